"""Helpers shared by the sink tests: read a topic back whole, as a read_committed (or
read_uncommitted) consumer sees it; start the streaming copy several tests run; the
environment of a Spark driver run in its own process, and a run of the batch-job driver."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from local_spark import with_repo

from spark_mq import Admin, Consumer, Producer, TopicPartition

#: Upper bound on the polls of one read (a topic in these tests is far smaller).
MAX_POLLS = 10_000
#: The batch-job driver of the task-retry and driver-death tests.
BATCH_DRIVER = Path(__file__).with_name("sink_retry_driver.py")


def driver_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``extra``, with the repository on ``PYTHONPATH``, for
    a driver script (``tests/spark/*_driver.py``) run as a subprocess."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = with_repo(env.get("PYTHONPATH"))
    return env


def read_topic(path: Path | str, topic: str, isolation: str = "read_committed") -> pa.Table:
    """Every record of ``topic`` visible at ``isolation``, partition by partition in offset
    order (columns of ``Consumer.poll_batch``)."""
    with Admin(path=str(path)) as admin:
        count = admin.describe_topic(topic).partition_count
    partitions = [TopicPartition(topic, p) for p in range(count)]
    with Consumer(
        path=str(path), auto_offset_reset="earliest", isolation_level=isolation
    ) as consumer:
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        pieces = []
        for _ in range(MAX_POLLS):
            if all(consumer.position(tp) >= ends[tp] for tp in partitions):
                break
            pieces.append(consumer.poll_batch(timeout_ms=200))
        else:
            raise AssertionError(f"could not read {topic} to its end {ends}")
    if not pieces:
        return pa.table({"partition": pa.array([], pa.int32()), "value": pa.array([], pa.binary())})
    return pa.concat_tables(pieces)


def values(path: Path | str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """The values of ``topic`` sorted (a multiset to compare)."""
    return sorted(read_topic(path, topic, isolation).column("value").to_pylist())


def produce(path: Path | str, topic: str, values: Sequence[bytes]) -> None:
    """Send ``values`` to ``topic`` (partitioned by the default partitioner) and flush."""
    with Producer(path=str(path)) as producer:
        for value in values:
            producer.send(topic, value)


def create_topic(path: Path | str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions."""
    with Admin(path=str(path)) as admin:
        admin.create_topic(topic, partitions=partitions)


def start_upper_copy(
    spark: Any,
    path: Path | str,
    checkpoint: str,
    *,
    columns: tuple[str, ...] = (),
    source: Mapping[str, str] | None = None,
    sink: Mapping[str, str] | None = None,
) -> Any:
    """Start an AvailableNow query that copies topic ``src`` to ``dst`` of the log at
    ``path`` through the exactly-once sink, upper-casing the values (plus ``columns`` as
    they are, and extra ``source`` / ``sink`` options); returns the StreamingQuery."""
    reader = (
        spark.readStream.format("spark_mq")
        .option("path", str(path))
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
        .options(**(source or {}))
    )
    return (
        reader.load()
        .selectExpr(*columns, "upper(CAST(value AS STRING)) AS value")
        .writeStream.format("spark_mq")
        .option("path", str(path))
        .option("topic", "dst")
        .option("checkpointLocation", checkpoint)
        .options(**(sink or {}))
        .trigger(availableNow=True)
        .start()
    )


def run_batch_driver(
    log: Path, args: Sequence[str], env_extra: Mapping[str, str] | None = None
) -> int:
    """Run the batch-job driver (``sink_retry_driver.py``) with ``args`` in a process group
    of its own, its output in ``log``; its exit code (negative: killed by that signal)."""
    with log.open("wb") as out:
        done = subprocess.run(
            [sys.executable, str(BATCH_DRIVER), *args],
            env=driver_env(env_extra),
            stdout=out,
            stderr=out,
            timeout=540,
            start_new_session=True,
            check=False,
        )
    return done.returncode
