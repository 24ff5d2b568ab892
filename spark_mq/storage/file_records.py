"""The ``.log`` file of a segment: record batches back to back, and ranges of them.

The file is a plain concatenation of record batches (see ``record_batch.py`` and
``docs/format.md``); nothing else is in it and nothing is checksummed beyond each batch's own
CRC. Appends go to the end with ``write``/``writev``; a failed write is rolled back with
``ftruncate`` so a full disk never leaves a torn batch behind. An append given a
``drop_behind_bytes`` window (the active segment's, from the topic config) drops behind
(:mod:`spark_mq.storage.page_cache`): completed windows are written back early and their pages
let go, so appends keep reusing the same memory. Under Kafka's ``preallocate`` the first append
reserves the segment's disk blocks (:mod:`spark_mq.storage.preallocation`; the file's size
stays that of its batches), given back when the segment rolls or the file is closed or cut. A
crash can still leave a torn tail (the OS wrote part of the last write); recovery finds it by
validation and truncates.

Reads are positional (``pread``), so appends and reads never share a file offset. A
:class:`FileRange` names a run of whole batches and holds its own duplicate of the file
descriptor, so it stays readable (and ``sendfile``-able) even if the segment is closed or
deleted before the reader gets to it; its owner closes it.

Threads: one writer at a time (the owning log's lock); any number of readers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from spark_mq.errors import LogClosedError, LogDirectoryFullError, StorageError
from spark_mq.storage import libc
from spark_mq.storage.batch_decoder import peek_size, validate_batch
from spark_mq.storage.batch_walk import SEEK_BAD_LENGTH, SEEK_FOUND, seek_batch, walk_batches
from spark_mq.storage.codecs import Bytes
from spark_mq.storage.page_cache import DropBehind
from spark_mq.storage.preallocation import Preallocation
from spark_mq.storage.record_batch import HEADER_SIZE, BatchHeader

#: Header scans read the file in blocks of this size, so small batches cost no syscall each.
SCAN_BLOCK_BYTES: Final = 64 * 1024
_IOV_MAX: Final = 512


class FileRange:
    """Whole batches ``[position, position + size)`` of a ``.log`` file, with their own fd.

    Use as a context manager (or call :meth:`close`) to release the descriptor.
    """

    __slots__ = ("_fd", "path", "position", "size")

    def __init__(self, fd: int, path: str, position: int, size: int) -> None:
        self._fd = fd
        self.path = path
        self.position = position
        self.size = size

    @property
    def fd(self) -> int:
        if self._fd < 0:
            raise LogClosedError(f"file range of {self.path} was closed")
        return self._fd

    def read(self) -> bytes:
        """The bytes of the range (one ``pread``; a short read means the file was truncated)."""
        data = os.pread(self.fd, self.size, self.position)
        if len(data) != self.size:
            raise StorageError(
                f"{self.path} is shorter than expected: wanted {self.size} bytes at "
                f"{self.position}, got {len(data)}; the log was truncated under this reader"
            )
        return data

    def send_to(self, out_fd: int, offset_in_range: int = 0) -> int:
        """``sendfile`` from the range to a socket or file; returns the bytes sent this call."""
        remaining = self.size - offset_in_range
        if remaining <= 0:
            return 0
        return os.sendfile(out_fd, self.fd, self.position + offset_in_range, remaining)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FileRange:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A leaked range must not leak its descriptor; closing here is a backstop, not the API.
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)

    def __repr__(self) -> str:
        return f"FileRange({self.path!r}, position={self.position}, size={self.size})"


class FileRecords:
    """The batches file of one segment."""

    def __init__(self, path: str | os.PathLike[str], *, writable: bool = True) -> None:
        self._path = Path(path)
        flags = (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY
        try:
            self._fd = os.open(self._path, flags | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open segment file {self._path}: {exc}") from exc
        stat = os.fstat(self._fd)
        self._size_bytes = stat.st_size
        self._writable = writable
        self._drop_behind = DropBehind(self._size_bytes)
        self._preallocation = Preallocation(
            self._size_bytes, allocated_bytes=stat.st_blocks * 512, writable=writable
        )

    # -----------------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    @property
    def fd(self) -> int:
        if self._fd < 0:
            raise LogClosedError(f"segment file {self._path} is closed")
        return self._fd

    @property
    def reserved_to(self) -> int:
        """The end of the disk blocks reserved for appends (the size when none are)."""
        return self._preallocation.reserved_to

    def append(
        self,
        chunks: Sequence[Bytes],
        *,
        drop_behind_bytes: int = 0,
        reserve_to: int = 0,
    ) -> int:
        """Write ``chunks`` at the end, in order; returns the bytes written.

        ``drop_behind_bytes`` is the drop-behind window (:mod:`spark_mq.storage.page_cache`;
        0, the default, leaves the written pages to the kernel). ``reserve_to`` > 0 reserves
        disk blocks up to that size (:mod:`spark_mq.storage.preallocation`; 0, the default,
        reserves nothing).

        On any failure the file is cut back to its previous size before the error propagates,
        so a partial write never stays in the file. ENOSPC/EDQUOT raise LogDirectoryFullError.
        """
        fd = self.fd
        start = self._size_bytes
        views = [memoryview(c).cast("B") for c in chunks]
        total = sum(v.nbytes for v in views)
        try:
            written = 0
            pending = [v for v in views if v.nbytes]
            while pending:
                n = os.pwritev(fd, pending[:_IOV_MAX], start + written)
                written += n
                pending = _advance(pending, n)
        except OSError as exc:
            self._rollback(start)
            if exc.errno in libc.DISK_FULL:
                raise LogDirectoryFullError(
                    f"disk full while appending {total} bytes to {self._path}; nothing was kept "
                    "of this append: free space (or lower retention) and retry",
                    path=str(self._path),
                ) from exc
            raise StorageError(f"write to {self._path} failed: {exc}") from exc
        self._size_bytes = start + total
        self._drop_behind.appended(fd, self._size_bytes, drop_behind_bytes)
        self._preallocation.appended(fd, self._size_bytes, reserve_to)
        return total

    def release_reserved(self) -> None:
        """Give back the disk blocks reserved past the end (the segment stops taking appends)."""
        if self._fd >= 0:
            self._preallocation.release(self._fd, self._size_bytes)

    def _rollback(self, size: int) -> None:
        self._drop_behind.truncated(size)
        self._preallocation.truncated(size)
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:  # The disk is unusable; the next open recovers by validation.
            raise StorageError(
                f"could not roll back a failed write to {self._path}: {exc}; the log will be "
                "truncated to its last valid batch when it is next opened"
            ) from exc

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer at the end of the file)."""
        size = max(0, min(size, self._size_bytes - position))
        if size == 0:
            return b""
        parts: list[bytes] = []
        got = 0
        while got < size:
            chunk = os.pread(self.fd, size - got, position + got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def range(self, position: int, size: int) -> FileRange:
        """A :class:`FileRange` over ``[position, position+size)`` with a duplicated fd."""
        return FileRange(os.dup(self.fd), str(self._path), position, size)

    def headers(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[BatchHeader, int]]:
        """``(header, position)`` of each batch from ``start_position``, without CRC checks.

        Reads the file in ``SCAN_BLOCK_BYTES`` blocks, so scanning many small batches costs one
        ``pread`` per block rather than per batch. Stops at the first batch that does not fit
        before ``end_position`` (default: the end of the file), which is how a reader bounded
        by the high watermark or a torn tail sees it. Batches are trusted here: only recovery
        and the decoding reader validate them.
        """
        end = self._size_bytes if end_position is None else min(end_position, self._size_bytes)
        pos = start_position
        block = b""
        block_start = pos
        while pos + HEADER_SIZE <= end:
            rel = pos - block_start
            if rel + HEADER_SIZE > len(block):
                block = self.read(pos, min(SCAN_BLOCK_BYTES, end - pos))
                block_start = pos
                rel = 0
                if len(block) < HEADER_SIZE:
                    return
            header = BatchHeader.unpack_from(block, rel)
            size = header.size
            if size < HEADER_SIZE or pos + size > end:
                return
            yield header, pos
            pos += size

    def seek(self, offset: int, start_position: int = 0) -> tuple[BatchHeader, int] | None:
        """The first batch from ``start_position`` whose last offset is at or past
        ``offset``, and its position: the first that :meth:`headers` yields with
        ``last_offset >= offset``, found by one call per ``SCAN_BLOCK_BYTES`` block
        (:func:`~spark_mq.storage.batch_walk.seek_batch`) instead of a header object per
        batch passed. None if there is none (or the walk stops first, as :meth:`headers`
        does)."""
        end = self._size_bytes
        pos = start_position
        while pos + HEADER_SIZE <= end:
            block = self.read(pos, min(SCAN_BLOCK_BYTES, end - pos))
            if len(block) < HEADER_SIZE:
                return None
            found = seek_batch(block, 0, offset)
            if found.status == SEEK_BAD_LENGTH:
                return None
            if found.status == SEEK_FOUND:
                at = pos + found.position
                header = BatchHeader.unpack_from(block, found.position)
                return (header, at) if at + header.size <= end else None
            if found.size:
                # A batch below the offset that reaches past the block: passed whole, if the
                # file holds it whole.
                if pos + found.position + found.size > end:
                    return None
                pos += found.position + found.size
            else:
                pos += found.position
        return None

    def extent(
        self, start_position: int, end_position: int, max_bytes: int, min_one_message: bool
    ) -> int:
        """Bytes of the whole batches from ``start_position`` that end at or before
        ``end_position`` and add up to at most ``max_bytes`` (with ``min_one_message``, the
        first batch whatever its size): what a fetch serves. Batches are trusted, as in
        :meth:`headers`; the walk over each ``SCAN_BLOCK_BYTES`` block is one call
        (:func:`~spark_mq.storage.batch_walk.walk_batches`), not a loop per batch, which a
        segment of one-record batches would otherwise pay 13,000 times per MiB served."""
        end = min(end_position, self._size_bytes)
        pos = start_position
        while pos + HEADER_SIZE <= end:
            block = self.read(pos, min(SCAN_BLOCK_BYTES, end - pos))
            walked = walk_batches(block, 0, max_bytes - (pos - start_position))
            pos += walked.position
            if walked.batches:
                continue
            # The batch at ``pos`` is larger than the block, or over the limit, or torn.
            size = peek_size(block, 0)
            if len(block) < HEADER_SIZE or size is None or size < HEADER_SIZE or pos + size > end:
                break
            if pos - start_position + size > max_bytes:
                if pos == start_position and min_one_message:
                    pos += size
                break
            pos += size
        return pos - start_position

    def validated_batches(
        self, start_position: int = 0, *, chunk_bytes: int = 8 * 1024 * 1024
    ) -> Iterator[tuple[BatchHeader, int]]:
        """Like :meth:`headers` but reads every byte and validates every batch (recovery).

        Raises CorruptRecordError at the first invalid batch; the caller truncates there. A
        batch larger than ``chunk_bytes`` is read on its own.
        """
        pos = start_position
        end = self._size_bytes
        while pos < end:
            buf = self.read(pos, min(chunk_bytes, end - pos))
            rel = 0
            while rel < len(buf):
                remaining = len(buf) - rel
                chunk_is_cut = pos + len(buf) < end
                size = peek_size(buf, rel)
                if chunk_is_cut and (size is None or remaining < max(size, HEADER_SIZE)):
                    if rel > 0:
                        break  # The batch continues past this chunk: re-read from its start.
                    if size is not None and size <= end - pos:
                        buf = self.read(pos, size)  # One batch larger than a chunk.
                header = validate_batch(buf, rel, path=str(self._path), file_position=pos)
                yield header, pos + rel
                rel += header.size
            pos += rel

    def truncate_to(self, size: int) -> None:
        if size > self._size_bytes:
            raise StorageError(
                f"cannot truncate {self._path} to {size} bytes: it holds only {self._size_bytes}"
            )
        os.ftruncate(self.fd, size)
        self._size_bytes = size
        self._drop_behind.truncated(size)
        self._preallocation.truncated(size)

    def flush(self) -> None:
        os.fsync(self.fd)

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        os.rename(self._path, new_path)
        self._path = Path(new_path)

    def close(self) -> None:
        if self._fd >= 0:
            self._preallocation.release(self._fd, self._size_bytes)
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self._path.unlink(missing_ok=True)

    def __del__(self) -> None:
        # A segment given up without close() (one that failed to open, a crashed cleaner's
        # output) must not keep its descriptor; a backstop, not the API. Nothing is written.
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1


def _advance(views: list[memoryview], n: int) -> list[memoryview]:
    """Drop ``n`` written bytes from the front of a list of views (partial ``writev``)."""
    out = list(views)
    while n and out:
        head = out[0]
        if n >= head.nbytes:
            n -= head.nbytes
            out.pop(0)
        else:
            out[0] = head[n:]
            n = 0
    return out
