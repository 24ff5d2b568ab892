"""Fixtures for every test.

Tests that give a client ``path=tmp_path / ...`` start the local broker of that directory,
which would otherwise linger until its idle timeout (60 s) after the test. After each test
that used ``tmp_path``, every local broker still serving a directory under it is stopped
(SIGTERM, a clean shutdown), so brokers do not pile up over a suite run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq.broker.dir_files import ENDPOINT_FILE
from spark_mq.broker.local import stop_broker

log = logging.getLogger(__name__)


@pytest.fixture(autouse=True)
def _stop_local_brokers(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    tmp = getattr(request.node, "funcargs", {}).get("tmp_path")
    if not isinstance(tmp, Path) or not tmp.exists():
        return
    for endpoint in tmp.glob(f"**/{ENDPOINT_FILE}"):
        try:
            stop_broker(endpoint.parent, timeout_ms=10_000)
        except Exception as exc:  # a test that already killed it, or a slow shutdown
            log.warning("could not stop the broker of %s: %s", endpoint.parent, exc)
