"""Spark fixtures: one session-scoped ``SparkSession`` for every Spark test, and a log
directory whose embedded broker is stopped at the end of the test.

Spark runs ``local[2]`` with the UI off and few shuffle partitions. ``PYSPARK_PYTHON`` is set
to the running interpreter first, or Spark's Python workers would start the system Python,
which lacks this project's packages. The whole directory is skipped when pyspark is not
installed (``pip install -e '.[dev]'`` installs it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
    )
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark_mq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
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
