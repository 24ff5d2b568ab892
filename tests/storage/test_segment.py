"""LogSegment: index entries, offset translation, reads, lookups by time, truncation, recovery."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import crc32c
import pyarrow as pa
import pytest
from log_testing import open_descriptors_of

from spark_mq.errors import CorruptIndexError, InvalidRecordError
from spark_mq.storage.batch_decoder import decode_records, iter_batches
from spark_mq.storage.offset_index import OffsetPosition
from spark_mq.storage.record_batch import HEADER_SIZE, BatchHeader, encode_batch
from spark_mq.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    BatchPosition,
    LogSegment,
    TimestampAndOffset,
    parse_base_offset,
    segment_file_name,
)
from spark_mq.storage.time_index import TimestampOffset

SEED = 424242
BASE = 1_000
BIG_INDEX_BYTES = 1024 * 1024
T = TypeVar("T")


def present(value: T | None) -> T:
    """``value``, which the test expects to be there."""
    assert value is not None
    return value


def new_segment(
    directory: Path,
    base_offset: int = BASE,
    *,
    interval: int = 0,
    index_bytes: int = BIG_INDEX_BYTES,
    jitter_ms: int = 0,
) -> LogSegment:
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=interval,
        max_index_size_bytes=index_bytes,
        rolling_jitter_ms=jitter_ms,
        created_ms=0,
    )


def make_batch(
    base_offset: int,
    timestamps: list[int],
    *,
    value_bytes: int = 30,
    codec: str = "none",
) -> bytes:
    n = len(timestamps)
    values = [bytes([(base_offset + i) % 256]) * value_bytes for i in range(n)]
    return encode_batch(
        pa.array(values, type=pa.binary()),
        key=pa.array([f"k{base_offset + i}".encode() for i in range(n)], type=pa.binary()),
        timestamp=pa.array(timestamps, type=pa.int64()),
        base_offset=base_offset,
        codec=codec,
    )


def append(segment: LogSegment, batches: list[bytes]) -> None:
    """Append ``batches`` in one call, as the log does."""
    positions = []
    pos = 0
    for data in batches:
        positions.append(BatchPosition(BatchHeader.unpack_from(data), pos))
        pos += len(data)
    segment.append(batches, positions)


def random_batches(
    rng: random.Random, base_offset: int, count: int, *, ts_base: int = 1_000_000
) -> list[bytes]:
    """Batches of 1-6 records with unordered timestamps and mixed sizes and codecs."""
    out = []
    offset = base_offset
    for _ in range(count):
        n = rng.randrange(1, 7)
        stamps = [ts_base + rng.randrange(-5_000, 5_000) for _ in range(n)]
        codec = rng.choice(["none", "gzip", "lz4", "zstd", "snappy"])
        out.append(make_batch(offset, stamps, value_bytes=rng.randrange(1, 400), codec=codec))
        offset += n
    return out


def headers_of(batches: list[bytes]) -> list[tuple[BatchHeader, int]]:
    out = []
    pos = 0
    for data in batches:
        header = BatchHeader.unpack_from(data)
        out.append((header, pos))
        pos += header.size
    return out


def records_of(batches: list[bytes]) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record."""
    table = decode_records(b"".join(batches))
    return list(
        zip(table.column("offset").to_pylist(), table.column("timestamp").to_pylist(), strict=True)
    )


def expected_indexes(
    batches: list[bytes], interval: int, base_offset: int = BASE
) -> tuple[list[OffsetPosition], list[TimestampOffset]]:
    """The entries the segment's rule gives: one for the first batch after > interval bytes."""
    offsets: list[OffsetPosition] = []
    times: list[TimestampOffset] = []
    since = 0
    max_ts, offset_of_max = -1, base_offset - 1
    for header, pos in headers_of(batches):
        if header.max_timestamp > max_ts:
            max_ts, offset_of_max = header.max_timestamp, header.last_offset
        if since > interval:
            offsets.append(OffsetPosition(header.base_offset, pos))
            if not times or max_ts > times[-1].timestamp:
                times.append(TimestampOffset(max_ts, offset_of_max))
            since = 0
        since += header.size
    return offsets, times


def index_entries(segment: LogSegment) -> tuple[list[OffsetPosition], list[TimestampOffset]]:
    return (
        [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)],
        [segment.time_index.entry(i) for i in range(segment.time_index.entries)],
    )


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[LogSegment]:
    seg = new_segment(tmp_path)
    yield seg
    seg.close()


# ---------------------------------------------------------------------------------------------
# Files


def test_file_names() -> None:
    assert segment_file_name(42, LOG_SUFFIX) == "00000000000000000042.log"
    assert parse_base_offset("00000000000000000042.timeindex") == 42
    assert parse_base_offset("00000000000000000042.log.deleted") == 42
    assert parse_base_offset("leader-epoch-checkpoint") is None
    assert parse_base_offset("42.log") is None


def test_new_segment_creates_its_three_files(tmp_path: Path, segment: LogSegment) -> None:
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        segment_file_name(BASE, s) for s in (INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX)
    ]
    assert segment.size_bytes == 0
    assert segment.next_offset() == BASE
    assert segment.max_timestamp_so_far == -1


def test_rename_to_deleted_then_delete(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    append(segment, [make_batch(BASE, [1, 2])])
    segment.rename_to_deleted()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        segment_file_name(BASE, s) + DELETED_SUFFIX
        for s in (INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX)
    )
    # Still readable under the new names until deleted.
    assert segment.translate_offset(BASE) is not None
    segment.delete()
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Append and indexes


@pytest.mark.parametrize("interval", [0, 150, 1_000, 4_096, 100_000])
def test_index_entries_every_index_interval_bytes(tmp_path: Path, interval: int) -> None:
    rng = random.Random(SEED + interval)
    batches = random_batches(rng, BASE, 120)
    segment = new_segment(tmp_path, interval=interval)
    # Appends of one to four batches at a time: the rule runs per batch, across appends.
    i = 0
    while i < len(batches):
        n = rng.randrange(1, 5)
        append(segment, batches[i : i + n])
        i += n
    assert segment.size_bytes == sum(len(b) for b in batches)
    assert index_entries(segment) == expected_indexes(batches, interval)
    if interval == 0:
        assert segment.offset_index.entries == len(batches) - 1
    assert segment.next_offset() == headers_of(batches)[-1][0].next_offset
    assert segment.max_timestamp_so_far == max(ts for _, ts in records_of(batches))
    segment.close()


def test_append_refuses_offsets_outside_the_segment(segment: LogSegment) -> None:
    with pytest.raises(InvalidRecordError, match="do not fit"):
        append(segment, [make_batch(BASE - 1, [5])])
    with pytest.raises(InvalidRecordError, match="do not fit"):
        append(segment, [make_batch(BASE + MAX_RELATIVE_OFFSET, [5, 6])])
    assert segment.size_bytes == 0


def test_multi_batch_append_fills_a_small_index_without_failing(tmp_path: Path) -> None:
    """An index that fills part-way through one append only gets sparser."""
    segment = new_segment(tmp_path, interval=0, index_bytes=24)  # 3 offset, 2 time slots
    batches = [make_batch(BASE + i, [100 + i]) for i in range(8)]
    append(segment, batches)
    assert segment.size_bytes == sum(len(b) for b in batches)
    assert segment.next_offset() == BASE + 8
    assert segment.time_index.is_full
    for offset in range(BASE, BASE + 8):
        found = segment.translate_offset(offset)
        assert found is not None
        assert found.header.base_offset == offset
    assert segment.find_offset_by_timestamp(105, BASE) == TimestampAndOffset(105, BASE + 5)
    segment.close()


def test_on_become_inactive_adds_the_final_time_entry_and_trims(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=100_000)
    append(segment, [make_batch(BASE, [10, 30]), make_batch(BASE + 2, [20])])
    assert segment.time_index.entries == 0
    segment.on_become_inactive()
    assert index_entries(segment)[1] == [TimestampOffset(30, BASE + 1)]
    assert segment.offset_index.length_bytes == 0
    assert segment.time_index.length_bytes == 12
    segment.close()
    assert (tmp_path / segment_file_name(BASE, TIME_INDEX_SUFFIX)).stat().st_size == 12


def test_reopen_keeps_offsets_and_timestamps(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    batches = random_batches(rng, BASE, 40)
    segment = new_segment(tmp_path, interval=500)
    append(segment, batches)
    before = index_entries(segment), segment.next_offset(), segment.max_timestamp_so_far
    segment.close()
    reopened = new_segment(tmp_path, interval=500)
    reopened.sanity_check()
    assert (index_entries(reopened), reopened.next_offset(), reopened.max_timestamp_so_far) == (
        before
    )
    reopened.close()


# ---------------------------------------------------------------------------------------------
# Reads


@pytest.fixture
def filled(tmp_path: Path) -> Iterator[tuple[LogSegment, list[bytes]]]:
    rng = random.Random(SEED + 1)
    batches = random_batches(rng, BASE, 60)
    segment = new_segment(tmp_path, interval=700)
    for i in range(0, len(batches), 3):
        append(segment, batches[i : i + 3])
    yield segment, batches
    segment.close()


def test_translate_offset(filled: tuple[LogSegment, list[bytes]]) -> None:
    segment, batches = filled
    headers = headers_of(batches)
    end = headers[-1][0].next_offset
    for offset in range(BASE - 2, end + 2):
        expected = next(
            (BatchPosition(h, pos) for h, pos in headers if h.last_offset >= offset), None
        )
        assert segment.translate_offset(offset) == expected, offset
    # A starting position past the index entry skips the earlier batches.
    h30, pos30 = headers[30]
    assert segment.translate_offset(BASE, pos30) == BatchPosition(h30, pos30)
    assert segment.translate_offset(end) is None


def test_read_whole_batches_within_max_size(filled: tuple[LogSegment, list[bytes]]) -> None:
    segment, batches = filled
    headers = headers_of(batches)
    for i in (0, 1, 17, 59):
        header, pos = headers[i]
        for offset in (header.base_offset, header.last_offset):
            # Everything from the batch holding the offset.
            with present(segment.read(offset, 10**9)) as file_range:
                assert file_range.position == pos
                assert file_range.read() == b"".join(batches[i:])
            # Exactly three batches fit; one byte less and only two do.
            three = sum(len(b) for b in batches[i : i + 3])
            with present(segment.read(offset, three)) as file_range:
                assert file_range.read() == b"".join(batches[i : i + 3])
            if i + 3 <= len(batches):
                with present(segment.read(offset, three - 1)) as file_range:
                    assert file_range.read() == b"".join(batches[i : i + 2])


def test_read_min_one_message(filled: tuple[LogSegment, list[bytes]]) -> None:
    segment, batches = filled
    with present(segment.read(BASE, 1)) as file_range:
        assert file_range.read() == batches[0]
    with present(segment.read(BASE, 0)) as file_range:
        assert file_range.read() == batches[0]
    assert segment.read(BASE, 1, min_one_message=False) is None
    assert segment.read(BASE, len(batches[0]), min_one_message=False) is not None


def test_read_stops_at_max_position(filled: tuple[LogSegment, list[bytes]]) -> None:
    segment, batches = filled
    headers = headers_of(batches)
    bound = headers[10][1]
    with present(segment.read(BASE, 10**9, max_position=bound)) as file_range:
        assert file_range.read() == b"".join(batches[:10])
    # min_one_message never reaches past max_position.
    assert segment.read(headers[10][0].base_offset, 0, max_position=bound) is None
    assert segment.read(headers[12][0].base_offset, 10**9, max_position=bound) is None
    # A max_position inside a batch excludes that batch.
    with present(segment.read(BASE, 10**9, max_position=bound + 5)) as file_range:
        assert file_range.read() == b"".join(batches[:10])


def test_read_past_the_end_is_none(filled: tuple[LogSegment, list[bytes]]) -> None:
    segment, _ = filled
    assert segment.read(segment.next_offset(), 10**9) is None
    assert segment.read(segment.next_offset() + 100, 10**9) is None


def test_find_offset_by_timestamp_against_brute_force(
    filled: tuple[LogSegment, list[bytes]],
) -> None:
    segment, batches = filled
    records = records_of(batches)
    stamps = sorted({ts for _, ts in records})
    targets = {stamps[0] - 1, stamps[-1], stamps[-1] + 1, *stamps[::7]}
    starts = [BASE, BASE + 1, *[off for off, _ in records[::23]], records[-1][0] + 1]
    for start in starts:
        for target in targets:
            hit = next(((ts, off) for off, ts in records if off >= start and ts >= target), None)
            expected = None if hit is None else TimestampAndOffset(*hit)
            assert segment.find_offset_by_timestamp(target, start) == expected, (target, start)


def test_find_offset_by_timestamp_with_log_append_time(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    data = bytearray(make_batch(BASE, [5, 1, 9]))
    header = BatchHeader.unpack_from(data)
    # What the log writes for LogAppendTime: the timestamp-type bit and the append time.
    header = header._replace(attributes=header.attributes | 0x08, max_timestamp=500)
    data[:HEADER_SIZE] = header.pack()
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    list(iter_batches(bytes(data)))  # valid
    append(segment, [bytes(data)])
    assert segment.find_offset_by_timestamp(400, BASE) == TimestampAndOffset(500, BASE)
    assert segment.find_offset_by_timestamp(500, BASE + 1) == TimestampAndOffset(500, BASE + 1)
    assert segment.find_offset_by_timestamp(501, BASE) is None
    segment.close()


# ---------------------------------------------------------------------------------------------
# Truncation


def test_truncate_to_removes_the_straddling_batch(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=0)
    batches = [make_batch(BASE + 3 * i, [100 + 10 * i, 90, 95]) for i in range(10)]
    append(segment, batches)
    headers = headers_of(batches)
    # Offset BASE+13 is in the fifth batch (BASE+12..BASE+14): it goes whole.
    removed = segment.truncate_to(BASE + 13)
    assert removed == sum(len(b) for b in batches[4:])
    assert segment.size_bytes == headers[4][1]
    assert segment.next_offset() == BASE + 12
    assert segment.max_timestamp_so_far == 130
    assert index_entries(segment) == expected_indexes(batches[:4], 0)
    assert segment.translate_offset(BASE + 12) is None
    # Appends continue at the cut, and index entries with them.
    append(segment, [make_batch(BASE + 12, [7]), make_batch(BASE + 13, [500])])
    assert segment.next_offset() == BASE + 14
    assert segment.find_offset_by_timestamp(200, BASE) == TimestampAndOffset(500, BASE + 13)
    segment.close()


def test_truncate_to_past_the_end_removes_nothing(segment: LogSegment) -> None:
    append(segment, [make_batch(BASE, [1, 2, 3])])
    assert segment.truncate_to(BASE + 3) == 0
    assert segment.truncate_to(BASE + 100) == 0
    assert segment.next_offset() == BASE + 3


def test_truncate_to_the_base_empties_the_segment(segment: LogSegment) -> None:
    append(segment, [make_batch(BASE, [1, 2, 3]), make_batch(BASE + 3, [4])])
    segment.truncate_to(BASE)
    assert segment.size_bytes == 0
    assert segment.next_offset() == BASE
    assert segment.max_timestamp_so_far == -1
    assert segment.offset_index.entries == 0 and segment.time_index.entries == 0
    # An empty segment never asks to roll, whatever its age.
    assert not segment.should_roll(
        append_size_bytes=10, last_offset=BASE, now_ms=10**12, segment_bytes=100, segment_ms=1
    )


def test_truncate_of_a_trimmed_segment_then_multi_batch_append(tmp_path: Path) -> None:
    """A rolled segment that truncation makes active again has trimmed (full) indexes."""
    segment = new_segment(tmp_path, interval=0)
    append(segment, [make_batch(BASE + i, [10 + i]) for i in range(4)])
    segment.on_become_inactive()
    segment.truncate_to(BASE)
    batches = [make_batch(BASE + i, [50 + i]) for i in range(6)]
    append(segment, batches)
    assert segment.next_offset() == BASE + 6
    assert [
        present(segment.translate_offset(BASE + i)).header.base_offset for i in range(6)
    ] == list(range(BASE, BASE + 6))
    assert segment.find_offset_by_timestamp(53, BASE) == TimestampAndOffset(53, BASE + 3)
    segment.close()


# ---------------------------------------------------------------------------------------------
# Recovery and sanity checks


def test_recover_rebuilds_missing_indexes(tmp_path: Path) -> None:
    rng = random.Random(SEED + 2)
    batches = random_batches(rng, BASE, 50)
    segment = new_segment(tmp_path, interval=600)
    append(segment, batches)
    segment.on_become_inactive()
    expected = index_entries(segment)
    segment.close()
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (tmp_path / segment_file_name(BASE, suffix)).unlink()
    rebuilt = new_segment(tmp_path, interval=600)
    assert rebuilt.offset_index.entries == 0
    assert rebuilt.recover() == 0
    assert index_entries(rebuilt) == expected
    assert rebuilt.next_offset() == headers_of(batches)[-1][0].next_offset
    rebuilt.sanity_check()
    rebuilt.close()


def test_recover_rebuilds_into_trimmed_index_files(tmp_path: Path) -> None:
    """Recovery of a rolled segment whose index files were trimmed at the roll."""
    batches = [make_batch(BASE + i, [100 + i]) for i in range(20)]
    segment = new_segment(tmp_path, interval=0)
    append(segment, batches)
    segment.on_become_inactive()
    segment.close()
    reopened = new_segment(tmp_path, interval=0)
    assert reopened.recover() == 0
    assert reopened.next_offset() == BASE + 20
    for offset in range(BASE, BASE + 20):
        assert present(reopened.translate_offset(offset)).header.base_offset == offset
    assert reopened.find_offset_by_timestamp(110, BASE) == TimestampAndOffset(110, BASE + 10)
    reopened.sanity_check()
    reopened.close()


@pytest.mark.parametrize("tail", [1, 30, HEADER_SIZE, HEADER_SIZE + 100])
def test_recover_truncates_a_torn_tail(tmp_path: Path, tail: int) -> None:
    batches = [make_batch(BASE + 2 * i, [i, i + 1], value_bytes=200) for i in range(10)]
    segment = new_segment(tmp_path, interval=300)
    append(segment, batches)
    good_size = segment.size_bytes
    segment.close()
    torn = make_batch(BASE + 20, [5, 6], value_bytes=200)[:tail]
    with open(tmp_path / segment_file_name(BASE, LOG_SUFFIX), "ab") as f:
        f.write(torn)
    reopened = new_segment(tmp_path, interval=300)
    assert reopened.recover() == tail
    assert reopened.size_bytes == good_size
    assert (tmp_path / segment_file_name(BASE, LOG_SUFFIX)).stat().st_size == good_size
    assert reopened.next_offset() == BASE + 20
    assert index_entries(reopened) == expected_indexes(batches, 300)
    reopened.close()


def test_recover_cuts_at_a_corrupt_batch_and_offsets_going_backwards(tmp_path: Path) -> None:
    batches = [make_batch(BASE + i, [i]) for i in range(10)]
    # The eighth batch repeats an offset: everything from it is cut.
    batches[7] = make_batch(BASE + 3, [7])
    segment = new_segment(tmp_path)
    path = tmp_path / segment_file_name(BASE, LOG_SUFFIX)
    segment.records.append(batches)  # bypasses the segment's own checks, as a bad disk would
    segment.close()
    reopened = new_segment(tmp_path)
    assert reopened.recover() == sum(len(b) for b in batches[7:])
    assert reopened.next_offset() == BASE + 7
    reopened.close()
    # A flipped bit in the fourth batch's body: cut there.
    data = bytearray(path.read_bytes())
    data[headers_of(batches)[3][1] + HEADER_SIZE + 3] ^= 0x01
    path.write_bytes(bytes(data))
    again = new_segment(tmp_path)
    assert again.recover() == sum(len(b) for b in batches[3:7])
    assert again.next_offset() == BASE + 3
    again.close()


def test_sanity_check_detects_bad_indexes(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=0)
    batches = [make_batch(BASE + i, [i]) for i in range(6)]
    append(segment, batches)
    segment.sanity_check()
    segment.close()
    log_path = tmp_path / segment_file_name(BASE, LOG_SUFFIX)
    index_path = tmp_path / segment_file_name(BASE, INDEX_SUFFIX)

    # The .log file lost its tail: the index points past its end.
    original = log_path.read_bytes()
    log_path.write_bytes(original[: len(batches[0]) + 1])
    reopened = new_segment(tmp_path, interval=0)
    with pytest.raises(CorruptIndexError, match="past the end"):
        reopened.sanity_check()
    reopened.close()
    log_path.write_bytes(original)

    # Entries out of order.
    entries = bytearray(index_path.read_bytes())
    entries[0:8], entries[8:16] = entries[8:16], entries[0:8]
    index_path.write_bytes(bytes(entries))
    reopened = new_segment(tmp_path, interval=0)
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check()
    reopened.close()

    # A size that is not a whole number of entries.
    index_path.write_bytes(bytes(entries[:-3]))
    reopened = new_segment(tmp_path, interval=0)
    with pytest.raises(CorruptIndexError, match="multiple"):
        reopened.sanity_check()
    reopened.close()


# ---------------------------------------------------------------------------------------------
# Rolling


def should_roll(segment: LogSegment, **overrides: int) -> bool:
    args = {
        "append_size_bytes": 100,
        "last_offset": segment.next_offset(),
        "now_ms": 1_000,
        "segment_bytes": 10**9,
        "segment_ms": 10**9,
    }
    args.update(overrides)
    return segment.should_roll(**args)


def test_should_roll_on_size(segment: LogSegment) -> None:
    data = make_batch(BASE, [1_000])
    append(segment, [data])
    size = len(data)
    assert not should_roll(segment, segment_bytes=size + 100, append_size_bytes=100)
    assert should_roll(segment, segment_bytes=size + 100, append_size_bytes=101)


def test_should_roll_on_age_of_the_first_batch(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, jitter_ms=30)
    append(segment, [make_batch(BASE, [5_000, 1_000])])
    append(segment, [make_batch(BASE + 2, [9_000])])
    # Age is measured from the first batch's largest timestamp (5000), minus the jitter.
    assert not should_roll(segment, now_ms=5_000 + 100 - 30, segment_ms=100)
    assert should_roll(segment, now_ms=5_000 + 100 - 30 + 1, segment_ms=100)
    segment.close()
    reopened = new_segment(tmp_path, jitter_ms=30)
    assert should_roll(reopened, now_ms=5_071, segment_ms=100)
    reopened.close()


def test_should_roll_on_full_indexes(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, interval=0, index_bytes=24)
    append(segment, [make_batch(BASE, [1])])
    assert not should_roll(segment)
    append(segment, [make_batch(BASE + 1, [2])])
    # The time index holds 2 slots and keeps the last one for the roll.
    assert segment.time_index.is_full
    assert should_roll(segment)
    segment.close()


def test_should_roll_when_offsets_no_longer_fit(segment: LogSegment) -> None:
    append(segment, [make_batch(BASE, [1])])
    assert not should_roll(segment, last_offset=BASE + MAX_RELATIVE_OFFSET)
    assert should_roll(segment, last_offset=BASE + MAX_RELATIVE_OFFSET + 1)


def test_empty_segment_never_rolls(segment: LogSegment) -> None:
    assert not should_roll(segment, segment_bytes=HEADER_SIZE + 1, append_size_bytes=10**6)
    assert not should_roll(segment, last_offset=BASE + MAX_RELATIVE_OFFSET + 1)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_segment_that_fails_to_open_keeps_no_descriptor(tmp_path: Path) -> None:
    log_path = tmp_path / segment_file_name(BASE, LOG_SUFFIX)
    log_path.write_bytes(b"")
    # The time index cannot be opened: the segment's .log is already open by then.
    time_index_path = tmp_path / segment_file_name(BASE, TIME_INDEX_SUFFIX)
    time_index_path.mkdir()

    with pytest.raises(OSError) as failed:
        LogSegment(
            tmp_path,
            BASE,
            index_interval_bytes=4096,
            max_index_size_bytes=BIG_INDEX_BYTES,
            created_ms=0,
        )
    # Checked while the exception (whose traceback holds the half-built segment) is alive.
    assert failed.value.filename == str(time_index_path)
    assert open_descriptors_of(log_path) == 0
