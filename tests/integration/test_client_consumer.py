"""Consumer positions against a real broker: seek, offsets by time, pause and resume,
auto.offset.reset, read_committed by default, and positions over compacted gaps."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.client import (
    Admin,
    Consumer,
    NoOffsetForPartitionError,
    OffsetAndTimestamp,
    Producer,
    TopicPartition,
)
from spark_mq.errors import OffsetOutOfRangeError, UsageError
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import ControlType, encode_batch

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def servers(broker: Any) -> str:
    return str(broker.address)


def fill(broker: Any, count: int = 100, partitions: int = 1) -> None:
    """``count`` records per partition, value = offset, timestamp = 10_000 + 10 * offset."""
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.create_topic("t", partitions=partitions)
    with Producer(bootstrap_servers=servers(broker)) as producer:
        for p in range(partitions):
            for i in range(count):
                producer.send("t", str(i).encode(), partition=p, timestamp_ms=10_000 + 10 * i)
        producer.flush()


def values(consumer: Consumer, count: int, **poll: Any) -> list[int]:
    out: list[int] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500, **poll).values():
            out.extend(int(r.value or b"") for r in records)
    return out


def consumer(broker: Any, **config: Any) -> Consumer:
    return Consumer(bootstrap_servers=servers(broker), **config)


def test_seek_position_and_offset_lookups(broker: Any) -> None:
    fill(broker)
    with consumer(broker, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        assert c.position(TP0) == 0
        c.seek(TP0, 40)
        assert values(c, 5, max_records=5) == [40, 41, 42, 43, 44]
        assert c.position(TP0) == 45
        c.seek_to_end()
        assert c.position(TP0) == 100
        assert c.poll(timeout_ms=0) == {}
        c.seek_to_beginning([TP0])
        assert values(c, 1, max_records=1) == [0]
        assert c.beginning_offsets([TP0]) == {TP0: 0}
        assert c.end_offsets([TP0]) == {TP0: 100}
        found = c.offsets_for_times({TP0: 10_000 + 10 * 55 - 5})
        assert found == {TP0: OffsetAndTimestamp(55, 10_550)}
        assert c.offsets_for_times({TP0: 99_999_999}) == {TP0: None}
        with pytest.raises(UsageError, match="not assigned"):
            c.seek(TopicPartition("t", 5), 0)


def test_a_seek_while_data_is_buffered_wins(broker: Any) -> None:
    fill(broker)
    with consumer(broker, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        assert values(c, 10, max_records=10) == list(range(10))
        c.seek(TP0, 3)  # buffered data past offset 10 is dropped
        assert values(c, 3, max_records=3) == [3, 4, 5]


def test_pause_and_resume(broker: Any) -> None:
    fill(broker, count=20, partitions=2)
    with consumer(broker, auto_offset_reset="earliest") as c:
        c.assign([TP0, TP1])
        c.pause(TP0)
        assert c.paused() == {TP0}
        seen: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + 30
        while seen.get(TP1, 0) < 20 and time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=500).items():
                seen[tp] = seen.get(tp, 0) + len(records)
        assert seen == {TP1: 20}
        assert c.position(TP0) == 0
        c.resume(TP0)
        assert c.paused() == set()
        assert values(c, 20) == list(range(20))


def test_auto_offset_reset_variants(broker: Any) -> None:
    fill(broker, count=10)
    with consumer(broker, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        assert values(c, 10) == list(range(10))
    with consumer(broker, auto_offset_reset="latest") as c:
        c.assign([TP0])
        assert c.position(TP0) == 10
        with Producer(bootstrap_servers=servers(broker)) as producer:
            producer.send("t", b"10").get(10)
        assert values(c, 1) == [10]
    with consumer(broker, auto_offset_reset="none") as c:
        c.assign([TP0])
        with pytest.raises(NoOffsetForPartitionError, match="seek"):
            c.poll(timeout_ms=100)
        with pytest.raises(OffsetOutOfRangeError):  # the same family
            c.position(TP0)
        c.seek(TP0, 500)
        with pytest.raises(OffsetOutOfRangeError) as info:
            values(c, 1)
        assert (info.value.topic, info.value.offset) == ("t", 500)
    with consumer(broker, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        c.seek(TP0, 500)  # out of range: reset to the beginning
        assert values(c, 11) == list(range(11))


def _write_transactions(directory: Path) -> None:
    """A log with plain, aborted, committed and open transactional data (offsets 0-11)."""

    def txn(pid: int, *vals: bytes) -> bytes:
        return encode_batch(
            pa.array(list(vals)),
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )

    with LogManager(directory) as logs:
        logs.create_topic("t", partitions=1)
        log = logs.get_log("t", 0)
        log.append(encode_batch(pa.array([b"a", b"b"])))  # 0-1
        log.append(txn(1000, b"aborted1", b"aborted2"))  # 2-3
        log.append_transaction_marker(
            ControlType.ABORT, producer_id=1000, producer_epoch=0, coordinator_epoch=0
        )  # 4
        log.append(txn(1001, b"c1", b"c2"))  # 5-6
        log.append_transaction_marker(
            ControlType.COMMIT, producer_id=1001, producer_epoch=0, coordinator_epoch=0
        )  # 7
        log.append(encode_batch(pa.array([b"d"])))  # 8
        log.append(txn(1002, b"open1", b"open2"))  # 9-10, never completed
        log.append(encode_batch(pa.array([b"e"])))  # 11


def test_read_committed_is_the_default(broker_dir: Path, start_broker: Any) -> None:
    _write_transactions(broker_dir)
    broker = start_broker()

    def read(**config: Any) -> list[bytes]:
        with consumer(broker, auto_offset_reset="earliest", **config) as c:
            c.assign([TP0])
            out: list[bytes] = []
            end = c.end_offsets([TP0])[TP0]
            deadline = time.monotonic() + 30
            while c.position(TP0) < end and time.monotonic() < deadline:
                out.extend(c.poll_batch(timeout_ms=200).column("value").to_pylist())
            return out

    assert read() == [b"a", b"b", b"c1", b"c2", b"d"]  # stops at the open transaction
    with consumer(broker) as c:
        assert c.config.isolation_level == "read_committed"
        assert c.end_offsets([TP0]) == {TP0: 9}  # the last stable offset
    assert read(isolation_level="read_uncommitted") == [
        b"a",
        b"b",
        b"aborted1",
        b"aborted2",
        b"c1",
        b"c2",
        b"d",
        b"open1",
        b"open2",
        b"e",
    ]


def test_positions_follow_batch_headers_over_compacted_gaps(
    broker_dir: Path, start_broker: Any
) -> None:
    with LogManager(broker_dir) as logs:
        logs.create_topic("t", partitions=1)
        log = logs.get_log("t", 0)
        # As compaction leaves them: a batch spanning 0-9 that kept offsets 0 and 3, a batch
        # spanning 10-14 that kept nothing, and a batch at 15.
        gappy = encode_batch(pa.array([b"0", b"3"]), offset_delta=[0, 3], last_offset_delta=9)
        empty = encode_batch(pa.array([], pa.binary()), base_offset=10, last_offset_delta=4)
        log.append(
            gappy + empty + encode_batch(pa.array([b"15"]), base_offset=15), assign_offsets=False
        )
    broker = start_broker()
    with consumer(broker, auto_offset_reset="earliest") as c:
        c.assign([TP0])
        assert values(c, 1, max_records=1) == [0]
        assert c.position(TP0) == 3
        assert values(c, 2) == [3, 15]
        assert c.position(TP0) == 16  # not 4 or 11: the batch headers decide
