"""Spark fixtures: one session-scoped ``SparkSession`` for every Spark test, and a log
directory whose embedded broker is stopped at the end of the test.

Spark runs ``local[2]`` with the UI off and few shuffle partitions, built by
``local_spark.local_session`` as the driver scripts' sessions are: ``PYSPARK_PYTHON`` is set
to the running interpreter first, or Spark's Python workers would start the system Python,
which lacks this project's packages. The whole directory is skipped when pyspark is not
installed (``pip install -e '.[dev]'`` installs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from local_spark import local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = local_session(
        "local[2]",
        "spark_mq-tests",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "2g",
            "spark.sql.streaming.stopTimeout": "30s",
        },
        log_level="WARN",
    )
    yield session
    session.stop()


@pytest.fixture
def mq_dir(tmp_path: Path) -> Iterator[Path]:
    """A log directory for ``.option("path", ...)``; its local broker is stopped after the
    test (it would otherwise linger until its idle timeout)."""
    from spark_mq.broker.local import stop_broker

    path = tmp_path / "mq"
    path.mkdir()
    yield path
    stop_broker(path)
