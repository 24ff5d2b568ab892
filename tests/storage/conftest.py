"""Fixtures shared by the storage tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from log_testing import Clock, OpenLog

from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_log(tmp_path: Path, clock: Clock) -> Iterator[OpenLog]:
    """Open a log (``tmp_path/t-0`` unless ``directory=`` says otherwise) on the test clock;
    closes every log it opened at the end."""
    opened: list[PartitionLog] = []

    def _open(config: LogConfig | None = None, /, **kwargs: Any) -> PartitionLog:
        directory = kwargs.pop("directory", tmp_path / "t-0")
        options = {"time_ms": clock, **kwargs}
        log = PartitionLog.open(directory, config or LogConfig(), topic="t", partition=0, **options)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
