"""The stream reader's offset logic against a real broker, driven directly as Spark's planner
would (no Spark job): every rate limit, AvailableNow targets, new partitions and topics,
data-loss checks, reportLatestOffset and group.id commits."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)
from source_testing import produce

from spark_mq import Admin, TopicPartition
from spark_mq.datasource.offsets import from_json
from spark_mq.datasource.options import parse_source_options
from spark_mq.datasource.stream_reader import SparkMQStreamReader
from spark_mq.errors import DataLossError


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def _reader(mq_dir: Path, clock: Clock | None = None, **options: str) -> SparkMQStreamReader:
    opts = {"path": str(mq_dir), "startingOffsets": "earliest", **options}
    parsed = parse_source_options(opts, streaming=True)
    return SparkMQStreamReader(parsed, clock_ms=clock or Clock())


def _total(offsets: dict) -> int:
    return sum(from_json(offsets).values())


def test_max_offsets_per_trigger_is_shared_by_backlog_and_never_exceeded(mq_dir: Path) -> None:
    produce(mq_dir, "m", 1, 10)
    produce(mq_dir, "m2", 1, 30)
    reader = _reader(mq_dir, subscribe="m,m2", maxOffsetsPerTrigger="9")
    try:
        assert reader.getDefaultReadLimit() == ReadMaxRows(9)
        start = reader.initialOffset()
        assert start == {"m": {"0": 0}, "m2": {"0": 0}}
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert end == {"m": {"0": 2}, "m2": {"0": 7}}
        seen = 9
        while end != start:
            start, end = end, reader.latestOffset(end, ReadMaxRows(9))
            assert _total(end) - _total(start) <= 9
            seen += _total(end) - _total(start)
        assert seen == 40
        assert reader.latestOffset(start, ReadAllAvailable()) == start
        assert reader.reportLatestOffset() == {"m": {"0": 10}, "m2": {"0": 30}}
    finally:
        reader.stop()


def test_max_bytes_per_trigger_stops_at_batch_boundaries(mq_dir: Path) -> None:
    for first in range(0, 40, 4):  # ten stored batches of four records each
        produce(mq_dir, "b", 1, 4, first=first)
    reader = _reader(mq_dir, subscribe="b", maxBytesPerTrigger="1")
    try:
        assert reader.getDefaultReadLimit() == ReadMaxBytes(1)
        start = reader.initialOffset()
        # A single batch over the budget is still read whole, so the query progresses.
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert end == {"b": {"0": 4}}
        # Room for about three batches: never part of one, never past the budget.
        end = reader.latestOffset(end, ReadMaxBytes(3 * 400))
        assert from_json(end)[TopicPartition("b", 0)] in (8, 12, 16)
        assert reader.latestOffset(end, ReadAllAvailable()) == {"b": {"0": 40}}
    finally:
        reader.stop()


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(mq_dir: Path) -> None:
    produce(mq_dir, "n", 2, 5)
    clock = Clock()
    reader = _reader(mq_dir, clock, subscribe="n", minOffsetsPerTrigger="8", maxTriggerDelay="10s")
    try:
        assert reader.getDefaultReadLimit() == ReadMinRows(8)
        start = reader.initialOffset()
        assert reader.latestOffset(start, ReadMinRows(8)) == start  # 5 < 8: wait
        produce(mq_dir, "n", 2, 4, first=5)
        end = reader.latestOffset(start, ReadMinRows(8))
        assert _total(end) == 9
        produce(mq_dir, "n", 2, 2, first=9)
        clock.now_ms += 9_999
        assert reader.latestOffset(end, ReadMinRows(8)) == end
        clock.now_ms += 1
        assert _total(reader.latestOffset(end, ReadMinRows(8))) == 11  # the delay passed
    finally:
        reader.stop()


def test_available_now_ends_at_the_offsets_present_when_it_started(mq_dir: Path) -> None:
    produce(mq_dir, "now", 2, 6)
    reader = _reader(mq_dir, subscribe="now,later", maxOffsetsPerTrigger="4")
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        produce(mq_dir, "now", 2, 6, first=6)
        produce(mq_dir, "later", 1, 3)
        offsets = [start]
        while True:
            end = reader.latestOffset(offsets[-1], reader.getDefaultReadLimit())
            if end == offsets[-1]:
                break
            offsets.append(end)
        assert offsets[-1] == {"now": {"0": 3, "1": 3}}
        assert [_total(o) for o in offsets] == [0, 4, 6]
    finally:
        reader.stop()


def test_new_partitions_and_pattern_topics_start_from_earliest(mq_dir: Path) -> None:
    produce(mq_dir, "p-1", 1, 3)
    reader = _reader(mq_dir, subscribePattern="p-.*", startingOffsets="latest")
    try:
        start = reader.initialOffset()
        assert start == {"p-1": {"0": 3}}
        with Admin(path=mq_dir) as admin:
            admin.create_partitions("p-1", 2)
        produce(mq_dir, "p-2", 1, 2)
        produce(mq_dir, "p-1", 2, 2, first=100)  # one record per partition
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {"p-1": {"0": 4, "1": 1}, "p-2": {"0": 2}}
        ranges = reader.partitions(start, end)
        assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [
            ("p-1", 0, 3, 4),
            ("p-1", 1, -2, 1),
            ("p-2", 0, -2, 2),
        ]
    finally:
        reader.stop()


def test_data_loss_detected_on_the_driver_both_ways(mq_dir: Path) -> None:
    produce(mq_dir, "gone", 1, 10)
    strict = _reader(mq_dir, subscribe="gone")
    lenient = _reader(mq_dir, subscribe="gone", failOnDataLoss="false")
    try:
        with Admin(path=mq_dir) as admin:
            admin.delete_records({TopicPartition("gone", 0): 6})
        start = {"gone": {"0": 2}}
        with pytest.raises(DataLossError, match=r"gone-0 from offset 2 to 6") as info:
            strict.latestOffset(start, ReadAllAvailable())
        assert (info.value.topic, info.value.partition, info.value.start_offset) == ("gone", 0, 2)
        assert lenient.latestOffset(start, ReadAllAvailable()) == {"gone": {"0": 10}}
        # The log ending below the checkpoint means the topic was recreated.
        with pytest.raises(DataLossError, match="recreated"):
            strict.latestOffset({"gone": {"0": 50}}, ReadAllAvailable())
        assert lenient.latestOffset({"gone": {"0": 50}}, ReadAllAvailable()) == {"gone": {"0": 10}}
    finally:
        strict.stop()
        lenient.stop()


def test_group_id_commit_makes_lag_visible(mq_dir: Path) -> None:
    produce(mq_dir, "g", 2, 10)
    reader = _reader(mq_dir, subscribe="g", **{"group.id": "spark-query"})
    try:
        reader.commit({"g": {"0": 5, "1": 2}})
    finally:
        reader.stop()
    with Admin(path=mq_dir) as admin:
        lag = admin.group_lag("spark-query")
    assert {tp.partition: (p.committed, p.lag) for tp, p in lag.items()} == {0: (5, 0), 1: (2, 3)}
