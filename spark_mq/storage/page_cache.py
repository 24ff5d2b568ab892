"""Drop-behind: write appended log bytes back early and let their page-cache pages go.

A partition log is written once, at its end. Left to itself the kernel keeps every written
page cached until memory runs short, so a broker that appends a few hundred MB/s asks the
kernel for that many *new* pages every second. On a virtual machine whose free memory goes
back to its host (virtio-balloon free page reporting, common in cloud VMs), each new page
costs a fault on the host, and writing into new pages runs an order of magnitude slower than
rewriting cached ones (``benchmarks/bench_report.py``, ``new_page_cache_write``; the figures
are in ``docs/benchmarks.md``, "Figures behind design choices").

With drop-behind (:class:`~spark_mq.storage.file_records.FileRecords`, topic config
``segment.drop.behind.bytes``) the active segment starts the writeback of every completed
window of that many bytes at once (``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which does not
wait) and, one window later, drops the pages of the windows before it from the cache
(``posix_fadvise(POSIX_FADV_DONTNEED)``). The freed pages are what the next appends get, so
the broker keeps writing into the same warm memory. Only clean pages are dropped: a page whose
writeback has not finished stays cached, and nothing here ever waits for the disk.

What it costs: the newest one to two windows of each partition stay cached, older bytes are
read from disk by a reader that lags behind them (as they are on any broker whose page cache is
smaller than its consumers' lag). Durability is unchanged: starting writeback early is not an
``fsync`` (``flush.messages`` / ``flush.ms`` decide that, as in Kafka).

Linux only: elsewhere :data:`SUPPORTED` is False and the calls do nothing. Errors are ignored
(the hint is best effort); a failed writeback is reported by the next ``fsync`` as usual.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

from spark_mq.storage import libc

#: ``sync_file_range`` flag: start writeback of dirty pages in the range, do not wait.
SYNC_FILE_RANGE_WRITE: Final = 2


_sync_file_range = libc.sync_file_range if hasattr(os, "posix_fadvise") else None
#: Whether this platform can drop behind (Linux with ``sync_file_range``).
SUPPORTED: Final = _sync_file_range is not None


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing the dirty pages of ``[offset, offset + length)`` to disk; no waiting."""
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE)


def drop_cached(fd: int, offset: int, length: int) -> None:
    """Let the kernel free the clean cached pages of ``[offset, offset + length)``."""
    if SUPPORTED and length > 0:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


class DropBehind:
    """Where one file's drop-behind stands: how far it was written back and dropped.

    :meth:`appended` is called with the file's new size and the window (the appender's
    ``segment.drop.behind.bytes``, 0 for off) after every append; it returns at once unless
    the append completed a window. The window is taken per call, from the config in force, so
    a config change applies from the next append with nothing to keep in sync.
    """

    __slots__ = ("_dropped_to", "_written_to")

    def __init__(self, size: int) -> None:
        # Bytes already in the file when it was opened are left to the kernel.
        self._written_to = size
        self._dropped_to = size

    def appended(self, fd: int, size: int, window: int) -> None:
        if window <= 0 or size - self._written_to < window:
            return
        complete = size - size % window
        if complete > self._written_to:
            started = self._written_to
            start_writeback(fd, started, complete - started)
            self._written_to = complete
            # Drop what had its writeback started by an earlier call, at least one window
            # ago, but never the newest complete window (pages still being written stay
            # cached whatever is asked).
            drop_to = min(complete - window, started)
            if drop_to > self._dropped_to:
                drop_cached(fd, self._dropped_to, drop_to - self._dropped_to)
                self._dropped_to = drop_to

    def truncated(self, size: int) -> None:
        """The file was cut back to ``size`` bytes."""
        self._written_to = min(self._written_to, size)
        self._dropped_to = min(self._dropped_to, size)
