"""FileRecords and FileRange: appends, positional reads, header scans, validation, rollback."""

from __future__ import annotations

import errno
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from log_testing import open_descriptors_of

from spark_mq.errors import (
    CorruptRecordError,
    LogClosedError,
    LogDirectoryFullError,
    StorageError,
)
from spark_mq.storage.file_records import SCAN_BLOCK_BYTES, FileRange, FileRecords
from spark_mq.storage.record_batch import HEADER_SIZE, BatchHeader, encode_batch

SEED = 20241121


def make_batch(base_offset: int, values: list[bytes], codec: str = "none") -> bytes:
    return encode_batch(
        pa.array(values, type=pa.binary()), base_offset=base_offset, now_ms=1_000, codec=codec
    )


def mixed_batches(rng: random.Random, count: int, large_every: int) -> list[bytes]:
    """Many small batches and, every ``large_every``, one larger than a scan block."""
    out = []
    offset = 0
    for i in range(count):
        if i % large_every == large_every - 1:
            values = [rng.randbytes(SCAN_BLOCK_BYTES + rng.randrange(1, 40_000))]
        else:
            values = [rng.randbytes(rng.randrange(0, 60)) for _ in range(rng.randrange(1, 4))]
        out.append(make_batch(offset, values))
        offset += len(values)
    return out


def expected_positions(batches: list[bytes]) -> list[tuple[BatchHeader, int]]:
    out = []
    pos = 0
    for batch in batches:
        out.append((BatchHeader.unpack_from(batch), pos))
        pos += len(batch)
    return out


@pytest.fixture
def records(tmp_path: Path) -> Iterator[FileRecords]:
    fr = FileRecords(tmp_path / "00000000000000000000.log")
    yield fr
    fr.close()


# ---------------------------------------------------------------------------------------------
# Append and read


def test_append_of_several_chunks_writes_them_in_order(records: FileRecords) -> None:
    chunks: list[bytes | bytearray | memoryview] = [
        b"abc",
        bytearray(b""),
        memoryview(b"defgh"),
        b"i" * 10_000,
    ]
    assert records.append(chunks) == 3 + 5 + 10_000
    assert records.append([b"XYZ"]) == 3
    expected = b"abcdefgh" + b"i" * 10_000 + b"XYZ"
    assert records.size_bytes == len(expected)
    assert records.path.read_bytes() == expected
    assert records.read(0, records.size_bytes) == expected
    assert records.read(3, 5) == b"defgh"
    # Reads past the end are cut at the end, never padded.
    assert records.read(records.size_bytes - 2, 100) == b"YZ"
    assert records.read(records.size_bytes, 10) == b""
    assert records.read(records.size_bytes + 10, 10) == b""


def test_append_of_more_chunks_than_one_writev_takes(records: FileRecords) -> None:
    chunks = [bytes([i % 256]) * (i % 7 + 1) for i in range(2_000)]
    assert records.append(chunks) == sum(len(c) for c in chunks)
    assert records.path.read_bytes() == b"".join(chunks)


def test_existing_file_is_opened_at_its_size(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"0123456789")
    fr = FileRecords(path)
    assert fr.size_bytes == 10
    fr.append([b"ab"])
    assert path.read_bytes() == b"0123456789ab"
    fr.close()


def test_read_only_file_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"data")
    fr = FileRecords(path, writable=False)
    assert fr.read(0, 4) == b"data"
    with pytest.raises(StorageError):
        fr.append([b"more"])
    assert path.read_bytes() == b"data"
    fr.close()


def test_missing_read_only_file_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open"):
        FileRecords(tmp_path / "absent.log", writable=False)


def test_closed_file_raises_log_closed(records: FileRecords) -> None:
    records.append([b"x"])
    records.close()
    records.close()  # idempotent
    with pytest.raises(LogClosedError):
        records.read(0, 1)
    with pytest.raises(LogClosedError):
        records.append([b"y"])
    with pytest.raises(LogClosedError):
        records.range(0, 1)


def test_rename_and_delete(records: FileRecords, tmp_path: Path) -> None:
    records.append([b"abc"])
    new_path = tmp_path / "00000000000000000000.log.deleted"
    records.rename(new_path)
    assert records.path == new_path
    assert not (tmp_path / "00000000000000000000.log").exists()
    assert records.read(0, 3) == b"abc"
    records.delete()
    assert not new_path.exists()


# ---------------------------------------------------------------------------------------------
# Header scans


def test_headers_across_scan_blocks_with_small_and_large_batches(records: FileRecords) -> None:
    rng = random.Random(SEED)
    batches = mixed_batches(rng, count=3_000, large_every=700)
    records.append(batches)
    assert records.size_bytes > 5 * SCAN_BLOCK_BYTES
    expected = expected_positions(batches)
    assert list(records.headers()) == expected
    # From every 97th batch, bounded by the end of a later one.
    for i in range(0, len(expected), 97):
        start = expected[i][1]
        j = min(len(expected) - 1, i + 150)
        end = expected[j][1] + expected[j][0].size
        assert list(records.headers(start, end)) == expected[i : j + 1]


def test_headers_stop_before_a_batch_that_does_not_fit(records: FileRecords) -> None:
    batches = [make_batch(i, [b"v" * 50]) for i in range(5)]
    records.append(batches)
    expected = expected_positions(batches)
    end_of_third = expected[2][1] + expected[2][0].size
    # An end inside the fourth batch (as a high watermark position or a torn tail would be).
    assert list(records.headers(0, end_of_third + 10)) == expected[:3]
    assert list(records.headers(0, end_of_third)) == expected[:3]
    assert list(records.headers(0, 0)) == []
    # A torn tail: half a batch, then less than a header.
    records.append([batches[0][: len(batches[0]) // 2]])
    assert list(records.headers()) == expected
    records.truncate_to(expected[-1][1] + expected[-1][0].size + HEADER_SIZE - 1)
    assert list(records.headers()) == expected


def test_headers_of_an_empty_file(records: FileRecords) -> None:
    assert list(records.headers()) == []


# ---------------------------------------------------------------------------------------------
# Validated scans (recovery)


@pytest.mark.parametrize("chunk_bytes", [64, 1_000, 70_000, 8 * 1024 * 1024])
def test_validated_batches_with_batches_larger_than_a_chunk(
    records: FileRecords, chunk_bytes: int
) -> None:
    rng = random.Random(SEED + chunk_bytes)
    batches = mixed_batches(rng, count=300, large_every=40)
    batches.insert(7, make_batch(0, [rng.randbytes(5_000)], codec="zstd"))
    records.append(batches)
    assert list(records.validated_batches(chunk_bytes=chunk_bytes)) == expected_positions(batches)
    start = expected_positions(batches)[123][1]
    assert (
        list(records.validated_batches(start, chunk_bytes=chunk_bytes))
        == (expected_positions(batches)[123:])
    )


@pytest.mark.parametrize("chunk_bytes", [100, 4_096, 8 * 1024 * 1024])
def test_validated_batches_stops_at_a_corrupt_batch(records: FileRecords, chunk_bytes: int) -> None:
    batches = [make_batch(i * 3, [b"a" * 200, b"b", b"c"]) for i in range(30)]
    records.append(batches)
    expected = expected_positions(batches)
    bad = expected[17][1]
    with open(records.path, "r+b") as f:
        f.seek(bad + HEADER_SIZE + 5)  # a byte of the body: the CRC no longer matches
        byte = f.read(1)
        f.seek(bad + HEADER_SIZE + 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    seen = []
    with pytest.raises(CorruptRecordError) as info:
        for item in records.validated_batches(chunk_bytes=chunk_bytes):
            seen.append(item)
    assert seen == expected[:17]
    assert info.value.position == bad
    assert info.value.path == str(records.path)


@pytest.mark.parametrize("chunk_bytes", [100, 4_096, 8 * 1024 * 1024])
@pytest.mark.parametrize("tail", [1, 11, 12, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 40])
def test_validated_batches_reports_a_torn_tail(
    records: FileRecords, chunk_bytes: int, tail: int
) -> None:
    batches = [make_batch(i, [b"z" * 300]) for i in range(10)]
    records.append(batches)
    records.append([batches[0][:tail]])
    expected = expected_positions(batches)
    seen = []
    with pytest.raises(CorruptRecordError, match="truncated") as info:
        for item in records.validated_batches(chunk_bytes=chunk_bytes):
            seen.append(item)
    assert seen == expected
    assert info.value.position == sum(len(b) for b in batches)


# ---------------------------------------------------------------------------------------------
# Truncation and rollback


def test_truncate_to(records: FileRecords) -> None:
    batches = [make_batch(i, [b"q" * 20]) for i in range(4)]
    records.append(batches)
    keep = len(batches[0]) + len(batches[1])
    records.truncate_to(keep)
    assert records.size_bytes == keep
    assert os.path.getsize(records.path) == keep
    assert list(records.headers()) == expected_positions(batches[:2])
    records.append([batches[2]])
    assert list(records.headers()) == expected_positions(batches[:3])
    with pytest.raises(StorageError, match="holds only"):
        records.truncate_to(records.size_bytes + 1)


def _failing_pwritev(monkeypatch: pytest.MonkeyPatch, error: int, written_first: int) -> list[int]:
    """Patch os.pwritev: the first call writes ``written_first`` bytes, every later one fails."""
    real = os.pwritev
    calls: list[int] = []

    def pwritev(fd: int, buffers: list[memoryview], offset: int) -> int:
        calls.append(offset)
        if len(calls) == 1 and written_first:
            data = b"".join(bytes(b) for b in buffers)[:written_first]
            return real(fd, [data], offset)
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(os, "pwritev", pwritev)
    return calls


@pytest.mark.parametrize("written_first", [0, 1, 5_000])
def test_disk_full_rolls_back_and_raises_log_directory_full(
    records: FileRecords, monkeypatch: pytest.MonkeyPatch, written_first: int
) -> None:
    good = make_batch(0, [b"kept"])
    records.append([good])
    size_before = os.path.getsize(records.path)
    calls = _failing_pwritev(monkeypatch, errno.ENOSPC, written_first)
    with pytest.raises(LogDirectoryFullError) as info:
        records.append([make_batch(1, [b"x" * 10_000]), b"tail"])
    assert calls, "the write was attempted"
    assert info.value.retriable
    assert info.value.path == str(records.path)
    assert isinstance(info.value.__cause__, OSError)
    assert os.path.getsize(records.path) == size_before
    assert records.size_bytes == size_before
    monkeypatch.undo()
    # The file goes on as if the failed append never happened.
    second = make_batch(1, [b"after"])
    records.append([second])
    assert records.path.read_bytes() == good + second


def test_other_write_errors_roll_back_and_raise_storage_error(
    records: FileRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    records.append([b"0123"])
    _failing_pwritev(monkeypatch, errno.EIO, written_first=2)
    with pytest.raises(StorageError) as info:
        records.append([b"abcdef"])
    assert not isinstance(info.value, LogDirectoryFullError)
    assert os.path.getsize(records.path) == 4
    assert records.size_bytes == 4


def test_failed_rollback_raises_storage_error(
    records: FileRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    records.append([b"0123"])
    _failing_pwritev(monkeypatch, errno.ENOSPC, written_first=0)

    def ftruncate(fd: int, size: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(StorageError, match="roll back"):
        records.append([b"abcdef"])


def test_partial_writes_are_continued(
    records: FileRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short pwritev (as a signal or a pipe-like device may cause) is resumed, not lost."""
    real = os.pwritev

    def short_pwritev(fd: int, buffers: list[memoryview], offset: int) -> int:
        data = b"".join(bytes(b) for b in buffers)
        return real(fd, [data[: max(1, len(data) // 3)]], offset)

    monkeypatch.setattr(os, "pwritev", short_pwritev)
    chunks = [b"a" * 100, b"b" * 7, b"c" * 1_000]
    assert records.append(chunks) == 1_107
    assert records.path.read_bytes() == b"".join(chunks)


# ---------------------------------------------------------------------------------------------
# FileRange


def test_file_range_read_and_send_to_a_socket(records: FileRecords) -> None:
    batches = [make_batch(i, [b"r" * 100]) for i in range(5)]
    records.append(batches)
    start = len(batches[0])
    size = len(batches[1]) + len(batches[2])
    with records.range(start, size) as file_range:
        assert file_range.position == start
        assert file_range.size == size
        assert file_range.read() == batches[1] + batches[2]
        left, right = socket.socketpair()
        with left, right:
            sent = 0
            while sent < size:
                n = file_range.send_to(left.fileno(), sent)
                assert n > 0
                sent += n
            assert file_range.send_to(left.fileno(), sent) == 0
            received = b""
            while len(received) < size:
                received += right.recv(size - len(received))
        assert received == batches[1] + batches[2]


def test_file_range_send_to_a_pipe_from_an_offset(records: FileRecords) -> None:
    records.append([b"0123456789"])
    read_fd, write_fd = os.pipe()
    try:
        with records.range(2, 6) as file_range:
            assert file_range.send_to(write_fd, 3) == 3
        assert os.read(read_fd, 100) == b"567"
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_file_range_outlives_its_file(records: FileRecords) -> None:
    records.append([b"still readable"])
    file_range = records.range(0, 14)
    records.delete()
    assert not records.path.exists()
    assert file_range.read() == b"still readable"
    file_range.close()
    file_range.close()  # idempotent
    with pytest.raises(LogClosedError):
        file_range.read()
    with pytest.raises(LogClosedError):
        _ = file_range.fd


def test_file_range_over_a_truncated_file_raises(records: FileRecords) -> None:
    records.append([b"x" * 100])
    with records.range(0, 100) as file_range:
        records.truncate_to(50)
        with pytest.raises(StorageError, match="shorter than expected"):
            file_range.read()


def test_file_range_closes_its_descriptor(records: FileRecords) -> None:
    records.append([b"abc"])
    file_range = records.range(0, 3)
    fd = file_range.fd
    assert fd != records.fd
    file_range.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    # A range dropped without close() still gives its descriptor back (the __del__ backstop).
    leaked = FileRange(os.dup(records.fd), str(records.path), 0, 3)
    leaked_fd = leaked.fd
    assert leaked.read() == b"abc"
    del leaked
    with pytest.raises(OSError):
        os.fstat(leaked_fd)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_file_given_up_without_close_releases_its_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    records = FileRecords(path)
    records.append([b"kept"])
    assert open_descriptors_of(path) == 1
    del records  # abandoned, as a crashed cleaner's output or a segment that failed to open
    assert open_descriptors_of(path) == 0
    assert path.read_bytes() == b"kept"  # nothing written or cut on the way out
