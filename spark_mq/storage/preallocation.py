"""Preallocation (Kafka's ``preallocate``): reserve a segment's disk blocks up front.

With the topic setting ``preallocate=true`` the first append into a segment reserves its disk
blocks up to ``segment.bytes`` with ``fallocate(FALLOC_FL_KEEP_SIZE)``, so the space a segment
will fill is taken when it starts, not 4 KiB at a time as it grows. The reservation keeps the
file's size: readers, ``sendfile``, recovery and every other user of the size see nothing of
it. (Kafka sets the file's length instead and trims the zero tail at roll; keeping the size
avoids zero bytes that a reader or recovery would have to tell from a torn batch.)

It is off by default, as in Kafka, because on Linux it buys no CPU: appends into reserved
blocks skip ext4's per-block delayed allocation, which took a sixth off the broker's own CPU
(0.29 to 0.24 s per 500 MB), but the same work then comes back when writeback converts the
reserved ("unwritten") blocks, and the machine as a whole used as much CPU either way
(docs/storage.md, "Preallocation").

What it leaves on disk, and when it is given back:

- blocks past the end of the active segment, released (``ftruncate`` to the file's own size,
  which frees them) when the segment rolls, is truncated or is closed;
- after a crash, the active segment may keep its reservation. A file opened with clearly more
  blocks than its size (:data:`LEFTOVER_SLACK_BYTES`) counts them as reserved, so they are
  released at its roll or close like any other.

Best effort, never an error: a file system that cannot reserve (``EOPNOTSUPP``; not Linux) or
has no room (``ENOSPC``, ``EDQUOT``) leaves the segment without a reservation, and the appends
themselves meet a full disk and report it. A release that fails is logged: the bytes of the
log are untouched either way.

Threads: one writer at a time (the owning log's lock), as for the file itself.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
from typing import Final

from spark_mq.storage import libc

log = logging.getLogger(__name__)

#: ``fallocate`` mode: allocate blocks past the end of the file without changing its size.
FALLOC_FL_KEEP_SIZE: Final = 1
#: A file opened with this many allocated bytes more than its size (rounded up to a block)
#: holds a reservation that a process stopped before releasing.
LEFTOVER_SLACK_BYTES: Final = 1024 * 1024
_BLOCK_BYTES: Final = 4096
#: Errors that only mean "no reservation here": the file system cannot, or has no room.
_EXPECTED: Final = libc.FALLOCATE_UNSUPPORTED | libc.DISK_FULL


_fallocate = libc.fallocate
#: Whether this platform can reserve blocks past the end of a file (Linux ``fallocate``).
SUPPORTED: Final = _fallocate is not None


def reserve(fd: int, offset: int, length: int) -> int:
    """Reserve ``[offset, offset + length)`` of ``fd`` without changing its size.

    Returns 0 on success, else the errno. Without ``fallocate`` it returns ``EOPNOTSUPP``.
    """
    if _fallocate is None:
        return errno.EOPNOTSUPP
    if _fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return 0
    return ctypes.get_errno()


class Preallocation:
    """How far one ``.log`` file is reserved past its end; reserves once, releases once."""

    __slots__ = ("_reserved_to", "_tried")

    def __init__(self, size: int, *, allocated_bytes: int, writable: bool = True) -> None:
        """``size`` and ``allocated_bytes`` (``st_blocks`` x 512) of the file as opened."""
        # Only a writable file ever reserves; a segment opened read-only has nothing to give
        # back either.
        self._tried = not writable
        self._reserved_to = size
        if writable:
            rounded = -(-size // _BLOCK_BYTES) * _BLOCK_BYTES
            if allocated_bytes > rounded + LEFTOVER_SLACK_BYTES:
                # A reservation left by a process that stopped without releasing it.
                self._reserved_to = allocated_bytes
                self._tried = True

    @property
    def reserved_to(self) -> int:
        """The end of the reserved blocks (the file's size when nothing is reserved)."""
        return self._reserved_to

    def appended(self, fd: int, size: int, reserve_to: int) -> None:
        """The file grew to ``size``; ``reserve_to`` > 0 asks for blocks up to it (the
        segment's ``segment.bytes`` under ``preallocate``). One attempt per file."""
        self._reserved_to = max(self._reserved_to, size)
        if reserve_to <= self._reserved_to or self._tried:
            return
        self._tried = True
        failed = reserve(fd, self._reserved_to, reserve_to - self._reserved_to)
        if failed == 0:
            self._reserved_to = reserve_to
        elif failed not in _EXPECTED:
            log.warning("cannot reserve disk blocks for a segment: %s", os.strerror(failed))

    def release(self, fd: int, size: int) -> None:
        """Give back the blocks reserved past ``size`` (the file's own size)."""
        if self._reserved_to <= size:
            return
        self._reserved_to = size
        try:
            # Truncating to the current size frees every block past it and changes no byte.
            os.ftruncate(fd, size)
        except OSError as exc:
            log.warning("cannot release the disk blocks reserved past a segment's end: %s", exc)

    def truncated(self, size: int) -> None:
        """The file was cut to ``size``: ``ftruncate`` freed every block past it."""
        self._reserved_to = size
