"""The exactly-once sink when the broker's disk fills up, on a real small file system (the
``small_disk`` tmpfs of tests/conftest.py): a batch job or a micro-batch fails with an error
that names the full disk, none of its rows becomes visible, none of its transactions is left
to hold back readers, and once there is room the job succeeds, or the query resumes from its
checkpoint with its output there exactly once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sink_helpers import start_upper_copy, values

from spark_mq import Admin, Producer
from spark_mq.broker.local import ensure_broker

pytestmark = pytest.mark.slow

#: Small indexes and one partition per internal topic, so that the whole log directory
#: fits on the 48 MB disk with room to fill.
BROKER_CONFIG = {
    "log.index.size.max.bytes": str(64 << 10),
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
}


def _write(spark: Any, directory: Path, rows: int, value_bytes: int, sink_id: str) -> None:
    frame = spark.range(0, rows, 1, 2).selectExpr(
        f"concat(CAST(id AS STRING), repeat('x', {value_bytes})) AS value"
    )
    frame.write.format("spark_mq").mode("append").option("path", str(directory)).option(
        "topic", "out"
    ).option("sink.id", sink_id).option("kafka.delivery.timeout.ms", "3000").option(
        "kafka.request.timeout.ms", "1000"
    ).save()


def test_a_full_disk_fails_the_job_cleanly_and_a_rerun_succeeds(
    spark: Any, small_disk: Path, fill_disk: Callable[[Path, int], Path]
) -> None:
    directory = small_disk / "mq"
    ensure_broker(directory, config=BROKER_CONFIG)
    with Admin(path=str(directory)) as admin:
        admin.create_topic("out", partitions=2)
    _write(spark, directory, 2, 10, "before")  # the coordinator's topic exists from here
    before = values(directory, "out")
    assert len(before) == 2

    filler = fill_disk(small_disk, 3 << 20)
    with pytest.raises(Exception, match="LogDirectoryFullError") as failed:
        _write(spark, directory, 200, 50_000, "full")  # about 10 MB
    assert "free space" in str(failed.value)
    assert values(directory, "out") == before  # nothing of the failed job shows
    with Admin(path=str(directory)) as admin:
        states = {t.state for t in admin.list_transactions(prefix="full/")}
    assert states, "the failed job's tasks did not start their transactions"
    assert not states & {"Ongoing", "Prepared"}, states  # none holds back readers

    filler.unlink()
    _write(spark, directory, 20, 1_000, "full")
    after = values(directory, "out")
    assert len(after) == 22 and set(before) <= set(after)


def test_a_stream_stopped_by_a_full_disk_resumes_exactly_once(
    spark: Any, small_disk: Path, fill_disk: Callable[[Path, int], Path], tmp_path: Path
) -> None:
    """The micro-batch that meets the full disk fails and stops the query (its abort
    closes the query run's ids); restarted from its checkpoint once there is room, the
    query re-runs the batch under a new run and its output is there exactly once."""
    directory = small_disk / "mq"
    ensure_broker(directory, config=BROKER_CONFIG)
    with Admin(path=str(directory)) as admin:
        admin.create_topic("src", partitions=1)
        admin.create_topic("dst", partitions=2)
    sent = [b"%03d" % i + b"v" * 50_000 for i in range(40)]  # about 2 MB
    with Producer(path=str(directory)) as producer:
        for value in sent:
            producer.send("src", value)
    checkpoint = str(tmp_path / "checkpoint")

    def start() -> Any:
        return start_upper_copy(
            spark,
            directory,
            checkpoint,
            sink={"kafka.delivery.timeout.ms": "3000", "kafka.request.timeout.ms": "1000"},
        )

    filler = fill_disk(small_disk, 1 << 20)
    failed = start()
    with pytest.raises(Exception, match="LogDirectoryFullError"):
        failed.awaitTermination()
    assert values(directory, "dst") == []

    filler.unlink()
    resumed = start()
    resumed.awaitTermination()
    assert resumed.runId != failed.runId
    assert values(directory, "dst") == sorted(v.upper() for v in sent)
    with Admin(path=str(directory)) as admin:
        states = {t.state for t in admin.list_transactions(prefix=f"spark-query-{failed.id}/")}
    assert not states & {"Ongoing", "Prepared"}, states
