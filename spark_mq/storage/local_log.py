"""The segments of one partition directory: Kafka's ``LocalLog``.

:class:`LocalLog` owns the ordered list of segments of a partition and the two offsets that
only they decide: the **log end** (one past the last batch) and the **recovery point**
(everything below it is fsynced). It rolls, appends to the active segment, flushes, locates
the batches of a read, truncates, deletes whole segments and swaps cleaned segments in. It
knows nothing of the log start offset, the high watermark, producers or transactions: the
:class:`~spark_mq.storage.log.PartitionLog` on top decides with those, as Kafka's
``UnifiedLog`` does over its ``LocalLog``.

Segment deletion renames a segment's files to ``*.deleted`` first and then removes them, so
a crash in between leaves ``.deleted`` files (loading removes them), never a half-deleted
segment that would be served. Readers holding a
:class:`~spark_mq.storage.file_records.FileRange` keep their own descriptor, so removal need
not wait for them.

Threads: not thread-safe. The owning ``PartitionLog`` calls every method under its lock.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from spark_mq.errors import CorruptRecordError
from spark_mq.storage.cleaner_swap import swap_in
from spark_mq.storage.codecs import Bytes
from spark_mq.storage.file_records import FileRange
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.segment import BatchPosition, LogSegment

__all__ = ["LocalLog"]


def _check_walkable(segment: LogSegment, start_offset: int, next_base_offset: int) -> None:
    """Raise CorruptRecordError if the batch headers of ``segment`` from the one indexed for
    ``start_offset`` do not lead to the end of its file (a damaged length field)."""
    records = segment.records
    position = segment.offset_index.lookup(start_offset).position
    for header, pos in records.headers(position):
        position = pos + header.size
    if position >= records.size_bytes:
        return
    raise CorruptRecordError(
        f"the batch at byte {position} of {records.path} is corrupt: its length field does "
        f"not fit the file, so the batches after it, up to offset {next_base_offset - 1}, "
        f"cannot be located; fetching at offset {start_offset} would skip them. Seek to "
        f"{next_base_offset} to skip them, and see the damage with spark-mq log verify",
        path=str(records.path),
        position=position,
        offset=start_offset,
        next_offset=next_base_offset,
    )


class LocalLog:
    """The segments of a partition directory, its log end and its recovery point."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_end_offset: int,
        recovery_point: int,
        time_ms: Callable[[], int],
        rng: random.Random,
    ) -> None:
        assert segments, "a log has at least one (active) segment"
        self.directory = directory
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self._time_ms = time_ms
        self._rng = rng
        #: When a flush last moved the recovery point (for flush.ms).
        self.last_flush_ms = time_ms()

    # -----------------------------------------------------------------------------------------
    # Segments

    @property
    def segments(self) -> Sequence[LogSegment]:
        """The segments, oldest first (the live list: copy it before releasing the lock)."""
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    def floor_index(self, offset: int) -> int:
        """Index of the segment whose base offset is the largest at or below ``offset``."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        config = self.config
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size_bytes=config.segment_index_bytes,
            rolling_jitter_ms=self._roll_jitter_ms(),
            created_ms=now_ms,
        )

    def _roll_jitter_ms(self) -> int:
        """Kafka's segment.jitter.ms: a random part of segment.ms taken off each new segment's
        age limit, so that partitions created together do not all roll at the same moment."""
        jitter = min(self.config.segment_jitter_ms, self.config.segment_ms)
        return self._rng.randrange(jitter) if jitter > 0 else 0

    @staticmethod
    def _delete_segment(segment: LogSegment) -> None:
        segment.rename_to_deleted()
        segment.delete()

    # -----------------------------------------------------------------------------------------
    # Roll, append, flush

    def should_roll(self, append_size_bytes: int, last_offset: int, now_ms: int) -> bool:
        """Whether an append of ``append_size_bytes`` ending at ``last_offset`` needs a new
        segment (Kafka's rule, :meth:`LogSegment.should_roll`; on a compacted topic the age
        limit is also ``max.compaction.lag.ms``)."""
        config = self.config
        return self._segments[-1].should_roll(
            append_size_bytes=append_size_bytes,
            last_offset=last_offset,
            now_ms=now_ms,
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
            max_compaction_lag_ms=config.max_compaction_lag_ms if config.compact else None,
        )

    def roll(self, now_ms: int) -> LogSegment | None:
        """Start a new active segment at the log end; None if the active one is empty (it
        stays active). The finished segment gets its final time index entry and trimmed
        indexes; flushing it is the caller's choice."""
        active = self._segments[-1]
        if active.size_bytes == 0:
            return None
        active.on_become_inactive()
        segment = self._new_segment(self.log_end_offset, now_ms)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    def append(self, chunks: Sequence[Bytes], batches: Sequence[BatchPosition]) -> None:
        """Append batches (offsets assigned, at or past the log end) to the active segment,
        which drops behind and preallocates by the config in force (only the
        active segment is appended to)."""
        config = self.config
        self._segments[-1].append(
            chunks,
            batches,
            drop_behind_bytes=config.segment_drop_behind_bytes,
            reserve_to=config.segment_bytes if config.preallocate else 0,
        )
        self.log_end_offset = batches[-1].header.next_offset

    def flush_up_to(self, offset: int) -> None:
        """fsync every segment below ``offset`` from the recovery point on, and move it there."""
        if offset <= self.recovery_point:
            return
        for segment in self._segments[self.floor_index(self.recovery_point) :]:
            if segment.base_offset >= offset:
                break
            segment.flush()
        self.recovery_point = offset
        self.last_flush_ms = self._time_ms()

    # -----------------------------------------------------------------------------------------
    # Read

    def read_range(
        self,
        start_offset: int,
        max_bytes: int,
        bound: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool,
    ) -> tuple[FileRange | None, LogSegment | None, int]:
        """Whole batches from the one holding ``start_offset``: none that reaches ``bound``
        (the isolation bound: what lies past it must not be served) and none that starts at
        or after ``max_offset`` (a batch straddling ``max_offset`` is included; the decoding
        reader cuts its records there).

        Returns the range and its segment, or ``(None, None, next)`` where ``next`` is where
        a reader goes on: the lower of the two limits when no batch in between holds an
        offset at or past the start, else the base offset of the first such batch (it
        reaches ``bound``, or did not fit ``max_bytes``), never below the start.
        """
        stop = bound if max_offset is None else min(bound, max_offset)
        if start_offset >= stop:
            return None, None, start_offset
        floor = self.floor_index(start_offset)
        for i, segment in enumerate(self._segments[floor:], start=floor):
            if segment.base_offset >= stop:
                break
            found = segment.read(
                start_offset,
                max_bytes,
                max_position=self._end_position(segment, bound, max_offset),
                min_one_message=min_one_message,
            )
            if found is not None:
                return found, segment, start_offset
            first = segment.translate_offset(start_offset)
            if first is not None:
                # The first batch at or after the start reaches the bound (or did not fit
                # max_bytes): a reader can get no further until the bound moves.
                return None, None, min(stop, max(start_offset, first.header.base_offset))
            if i + 1 < len(self._segments):
                # Compaction can leave no batch at the end of a segment, and a read goes on
                # in the next one; a batch that cannot even be walked over must not send it
                # there silently, past every intact batch behind the damage.
                _check_walkable(segment, start_offset, self._bases[i + 1])
        return None, None, stop

    @staticmethod
    def _end_position(segment: LogSegment, bound: int, max_offset: int | None) -> int | None:
        """Position of the first batch of ``segment`` that reaches ``bound`` or starts at or
        after ``max_offset`` (None: the end of the segment)."""
        end = None
        if bound < segment.next_offset():
            boundary = segment.translate_offset(bound)
            end = None if boundary is None else boundary.position
        if max_offset is not None and max_offset < segment.next_offset():
            after = segment.translate_offset(max_offset)
            if after is not None and after.header.base_offset < max_offset:
                # It straddles max_offset: the next batch is the first one past it.
                after = segment.translate_offset(after.header.next_offset, after.position)
            if after is not None and (end is None or after.position < end):
                end = after.position
        return end

    # -----------------------------------------------------------------------------------------
    # Truncation and deletion

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding ``offset`` or later (a straddling batch goes too).

        The floor segment of the cut is truncated (possibly to empty: it then stays as the
        active segment) and every later one deleted; the log end and recovery point follow.
        """
        keep = self.floor_index(offset)
        for segment in self._segments[keep + 1 :]:
            self._delete_segment(segment)
        del self._segments[keep + 1 :]
        del self._bases[keep + 1 :]
        segment = self._segments[keep]
        segment.truncate_to(offset)
        # An older segment that becomes active again had its indexes trimmed when it rolled.
        segment.resize_indexes(self.config.segment_index_bytes)
        self.log_end_offset = segment.next_offset()
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment; the log restarts, empty, at ``offset``."""
        for segment in self._segments:
            self._delete_segment(segment)
        self._segments = [self._new_segment(offset, self._time_ms())]
        self._bases = [offset]
        self.log_end_offset = self.recovery_point = offset

    def delete_oldest(self, count: int) -> None:
        """Delete the ``count`` oldest segments, rolling first if that is all of them (a log
        always keeps an active segment, as Kafka's)."""
        if count >= len(self._segments):
            self.roll(self._time_ms())
        for segment in self._segments[:count]:
            self._delete_segment(segment)
        del self._segments[:count]
        del self._bases[:count]

    def replace_segments(
        self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
    ) -> bool:
        """Swap cleaned ``new_segments`` in for ``old_segments``; False if those changed.

        ``old_segments`` must still be consecutive inactive segments of this log (retention,
        truncation or another clean may have changed them since the cleaner read them). The
        renames of :func:`~spark_mq.storage.cleaner_swap.swap_in` commit the swap, the segment
        list changes in one step, and the old segments' files are deleted.
        """
        if not old_segments or not new_segments:
            return False
        first = next((i for i, s in enumerate(self._segments) if s is old_segments[0]), -1)
        last = first + len(old_segments)
        if (
            first < 0
            or last >= len(self._segments)  # the active segment is never replaced
            or any(
                a is not b for a, b in zip(self._segments[first:last], old_segments, strict=True)
            )
        ):
            return False
        swap_in(self.directory, new_segments, old_segments)
        self._segments[first:last] = new_segments
        self._bases[first:last] = [s.base_offset for s in new_segments]
        for segment in old_segments:
            segment.delete()  # already renamed to .deleted by swap_in
        return True

    def close(self) -> None:
        """Close every segment (writing final time index entries); flushing is the caller's."""
        for segment in self._segments:
            segment.close()
