"""The time index of a log segment: from a timestamp to the offset where a search should start."""

from __future__ import annotations

import mmap
import struct
from typing import ClassVar, Final, NamedTuple

import numpy as np

from spark_mq.errors import InvalidRecordError, UsageError
from spark_mq.storage.abstract_index import AbstractIndex

#: Kafka's ``RecordBatch.NO_TIMESTAMP``: the timestamp of "no entry".
NO_TIMESTAMP: Final = -1

_INT64_MAX: Final = 2**63 - 1

_ENTRY = struct.Struct(">qi")  # timestamp (ms), relative offset
_TIMESTAMP = struct.Struct(">q")
_RELATIVE_OFFSET = struct.Struct(">i")
_RELATIVE_OFFSET_AT: Final = 8
_ENTRY_DTYPE: Final = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
assert _ENTRY.size == _ENTRY_DTYPE.itemsize == 12


class TimestampOffset(NamedTuple):
    """A timestamp (ms since the epoch) and an offset of the log."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """A sparse map from timestamps to the offsets where a search by time should start.

    The file is ``<base offset, 20 digits>.timeindex``: a sequence of 12-byte big-endian
    entries::

         offset  size  field           notes
         ------  ----  --------------  -----------------------------------------------------
              0     8  timestamp       int64, ms since the epoch; >= 0, strictly increasing
              8     4  relativeOffset  int32, offset - base_offset; never decreasing

    An entry ``(T, O)`` says that the largest timestamp of the records up to and including
    offset ``O`` is ``T``: the log appends its running maximum timestamp and the offset where
    it was reached. Every record before ``O`` therefore has a timestamp <= ``T``, and a search
    for the first record at or after a time starts from the offset :meth:`lookup` returns.
    The log adds an entry only every ``index.interval.bytes``, so the index is sparse.

    Kafka's rule for the last slot is followed: :attr:`is_full` is already true when one free
    slot is left. That slot is kept for the final entry the segment writes when it rolls or
    closes, with ``maybe_append(..., skip_full_check=True)``, so the index always ends with the
    segment's largest timestamp.

    Nothing in the file is checksummed. After a crash the log runs :meth:`sanity_check` and
    rebuilds a corrupt index from the ``.log`` file. When an existing file is opened, trailing
    all-zero entries are room for more entries, not entries (see
    :mod:`spark_mq.storage.abstract_index`). Timestamps in the file are >= 0 and strictly
    increase, so only slot 0 can legitimately be all zeros: timestamp 0 (the epoch) at the
    base offset. A file whose entries are all zeros therefore opens as an empty index. The
    cost is small and safe: :meth:`lookup` answers ``(-1, base_offset)`` instead of
    ``(0, base_offset)``, so a search by time still starts at the same offset, and
    :attr:`last_entry` reports no timestamp instead of the epoch, both older than any
    retention limit.

    Thread contract: one writer thread; lookups may run concurrently with
    :meth:`maybe_append`; the owning log serialises truncation, resizing, renaming and closing
    with readers.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "00000000000000000100.timeindex")
    >>> index = TimeIndex(path, base_offset=100, max_index_size_bytes=4096)
    >>> index.maybe_append(1_700_000_000_000, 100), index.maybe_append(1_700_000_000_000, 120)
    (True, False)
    >>> index.maybe_append(1_700_000_005_000, 140)
    True
    >>> index.lookup(1_700_000_004_999)
    TimestampOffset(timestamp=1700000000000, offset=100)
    >>> index.lookup(0)
    TimestampOffset(timestamp=-1, offset=100)
    >>> index.close()
    """

    ENTRY_SIZE: ClassVar[int] = _ENTRY.size
    KIND: ClassVar[str] = "time index"
    FILE_SUFFIX: ClassVar[str] = ".timeindex"
    _KEY_FIELD: ClassVar[struct.Struct] = _TIMESTAMP
    _KEY_AT: ClassVar[int] = 0

    _last_entry: TimestampOffset

    @property
    def is_full(self) -> bool:
        """True when only the slot kept for the roll is left (see the class docstring)."""
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when the index is empty."""
        self._check_open()
        return self._last_entry

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Add ``timestamp -> offset`` if ``timestamp`` is above the last entry's; say if it did.

        An equal timestamp is ignored: it happens when a segment that just appended its
        maximum rolls or closes and appends it again. A timestamp below the last entry's, or
        an offset below the last entry's, raises :class:`InvalidRecordError`: the log passes
        its running maximum, which never goes down. A full index (:attr:`is_full`) raises
        :class:`UsageError` unless ``skip_full_check``, which only the roll and close of a
        segment use to fill the last, reserved slot. A full disk raises
        :class:`LogDirectoryFullError` with nothing written (see
        :mod:`spark_mq.storage.index_blocks`).
        """
        mm = self._check_writable("append to")
        if not skip_full_check and self.is_full:
            raise UsageError(
                f"{self.KIND} {self.path} is full ({self._entries} entries; the last slot is "
                "kept for the roll); roll a new segment before appending"
            )
        entries = self._entries
        last = self._last_entry
        if entries and offset < last.offset:
            raise InvalidRecordError(
                f"cannot append offset {offset} (timestamp {timestamp}) to {self.KIND} "
                f"{self.path}: it is below the last indexed offset {last.offset}"
            )
        if entries and timestamp < last.timestamp:
            raise InvalidRecordError(
                f"cannot append timestamp {timestamp} (offset {offset}) to {self.KIND} "
                f"{self.path}: it is below the last indexed timestamp {last.timestamp}"
            )
        # With an empty index `last` is (-1, base_offset): negative timestamps (no timestamp)
        # are never indexed, which keeps every stored timestamp >= 0.
        if timestamp <= last.timestamp:
            return False
        if timestamp > _INT64_MAX:
            raise InvalidRecordError(
                f"timestamp {timestamp} (offset {offset}) does not fit the int64 field of "
                f"{self.KIND} {self.path}"
            )
        relative_offset = self._relative_offset(offset)
        mm = self._check_room(mm)
        # Blocks first: a write into a hole of the mapping on a full disk would be a SIGBUS.
        if (entries + 1) * self.ENTRY_SIZE > self._reserved_bytes:
            self._back_slot(entries)
        _ENTRY.pack_into(mm, entries * self.ENTRY_SIZE, timestamp, relative_offset)
        self._last_entry = TimestampOffset(timestamp, offset)
        # Published after the bytes are in place, so a concurrent lookup never sees a slot
        # that is counted but not yet written.
        self._entries = entries + 1
        return True

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``.

        ``(-1, base_offset)`` when there is none: the search by time starts at the segment's
        first offset.
        """
        mm, slot = self._largest_slot_at_most(target_timestamp)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        assert mm is not None  # a nonempty index always has a mapping
        return self._parse(mm, slot)

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry (0-based); :class:`UsageError` if there is no such entry."""
        return self._parse(self._check_slot(n), n)

    def truncate_to(self, offset: int) -> None:
        mm = self._check_writable("truncate")
        # Relative offsets never decrease, so the kept entries are those below the target;
        # searching by offset (not by timestamp) also drops every duplicate of the target.
        keep = self._count_at_most(
            mm,
            self._entries,
            offset - self.base_offset,
            _RELATIVE_OFFSET,
            _RELATIVE_OFFSET_AT,
            strict=True,
        )
        self._truncate_to_entries(keep)

    def _parse(self, mm: mmap.mmap, slot: int) -> TimestampOffset:
        timestamp, relative_offset = _ENTRY.unpack_from(mm, slot * self.ENTRY_SIZE)
        return TimestampOffset(timestamp, self.base_offset + relative_offset)

    def _after_entries_changed(self) -> None:
        if self._entries == 0 or self._mmap is None:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        else:
            self._last_entry = self._parse(self._mmap, self._entries - 1)

    def _find_corruption(self, mm: mmap.mmap) -> str | None:
        entries = np.frombuffer(mm, dtype=_ENTRY_DTYPE, count=self._entries)
        timestamp = entries["timestamp"]
        relative = entries["relative_offset"]
        not_increasing = np.flatnonzero(timestamp[1:] <= timestamp[:-1])
        if not_increasing.size:
            slot = int(not_increasing[0]) + 1
            return (
                f"entry {slot} has timestamp {int(timestamp[slot])}, not above "
                f"{int(timestamp[slot - 1])} of entry {slot - 1}"
            )
        if timestamp[0] < 0:
            return f"entry 0 has a negative timestamp {int(timestamp[0])}"
        backwards = np.flatnonzero(relative[1:] < relative[:-1])
        if backwards.size:
            slot = int(backwards[0]) + 1
            return (
                f"entry {slot} has relative offset {int(relative[slot])}, below "
                f"{int(relative[slot - 1])} of entry {slot - 1}"
            )
        if relative[0] < 0:
            return f"entry 0 has a negative relative offset {int(relative[0])}"
        return None
