"""Drop-behind of the active segment (spark_mq/storage/page_cache.py): which ranges are
written back and dropped when, that the bytes read back unchanged, and (on Linux) that the
pages of dropped windows really leave the page cache while the newest stay."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.storage import page_cache
from spark_mq.storage.file_records import FileRecords
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.page_cache import DropBehind
from spark_mq.storage.record_batch import encode_batch


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    seen: list[tuple[str, int, int]] = []
    monkeypatch.setattr(
        page_cache, "start_writeback", lambda fd, o, n: seen.append(("writeback", o, n))
    )
    monkeypatch.setattr(page_cache, "drop_cached", lambda fd, o, n: seen.append(("drop", o, n)))
    return seen


def test_completed_windows_are_written_back_and_dropped_one_window_later(
    calls: list[tuple[str, int, int]],
) -> None:
    drop = DropBehind(0)
    drop.appended(-1, 50, 100)
    assert calls == []
    drop.appended(-1, 100, 100)
    assert calls == [("writeback", 0, 100)]
    calls.clear()
    drop.appended(-1, 250, 100)  # completes [100, 200): the window before it may go
    assert calls == [("writeback", 100, 100), ("drop", 0, 100)]
    calls.clear()
    drop.appended(-1, 299, 100)
    assert calls == []
    drop.appended(-1, 520, 100)  # three windows at once: only what was written back before goes
    assert calls == [("writeback", 200, 300), ("drop", 100, 100)]
    calls.clear()
    drop.appended(-1, 600, 100)
    assert calls == [("writeback", 500, 100), ("drop", 200, 300)]


def test_a_truncation_moves_the_marks_back(calls: list[tuple[str, int, int]]) -> None:
    drop = DropBehind(0)
    drop.appended(-1, 300, 100)
    calls.clear()
    drop.truncated(150)  # e.g. a failed write rolled back, or a follower's truncation
    drop.appended(-1, 300, 100)  # the rewritten bytes are written back before they are dropped
    assert calls == [("writeback", 150, 150), ("drop", 0, 150)]
    calls.clear()
    drop.appended(-1, 400, 100)
    assert calls == [("writeback", 300, 100), ("drop", 150, 150)]


def test_bytes_present_at_open_are_left_to_the_kernel(calls: list[tuple[str, int, int]]) -> None:
    drop = DropBehind(1_000)
    drop.appended(-1, 1_050, 100)
    assert calls == []
    drop.appended(-1, 1_200, 100)
    assert calls == [("writeback", 1_000, 200)]


def test_window_zero_is_off(calls: list[tuple[str, int, int]]) -> None:
    drop = DropBehind(0)
    drop.appended(-1, 10**9, 0)
    assert calls == []


def test_appends_read_back_unchanged_through_many_windows(tmp_path: Path) -> None:
    records = FileRecords(tmp_path / "0.log")
    chunks = [os.urandom(1000 + 37 * i) for i in range(60)]
    for chunk in chunks:
        records.append([chunk], drop_behind_bytes=4096)
    assert records.read(0, records.size_bytes) == b"".join(chunks)
    records.truncate_to(5000)
    records.append([b"tail"], drop_behind_bytes=4096)
    assert records.read(0, 5004) == b"".join(chunks)[:5000] + b"tail"
    records.close()


def _append_kib(log: PartitionLog, kib: int) -> None:
    for _ in range(kib):
        log.append(encode_batch(pa.array([b"v" * 900])))  # about 1 KiB a batch


def _windows_used(calls: list[tuple[str, int, int]]) -> set[int]:
    """The windows that writeback ends can be multiples of, among 4 and 8 KiB."""
    ends = [o + n for kind, o, n in calls if kind == "writeback"]
    assert ends
    return {w for w in (4096, 8192) if all(end % w == 0 for end in ends)}


def test_the_log_appends_with_the_topic_window_in_force(
    tmp_path: Path, calls: list[tuple[str, int, int]]
) -> None:
    config = LogConfig.from_properties({"segment.drop.behind.bytes": "4096"})
    log = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0)
    try:
        _append_kib(log, 40)
        assert 4096 in _windows_used(calls)
        assert ("drop", 0, 4096) in calls
        calls.clear()
        log.update_config(LogConfig.from_properties({"segment.drop.behind.bytes": "0"}))
        _append_kib(log, 40)
        assert calls == []  # 0 is off from the next append on
    finally:
        log.close()


def test_a_segment_active_again_after_truncation_appends_with_the_current_window(
    tmp_path: Path, calls: list[tuple[str, int, int]]
) -> None:
    config = LogConfig.from_properties({"segment.drop.behind.bytes": "4096"})
    log = PartitionLog.open(tmp_path / "t-0", config, topic="t", partition=0)
    try:
        log.append(encode_batch(pa.array([b"a" * 100])))
        log.append(encode_batch(pa.array([b"a" * 100])))
        log.roll()
        log.append(encode_batch(pa.array([b"b" * 100])))
        log.update_config(LogConfig.from_properties({"segment.drop.behind.bytes": "8192"}))
        log.truncate_to(1)  # the first segment is the active one again
        assert len(log.segments) == 1
        calls.clear()
        _append_kib(log, 40)
        assert _windows_used(calls) == {4096, 8192}  # every end a multiple of 8 KiB
    finally:
        log.close()


def test_the_default_window_is_on() -> None:
    assert LogConfig().segment_drop_behind_bytes == 8 * 1024 * 1024


# -- the real page cache ----------------------------------------------------------------------

_PAGE = mmap.PAGESIZE


def _resident_pages(fd: int, offset: int, length: int) -> list[bool]:
    """Which pages of the range are in the page cache (``mincore`` of a shared mapping)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    pages = (length + _PAGE - 1) // _PAGE
    vec = ctypes.create_string_buffer(pages)
    try:
        assert libc.mincore(address, length, vec) == 0, os.strerror(ctypes.get_errno())
    finally:
        libc.munmap(address, length)
    return [bool(b & 1) for b in vec.raw]


def _kernel_drops_clean_pages(directory: Path) -> bool:
    """Whether DONTNEED frees the clean pages of a file here (not on tmpfs, for one)."""
    path = directory / "probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * 16 * _PAGE)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 16 * _PAGE, os.POSIX_FADV_DONTNEED)
        return not any(_resident_pages(fd, 0, 16 * _PAGE))
    finally:
        os.close(fd)
        path.unlink()


@pytest.mark.skipif(not page_cache.SUPPORTED, reason="drop-behind is Linux only")
def test_dropped_windows_leave_the_page_cache_and_the_newest_stay(tmp_path: Path) -> None:
    if not _kernel_drops_clean_pages(tmp_path):
        pytest.skip("this file system keeps clean pages after POSIX_FADV_DONTNEED")
    window = 64 * _PAGE
    records = FileRecords(tmp_path / "0.log")
    records.append([os.urandom(window)], drop_behind_bytes=window)
    records.append([os.urandom(window)], drop_behind_bytes=window)
    records.flush()  # the first two windows are clean now, so dropping them cannot be refused
    # Completes the third window: the second is dropped.
    records.append([os.urandom(window)], drop_behind_bytes=window)
    fd = records.fd
    assert not any(_resident_pages(fd, window, window)), "the dropped window is still cached"
    assert all(_resident_pages(fd, 2 * window, window)), "the newest window left the cache"
    records.close()
