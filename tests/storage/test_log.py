"""PartitionLog: appends, rolls, reads, flushes, retention, truncation, restarts.

The clock is injected everywhere (``time_ms=``) so that rolls by age, flushes by time and
retention by time happen exactly when a test moves it; nothing sleeps.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
import pytest
from log_testing import START_MS, Clock, OpenLog

from spark_mq.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from spark_mq.storage.batch_decoder import iter_batches
from spark_mq.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchIsolation,
    PartitionLog,
)
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import HEADER_SIZE, BatchHeader, TimestampType, encode_batch
from spark_mq.storage.segment import LOG_SUFFIX, TimestampAndOffset, segment_file_name

T = TypeVar("T")


def present(value: T | None) -> T:
    """``value``, which the test expects to be there."""
    assert value is not None
    return value


def batch(
    n: int = 3,
    *,
    timestamps: list[int] | None = None,
    value_bytes: int = 20,
    tag: int = 0,
    codec: str = "none",
    base_offset: int = 0,
    keyed: bool = False,
) -> bytes:
    stamps = timestamps if timestamps is not None else [START_MS] * n
    values = [f"{tag}:{i}:".encode().ljust(value_bytes, b".") for i in range(len(stamps))]
    keys = [b"k%d" % i for i in range(len(stamps))] if keyed else None
    return encode_batch(
        pa.array(values, type=pa.binary()),
        key=None if keys is None else pa.array(keys, type=pa.binary()),
        timestamp=pa.array(stamps, type=pa.int64()),
        codec=codec,
        base_offset=base_offset,
    )


def values_of(table: pa.Table) -> list[bytes]:
    values: list[bytes] = table.column("value").to_pylist()
    return values


def offsets_of(table: pa.Table) -> list[int]:
    offsets: list[int] = table.column("offset").to_pylist()
    return offsets


def all_offsets(
    log: PartitionLog, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
) -> list[int]:
    """Every offset a reader sees from the log start, reading until it gets no further."""
    return [offset for offset, _, _ in _read_all(log, isolation)]


def all_records(log: PartitionLog) -> list[tuple[int, int, bytes]]:
    """(offset, timestamp, value) of every record from the log start."""
    return _read_all(log, FetchIsolation.HIGH_WATERMARK)


def _read_all(log: PartitionLog, isolation: FetchIsolation) -> list[tuple[int, int, bytes]]:
    out: list[tuple[int, int, bytes]] = []
    offset = log.log_start_offset
    while True:
        table, next_offset = log.read_records_with_next(offset, 10**9, isolation=isolation)
        columns = (table.column(name).to_pylist() for name in ("offset", "timestamp", "value"))
        out.extend(zip(*columns, strict=True))
        if next_offset == offset:  # at the bound
            return out
        offset = next_offset


def disk_headers(log: PartitionLog) -> list[BatchHeader]:
    """The batch headers as they are in the segment files."""
    out: list[BatchHeader] = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        out.extend(header for header, _ in iter_batches(data))
    return out


def config(**settings: object) -> LogConfig:
    return LogConfig.from_properties(settings)


# ---------------------------------------------------------------------------------------------
# Appends


def test_the_log_assigns_offsets(open_log: OpenLog) -> None:
    log = open_log()
    first = log.append(batch(3, base_offset=500))
    second = log.append(batch(2, base_offset=7, tag=1))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == log.high_watermark == 5
    assert [h.base_offset for h in disk_headers(log)] == [0, 3]
    assert offsets_of(log.read_records(0)) == [0, 1, 2, 3, 4]


def test_several_batches_in_one_append(open_log: OpenLog, clock: Clock) -> None:
    log = open_log()
    parts = [
        batch(2, timestamps=[5, 50]),
        batch(4, tag=1, codec="zstd", timestamps=[1, 2, 3, 4]),
        batch(1, tag=2, codec="lz4", timestamps=[7]),
    ]
    info = log.append(b"".join(parts))
    assert info.num_batches == 3
    assert info.num_records == 7
    assert info.valid_bytes == sum(len(p) for p in parts)
    assert [(h.base_offset, h.last_offset) for h in info.batches] == [(0, 1), (2, 5), (6, 6)]
    assert (info.max_timestamp_ms, info.offset_of_max_timestamp) == (50, 1)
    assert info.log_append_time_ms == -1
    table = log.read_records(0)
    assert offsets_of(table) == list(range(7))
    assert values_of(table)[2] == b"1:0:".ljust(20, b".")
    assert table.column("timestamp").to_pylist() == [5, 50, 1, 2, 3, 4, 7]
    assert [h.base_offset for h in disk_headers(log)] == [0, 2, 6]


def test_assign_offsets_false_keeps_offsets_at_or_after_the_log_end(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(3))
    size = log.size_bytes
    with pytest.raises(InvalidRecordError, match="below the log end"):
        log.append(batch(2, base_offset=1), assign_offsets=False)
    # A multi-batch copy with one bad batch writes nothing either.
    with pytest.raises(InvalidRecordError):
        log.append(batch(1, base_offset=3) + batch(1, base_offset=3), assign_offsets=False)
    assert log.size_bytes == size
    assert log.log_end_offset == 3
    log.append(batch(2, base_offset=3), assign_offsets=False)
    info = log.append(batch(2, base_offset=10, tag=1), assign_offsets=False)  # a gap is fine
    assert (info.first_offset, info.last_offset) == (10, 11)
    assert log.log_end_offset == 12
    assert all_offsets(log) == [0, 1, 2, 3, 4, 10, 11]
    assert offsets_of(log.read_records(6)) == [10, 11]


def test_empty_appends_are_rejected(open_log: OpenLog) -> None:
    log = open_log()
    with pytest.raises(InvalidRecordError, match="no record batches"):
        log.append(b"")
    with pytest.raises(InvalidRecordError, match="at least one record"):
        log.append(encode_batch(pa.array([], type=pa.binary())))
    with pytest.raises(InvalidRecordError, match="at least one record"):
        log.append(batch(2) + encode_batch(pa.array([], type=pa.binary())))
    assert log.size_bytes == 0
    assert log.log_end_offset == 0


def test_batch_over_max_message_bytes_is_rejected_and_nothing_written(
    open_log: OpenLog,
) -> None:
    small = batch(1)
    large = batch(1, value_bytes=2_000)
    log = open_log(config(max_message_bytes=len(large) - 1))
    log.append(small)
    size = log.size_bytes
    with pytest.raises(RecordTooLargeError) as info:
        log.append(small + large)
    assert info.value.size_bytes == len(large)
    assert info.value.max_bytes == len(large) - 1
    assert log.size_bytes == size
    assert log.log_end_offset == 1
    assert log.active_segment.log_path.stat().st_size == size


def test_append_over_segment_bytes_is_rejected(open_log: OpenLog) -> None:
    one = batch(1, value_bytes=300)
    log = open_log(config(segment_bytes=2 * len(one)))
    log.append(one + one)
    with pytest.raises(RecordTooLargeError) as info:
        log.append(one + one + one)
    assert info.value.size_bytes == 3 * len(one)
    assert log.log_end_offset == 2


def _corrupt_body(data: bytes) -> bytes:
    buf = bytearray(data)
    buf[HEADER_SIZE + 2] ^= 0x40
    return bytes(buf)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(_corrupt_body, id="crc"),
        pytest.param(lambda b: b[:-1], id="truncated"),
        pytest.param(lambda b: b[:16] + b"\x02" + b[17:], id="magic"),
    ],
)
def test_a_corrupt_batch_rejects_the_whole_append(
    open_log: OpenLog, bad: Callable[[bytes], bytes]
) -> None:
    log = open_log()
    log.append(batch(1))
    size = log.size_bytes
    with pytest.raises(CorruptRecordError):
        log.append(batch(2) + bad(batch(2, tag=1)) + batch(2, tag=2))
    with pytest.raises(CorruptRecordError):
        log.append(batch(2) + bad(batch(2, tag=1)))
    assert log.size_bytes == size
    assert log.active_segment.log_path.stat().st_size == size
    assert log.log_end_offset == 1
    assert all_offsets(log) == [0]


def test_leader_epoch_is_stamped_outside_the_crc(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(2))
    log.leader_epoch = 4
    log.append(batch(2))
    log.append(batch(2), leader_epoch=9)
    assert [h.partition_leader_epoch for h in disk_headers(log)] == [-1, 4, 9]
    with present(log.read(0, 10**9).records) as file_range:
        data = file_range.read()
    # The CRC still matches: the epoch (like the base offset) is not covered by it.
    assert [h.partition_leader_epoch for h, _ in iter_batches(data, verify_crc=True)] == [-1, 4, 9]


def test_log_append_time_stamps_batches_and_keeps_the_crc_valid(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(config(message_timestamp_type="LogAppendTime"))
    clock.now_ms = 5_000
    info = log.append(batch(3, timestamps=[1, 99, 2]))
    assert info.log_append_time_ms == 5_000
    assert info.max_timestamp_ms == 5_000
    clock.now_ms = 7_000
    log.append(batch(2, timestamps=[8, 9], tag=1) + batch(1, timestamps=[10], tag=2))
    table = log.read_records(0)
    assert table.column("timestamp").to_pylist() == [5_000] * 3 + [7_000] * 3
    assert set(table.column("timestamp_type").to_pylist()) == {TimestampType.LOG_APPEND_TIME}
    with present(log.read(0, 10**9).records) as file_range:
        headers = [h for h, _ in iter_batches(file_range.read(), verify_crc=True)]
    assert [h.max_timestamp for h in headers] == [5_000, 7_000, 7_000]
    assert all(h.timestamp_type is TimestampType.LOG_APPEND_TIME for h in headers)
    # The producer's baseTimestamp is kept, as in Kafka.
    assert [h.base_timestamp for h in headers] == [1, 8, 10]


def test_find_offset_by_timestamp_with_log_append_time(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(config(message_timestamp_type="LogAppendTime", index_interval_bytes=0))
    for i in range(5):
        clock.now_ms = 10_000 + 1_000 * i
        # Producer timestamps go backwards; the log's own times are what count.
        log.append(batch(2, timestamps=[90_000 - i, 1]))
    assert log.find_offset_by_timestamp(0) == TimestampAndOffset(10_000, 0)
    assert log.find_offset_by_timestamp(12_000) == TimestampAndOffset(12_000, 4)
    assert log.find_offset_by_timestamp(12_001) == TimestampAndOffset(13_000, 6)
    assert log.find_offset_by_timestamp(14_001) is None
    assert log.find_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(14_000, 8)
    log.delete_records_before(5)
    assert log.find_offset_by_timestamp(12_000) == TimestampAndOffset(12_000, 5)


def test_find_offset_by_timestamp_special_values_and_create_time(open_log: OpenLog) -> None:
    log = open_log(config(index_interval_bytes=0))
    log.append(batch(3, timestamps=[100, 900, 300]))
    log.append(batch(3, timestamps=[200, 50, 900], tag=1))
    log.roll()
    log.append(batch(2, timestamps=[400, 700], tag=2))
    assert log.find_offset_by_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 0)
    assert log.find_offset_by_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(-1, 8)
    # The record with the largest timestamp (the first of two), not the end of its batch.
    assert log.find_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(900, 1)
    assert log.find_offset_by_timestamp(250) == TimestampAndOffset(900, 1)
    assert log.find_offset_by_timestamp(650) == TimestampAndOffset(900, 1)
    assert log.find_offset_by_timestamp(901) is None
    log.delete_records_before(2)
    assert log.find_offset_by_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 2)
    # The largest timestamp below the log start no longer counts.
    assert log.find_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(900, 5)
    assert log.find_offset_by_timestamp(250) == TimestampAndOffset(300, 2)
    log.delete_records_before(6)
    assert log.find_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(700, 7)
    assert log.find_offset_by_timestamp(0) == TimestampAndOffset(400, 6)


# ---------------------------------------------------------------------------------------------
# Rolls


def test_roll_on_segment_bytes(open_log: OpenLog) -> None:
    one = batch(2, value_bytes=100)
    log = open_log(config(segment_bytes=3 * len(one) + 10))
    for i in range(10):
        log.append(batch(2, value_bytes=100, tag=i))
    segments = log.segments
    assert [s.base_offset for s in segments] == [0, 6, 12, 18]
    assert all(s.size_bytes <= 3 * len(one) + 10 for s in segments)
    assert all_offsets(log) == list(range(20))


def test_roll_on_segment_ms(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(config(segment_ms=1_000))
    log.append(batch(1, timestamps=[clock.now_ms]))
    clock.now_ms += 1_000
    log.append(batch(1, timestamps=[clock.now_ms]))
    assert log.num_segments == 1
    clock.now_ms += 1
    log.append(batch(1, timestamps=[clock.now_ms - 500]))
    assert [s.base_offset for s in log.segments] == [0, 2]
    # The age counts from the first batch's timestamp, 500 ms before the segment was created.
    clock.now_ms += 500
    log.append(batch(1, timestamps=[clock.now_ms]))
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.now_ms += 1
    log.append(batch(1, timestamps=[clock.now_ms]))
    assert [s.base_offset for s in log.segments] == [0, 2, 4]


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete"])
def test_a_compacted_log_rolls_once_its_data_is_max_compaction_lag_old(
    open_log: OpenLog, clock: Clock, policy: str
) -> None:
    lag_ms = 60_000
    log = open_log(config(cleanup_policy=policy, max_compaction_lag_ms=lag_ms))
    compacted = "compact" in policy
    log.append(batch(1, timestamps=[clock.now_ms], keyed=True))
    clock.now_ms += lag_ms
    log.append(batch(1, timestamps=[clock.now_ms], keyed=True))
    assert not log.roll_for_compaction_lag()
    assert log.num_segments == 1  # exactly the lag: not older than it yet
    clock.now_ms += 1
    # An append rolls first, by the first batch's timestamp, as segment.ms does.
    log.append(batch(1, timestamps=[clock.now_ms], keyed=True))
    assert [s.base_offset for s in log.segments] == ([0, 2] if compacted else [0])
    # A log that gets no append is rolled by the cleaner's call, with the injected clock.
    clock.now_ms += lag_ms + 1
    assert log.roll_for_compaction_lag() is compacted
    assert [s.base_offset for s in log.segments] == ([0, 2, 3] if compacted else [0])
    assert not log.roll_for_compaction_lag()  # the new active segment is empty


def test_explicit_roll(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(2))
    log.roll()
    log.roll()
    log.append(batch(2))
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.segments[0].log_path.name == segment_file_name(0, LOG_SUFFIX)


def test_roll_on_a_full_index(open_log: OpenLog) -> None:
    # 24 bytes: 3 offset index slots and 2 time index slots, one of them kept for the roll.
    log = open_log(config(segment_index_bytes=24, index_interval_bytes=0))
    for i in range(8):
        log.append(batch(1, timestamps=[START_MS + i], tag=i))
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    # Several batches in one append fill the index part-way: the append still succeeds.
    five = b"".join(batch(1, timestamps=[START_MS + 10 + i], tag=i) for i in range(5))
    log.append(five)
    log.append(batch(1, timestamps=[START_MS + 20]))
    assert log.log_end_offset == 14
    assert all_offsets(log) == list(range(14))
    assert log.find_offset_by_timestamp(START_MS + 12) == TimestampAndOffset(START_MS + 12, 10)


# ---------------------------------------------------------------------------------------------
# Reads


def test_read_returns_whole_batches_as_a_file_range(open_log: OpenLog) -> None:
    log = open_log()
    parts = [batch(3, tag=i) for i in range(6)]
    for part in parts:
        log.append(part)
    info = log.read(7, 10**9)
    assert info.fetch_offset == 7
    assert (info.log_start_offset, info.high_watermark, info.log_end_offset) == (0, 18, 18)
    with present(info.records) as file_range:
        data = file_range.read()
        assert info.size_bytes == file_range.size == len(data)
    # From the batch holding offset 7 (6..8): the reader skips its head.
    assert [h.base_offset for h, _ in iter_batches(data)] == [6, 9, 12, 15]
    assert len(data) == sum(len(p) for p in parts[2:])
    assert offsets_of(log.read_records(7)) == list(range(7, 18))


def test_read_honours_max_bytes_and_min_one_message(open_log: OpenLog) -> None:
    log = open_log()
    parts = [batch(2, tag=i, value_bytes=50) for i in range(5)]
    for part in parts:
        log.append(part)
    two = len(parts[0]) + len(parts[1])
    with present(log.read(0, two).records) as file_range:
        assert file_range.size == two
    with present(log.read(0, two - 1).records) as file_range:
        assert file_range.size == len(parts[0])
    with present(log.read(0, 1).records) as file_range:  # one batch, even over max_bytes
        assert file_range.size == len(parts[0])
    assert log.read(0, 1, min_one_message=False).records is None
    assert log.read(0, 0, min_one_message=False).size_bytes == 0
    assert log.read(10, 10**9).records is None  # at the log end
    assert offsets_of(log.read_records(2, 1)) == [2, 3]


def test_read_stays_within_one_segment(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(2))
    log.roll()
    log.append(batch(2, tag=1))
    assert offsets_of(log.read_records(1, 10**9)) == [1]
    assert offsets_of(log.read_records(2, 10**9)) == [2, 3]


def test_read_out_of_range(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(4))
    log.delete_records_before(2)
    for offset in (0, 1, 5, 100):
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(offset)
        assert (info.value.offset, info.value.log_start_offset, info.value.log_end_offset) == (
            offset,
            2,
            4,
        )
        assert (info.value.topic, info.value.partition) == ("t", 0)
    assert offsets_of(log.read_records(2)) == [2, 3]
    assert log.read_records(4).num_rows == 0


def test_reads_stop_at_the_high_watermark(open_log: OpenLog) -> None:
    log = open_log(high_watermark_follows_log_end=False)
    for i in range(3):
        log.append(batch(3, tag=i))
    assert (log.high_watermark, log.log_end_offset) == (0, 9)
    assert log.read(0).records is None
    assert log.read_records(0).num_rows == 0
    assert log.update_high_watermark(6) == 6
    with present(log.read(0, 10**9).records) as file_range:
        assert [h.base_offset for h, _ in iter_batches(file_range.read())] == [0, 3]
    assert all_offsets(log) == list(range(6))
    # A high watermark inside a batch: the reader never gets records at or past it.
    log.update_high_watermark(7)
    assert all_offsets(log) == list(range(6))
    assert offsets_of(log.read_records(5)) == [5]
    # Followers read to the log end.
    assert all_offsets(log, FetchIsolation.LOG_END) == list(range(9))
    with present(log.read(0, 10**9, isolation=FetchIsolation.LOG_END).records) as file_range:
        assert [h.base_offset for h, _ in iter_batches(file_range.read())] == [0, 3, 6]
    # max_offset cuts records, not batches: the batch straddling it is read up to it.
    assert offsets_of(log.read_records(0, isolation=FetchIsolation.LOG_END, max_offset=4)) == [
        0,
        1,
        2,
        3,
    ]
    assert offsets_of(log.read_records(4, isolation=FetchIsolation.LOG_END, max_offset=4)) == []
    assert log.find_offset_by_timestamp(LATEST_TIMESTAMP) == TimestampAndOffset(-1, 7)
    # Clamped to [log start, log end].
    assert log.update_high_watermark(100) == 9
    assert log.update_high_watermark(-5) == 0


def test_a_file_range_outlives_its_deleted_segment(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(config(retention_ms=1_000))
    log.append(batch(3, timestamps=[clock.now_ms] * 3))
    log.roll()
    log.append(batch(3, timestamps=[clock.now_ms + 10_000] * 3, tag=1))
    info = log.read(0, 10**9)
    assert info.records is not None
    first_segment = log.segments[0].log_path
    clock.now_ms += 5_000
    assert log.apply_retention() == 1
    assert not first_segment.exists()
    with present(info.records) as file_range:
        data = file_range.read()
    assert [h.base_offset for h, _ in iter_batches(data, verify_crc=True)] == [0]


# ---------------------------------------------------------------------------------------------
# Flushing


def test_flush_messages_one_flushes_every_append(open_log: OpenLog) -> None:
    log = open_log(config(flush_messages=1))
    for i in range(4):
        log.append(batch(2, tag=i))
        assert log.recovery_point == log.log_end_offset == 2 * (i + 1)


def test_default_leaves_flushing_to_rolls_and_close(open_log: OpenLog) -> None:
    log = open_log()
    for i in range(4):
        log.append(batch(2, tag=i))
    assert log.recovery_point == 0
    log.roll()  # the finished segment is flushed (inline without an executor)
    assert log.recovery_point == 8
    log.append(batch(2))
    assert log.recovery_point == 8
    log.flush()
    assert log.recovery_point == 10


def test_flush_ms_with_an_injected_clock(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(config(flush_ms=1_000))
    log.append(batch(1))
    assert log.recovery_point == 0
    clock.now_ms += 999
    log.flush_if_due()
    assert log.recovery_point == 0
    clock.now_ms += 1
    log.flush_if_due()
    assert log.recovery_point == 1
    log.append(batch(1))
    assert log.recovery_point == 1
    clock.now_ms += 1_000
    log.append(batch(1))  # the append itself notices the time
    assert log.recovery_point == 3


def test_flush_on_roll_runs_on_the_flush_executor(open_log: OpenLog) -> None:
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    gate = threading.Event()
    try:
        executor.submit(gate.wait)  # holds the single worker until the test lets it go
        log = open_log(flush_executor=executor)
        log.append(batch(3))
        log.roll()
        log.append(batch(3))
        assert log.recovery_point == 0, "the roll must not flush inline"
        gate.set()
    finally:
        gate.set()
        executor.shutdown(wait=True)
    assert log.recovery_point == 3
    assert log.log_end_offset == 6


# ---------------------------------------------------------------------------------------------
# Retention and deletion


def _segments_with_timestamps(log: PartitionLog, stamps: list[int], *, keyed: bool = False) -> None:
    """One segment of two records per timestamp; the last one is the active segment."""
    for i, ts in enumerate(stamps):
        if i:
            log.roll()
        log.append(batch(2, timestamps=[ts - 5, ts], tag=i, keyed=keyed))


def test_retention_by_time_deletes_whole_old_segments(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(config(retention_ms=10_000))
    now = clock.now_ms
    _segments_with_timestamps(log, [now - 30_000, now - 20_000, now - 5_000, now - 40_000])
    # The third segment is young: it and everything after it stay, even the old fourth.
    assert log.apply_retention() == 2
    assert log.log_start_offset == 4
    assert [s.base_offset for s in log.segments] == [4, 6]
    assert all_offsets(log) == [4, 5, 6, 7]
    clock.now_ms += 10_000
    assert log.apply_retention() == 2  # the active segment too: a new empty one replaces it
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (8, 8, 8)
    assert log.num_segments == 1 and log.active_segment.size_bytes == 0
    assert log.append(batch(1)).first_offset == 8
    assert log.apply_retention() == 0


def test_retention_by_time_looks_at_the_newest_record_of_a_segment(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(config(retention_ms=10_000))
    now = clock.now_ms
    log.append(batch(1, timestamps=[now - 50_000]))
    log.append(batch(1, timestamps=[now], tag=1))
    log.roll()
    log.append(batch(1, timestamps=[now - 50_000], tag=2))
    assert log.apply_retention() == 0
    assert all_offsets(log) == [0, 1, 2]


def test_retention_never_deletes_data_at_or_past_the_high_watermark(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(config(retention_ms=10), high_watermark_follows_log_end=False)
    _segments_with_timestamps(log, [1, 2, 3])
    log.update_high_watermark(3)  # inside the second segment
    clock.now_ms += 10**9
    assert log.apply_retention() == 1
    assert [s.base_offset for s in log.segments] == [2, 4]
    log.update_high_watermark(4)
    assert log.apply_retention() == 1
    assert [s.base_offset for s in log.segments] == [4]
    assert log.log_start_offset == 4
    assert all_offsets(log, FetchIsolation.LOG_END) == [4, 5]


def test_retention_by_size_deletes_whole_segments(open_log: OpenLog) -> None:
    one = len(batch(2, timestamps=[START_MS - 5, START_MS]))
    log = open_log(config(retention_ms=-1, retention_bytes=3 * one - 5))
    _segments_with_timestamps(log, [START_MS] * 5)
    sizes = [s.size_bytes for s in log.segments]
    assert sizes == [one] * 5
    # Segments go, oldest first and whole, while what remains is still at least
    # retention.bytes: 2 of them, leaving 5 bytes more than the limit.
    assert log.apply_retention() == 2
    assert log.log_start_offset == 4
    assert log.size_bytes == 3 * sizes[0]
    assert log.apply_retention() == 0
    assert all_offsets(log) == list(range(4, 10))


def test_retention_by_size_zero_keeps_only_an_empty_active_segment(open_log: OpenLog) -> None:
    log = open_log(config(retention_ms=-1, retention_bytes=0))
    _segments_with_timestamps(log, [START_MS] * 3)
    assert log.apply_retention() == 3
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (6, 6, 0)


def test_compact_only_topics_are_not_deleted_by_retention(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(config(retention_ms=1, retention_bytes=0, cleanup_policy="compact"))
    _segments_with_timestamps(log, [1, 2], keyed=True)
    clock.now_ms += 10**9
    assert log.apply_retention() == 0
    assert all_offsets(log) == [0, 1, 2, 3]


def test_delete_records_before(open_log: OpenLog) -> None:
    log = open_log()
    _segments_with_timestamps(log, [START_MS] * 3)
    assert log.delete_records_before(3) == 3
    assert [s.base_offset for s in log.segments] == [2, 4]  # whole segments below it go
    assert all_offsets(log) == [3, 4, 5]
    with pytest.raises(OffsetOutOfRangeError):
        log.read_records(2)
    assert log.delete_records_before(1) == 3  # never backwards
    assert log.delete_records_before(6) == 6  # up to the high watermark
    assert log.read_records(6).num_rows == 0
    assert log.num_segments == 1


def test_delete_records_beyond_the_high_watermark_raises(open_log: OpenLog) -> None:
    log = open_log(high_watermark_follows_log_end=False)
    log.append(batch(4))
    log.update_high_watermark(2)
    with pytest.raises(OffsetOutOfRangeError, match="high watermark is 2") as info:
        log.delete_records_before(3)
    assert info.value.offset == 3
    assert log.log_start_offset == 0
    assert log.delete_records_before(2) == 2


# ---------------------------------------------------------------------------------------------
# Truncation


def test_truncate_to_removes_the_straddling_batch(open_log: OpenLog) -> None:
    log = open_log(config(flush_messages=1))
    for i in range(4):
        log.append(batch(3, tag=i))
    log.truncate_to(7)  # inside 6..8: the whole batch goes
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (6, 6, 6)
    assert all_offsets(log) == list(range(6))
    log.truncate_to(6)
    log.truncate_to(100)
    assert log.log_end_offset == 6
    assert log.append(batch(1, tag=9)).first_offset == 6
    assert values_of(log.read_records(6)) == [b"9:0:".ljust(20, b".")]


def test_truncate_to_an_earlier_segment(open_log: OpenLog) -> None:
    log = open_log(config(index_interval_bytes=0))
    _segments_with_timestamps(log, [START_MS + i for i in range(4)])
    log.truncate_to(3)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.log_end_offset == 2
    assert sorted(p.name for p in log.directory.iterdir() if p.suffix == ".log") == [
        segment_file_name(0, LOG_SUFFIX),
        segment_file_name(2, LOG_SUFFIX),
    ]
    # The old segment is the active one again; several batches in one append fit in it.
    log.append(b"".join(batch(1, tag=i) for i in range(6)))
    assert all_offsets(log) == list(range(8))
    log.truncate_to(1)  # into the first segment, which had been rolled (trimmed indexes)
    assert [s.base_offset for s in log.segments] == [0]
    assert log.log_end_offset == 0  # its only batch, 0..1, straddled the cut
    log.append(b"".join(batch(1, tag=i) for i in range(6)))
    assert all_offsets(log) == list(range(6))


def test_truncate_below_the_log_start_resets_the_log(open_log: OpenLog) -> None:
    log = open_log()
    _segments_with_timestamps(log, [START_MS] * 3)
    log.delete_records_before(4)
    log.truncate_to(3)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (3, 3, 3)
    assert log.num_segments == 1
    assert log.active_segment.base_offset == 3
    assert log.read_records(3).num_rows == 0
    assert log.append(batch(2)).first_offset == 3
    assert all_offsets(log) == [3, 4]


# ---------------------------------------------------------------------------------------------
# Lifecycle


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_keeps_everything(open_log: OpenLog, clean: bool) -> None:
    settings = config(segment_bytes=1_000, index_interval_bytes=100)
    log = open_log(settings)
    for i in range(20):
        log.append(batch(2, timestamps=[START_MS + i, START_MS - i], tag=i))
    log.delete_records_before(5)
    expected = all_records(log)
    segments = [s.base_offset for s in log.segments]
    start, end = log.log_start_offset, log.log_end_offset
    log.close()
    # After an unclean shutdown, recovery from offset 0 re-reads every segment.
    reopened = open_log(
        settings,
        log_start_offset=start,
        recovery_point=end if clean else 0,
        had_clean_shutdown=clean,
    )
    assert (reopened.log_start_offset, reopened.high_watermark, reopened.log_end_offset) == (
        5,
        40,
        40,
    )
    assert [s.base_offset for s in reopened.segments] == segments
    assert all_offsets(reopened) == list(range(5, 40))
    assert all_records(reopened) == expected
    assert reopened.find_offset_by_timestamp(START_MS + 7) == TimestampAndOffset(START_MS + 7, 14)
    assert reopened.find_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(START_MS + 19, 38)
    assert reopened.append(batch(1)).first_offset == 40


def test_operations_after_close_raise_log_closed(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(2))
    log.close()
    log.close()  # idempotent
    for call in (
        lambda: log.append(batch(1)),
        lambda: log.read(0),
        lambda: log.read_records(0),
        log.roll,
        log.flush,
        lambda: log.truncate_to(0),
        lambda: log.delete_records_before(1),
        lambda: log.find_offset_by_timestamp(0),
    ):
        with pytest.raises(LogClosedError):
            call()
    assert log.apply_retention() == 0
    log.flush_if_due()  # a scheduler tick after close is harmless


def test_delete_removes_the_directory(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(2))
    directory = log.directory
    assert directory.is_dir()
    log.delete()
    assert not directory.exists()
    with pytest.raises(LogClosedError):
        log.append(batch(1))


def test_truncation_into_an_older_segment_does_not_force_a_roll(tmp_path) -> None:
    """A re-activated segment gets index room back, so the next append stays in it."""
    import pyarrow as pa

    from spark_mq.storage.log import PartitionLog
    from spark_mq.storage.log_config import LogConfig
    from spark_mq.storage.record_batch import encode_batch

    config = LogConfig(segment_bytes=4000, index_interval_bytes=0)
    log = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0, time_ms=lambda: 0)
    for i in range(12):
        log.append(encode_batch(pa.array([b"%d" % i]), now_ms=0))
    assert log.num_segments > 2
    first_next = log.segments[0].next_offset()
    log.truncate_to(first_next - 1)
    assert log.num_segments == 1
    log.append(encode_batch(pa.array([b"again"]), now_ms=0))
    assert log.num_segments == 1
    assert log.read_records(first_next - 1)["value"].to_pylist() == [b"again"]
    log.close()


def test_segment_jitter_makes_rolls_happen_earlier_than_segment_ms(tmp_path) -> None:
    """segment.jitter.ms takes a random part (seeded here) off each new segment's age limit."""
    import random

    import pyarrow as pa

    from spark_mq.storage.log import PartitionLog
    from spark_mq.storage.log_config import LogConfig
    from spark_mq.storage.record_batch import encode_batch

    now = [0]
    config = LogConfig(segment_ms=1000, segment_jitter_ms=1000)
    rng = random.Random(3)
    expected_jitter = random.Random(3).randrange(1000)
    log = PartitionLog.open(
        tmp_path / "t-0", config, topic="t", partition=0, time_ms=lambda: now[0], rng=rng
    )
    log.append(encode_batch(pa.array([b"a"]), now_ms=0))
    log.roll()  # the new active segment draws its jitter from the seeded rng
    log.append(encode_batch(pa.array([b"b"]), now_ms=0))
    assert log.num_segments == 2
    now[0] = 1000 - expected_jitter  # not past the jittered limit yet
    log.append(encode_batch(pa.array([b"c"]), now_ms=now[0]))
    assert log.num_segments == 2
    now[0] = 1000 - expected_jitter + 1  # past segment.ms - jitter, though not past segment.ms
    log.append(encode_batch(pa.array([b"d"]), now_ms=now[0]))
    assert log.num_segments == 3
    log.close()


def test_compacted_topic_refuses_records_without_a_key(tmp_path) -> None:
    import pyarrow as pa
    import pytest

    from spark_mq.errors import InvalidRecordError
    from spark_mq.storage.log import PartitionLog
    from spark_mq.storage.log_config import LogConfig
    from spark_mq.storage.record_batch import encode_batch

    config = LogConfig.from_properties({"cleanup.policy": "compact"})
    log = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0)
    with pytest.raises(InvalidRecordError, match="needs a key"):
        log.append(encode_batch(pa.array([b"v1", b"v2"]), key=pa.array([b"k", None])))
    assert log.log_end_offset == 0
    log.append(encode_batch(pa.array([b"v1", None]), key=pa.array([b"k", b"k"])))
    assert log.log_end_offset == 2
    log.close()
