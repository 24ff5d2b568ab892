"""What the offset index and the time index of a log segment have in common.

Both are files of fixed-size, big-endian entries, kept sorted by the way the log appends to
them, memory-mapped and searched in place. This module owns everything that does not depend
on the layout of one entry: opening, sizing and mapping the file, reserving its disk blocks,
counting the valid entries of an existing file, binary search, truncation, resizing,
trimming, flushing, closing, deleting and renaming. :mod:`spark_mq.storage.offset_index` and
:mod:`spark_mq.storage.time_index` add the entry layout and the rules of their appends.

Life of an index file
---------------------
The index of the active segment is *writable*. A writable index that creates its file sets
its length to ``max_index_size_bytes`` (rounded down to a whole number of entries) with
``ftruncate``, so the file is sparse, as Kafka's are: it takes no disk blocks until entries
are written. When the segment rolls or closes, :meth:`AbstractIndex.trim_to_valid_size`
shrinks the file to exactly ``entries * ENTRY_SIZE`` bytes. An existing file is mapped at the
size it has, as in Kafka: a trimmed index reopened writable is full until the log gives the
active segment's indexes room again with :meth:`AbstractIndex.resize` (Kafka's
``resizeIndexes`` on load) or :meth:`AbstractIndex.reset`. Segments that will not be appended
to again are best opened read-only.

Disk blocks
-----------
Entries are written through the mapping, and a write into a hole of a sparse file on a full
disk is a SIGBUS, so every page gets its blocks before an entry is written into it, and
nothing else writes (or reads past the entries) through the mapping: the rule, why it was
chosen over the alternatives, and the file calls are in :mod:`spark_mq.storage.index_blocks`.
:attr:`AbstractIndex.reserved_bytes` says how far the file is known to have blocks, and
:meth:`AbstractIndex.reserve` lets a caller reserve before it writes anything else, so that a
full disk fails an append before any byte of it is written.

Opening an existing file
------------------------
An index file is not checksummed. A trimmed file holds exactly its entries. A file that was
not trimmed when the process died holds its entries followed by zero bytes (holes read as
zeros), so the entry count of an existing file is the number of whole entries up to and
including the last entry that has a nonzero byte. Truncation zeroes the slots it frees, so
stale entries never reappear after a crash. Which all-zero entries could be real is up to the
entry layout; both indexes are built so that only slot 0 can legitimately be all zeros, and
dropping it loses no answer (see each subclass for why). Whatever a crash of the whole
machine leaves behind (torn pages, zeros in the middle: an all-zero entry after slot 0 breaks
the order of the keys) is caught by :meth:`AbstractIndex.sanity_check`. The owning log is
expected to run it on every existing file it opens and to rebuild the index from the log on
:class:`CorruptIndexError`, as Kafka does.

Thread contract
---------------
Exactly one thread changes the index (``append``/``maybe_append``, ``truncate*``, ``reset``,
``resize``, ``trim_to_valid_size``, ``rename``, ``close``, ``delete``). Lookups (``lookup``,
``entry``, the properties) and ``flush`` may run on other threads while that thread appends:
an append writes the entry's bytes into the mapping before it publishes the new entry count,
and a lookup reads the count once and only looks at slots below it. Truncation, resizing,
closing, deleting and renaming change or unmap bytes a reader could be looking at, so the
owning log serialises them with readers and flushes (Kafka uses a read-write lock for this;
here it is the caller's job, the index holds no lock).
"""

from __future__ import annotations

import abc
import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar, Final, Self

from spark_mq.errors import (
    ConfigError,
    CorruptIndexError,
    InvalidRecordError,
    LogClosedError,
    UsageError,
)
from spark_mq.storage import index_blocks

#: Kafka's ``segment.index.bytes`` default: the length of a writable index file (sparse).
DEFAULT_MAX_INDEX_SIZE_BYTES: Final = 10 * 1024 * 1024

#: Relative offsets are stored as int32, so a segment spans at most this many offsets past its
#: base offset; the log rolls a new segment before it would overflow.
MAX_RELATIVE_OFFSET: Final = 2**31 - 1


def round_down_to_entries(size_bytes: int, entry_size_bytes: int) -> int:
    """The largest multiple of ``entry_size_bytes`` that is not above ``size_bytes``."""
    return (size_bytes // entry_size_bytes) * entry_size_bytes


class AbstractIndex(abc.ABC):
    """A sorted, sparse, memory-mapped file of fixed-size entries (see the module docstring).

    Subclasses set :attr:`ENTRY_SIZE` and :attr:`KIND`, describe the key each entry is sorted
    by (:attr:`_KEY_FIELD` at byte :attr:`_KEY_AT`), and implement the entry-specific parts of
    truncation and of the sanity check. After :meth:`close` or :meth:`delete`, every method and
    property except :attr:`path`, :attr:`base_offset` and :meth:`close` raises
    :class:`LogClosedError`.
    """

    #: Bytes of one entry.
    ENTRY_SIZE: ClassVar[int]
    #: "offset index" or "time index", for messages.
    KIND: ClassVar[str]
    #: How to read the sort key of an entry, and where in the entry it starts.
    _KEY_FIELD: ClassVar[struct.Struct]
    _KEY_AT: ClassVar[int]

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size_bytes: int = DEFAULT_MAX_INDEX_SIZE_BYTES,
        writable: bool = True,
    ) -> None:
        """Open the index at ``path``; if writable and missing, create it (sparse).

        An existing file is mapped at its current size (see the module docstring). A
        read-only index maps the file read-only and refuses every change; a missing file then
        raises :class:`FileNotFoundError`, as whether to rebuild it is the log's decision. Call
        :meth:`sanity_check` after opening a file that already existed.
        """
        if base_offset < 0:
            raise UsageError(f"base offset of an index must be >= 0, got {base_offset}")
        if max_index_size_bytes < self.ENTRY_SIZE:
            raise ConfigError(
                f"segment.index.bytes must hold at least one {self.ENTRY_SIZE}-byte "
                f"{self.KIND} entry, got {max_index_size_bytes}",
                key="segment.index.bytes",
                value=max_index_size_bytes,
            )
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size_bytes = max_index_size_bytes
        self._writable = writable
        self._closed = False
        # None while the file is empty: Python cannot map zero bytes.
        self._mmap: mmap.mmap | None = None
        self._length_bytes = 0
        self._entries = 0
        # Every page below this offset has disk blocks (see the module docstring).
        self._reserved_bytes = 0
        self._open()
        self._after_entries_changed()

    # -----------------------------------------------------------------------------------------
    # Properties

    @property
    def path(self) -> Path:
        """Where the index file is now (follows :meth:`rename`)."""
        return self._path

    @property
    def base_offset(self) -> int:
        """Offset of the first record of the segment; stored offsets are relative to it."""
        return self._base_offset

    @property
    def writable(self) -> bool:
        self._check_open()
        return self._writable

    @property
    def max_index_size_bytes(self) -> int:
        """The length a writable file is given (before rounding to whole entries)."""
        self._check_open()
        return self._max_index_size_bytes

    @property
    def entries(self) -> int:
        """Number of valid entries."""
        self._check_open()
        return self._entries

    @property
    def max_entries(self) -> int:
        """Number of entries the file has room for at its current size."""
        self._check_open()
        return self._length_bytes // self.ENTRY_SIZE

    @property
    def is_full(self) -> bool:
        """True when an append would not fit: the log must roll a new segment first."""
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        """Bytes taken by the valid entries: the file size after :meth:`trim_to_valid_size`."""
        return self.entries * self.ENTRY_SIZE

    @property
    def length_bytes(self) -> int:
        """Current size of the file, its sparse room for more entries included."""
        self._check_open()
        return self._length_bytes

    @property
    def reserved_bytes(self) -> int:
        """How far the file is known to have disk blocks: entries below it can be written
        without taking new space (see the module docstring)."""
        self._check_open()
        return self._reserved_bytes

    def reserve(self, more_entries: int) -> None:
        """Give the next ``more_entries`` free slots disk blocks, a page at a time.

        Raises :class:`LogDirectoryFullError` when the disk has no room, before anything is
        written. Slots past the file's length are not reserved: an append there fails as full
        anyway. Cheap when the slots are already backed (one comparison).
        """
        end = (self._entries + more_entries) * self.ENTRY_SIZE
        if end <= self._reserved_bytes:
            return
        self._check_writable("reserve blocks for")
        self._reserve_to(min(end, self._length_bytes))

    # -----------------------------------------------------------------------------------------
    # Changes

    def truncate(self) -> None:
        """Remove every entry (the file keeps its size)."""
        self._check_writable("truncate")
        self._truncate_to_entries(0)

    @abc.abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; an offset past the last is a no-op."""

    def reset(self) -> None:
        """Remove every entry and grow the file back to ``max_index_size_bytes``.

        Used when the log truncates back into an old segment that becomes active again.
        """
        self.truncate()
        self.resize(self._max_index_size_bytes)

    def resize(self, new_size_bytes: int) -> bool:
        """Set the file size to ``new_size_bytes`` rounded down to whole entries and re-map it.

        Returns whether the size changed. Shrinking below the valid entries is refused:
        truncate first. Growing the file takes no disk blocks (see the module docstring).
        """
        self._check_writable("resize")
        rounded_bytes = round_down_to_entries(new_size_bytes, self.ENTRY_SIZE)
        if rounded_bytes < self._entries * self.ENTRY_SIZE:
            raise UsageError(
                f"cannot resize {self.KIND} {self._path} to {new_size_bytes} bytes: it holds "
                f"{self._entries} entries ({self._entries * self.ENTRY_SIZE} bytes); "
                "truncate it first"
            )
        if rounded_bytes == self._length_bytes:
            return False
        self._remap(rounded_bytes)
        return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its valid entries; done when the segment rolls or closes."""
        self._check_writable("trim")
        self.resize(self._entries * self.ENTRY_SIZE)

    def flush(self) -> None:
        """Write dirty pages of the mapping to the file and fsync it (no-op when read-only)."""
        self._check_open()
        if not self._writable:
            return
        if self._mmap is not None:
            self._mmap.flush()
        # msync writes the data pages; fsync also makes the file size from a resize durable.
        fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Trim a writable index to its valid entries and unmap it. Closing twice is a no-op.

        Does not fsync: call :meth:`flush` first when the entries must survive a power loss.
        """
        if self._closed:
            return
        try:
            if self._writable:
                self.trim_to_valid_size()
        finally:
            self._unmap()
            self._closed = True

    def delete(self) -> bool:
        """Unmap the index and delete its file; returns whether a file was there to delete.

        The index is closed afterwards.
        """
        self._check_open()
        self._unmap()
        self._closed = True
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        """Atomically move the file to ``new_path``; the index keeps working at its new name.

        The mapping refers to the file itself, not to its name, so nothing is re-mapped.
        """
        self._check_open()
        target = Path(new_path)
        os.replace(self._path, target)
        self._path = target

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` if the file cannot be a valid index.

        Checks that the file size is a whole number of entries and the entry-specific rules of
        the subclass (order of keys, relative offsets not negative). It reads every entry once,
        vectorised; run it when a log opens an existing segment, not on a hot path.
        """
        mm = self._check_open()
        if self._length_bytes % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{self.KIND} {self._path} is corrupt: its size {self._length_bytes} bytes is "
                f"not a multiple of the entry size {self.ENTRY_SIZE}; rebuild it from the log",
                path=str(self._path),
            )
        problem = None if mm is None or self._entries == 0 else self._find_corruption(mm)
        if problem is not None:
            raise CorruptIndexError(
                f"{self.KIND} {self._path} is corrupt: {problem}; rebuild it from the log",
                path=str(self._path),
            )

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"entries={self._entries}"
        name = type(self).__name__
        return f"{name}({str(self._path)!r}, base_offset={self._base_offset}, {state})"

    # -----------------------------------------------------------------------------------------
    # For subclasses

    @abc.abstractmethod
    def _after_entries_changed(self) -> None:
        """Refresh whatever the subclass caches about the last entry."""

    @abc.abstractmethod
    def _find_corruption(self, mm: mmap.mmap) -> str | None:
        """Describe the first broken rule among the ``self._entries`` entries, or None.

        Implementations may put numpy views on ``mm`` but must return plain Python values and
        keep no view alive: a mapping with an exported buffer cannot be closed or resized.
        """

    def _check_open(self) -> mmap.mmap | None:
        """The current mapping (None for an empty file); raises once the index is closed."""
        if self._closed:
            raise LogClosedError(f"{self.KIND} {self._path} is closed")
        return self._mmap

    def _check_writable(self, action: str) -> mmap.mmap | None:
        mm = self._check_open()
        if not self._writable:
            raise UsageError(
                f"cannot {action} {self.KIND} {self._path}: it was opened read-only "
                "(only the active segment's index is writable)"
            )
        return mm

    def _relative_offset(self, offset: int) -> int:
        """``offset - base_offset`` as stored, or InvalidRecordError if it does not fit int32."""
        relative = offset - self._base_offset
        if not 0 <= relative <= MAX_RELATIVE_OFFSET:
            raise InvalidRecordError(
                f"offset {offset} cannot go into {self.KIND} {self._path} with base offset "
                f"{self._base_offset}: the relative offset must be in [0, {MAX_RELATIVE_OFFSET}]; "
                "roll a new segment at this offset"
            )
        return relative

    def _check_room(self, mm: mmap.mmap | None) -> mmap.mmap:
        """The mapping to append to, or UsageError if there is no free slot at all."""
        if mm is None or self._entries >= self._length_bytes // self.ENTRY_SIZE:
            raise UsageError(
                f"{self.KIND} {self._path} is full ({self._entries} entries, "
                f"{self._length_bytes} bytes); roll a new segment before appending"
            )
        return mm

    def _count_at_most(
        self,
        mm: mmap.mmap | None,
        entries: int,
        target: int,
        field: struct.Struct,
        field_at: int,
        *,
        strict: bool = False,
    ) -> int:
        """Number of leading entries whose ``field`` is <= ``target`` (< when ``strict``).

        A binary search straight on the mapping, one small unpack per probe: O(log n), nothing
        copied. It is valid because the log appends entries with the field non-decreasing.
        ``entries`` is passed in so a lookup uses the count it read once (see the thread
        contract).
        """
        if mm is None:
            return 0
        lo, hi = 0, entries
        while lo < hi:
            mid = (lo + hi) // 2
            (value,) = field.unpack_from(mm, mid * self.ENTRY_SIZE + field_at)
            if value < target or (value == target and not strict):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _largest_slot_at_most(self, target_key: int) -> tuple[mmap.mmap | None, int]:
        """The mapping and the slot of the last entry whose key is <= ``target_key`` (-1: none)."""
        mm = self._check_open()
        entries = self._entries
        slot = self._count_at_most(mm, entries, target_key, self._KEY_FIELD, self._KEY_AT) - 1
        return mm, slot

    def _check_slot(self, n: int) -> mmap.mmap:
        mm = self._check_open()
        if mm is None or not 0 <= n < self._entries:
            raise UsageError(
                f"no entry {n} in {self.KIND} {self._path}: it has {self._entries} entries"
            )
        return mm

    def _truncate_to_entries(self, entries: int) -> None:
        """Keep the first ``entries`` entries and zero the slots after them.

        Zeroing is what lets a reopened, untrimmed file find its end (see the module
        docstring); the count is lowered first so that no lookup starts on a zeroed slot. The
        zeros go in with ``pwrite``, not through the mapping: those slots have blocks, so this
        takes no space, whereas a write fault on their page could need blocks for the rest of
        it (see the module docstring).
        """
        self._check_writable("truncate")
        old_entries = self._entries
        if entries >= old_entries:
            return
        self._entries = entries
        self._after_entries_changed()
        index_blocks.zero_range(
            self._path,
            entries * self.ENTRY_SIZE,
            old_entries * self.ENTRY_SIZE,
            what=f"{self.KIND} {self._path}",
        )

    def _back_slot(self, slot: int) -> None:
        """Give slot ``slot`` disk blocks before it is written through the mapping (callers
        on the append path check ``(slot + 1) * ENTRY_SIZE > reserved_bytes`` inline first:
        that comparison is all an append pays while its page is reserved)."""
        self._reserve_to((slot + 1) * self.ENTRY_SIZE)

    # -----------------------------------------------------------------------------------------
    # File handling

    def _target_length_bytes(self) -> int:
        return round_down_to_entries(self._max_index_size_bytes, self.ENTRY_SIZE)

    def _open(self) -> None:
        created = False
        if self._writable:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                created = True
            except FileExistsError:
                fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
        else:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            existing_bytes = os.fstat(fd).st_size
            length_bytes = existing_bytes
            # Only a new file is sized, and sparsely: it takes blocks as entries are written.
            # An existing one is mapped at its size, as Kafka does; a file of a bad size must
            # reach sanity_check() unchanged. The log grows the active segment's indexes with
            # resize() or reset().
            if created:
                length_bytes = self._target_length_bytes()
                os.ftruncate(fd, length_bytes)
            entries = index_blocks.count_entries_before_zero_tail(
                fd, existing_bytes // self.ENTRY_SIZE, self.ENTRY_SIZE
            )
            self._mmap = self._map(fd, length_bytes)
        except BaseException:
            os.close(fd)
            if created:
                self._path.unlink(missing_ok=True)
            raise
        os.close(fd)
        self._length_bytes = length_bytes
        self._entries = entries
        # The pages that hold entries were written, so they have blocks; the page after the
        # last whole one may be partly a hole.
        self._reserved_bytes = min(
            index_blocks.round_down_to_unit(self._entries * self.ENTRY_SIZE), length_bytes
        )

    def _map(self, fd: int, length_bytes: int) -> mmap.mmap | None:
        if length_bytes == 0:
            return None
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        return mmap.mmap(fd, length_bytes, access=access)

    def _reserve_to(self, end_bytes: int) -> None:
        """Give every page from :attr:`reserved_bytes` up to the one holding byte
        ``end_bytes - 1`` its disk blocks (whole pages, capped at the file's length).

        Invariant: :attr:`reserved_bytes` is a whole number of pages, or the file's length
        (whose last page has no bytes past it to back), so a slot that ends at or below it
        lies in backed pages only.
        """
        stop = min(index_blocks.round_up_to_unit(end_bytes), self._length_bytes)
        if stop <= self._reserved_bytes:
            return
        index_blocks.reserve(
            self._path,
            self._reserved_bytes,
            stop,
            free_from=self._entries * self.ENTRY_SIZE,
            what=f"{self.KIND} {self._path}",
        )
        self._reserved_bytes = stop

    def _remap(self, length_bytes: int) -> None:
        """Change the file size and map it again.

        ``mmap.resize`` is not used: it fails while any buffer is exported and would move the
        mapping under readers anyway. Growing only moves the length (the new room is a hole,
        reserved page by page as entries come) and maps the file before the old mapping is
        dropped; shrinking unmaps first, because a mapping that reaches past the end of the
        file faults (SIGBUS) when touched, and frees the blocks past the new end.
        """
        fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
        try:
            if length_bytes > self._length_bytes:
                os.ftruncate(fd, length_bytes)
                try:
                    new_mmap = self._map(fd, length_bytes)
                except BaseException:
                    os.ftruncate(fd, self._length_bytes)
                    raise
                self._unmap()
                self._mmap = new_mmap
                # A reservation that ended at the old end of the file (inside a page) covered
                # that page only up to there: the rest of it is a hole now.
                self._reserved_bytes = index_blocks.round_down_to_unit(self._reserved_bytes)
            else:
                self._unmap()
                try:
                    os.ftruncate(fd, length_bytes)
                except OSError:
                    self._mmap = self._map(fd, self._length_bytes)
                    raise
                self._mmap = self._map(fd, length_bytes)
                # Blocks past the new end are freed.
                self._reserved_bytes = min(self._reserved_bytes, length_bytes)
            self._length_bytes = length_bytes
        finally:
            os.close(fd)

    def _unmap(self) -> None:
        mm, self._mmap = self._mmap, None
        if mm is not None:
            mm.close()
