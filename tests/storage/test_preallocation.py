"""Kafka's preallocate (spark_mq/storage/preallocation.py): when blocks are reserved and
given back (against a fake ``fallocate``), and, on Linux, that the reserved blocks really
exist past the end of the file, leave its size and bytes alone, and are freed at roll, close
and truncation, including those a crashed process left behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.storage import preallocation
from spark_mq.storage.file_records import FileRecords
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.preallocation import LEFTOVER_SLACK_BYTES, Preallocation
from spark_mq.storage.record_batch import encode_batch

MIB = 1024 * 1024


@pytest.fixture
def reserved(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The (offset, length) of every reservation asked for; each succeeds."""
    seen: list[tuple[int, int]] = []

    def fake(fd: int, offset: int, length: int) -> int:
        seen.append((offset, length))
        return 0

    monkeypatch.setattr(preallocation, "reserve", fake)
    return seen


def _fresh(size: int = 0) -> Preallocation:
    """A plan for a writable file of ``size`` bytes holding no blocks past its end."""
    return Preallocation(size, allocated_bytes=size)


def test_the_first_append_reserves_up_to_the_limit_once(reserved: list[tuple[int, int]]) -> None:
    plan = _fresh()
    plan.appended(-1, 10, 1_000)
    assert reserved == [(10, 990)]
    assert plan.reserved_to == 1_000
    for size in (300, 999, 1_000):
        plan.appended(-1, size, 1_000)
    assert reserved == [(10, 990)]


def test_zero_reserves_nothing(reserved: list[tuple[int, int]]) -> None:
    plan = _fresh()
    plan.appended(-1, 10**9, 0)
    assert reserved == []
    assert plan.reserved_to == 10**9  # the file's size when nothing is reserved


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EOPNOTSUPP, errno.EIO])
def test_a_failed_reservation_is_not_retried(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    asked: list[int] = []
    monkeypatch.setattr(preallocation, "reserve", lambda fd, o, n: asked.append(o) or code)
    plan = _fresh()
    plan.appended(-1, 100, 1_000)
    plan.appended(-1, 200, 1_000)
    assert asked == [100]
    assert plan.reserved_to == 200


def test_a_truncation_frees_what_was_reserved(reserved: list[tuple[int, int]]) -> None:
    plan = _fresh()
    plan.appended(-1, 100, 1_000)
    plan.truncated(40)
    assert plan.reserved_to == 40


def test_blocks_left_past_the_end_count_as_reserved_and_end_the_reserving(
    reserved: list[tuple[int, int]],
) -> None:
    plan = Preallocation(5_000, allocated_bytes=5 * MIB)
    assert plan.reserved_to == 5 * MIB
    plan.appended(-1, 6_000, 32 * MIB)
    assert reserved == []  # a leftover reservation is used, not added to
    # Block rounding and a little slack are not a reservation.
    assert Preallocation(5_000, allocated_bytes=8192).reserved_to == 5_000


def test_a_read_only_file_never_reserves_nor_counts_blocks(
    reserved: list[tuple[int, int]],
) -> None:
    plan = Preallocation(5_000, allocated_bytes=5 * MIB, writable=False)
    assert plan.reserved_to == 5_000
    plan.appended(-1, 5_000, 32 * MIB)
    assert reserved == []


# -- a real file system -----------------------------------------------------------------------


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def _can_reserve(directory: Path) -> bool:
    probe = directory / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT)
    try:
        return preallocation.reserve(fd, 0, MIB) == 0 and _allocated(probe) >= MIB
    finally:
        os.close(fd)
        probe.unlink()


@pytest.fixture
def fs(tmp_path: Path) -> Path:
    if not preallocation.SUPPORTED or not _can_reserve(tmp_path):
        pytest.skip("this file system cannot reserve blocks past the end of a file")
    return tmp_path


def test_reserved_blocks_lie_past_the_end_and_change_no_byte(fs: Path) -> None:
    records = FileRecords(fs / "0.log")
    chunks = [os.urandom(MIB // 2 + 7 * i) for i in range(6)]
    for chunk in chunks:
        records.append([chunk], reserve_to=16 * MIB)
    data = b"".join(chunks)
    assert records.size_bytes == len(data) == os.stat(fs / "0.log").st_size
    assert records.reserved_to == 16 * MIB
    assert _allocated(fs / "0.log") >= 16 * MIB
    assert records.read(0, records.size_bytes) == data
    assert records.read(records.size_bytes, MIB) == b""  # nothing readable past the end
    records.release_reserved()
    assert records.reserved_to == records.size_bytes
    assert _allocated(fs / "0.log") < records.size_bytes + MIB
    assert records.read(0, records.size_bytes) == data
    records.close()


def test_closing_gives_the_blocks_back(fs: Path) -> None:
    records = FileRecords(fs / "0.log")
    records.append([os.urandom(3 * MIB)], reserve_to=32 * MIB)
    assert _allocated(fs / "0.log") >= 32 * MIB
    records.close()
    assert _allocated(fs / "0.log") < 4 * MIB
    assert os.stat(fs / "0.log").st_size == 3 * MIB


def test_a_truncation_frees_the_blocks_past_the_new_end(fs: Path) -> None:
    records = FileRecords(fs / "0.log")
    records.append([os.urandom(3 * MIB)], reserve_to=32 * MIB)
    records.truncate_to(MIB)
    assert records.reserved_to == MIB
    assert _allocated(fs / "0.log") < 2 * MIB
    records.close()


def test_a_read_only_segment_file_leaves_blocks_past_its_end_alone(fs: Path) -> None:
    path = fs / "0.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * 5000)
    assert preallocation.reserve(fd, 5000, 16 * MIB) == 0
    os.close(fd)
    records = FileRecords(path, writable=False)
    records.release_reserved()
    records.close()
    assert _allocated(path) >= 16 * MIB  # only the writer gives blocks back


def test_a_reservation_left_by_a_crash_is_used_and_given_back(fs: Path) -> None:
    path = fs / "0.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * 5000)
    assert preallocation.reserve(fd, 5000, 16 * MIB) == 0  # the crashed broker's reservation
    os.close(fd)
    records = FileRecords(path)
    assert records.reserved_to >= 16 * MIB
    records.close()
    assert _allocated(path) < LEFTOVER_SLACK_BYTES
    assert os.stat(path).st_size == 5000
    # A file with no more blocks than its size counts nothing as reserved.
    again = FileRecords(path)
    assert again.reserved_to == 5000
    again.close()


def _append_mib(log: PartitionLog, mib: int) -> None:
    for _ in range(mib * 4):
        log.append(encode_batch(pa.array([os.urandom(1000)] * 256)))  # about 256 KiB


def test_a_roll_gives_the_blocks_back_and_the_next_segment_reserves(fs: Path) -> None:
    config = LogConfig.from_properties({"preallocate": "true", "segment.bytes": str(16 * MIB)})
    log = PartitionLog.open(fs / "t-0", config, topic="t", partition=0)
    try:
        _append_mib(log, 1)
        first = log.segments[0]
        assert first.records.reserved_to == 16 * MIB
        log.roll()
        assert first.records.reserved_to == first.size_bytes
        assert _allocated(first.log_path) < first.size_bytes + MIB
        _append_mib(log, 1)
        assert log.segments[-1].records.reserved_to == 16 * MIB
        assert log.log_end_offset == 2 * 4 * 256
        assert log.read_records(4 * 256).num_rows > 0
    finally:
        log.close()


def test_off_by_default(fs: Path) -> None:
    assert LogConfig().preallocate is False
    log = PartitionLog.open(fs / "t-0", LogConfig(), topic="t", partition=0)
    try:
        _append_mib(log, 1)
        active = log.segments[-1]
        assert active.records.reserved_to == active.size_bytes
        assert _allocated(active.log_path) < active.size_bytes + MIB
    finally:
        log.close()


def test_preallocate_reserves_each_segment_whole(fs: Path) -> None:
    config = LogConfig.from_properties({"preallocate": "true", "segment.bytes": str(8 * MIB)})
    log = PartitionLog.open(fs / "t-0", config, topic="t", partition=0)
    try:
        log.append(encode_batch(pa.array([b"v" * 100])))
        active = log.segments[-1]
        assert active.records.reserved_to == 8 * MIB
        assert _allocated(active.log_path) >= 8 * MIB
        assert os.stat(active.log_path).st_size == active.size_bytes
    finally:
        log.close()
    assert _allocated(active.log_path) < MIB


def test_recovery_after_a_crash_keeps_every_batch_and_gives_the_blocks_back(fs: Path) -> None:
    config = LogConfig.from_properties({"preallocate": "true", "segment.bytes": str(32 * MIB)})
    log = PartitionLog.open(fs / "t-0", config, topic="t", partition=0)
    _append_mib(log, 3)
    end = log.log_end_offset
    path = log.segments[-1].log_path
    size = os.stat(path).st_size
    assert _allocated(path) >= 32 * MIB
    # A crash: nothing is closed, the reserved blocks stay past the end.
    reopened = PartitionLog.open(fs / "t-0", config, topic="t", partition=0)
    try:
        assert reopened.log_end_offset == end
        assert os.stat(path).st_size == size
        assert reopened.read_records(end - 256).num_rows == 256
        assert reopened.segments[-1].records.reserved_to >= 32 * MIB  # counted as reserved
        _append_mib(reopened, 1)
        assert reopened.log_end_offset == end + 4 * 256
    finally:
        reopened.close()
        del log
    assert _allocated(path) < os.stat(path).st_size + MIB
