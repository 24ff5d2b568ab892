"""The offset index of a log segment: from an offset to a byte position in the ``.log`` file."""

from __future__ import annotations

import mmap
import struct
from typing import ClassVar, Final, NamedTuple

import numpy as np

from spark_mq.errors import InvalidRecordError
from spark_mq.storage.abstract_index import AbstractIndex

#: Positions are stored as uint32, so a ``.log`` file is addressable up to 4 GiB.
MAX_POSITION: Final = 2**32 - 1

_ENTRY = struct.Struct(">iI")  # relative offset, position
_RELATIVE_OFFSET = struct.Struct(">i")
_POSITION = struct.Struct(">I")
_POSITION_AT: Final = 4
_ENTRY_DTYPE: Final = np.dtype([("relative_offset", ">i4"), ("position", ">u4")])
assert _ENTRY.size == _ENTRY_DTYPE.itemsize == 8


class OffsetPosition(NamedTuple):
    """An offset and the byte position in the ``.log`` file of the batch that holds it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """A sparse map from offsets to byte positions in a segment's ``.log`` file.

    The file is ``<base offset, 20 digits>.index``: a sequence of 8-byte big-endian entries::

         offset  size  field           notes
         ------  ----  --------------  -----------------------------------------------------
              0     4  relativeOffset  int32, offset - base_offset; strictly increasing
              4     4  position        uint32, byte position in the .log file of the batch
                                       holding that offset; never decreasing

    The log adds an entry only every ``index.interval.bytes`` of batches, so the index is
    sparse: :meth:`lookup` finds the nearest entry at or below an offset and the reader scans
    the ``.log`` file forward from its position. Offsets are stored relative to the segment's
    base offset to fit in 4 bytes; an offset more than 2^31-1 past it cannot be indexed and the
    log must roll a new segment first.

    Nothing in the file is checksummed. After a crash the log runs :meth:`sanity_check` and
    rebuilds a corrupt index from the ``.log`` file. When an existing file is opened, trailing
    all-zero entries are room for more entries, not entries (see
    :mod:`spark_mq.storage.abstract_index`). Only slot 0 can legitimately be all zeros: it
    would be the entry ``(base_offset, 0)`` of the segment's first batch, and every later
    entry has a relative offset above 0. A file whose entries are all zeros therefore opens as
    an empty index; nothing is lost, because :meth:`lookup` on an empty index answers
    ``(base_offset, 0)``, the very same entry.

    Thread contract: one writer thread; lookups may run concurrently with :meth:`append`; the
    owning log serialises truncation, resizing, renaming and closing with readers.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "00000000000000000100.index")
    >>> index = OffsetIndex(path, base_offset=100, max_index_size_bytes=4096)
    >>> index.append(100, 0)
    >>> index.append(150, 8192)
    >>> index.lookup(149), index.lookup(99)
    (OffsetPosition(offset=100, position=0), OffsetPosition(offset=100, position=0))
    >>> index.lookup(1000)
    OffsetPosition(offset=150, position=8192)
    >>> index.close()
    >>> os.path.getsize(path)
    16
    """

    ENTRY_SIZE: ClassVar[int] = _ENTRY.size
    KIND: ClassVar[str] = "offset index"
    FILE_SUFFIX: ClassVar[str] = ".index"
    _KEY_FIELD: ClassVar[struct.Struct] = _RELATIVE_OFFSET
    _KEY_AT: ClassVar[int] = 0

    _last_offset: int
    _last_position: int

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when the index is empty."""
        self._check_open()
        return self._last_offset

    def append(self, offset: int, position: int) -> None:
        """Add the entry ``offset -> position``.

        ``offset`` must be above the last entry's offset and ``position`` not below the last
        entry's position, else :class:`InvalidRecordError`. A full index raises
        :class:`UsageError`: the log checks :attr:`is_full` and rolls the segment first. A
        full disk raises :class:`LogDirectoryFullError` with nothing written (see
        :mod:`spark_mq.storage.index_blocks`).
        """
        mm = self._check_room(self._check_writable("append to"))
        entries = self._entries
        if entries and offset <= self._last_offset:
            raise InvalidRecordError(
                f"cannot append offset {offset} to {self.KIND} {self.path}: it is not above "
                f"the last indexed offset {self._last_offset}"
            )
        if entries and position < self._last_position:
            raise InvalidRecordError(
                f"cannot append position {position} (offset {offset}) to {self.KIND} "
                f"{self.path}: it is below the last indexed position {self._last_position}"
            )
        if not 0 <= position <= MAX_POSITION:
            raise InvalidRecordError(
                f"position {position} (offset {offset}) does not fit the uint32 field of "
                f"{self.KIND} {self.path}; roll a new segment"
            )
        relative_offset = self._relative_offset(offset)
        # Blocks first: a write into a hole of the mapping on a full disk would be a SIGBUS.
        if (entries + 1) * self.ENTRY_SIZE > self._reserved_bytes:
            self._back_slot(entries)
        _ENTRY.pack_into(mm, entries * self.ENTRY_SIZE, relative_offset, position)
        self._last_offset, self._last_position = offset, position
        # Published after the bytes are in place, so a concurrent lookup never sees a slot
        # that is counted but not yet written.
        self._entries = entries + 1

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``, or ``(base_offset, 0)``."""
        mm, slot = self._largest_slot_at_most(target_offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        assert mm is not None  # a nonempty index always has a mapping
        return self._parse(mm, slot)

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry (0-based); :class:`UsageError` if there is no such entry."""
        return self._parse(self._check_slot(n), n)

    def fetch_upper_bound_position(
        self, fetch_offset: OffsetPosition, fetch_size_bytes: int
    ) -> OffsetPosition | None:
        """The first entry at or past ``fetch_offset.position + fetch_size_bytes``, if any.

        Its offset is certainly outside a fetch of ``fetch_size_bytes`` starting at
        ``fetch_offset``, though not generally the smallest such offset (Kafka's
        ``fetchUpperBoundOffset``).
        """
        mm = self._check_open()
        entries = self._entries
        end_position = fetch_offset.position + fetch_size_bytes
        slot = self._count_at_most(mm, entries, end_position, _POSITION, _POSITION_AT, strict=True)
        if slot >= entries:
            return None
        assert mm is not None  # slot < entries means the index is not empty
        return self._parse(mm, slot)

    def truncate_to(self, offset: int) -> None:
        mm = self._check_writable("truncate")
        # Relative offsets strictly increase, so the kept entries are those below the target.
        keep = self._count_at_most(
            mm, self._entries, offset - self.base_offset, _RELATIVE_OFFSET, 0, strict=True
        )
        self._truncate_to_entries(keep)

    def _parse(self, mm: mmap.mmap, slot: int) -> OffsetPosition:
        relative_offset, position = _ENTRY.unpack_from(mm, slot * self.ENTRY_SIZE)
        return OffsetPosition(self.base_offset + relative_offset, position)

    def _after_entries_changed(self) -> None:
        if self._entries == 0 or self._mmap is None:
            self._last_offset, self._last_position = self.base_offset, 0
        else:
            self._last_offset, self._last_position = self._parse(self._mmap, self._entries - 1)

    def _find_corruption(self, mm: mmap.mmap) -> str | None:
        entries = np.frombuffer(mm, dtype=_ENTRY_DTYPE, count=self._entries)
        relative = entries["relative_offset"]
        position = entries["position"]
        not_increasing = np.flatnonzero(relative[1:] <= relative[:-1])
        if not_increasing.size:
            slot = int(not_increasing[0]) + 1
            return (
                f"entry {slot} has relative offset {int(relative[slot])}, not above "
                f"{int(relative[slot - 1])} of entry {slot - 1}"
            )
        if relative[0] < 0:
            return f"entry 0 has a negative relative offset {int(relative[0])}"
        backwards = np.flatnonzero(position[1:] < position[:-1])
        if backwards.size:
            slot = int(backwards[0]) + 1
            return (
                f"entry {slot} has position {int(position[slot])}, below "
                f"{int(position[slot - 1])} of entry {slot - 1}"
            )
        return None
