"""Streaming reads through Spark: restarts from a checkpoint read every record exactly once,
rate limits shape micro-batches, AvailableNow stops at the offsets present when it started,
a pattern subscription picks up a new topic, failOnDataLoss both ways after retention and
after a topic is recreated, and group.id commits the query's progress."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from source_testing import Collector, produce, run_available_now, values

from spark_mq import Admin, TopicPartition


def test_restarts_read_every_record_exactly_once(spark: Any, mq_dir: Path, tmp_path: Path) -> None:
    produce(mq_dir, "s1", 3, 30)
    produce(mq_dir, "s2", 1, 5, first=1000)
    options = {
        "path": str(mq_dir),
        "subscribe": "s1,s2",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "8",
        "group.id": "stream-lag",
    }
    checkpoint = tmp_path / "ckpt"
    first = Collector()
    run_available_now(spark, options, checkpoint, first)
    assert sorted(first.values) == sorted(values(range(30)) + values(range(1000, 1005)))
    assert all(len(vs) <= 8 for _, vs in first.batches)
    assert len(first.batches) >= 5

    produce(mq_dir, "s1", 3, 12, first=30)
    second = Collector()
    run_available_now(spark, options, checkpoint, second)
    assert sorted(second.values) == sorted(values(range(30, 42)))
    assert min(b for b, _ in second.batches) > max(b for b, _ in first.batches)

    third = Collector()
    run_available_now(spark, options, checkpoint, third)
    assert third.values == []

    # The group holds the query's progress. Spark calls a source's commit(end) when it
    # starts the next micro-batch, so the group shows the end of the second-to-last batch
    # (the checkpoint's offset log has it).
    last = max(b for b, _ in second.batches)
    lines = (checkpoint / "offsets" / str(last - 1)).read_text().splitlines()
    expected = json.loads(lines[-1])
    with Admin(path=mq_dir) as admin:
        committed = admin.list_group_offsets("stream-lag")
    got: dict[str, dict[str, int]] = {}
    for tp, o in committed.items():
        got.setdefault(tp.topic, {})[str(tp.partition)] = o.offset
    assert got == expected
    assert sum(v for parts in got.values() for v in parts.values()) > 35


def test_available_now_ignores_records_written_while_it_runs(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    produce(mq_dir, "an", 2, 10)
    produced_during = []

    class WritesMore(Collector):
        def __call__(self, df: Any, batch_id: int) -> None:
            super().__call__(df, batch_id)
            if not produced_during:
                produced_during.append(batch_id)
                produce(mq_dir, "an", 2, 10, first=10)
                produce(mq_dir, "an-new", 1, 3)

    collector = WritesMore()
    options = {
        "path": str(mq_dir),
        "subscribePattern": "an.*",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "3",
    }
    run_available_now(spark, options, tmp_path / "ckpt", collector)
    assert sorted(collector.values) == sorted(values(range(10)))
    # A later run takes the rest, the new topic included, from its earliest offset.
    rest = Collector()
    options.pop("maxOffsetsPerTrigger")
    run_available_now(spark, options, tmp_path / "ckpt", rest)
    assert sorted(rest.values) == sorted(values(range(10, 20)) + values(range(3)))


def test_fail_on_data_loss_after_retention_and_recreation(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    produce(mq_dir, "dl", 1, 5)
    strict = {"path": str(mq_dir), "subscribe": "dl", "startingOffsets": "earliest"}
    lenient = {**strict, "failOnDataLoss": "false"}
    for name in ("strict", "lenient"):
        run_available_now(spark, strict, tmp_path / name, Collector())
    produce(mq_dir, "dl", 1, 10, first=5)
    with Admin(path=mq_dir) as admin:
        admin.delete_records({TopicPartition("dl", 0): 9})  # offsets 5-8 unread and gone

    with pytest.raises(Exception, match=r"DataLossError.*dl-0 from offset 5 to 9"):
        run_available_now(spark, strict, tmp_path / "strict", Collector())
    skipped = Collector()
    run_available_now(spark, lenient, tmp_path / "lenient", skipped)
    assert sorted(skipped.values) == sorted(values(range(9, 15)))

    # The topic is deleted and created again with fewer records than were read.
    with Admin(path=mq_dir) as admin:
        admin.delete_topic("dl")
    produce(mq_dir, "dl", 1, 3, first=100)
    with pytest.raises(Exception, match=r"DataLossError.*recreated"):
        run_available_now(spark, strict, tmp_path / "strict", Collector())
    recreated = Collector()
    run_available_now(spark, lenient, tmp_path / "lenient", recreated)
    assert sorted(recreated.values) == values(range(100, 103))
