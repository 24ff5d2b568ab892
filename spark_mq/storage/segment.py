"""A log segment: one ``.log`` file of batches plus its sparse offset and time indexes.

Files, all named by the segment's base offset in 20 digits (``00000000000000000042.log``):

- ``.log``: record batches back to back (``file_records.py``).
- ``.index``: (relative offset, position) of the first batch after every
  ``index.interval.bytes`` of appends (``offset_index.py``). Entries point at a batch's
  *base* offset, so a lookup lands on the batch holding the target or an earlier one.
- ``.timeindex``: (max timestamp so far, last offset of the batch that holds it), appended
  with the offset index entries and once more when the segment stops being active.

Only the ``.log`` file is the truth. Indexes are caches: not checksummed, rebuilt from the
``.log`` file by :meth:`LogSegment.recover` after an unclean shutdown or a failed sanity check.

Threads: the owning :class:`~spark_mq.storage.log.PartitionLog` serialises every mutation;
lookups may run concurrently with appends.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NamedTuple

import numpy as np

from spark_mq.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidRecordError,
    LogDirectoryFullError,
)
from spark_mq.storage.arrow_arrays import to_numpy
from spark_mq.storage.batch_decoder import decode_body
from spark_mq.storage.codecs import Bytes
from spark_mq.storage.file_records import FileRange, FileRecords
from spark_mq.storage.offset_index import OffsetIndex
from spark_mq.storage.record_batch import BatchHeader
from spark_mq.storage.time_index import TimeIndex
from spark_mq.storage.txn_index import TxnIndex

log = logging.getLogger(__name__)

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
TXN_INDEX_SUFFIX: Final = ".txnindex"
DELETED_SUFFIX: Final = ".deleted"

#: Relative offsets are int32 in the indexes, so a segment spans at most this many offsets.
MAX_RELATIVE_OFFSET: Final = 2**31 - 1


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    """The base offset in a segment file name, or None if the name is not one of ours."""
    stem = name.split(".", 1)[0]
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class BatchPosition(NamedTuple):
    """Where a batch sits: its header and its byte position in the segment's ``.log``."""

    header: BatchHeader
    position: int


@dataclasses.dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp_ms: int
    offset: int


class LogSegment:
    """One segment; created by :meth:`open` (existing files) or :meth:`create` (new ones)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size_bytes: int,
        rolling_jitter_ms: int = 0,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = created_ms
        self.records = FileRecords(directory / segment_file_name(base_offset, LOG_SUFFIX))
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_so_far = -1
        self._offset_of_max_timestamp_so_far = base_offset - 1
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None
        try:
            self.offset_index = OffsetIndex(
                directory / segment_file_name(base_offset, INDEX_SUFFIX),
                base_offset,
                max_index_size_bytes=max_index_size_bytes,
            )
            self.time_index = TimeIndex(
                directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX),
                base_offset,
                max_index_size_bytes=max_index_size_bytes,
            )
            # Aborted transactions whose abort marker is in this segment (read_committed
            # readers skip their data). Maintained by the log, which knows the producer state.
            self.txn_index = TxnIndex(
                directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX), base_offset
            )
            self._load_largest_timestamp()
        except BaseException:
            # A corrupt index (the loader rebuilds it and opens the segment again) or a failed
            # open: release the descriptors opened so far, writing nothing.
            self.records.close()
            txn_index = getattr(self, "txn_index", None)
            if txn_index is not None:
                txn_index.close()
            raise

    # -----------------------------------------------------------------------------------------
    # Properties

    @property
    def size_bytes(self) -> int:
        return self.records.size_bytes

    @property
    def log_path(self) -> Path:
        return self.records.path

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_so_far

    @property
    def largest_timestamp_ms(self) -> int:
        """Newest timestamp in the segment (for retention.ms); the file mtime if it has none."""
        if self._max_timestamp_so_far >= 0:
            return self._max_timestamp_so_far
        return int(os.stat(self.records.path).st_mtime * 1000)

    def next_offset(self) -> int:
        """One past the last offset in the segment (the base offset when it is empty)."""
        if self._next_offset is None:
            entry = self.offset_index.lookup(2**63 - 1)
            next_offset = self.base_offset
            for header, _ in self.records.headers(entry.position):
                next_offset = header.next_offset
            self._next_offset = next_offset
        return self._next_offset

    # -----------------------------------------------------------------------------------------
    # Writing

    def can_hold(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(
        self,
        chunks: Sequence[Bytes],
        batches: Sequence[BatchPosition],
        *,
        drop_behind_bytes: int = 0,
        reserve_to: int = 0,
    ) -> None:
        """Append ``chunks`` (the batches' bytes, offsets already assigned) and index them.
        ``drop_behind_bytes`` and ``reserve_to``: see :meth:`FileRecords.append`.

        ``batches`` give each batch's header and its position relative to the start of the
        append. Index entries go in after the write, so a crash between the two leaves an index
        that is merely sparser than it could be.
        """
        if not batches:
            return
        start = self.records.size_bytes
        first = batches[0].header
        if first.base_offset < self.base_offset or not self.can_hold(
            batches[-1].header.last_offset
        ):
            raise InvalidRecordError(
                f"batch offsets {first.base_offset}..{batches[-1].header.last_offset} do not fit "
                f"segment {self.base_offset}"
            )
        # Disk blocks for the index entries this append may add, before any byte is written:
        # a full disk then fails the whole append cleanly (see index_blocks.py).
        more_entries = self._max_new_index_entries(batches)
        if more_entries:
            self.offset_index.reserve(more_entries)
            self.time_index.reserve(more_entries)
        self.records.append(chunks, drop_behind_bytes=drop_behind_bytes, reserve_to=reserve_to)
        if self._rolling_based_timestamp is None:
            self._rolling_based_timestamp = first.max_timestamp
        for batch in batches:
            header = batch.header
            if header.max_timestamp > self._max_timestamp_so_far:
                self._max_timestamp_so_far = header.max_timestamp
                self._offset_of_max_timestamp_so_far = header.last_offset
            due = self._bytes_since_last_index_entry > self.index_interval_bytes
            if due and self._indexes_have_room():
                self.offset_index.append(header.base_offset, start + batch.position)
                self.time_index.maybe_append(
                    self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far
                )
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += header.size
        self._next_offset = batches[-1].header.next_offset

    def _max_new_index_entries(self, batches: Sequence[BatchPosition]) -> int:
        """At most how many index entries appending ``batches`` adds.

        One per batch at most, and each entry needs more than ``index.interval.bytes`` of
        batches since the last one, counted before the batch it indexes, so the bytes before
        the last batch bound the count too (and a segment's first batch needs none).
        """
        bytes_before_last = batches[-1].position
        by_bytes = (self._bytes_since_last_index_entry + bytes_before_last) // (
            self.index_interval_bytes + 1
        )
        return min(len(batches), by_bytes)

    def _append_final_time_entry(self) -> None:
        """The time index's last entry (the segment's largest timestamp), when it stops being
        active. Skipped on a full disk: it only makes the index sparser, which lookups by time
        tolerate, while failing would leave a roll or close half done."""
        if self._max_timestamp_so_far < 0:
            return
        try:
            self.time_index.maybe_append(
                self._max_timestamp_so_far,
                self._offset_of_max_timestamp_so_far,
                skip_full_check=True,
            )
        except LogDirectoryFullError as exc:
            log.warning("time index of segment %s lacks its last entry: %s", self.log_path, exc)

    def _indexes_have_room(self) -> bool:
        # The log checks for full indexes only before an append, so a multi-batch append (or a
        # rebuild into index files trimmed at an earlier roll) can fill one part-way. Skipping
        # the entry then only makes the index sparser, which lookups tolerate; raising would
        # leave written batches unaccounted for. The next append rolls the segment.
        return not (self.offset_index.is_full or self.time_index.is_full)

    def should_roll(
        self,
        *,
        append_size_bytes: int,
        last_offset: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
        max_compaction_lag_ms: int | None = None,
    ) -> bool:
        """Kafka's roll rule: size, age (segment.ms minus jitter, or on a compacted topic
        ``max_compaction_lag_ms``), full indexes, offset range."""
        if self.size_bytes == 0:
            return False
        reached_time = (
            self._rolling_based_timestamp is not None
            and now_ms - self._rolling_based_timestamp > segment_ms - self.rolling_jitter_ms
        )
        return (
            self.size_bytes > segment_bytes - append_size_bytes
            or reached_time
            or (
                max_compaction_lag_ms is not None
                and self.compaction_lag_passed(now_ms, max_compaction_lag_ms)
            )
            or self.offset_index.is_full
            or self.time_index.is_full
            or not self.can_hold(last_offset)
        )

    def compaction_lag_passed(self, now_ms: int, max_compaction_lag_ms: int) -> bool:
        """Whether the first batch (by its maxTimestamp, as Kafka's roll rule uses) is more
        than ``max_compaction_lag_ms`` old: on a compacted topic the segment must then roll
        so that the cleaner can meet max.compaction.lag.ms."""
        first = self._rolling_based_timestamp
        return self.size_bytes > 0 and first is not None and now_ms - first > max_compaction_lag_ms

    def resize_indexes(self, size_bytes: int) -> None:
        """Give the indexes room again (an active segment reopened after a trim is full).

        Each file is trimmed to its entries first, which frees any blocks held past them (a
        file preallocated whole by an older version, or not trimmed before a crash), then
        grown sparsely.
        """
        for index in (self.offset_index, self.time_index):
            index.trim_to_valid_size()
            index.resize(max(size_bytes, index.size_bytes))

    def on_become_inactive(self) -> None:
        """Called when a new segment takes over: final time index entry, indexes trimmed,
        disk blocks reserved past the end of the ``.log`` file given back."""
        self.records.release_reserved()
        self._append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    # -----------------------------------------------------------------------------------------
    # Reading

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is >= ``offset``, or None if there is none."""
        start = max(self.offset_index.lookup(offset).position, starting_position)
        found = self.records.seek(offset, start)
        return None if found is None else BatchPosition(*found)

    def read(
        self,
        start_offset: int,
        max_size_bytes: int,
        *,
        max_position: int | None = None,
        min_one_message: bool = True,
    ) -> FileRange | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size_bytes``.

        ``max_position`` bounds the range (the high watermark's position); with
        ``min_one_message`` the first batch is returned whole even if larger than the limit,
        as Kafka does, so that a consumer is never stuck behind one large batch.
        """
        end_limit = self.records.size_bytes if max_position is None else max_position
        first = self.translate_offset(start_offset)
        if first is None or first.position >= end_limit:
            return None
        size = self.records.extent(first.position, end_limit, max_size_bytes, min_one_message)
        if size == 0:
            return None
        return self.records.range(first.position, size)

    def find_offset_by_timestamp(
        self, timestamp_ms: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """Earliest record at or after ``starting_offset`` with a timestamp >= ``timestamp_ms``."""
        entry = self.time_index.lookup(timestamp_ms)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for header, pos in self.records.headers(position):
            if (
                header.is_control
                or header.record_count == 0  # emptied by compaction: its timestamps are stale
                or header.max_timestamp < timestamp_ms
                or header.last_offset < starting_offset
            ):
                continue
            data = self.records.read(pos, header.size)
            body = decode_body(data, 0, header)
            deltas = to_numpy(body.column(0))
            stamps = to_numpy(body.column(1))
            if header.timestamp_type:  # LogAppendTime: every record carries maxTimestamp.
                stamps = np.full_like(stamps, header.max_timestamp)
            offsets = deltas.astype("int64") + header.base_offset
            hits = ((stamps >= timestamp_ms) & (offsets >= starting_offset)).nonzero()[0]
            if len(hits):
                i = int(hits[0])
                return TimestampAndOffset(int(stamps[i]), int(offsets[i]))
        return None

    # -----------------------------------------------------------------------------------------
    # Truncation and recovery

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns the bytes removed.

        Truncation is by whole batches (the batch straddling ``offset`` goes too), which is
        what replication's truncation to a leader-epoch boundary needs.
        """
        found = self.translate_offset(offset)
        if found is None:
            return 0
        cut_offset = found.header.base_offset
        self.offset_index.truncate_to(cut_offset)
        self.time_index.truncate_to(cut_offset)
        self.txn_index.truncate_to(cut_offset)
        removed = self.records.size_bytes - found.position
        self.records.truncate_to(found.position)
        self._bytes_since_last_index_entry = 0
        self._next_offset = None
        if self.records.size_bytes == 0:
            self._rolling_based_timestamp = None
        self._load_largest_timestamp()
        return removed

    def _load_largest_timestamp(self) -> None:
        """Max timestamp from the last time index entry plus the batch headers after it."""
        last = self.time_index.last_entry
        position = 0
        self._max_timestamp_so_far = -1
        self._offset_of_max_timestamp_so_far = self.base_offset - 1
        if last.timestamp >= 0:
            self._max_timestamp_so_far = last.timestamp
            self._offset_of_max_timestamp_so_far = last.offset
            position = self.offset_index.lookup(last.offset).position
        for header, _ in self.records.headers(position):
            if header.max_timestamp > self._max_timestamp_so_far:
                self._max_timestamp_so_far = header.max_timestamp
                self._offset_of_max_timestamp_so_far = header.last_offset
        self._rolling_based_timestamp = None
        for header, _ in self.records.headers(0):
            self._rolling_based_timestamp = header.max_timestamp
            break

    def recover(self, *, max_message_bytes: int | None = None, truncate: bool = True) -> int:
        """Validate every batch, rebuild both indexes, cut the file at the first bad byte.

        Returns the number of bytes truncated (0 for a healthy segment). A batch is bad if it
        fails :func:`~spark_mq.storage.batch_decoder.validate_batch`, if its offsets go
        backwards or fall outside this segment, or if it exceeds ``max_message_bytes``.

        With ``truncate=False`` the bad bytes stay in the file and the count says how many
        there are: the loader first deletes the segments after this one, then cuts, so that
        a crash in between cannot leave a hole in the log (see ``log_loader.py``).
        """
        # As Kafka's recover(): the index files may have been trimmed at a roll or close, so
        # they get their full size back for the rebuild (else it would come out sparser, and
        # sparser again on every recovery) and are trimmed to their entries at the end.
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_so_far = -1
        self._offset_of_max_timestamp_so_far = self.base_offset - 1
        self._rolling_based_timestamp = None
        valid_bytes = 0
        expected_min_offset = self.base_offset
        # False once the disk had no room for an index page: the rest of the rebuild indexes
        # nothing (see below).
        indexing = True
        try:
            for header, pos in self.records.validated_batches(0):
                if header.base_offset < expected_min_offset or not self.can_hold(
                    header.last_offset
                ):
                    raise InvalidRecordError(
                        f"batch at position {pos} of {self.records.path} has offsets "
                        f"{header.base_offset}..{header.last_offset}, expected at least "
                        f"{expected_min_offset}"
                    )
                if max_message_bytes is not None and header.size > max_message_bytes + 1024 * 1024:
                    # Generous slack: max.message.bytes may have been lowered since the append.
                    raise InvalidRecordError(f"batch at position {pos} is {header.size} bytes")
                if self._rolling_based_timestamp is None:
                    self._rolling_based_timestamp = header.max_timestamp
                if header.max_timestamp > self._max_timestamp_so_far:
                    self._max_timestamp_so_far = header.max_timestamp
                    self._offset_of_max_timestamp_so_far = header.last_offset
                due = self._bytes_since_last_index_entry > self.index_interval_bytes
                if indexing and due and self._indexes_have_room():
                    indexing = self._rebuild_entry(header, pos)
                    self._bytes_since_last_index_entry = 0
                self._bytes_since_last_index_entry += header.size
                expected_min_offset = header.next_offset
                valid_bytes = pos + header.size
        except (CorruptRecordError, InvalidRecordError) as exc:
            log.warning("recovery of %s stops at byte %d: %s", self.records.path, valid_bytes, exc)
        truncated = self.records.size_bytes - valid_bytes
        if truncated and truncate:
            self.records.truncate_to(valid_bytes)
        if indexing:
            self._append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self._next_offset = expected_min_offset
        return truncated

    def _rebuild_entry(self, header: BatchHeader, position: int) -> bool:
        """Add the index entries of one batch during :meth:`recover`; False on a full disk.

        A rebuild must not stop a log from opening for want of an index page: the indexes are
        only caches, and an index that ends early is still valid (lookups past its last entry
        scan the ``.log`` file forward from there). So on a full disk the entries stop here,
        once, with a warning; the log opens with all its data.
        """
        try:
            self.offset_index.append(header.base_offset, position)
            self.time_index.maybe_append(
                self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far
            )
        except LogDirectoryFullError as exc:
            log.warning(
                "rebuilding the indexes of %s stops at offset %d, the disk is full: %s; lookups "
                "past it scan the log file forward from the last entry",
                self.log_path,
                header.base_offset,
                exc,
            )
            return False
        return True

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if either index fails its check (the caller rebuilds)."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        end = self.records.size_bytes
        if self.offset_index.entries and self.offset_index.lookup(2**63 - 1).position >= max(
            end, 1
        ):
            raise CorruptIndexError(
                f"offset index {self.offset_index.path} points past the end of its log file",
                path=str(self.offset_index.path),
            )

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def flush(self) -> None:
        self.records.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        # An old segment's time index is opened at its trimmed size. If it lacks the final
        # entry (a sane but sparser file), there is no slot for it: skipping it only makes the
        # index sparser, while appending would raise and leave the log half closed.
        if self.time_index.entries < self.time_index.max_entries:
            self._append_final_time_entry()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.records.close()

    def rename_to_deleted(self) -> None:
        """First step of deletion: the files leave the log (a crash after this finishes it)."""
        for item in (self.records, self.offset_index, self.time_index, self.txn_index):
            item.rename(str(item.path) + DELETED_SUFFIX)

    def delete(self) -> None:
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.records.delete()

    def __repr__(self) -> str:
        return f"LogSegment({self.records.path}, size_bytes={self.size_bytes})"
