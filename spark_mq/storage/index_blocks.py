"""Disk blocks of the offset and time index files: sparse files, reserved a page at a time.

An index file of the active segment has the length ``segment.index.bytes`` but is sparse
(``ftruncate``), as Kafka's are; :class:`~spark_mq.storage.abstract_index.AbstractIndex` keeps
how far it is reserved and calls these functions, which do the file work.

Entries are written through a shared memory mapping. Writing into a page of a mapping that has
no disk block behind it (a hole of a sparse file) makes the kernel allocate one at that
moment, and when the disk is full it cannot report that as an error: the process gets SIGBUS
and dies. Kafka accepts that risk; spark_mq does not. Before an entry is written into a
page, the whole page gets its blocks with ``posix_fallocate`` (without changing the file's
size); a full disk then raises :class:`LogDirectoryFullError` from the append, with nothing
written, and the process lives on. ``AbstractIndex.reserved_bytes`` says how far the file
is known to have blocks: every page below it is backed. The reservation grows one page
(``mmap.PAGESIZE``, the granularity of the kernel's write faults) at a time, so an active
segment's two indexes hold at most one page each beyond their entries (8 KiB for a fresh
partition that has entries, none for one that has none), instead of ``2 x segment.index.bytes``
(20 MiB with the defaults) when they were preallocated whole. The check on every append is one
integer comparison; one ``posix_fallocate`` call per page (512 offset entries, 341 time
entries) is the whole cost (docs/storage.md, "Index files", has the figures). A file system
that cannot ``fallocate`` gets the page's free slots written with zeros by ``pwrite``, which
also allocates blocks or fails with ``ENOSPC``. Callers that must not fail half-way reserve
first: the segment calls ``AbstractIndex.reserve`` for the entries an append may add
before it writes the batches, so a full disk fails the append before any byte of it is
written.

Why this and not the alternatives: reserving the whole file up front (what the indexes did
before) is safe but takes ``segment.index.bytes`` of real blocks per index of every active
segment, so a small or nearly full disk could not hold or even reopen partitions; writing
every entry with ``pwrite`` instead of through the mapping is safe too, but costs a system call
per entry on the append path, where the page-ahead reservation costs one per page.

Everything else that writes to the file goes through ``pwrite`` or ``ftruncate``, never
through the mapping: truncation zeroes the freed slots with ``pwrite`` (their blocks exist, so
this needs no new space, and a page whose other blocks are holes is never faulted in for
writing); growing the file with ``AbstractIndex.resize`` only moves its length (sparse);
shrinking frees the blocks past the new end, and ``AbstractIndex.reserved_bytes`` drops
with it. An existing file is assumed backed only up to the last whole page of its entries
(pages that hold entries were written, so they have blocks; the page after may be partly a
hole when the file system's block is smaller than a page). Nothing reads past the entries
through the mapping either: on tmpfs even a read fault on a hole of a shared mapping
allocates a page (and is a SIGBUS on a full disk), so the entries of an existing file are
counted with ``pread``, up to its first hole.

Threads: called by the index's one writer thread (see
:mod:`spark_mq.storage.abstract_index`).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Final

import numpy as np

from spark_mq.errors import LogDirectoryFullError
from spark_mq.storage import libc

#: The unit of block reservation: the kernel backs a mapping's writes a page at a time.
RESERVE_UNIT_BYTES: Final = mmap.PAGESIZE
#: Largest single ``pwrite`` of zeros.
_ZEROS_CHUNK_BYTES: Final = 1 << 20


def round_down_to_unit(size_bytes: int) -> int:
    return size_bytes - size_bytes % RESERVE_UNIT_BYTES


def round_up_to_unit(size_bytes: int) -> int:
    return -(-size_bytes // RESERVE_UNIT_BYTES) * RESERVE_UNIT_BYTES


def reserve(path: Path, start: int, stop: int, *, free_from: int, what: str) -> None:
    """Give bytes ``[start, stop)`` of the file at ``path`` disk blocks, keeping its size.

    ``free_from`` is where the file's free slots begin (its entries end): where the file
    system cannot ``fallocate``, the free part of the range is written with zeros instead
    (those bytes are zeros already, or holes that read as zeros). :class:`LogDirectoryFullError`
    (``what`` names the index) when there is no room; nothing in the file changes then.
    """
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        try:
            # Blocks that already exist are left as they are: their bytes do not change.
            os.posix_fallocate(fd, start, stop - start)
        except OSError as exc:
            if exc.errno in libc.DISK_FULL:
                raise _disk_full(what, path, stop, exc) from exc
            if exc.errno not in libc.FALLOCATE_UNSUPPORTED:
                raise
            # The file system cannot reserve: writing the free slots gives them blocks, or
            # fails with ENOSPC instead of a SIGBUS.
            _write_zeros(fd, max(start, free_from), stop, what=what, path=path)
    finally:
        os.close(fd)


def zero_range(path: Path, start: int, end: int, *, what: str) -> None:
    """Write zeros over ``[start, end)`` with ``pwrite`` (slots freed by a truncation: their
    blocks exist, so this takes no new space)."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        _write_zeros(fd, start, end, what=what, path=path)
    finally:
        os.close(fd)


def _write_zeros(fd: int, start: int, end: int, *, what: str, path: Path) -> None:
    try:
        while start < end:
            start += os.pwrite(fd, bytes(min(end - start, _ZEROS_CHUNK_BYTES)), start)
    except OSError as exc:
        if exc.errno in libc.DISK_FULL:
            raise _disk_full(what, path, end, exc) from exc
        raise


def _disk_full(what: str, path: Path, end_bytes: int, exc: OSError) -> LogDirectoryFullError:
    return LogDirectoryFullError(
        f"no room on disk for the blocks of {what} (up to byte {end_bytes}: {exc.strerror}); "
        "nothing was written: free space and retry",
        path=str(path),
    )


def count_entries_before_zero_tail(fd: int, slots: int, entry_size: int) -> int:
    """1 + the last of the first ``slots`` entries of the file that has a nonzero byte (0 if
    none has).

    Read with ``pread``, never through the mapping, and only up to the file's first hole: on
    tmpfs even a *read* fault on a hole of a shared mapping allocates a page, which on a full
    disk is a SIGBUS (and on any disk a waste). Entries are written from the start with no
    gap, so none lies past the first hole; where ``SEEK_HOLE`` is not supported the whole file
    counts as data and is read.
    """
    if slots == 0:
        return 0
    try:
        data_end = os.lseek(fd, 0, os.SEEK_HOLE)
    except OSError:
        data_end = slots * entry_size
    slots = min(slots, -(-data_end // entry_size))
    if slots == 0:
        return 0
    raw_bytes = bytearray(slots * entry_size)
    view = memoryview(raw_bytes)
    done = 0
    while done < len(raw_bytes):
        read = os.preadv(fd, [view[done:]], done)
        if read == 0:  # the file shrank under us: what was read is all there is
            break
        done += read
    view.release()
    raw = np.frombuffer(raw_bytes, dtype=np.uint8, count=done - done % entry_size)
    nonzero = np.asarray(raw.reshape(-1, entry_size).any(axis=1), dtype=np.bool_)
    if not nonzero.any():
        return 0
    # argmax finds the first True; on the reversed mask that is the last nonzero entry.
    return len(nonzero) - int(np.argmax(nonzero[::-1]))
