"""Disk blocks of the offset and time indexes: sparse files, blocks reserved a page at a time
ahead of the entries, and a full disk that is a typed error (never a SIGBUS), on the indexes
alone, through a log's appends and through its crash recovery."""

from __future__ import annotations

import errno
import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from log_testing import OpenLog

from spark_mq.errors import LogDirectoryFullError
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.offset_index import OffsetIndex, OffsetPosition
from spark_mq.storage.record_batch import encode_batch
from spark_mq.storage.time_index import TimeIndex

PAGE = mmap.PAGESIZE
REPO_ROOT = Path(__file__).resolve().parents[2]


def _blocks_bytes(path: Path) -> int:
    return path.stat().st_blocks * 512


def _no_space(fd: int, offset: int, length: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_blocks_are_reserved_a_page_at_a_time_ahead_of_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    per_page = PAGE // OffsetIndex.ENTRY_SIZE
    with OffsetIndex(path, 0) as index:
        assert (index.reserved_bytes, _blocks_bytes(path)) == (0, 0)
        index.append(0, 0)
        assert index.reserved_bytes == PAGE
        for i in range(1, per_page):
            index.append(i, i)
        assert index.reserved_bytes == PAGE  # the page is full, no more blocks yet
        index.append(per_page, per_page)
        assert index.reserved_bytes == 2 * PAGE
        assert _blocks_bytes(path) <= 2 * PAGE


def test_reserve_backs_the_slots_an_append_may_need_before_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    with TimeIndex(path, 0) as index:
        index.reserve(PAGE // TimeIndex.ENTRY_SIZE + 1)
        assert index.reserved_bytes == 2 * PAGE
        index.reserve(1)  # already backed: nothing to do
        assert index.reserved_bytes == 2 * PAGE


def test_a_reopened_index_trusts_only_the_whole_pages_of_its_entries(tmp_path: Path) -> None:
    """After a trim, the page holding the end of the entries is partly a hole once the file
    grows again; the next entry in that page must reserve it."""
    path = tmp_path / "00000000000000000000.index"
    with OffsetIndex(path, 0) as index:
        for i in range(3):
            index.append(i, i)
    assert path.stat().st_size == 24
    with OffsetIndex(path, 0) as index:
        assert index.reserved_bytes == 0
        index.resize(1 << 20)
        assert index.reserved_bytes == 0
        index.append(3, 3)
        assert index.reserved_bytes == PAGE
        assert [index.entry(i) for i in range(4)] == [OffsetPosition(i, i) for i in range(4)]


def test_truncation_keeps_the_blocks_and_zeroes_the_freed_slots(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    with OffsetIndex(path, 0) as index:
        for i in range(10):
            index.append(i, i)
        index.truncate_to(4)
        assert (index.entries, index.reserved_bytes) == (4, PAGE)
        assert path.read_bytes()[32:80] == bytes(48)
        index.append(4, 40)
        assert index.entry(4) == OffsetPosition(4, 40)


def _appender_script(path: Path, fill: Path) -> str:
    return textwrap.dedent(
        f"""
        import os
        from spark_mq.errors import LogDirectoryFullError
        from spark_mq.storage.offset_index import OffsetIndex

        index = OffsetIndex({str(path)!r}, 0)
        index.append(0, 0)
        # Leave no free block on the disk.
        fd = os.open({str(fill)!r}, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, bytes(4096)):
                pass
        except OSError:
            pass
        os.close(fd)
        appended = 1
        try:
            while True:
                index.append(appended, appended)
                appended += 1
        except LogDirectoryFullError as exc:
            print("full after", appended, exc)
        assert index.entries == appended
        assert index.lookup(appended - 1).position == appended - 1
        """
    )


def test_a_full_disk_is_an_error_not_a_sigbus(small_disk: Path) -> None:
    """On a real full file system, appends into the sparse file's hole would kill the process
    with SIGBUS; they raise LogDirectoryFullError once the reserved page is used up."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _appender_script(small_disk / "00000000000000000000.index", small_disk / "fill"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"died with {done.returncode}: {done.stderr[-2000:]}"
    assert f"full after {PAGE // OffsetIndex.ENTRY_SIZE}" in done.stdout, done.stdout
    assert "free space" in done.stdout


# ---------------------------------------------------------------------------------------------
# Through a log


def _one_record_batch() -> bytes:
    return encode_batch(pa.array([b"v" * 100]))


def test_a_fresh_partitions_indexes_hold_no_blocks(open_log: OpenLog) -> None:
    log = open_log(LogConfig(index_interval_bytes=0))
    active = log.active_segment
    paths = [active.offset_index.path, active.time_index.path]
    assert [_blocks_bytes(p) for p in paths] == [0, 0]
    for _ in range(100):
        log.append(_one_record_batch())
    assert active.offset_index.entries == 99
    assert all(_blocks_bytes(p) <= PAGE for p in paths), [_blocks_bytes(p) for p in paths]


def test_no_room_for_an_index_page_fails_the_append_before_anything_is_written(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(LogConfig(index_interval_bytes=0))
    log.append(_one_record_batch())  # no entry is due for the first batch of a segment
    size_before = log.active_segment.size_bytes
    with monkeypatch.context() as patch:
        patch.setattr(os, "posix_fallocate", _no_space)
        with pytest.raises(LogDirectoryFullError, match="free space"):
            log.append(_one_record_batch())
    assert (log.log_end_offset, log.active_segment.size_bytes) == (1, size_before)
    log.append(_one_record_batch())
    assert log.read_records(0).column("value").to_pylist() == [b"v" * 100] * 2


def test_recovery_without_room_for_index_pages_opens_the_log_with_all_its_data(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = LogConfig(index_interval_bytes=0)
    log = open_log(config)
    for _ in range(50):
        log.append(_one_record_batch())
    log.flush()
    directory = log.directory
    log.close()
    # Indexes lost, as a crash while they were written can leave them.
    for index in directory.glob("*index"):
        if index.suffix in (".index", ".timeindex"):
            index.unlink()
    monkeypatch.setattr(os, "posix_fallocate", _no_space)
    reopened = open_log(config, directory=directory)
    assert reopened.log_end_offset == 50
    assert reopened.read_records(0).num_rows == 50
    assert reopened.active_segment.offset_index.entries == 0  # no room: none rebuilt
    assert reopened.read_records(37).column("offset").to_pylist()[0] == 37


def test_reopening_a_preallocated_active_segment_frees_its_blocks(open_log: OpenLog) -> None:
    """Index files preallocated whole (by an earlier version, or left untrimmed) lose their
    blocks past the entries when the log opens."""
    log = open_log(LogConfig(index_interval_bytes=0))
    for _ in range(3):
        log.append(_one_record_batch())
    directory = log.directory
    log.close()
    paths = sorted(p for p in directory.iterdir() if p.suffix in (".index", ".timeindex"))
    for path in paths:
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 10 << 20)
        finally:
            os.close(fd)
        assert _blocks_bytes(path) >= 10 << 20
    reopened = open_log(LogConfig(index_interval_bytes=0), directory=directory)
    assert all(_blocks_bytes(p) <= PAGE for p in paths), [_blocks_bytes(p) for p in paths]
    assert reopened.read_records(0).num_rows == 3
