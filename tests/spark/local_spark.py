"""The local SparkSession of the Spark tests and of their driver scripts
(``tests/spark/*_driver.py``, run as subprocesses): Python workers on this interpreter with
the repository importable, no UI."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def with_repo(pythonpath: str | None) -> str:
    """``pythonpath`` with the repository in front."""
    return os.pathsep.join(filter(None, [str(REPO_ROOT), pythonpath]))


def local_session(
    master: str, app_name: str, conf: Mapping[str, str], *, log_level: str = "ERROR"
) -> Any:
    """A SparkSession on ``master`` with ``conf``. Sets ``PYSPARK_PYTHON`` to this interpreter
    (Spark would start the system Python, which lacks the packages) and puts the repository
    on ``PYTHONPATH`` for the workers."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = with_repo(os.environ.get("PYTHONPATH"))
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
