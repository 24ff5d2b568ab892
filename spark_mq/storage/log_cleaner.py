"""Key-based log compaction: Kafka's log cleaner, one partition log per call.

A topic whose ``cleanup.policy`` contains ``compact`` keeps, per key, at least the newest
record. :class:`LogCleaner` cleans one :class:`~spark_mq.storage.log.PartitionLog` at a time
(the :class:`~spark_mq.storage.log_manager.LogManager` calls it for every compacted log and
keeps each log's first dirty offset in ``cleaner-offset-checkpoint``). The rules, exactly:

- **Sections.** ``[log start, first dirty)`` is the *clean* section, already deduplicated;
  ``[first dirty, first uncleanable)`` the *dirty* one. The first dirty offset is the log's
  checkpoint, reset to the log start when it lies outside ``[log start, log end]``. The first
  uncleanable offset is the smallest of the active segment's base offset (the active segment
  is never cleaned), the last stable offset (the high watermark when there are no open
  transactions), and, when ``min.compaction.lag.ms`` > 0, the base offset of the first
  segment holding dirty data whose largest timestamp is newer than ``now - min.compaction
  .lag.ms``.
- **When.** A log is cleaned when its dirty section is not empty and the dirty ratio (dirty
  bytes / (clean + dirty bytes), counted in whole batches) is at least
  ``min.cleanable.dirty.ratio``, or when it is *forced*: the oldest dirty segment's first
  batch (its maxTimestamp, as Kafka) is older than ``now - max.compaction.lag.ms``. So that
  data in the active segment meets that deadline too, a pass first rolls the active segment
  when its first batch is older than ``max.compaction.lag.ms``
  (:meth:`~spark_mq.storage.log.PartitionLog.roll_for_compaction_lag`; appends roll it by the
  same rule).
- **Offset map.** The newest offset of every key in the dirty section, built from whole Arrow
  columns (:class:`~spark_mq.storage.offset_map.OffsetMap`) within ``dedupe_buffer_bytes`` (Kafka's
  ``log.cleaner.dedupe.buffer.size``). If the dirty section does not fit, the map covers the
  prefix that does and only that prefix counts as cleaned: the map's end offset becomes the
  next first dirty offset (:attr:`CleanerStats.first_dirty_offset`). Control batches and
  aborted transactional data are not in the map.
- **Rewrite.** Every segment from the first one up to the map's end is rewritten, in groups
  of consecutive segments whose sizes add up to at most ``segment.bytes`` (and whose indexes
  and offset range fit one segment), one new segment per group. A record is kept iff its
  offset is at or past the map's end, or it has no key (left in place and reported: Kafka
  refuses such records on compacted topics at produce time), or its offset is at least the
  newest offset of its key in the map (absent keys count as -1) and it is not an expired
  tombstone.
- **Tombstones** (null values) expire by Kafka's classic rule, with segments' largest
  timestamps in place of file modification times: the *delete horizon* is the largest
  timestamp of the last segment whose base offset is below the first dirty offset, minus
  ``delete.retention.ms``; a tombstone goes when the segment it is read from has a largest
  timestamp at or below the horizon (and, like any record, when its key has a newer record).
  With no such segment (a first clean) no tombstone expires. When timestamps grow with
  offsets, a tombstone thus survives the pass that first cleans it and goes once the clean
  section holds data ``delete.retention.ms`` newer than its segment; merging its segment
  with newer ones delays that, as in Kafka.
- **Batches** keep their offsets, order, base offset, lastOffsetDelta, producer id, epoch,
  base sequence, attributes, leader epoch and codec. A batch whose records are all kept is
  copied byte for byte; one that keeps some is re-encoded with the survivors; one that keeps
  none is dropped, unless it is its producer's last batch, which stays empty; a group that
  keeps nothing becomes an empty segment (as in Kafka, so the segment bases, and the log
  start, stay). Offsets, the log start and the log end never change; the offsets of removed
  records become gaps, which every reader skips.
- **Transactions** (:mod:`~spark_mq.storage.cleaner_transactions`, the default rules):
  aborted data is removed and never enters the map; committed transactional data is
  compacted like any other; a marker stays while its transaction keeps a batch and until its
  segment passes the delete horizon; each producer's last batch stays, empty if need be, so
  that producer state rebuilt from the log still knows its last sequence and epoch; a cleaned
  segment's ``.txnindex`` keeps the entries whose transaction still has a batch. The pass
  never reaches an open transaction: the first uncleanable offset is at most the LSO. Other
  rules can be given as a ``filter_factory`` (:mod:`~spark_mq.storage.cleaner_filter`).

Crash safety is by renames (``*.cleaned`` -> ``*.swap`` -> final names), one group at a
time; :mod:`~spark_mq.storage.cleaner_swap` tells each crash point and what loading does.
Whatever the crash, the log loads as the cleaned log below some segment boundary and the
uncleaned log above it: valid, with the same newest record per key, and the next clean (from
the unchanged checkpoint) finishes the job.

Threads: a :class:`LogCleaner` cleans on the caller's thread, one pass per log at a time
(a second pass on a log being cleaned returns None). It reads the inactive segments without
the log's lock (appends only touch the active segment) and takes the lock only to swap a
group in; if retention, truncation or a close changed those segments meanwhile, the swap is
refused and the pass abandoned.

    >>> import tempfile, pyarrow as pa
    >>> from spark_mq.storage.log import PartitionLog
    >>> from spark_mq.storage.log_config import LogConfig
    >>> from spark_mq.storage.record_batch import encode_batch
    >>> config = LogConfig.from_properties({"cleanup.policy": "compact", "segment.bytes": 1000})
    >>> log = PartitionLog.open(tempfile.mkdtemp(), config, topic="t", partition=0)
    >>> for value in (b"v1", b"v2", b"v3"):
    ...     _ = log.append(encode_batch(pa.array([value]), key=pa.array([b"k"])))
    >>> stats = LogCleaner().clean(log, first_dirty_offset=0)
    >>> stats.records_removed, stats.first_dirty_offset  # v3 is in the active segment
    (1, 2)
    >>> [log.read_records(offset).column("value").to_pylist() for offset in (0, 2)]
    [[b'v2'], [b'v3']]
    >>> log.close()
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from spark_mq.errors import ConfigError, LogClosedError, StorageError
from spark_mq.storage.arrow_arrays import from_numpy, to_numpy
from spark_mq.storage.batch_decoder import decode_body, validate_batch
from spark_mq.storage.cleaner_filter import BatchRetention, CleanerFilter, RecordsToDecide
from spark_mq.storage.cleaner_swap import (
    RewriteCounters,
    RewriteRules,
    clean_group,
    discard_cleaned_segment,
    group_segments,
    read_runs,
)
from spark_mq.storage.cleaner_transactions import TransactionalCleanerFilter
from spark_mq.storage.offset_map import MAP_ENTRY_OVERHEAD_BYTES, OffsetMap
from spark_mq.storage.segment import LogSegment

if TYPE_CHECKING:
    from spark_mq.storage.log import PartitionLog

__all__ = [
    "MAP_ENTRY_OVERHEAD_BYTES",
    "BatchRetention",
    "CleanableSection",
    "CleanerFilter",
    "CleanerStats",
    "LogCleaner",
    "OffsetMap",
    "RecordsToDecide",
    "TransactionalCleanerFilter",
    "cleanable_section",
    "dirty_ratio",
    "first_uncleanable_offset",
]

logger = logging.getLogger(__name__)

MIB: Final = 1024 * 1024
#: Kafka's log.cleaner.dedupe.buffer.size default.
DEFAULT_DEDUPE_BUFFER_BYTES: Final = 128 * MIB
#: Bytes of whole batches read and decided together. Kafka's 512 KiB suits a per-record loop;
#: vectorised decisions need larger runs to amortise their fixed cost per run.
DEFAULT_IO_BUFFER_BYTES: Final = 4 * MIB

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Logs being cleaned, by directory (Kafka's in-progress set): two passes on one log would
# write the same *.cleaned files.
_in_progress: set[str] = set()
_in_progress_lock = threading.Lock()


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------------------------------------
# Results and sections


@dataclasses.dataclass(frozen=True, slots=True)
class CleanerStats:
    """What one cleaning pass did (or, from :meth:`total`, several)."""

    bytes_read: int  # batches read while rewriting (the input of the clean)
    map_bytes_read: int  # batches read while building the offset map
    bytes_written: int
    records_read: int
    records_kept: int
    tombstones_removed: int  # superseded or expired
    null_key_records: int  # records without a key, left in place
    segments_before: int  # segments rewritten
    segments_after: int  # segments that replaced them
    map_keys: int
    map_seconds: float  # building the offset map
    elapsed_seconds: float  # the whole pass
    #: Where the next clean starts: the end of the section this pass cleaned (-1 in a total).
    first_dirty_offset: int
    aborted_records_removed: int = 0  # records of aborted transactions (whole batches)
    markers_removed: int = 0  # transaction markers whose transaction kept nothing
    empty_batches_kept: int = 0  # producers' last batches kept without their records

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept

    @property
    def mb_per_second(self) -> float:
        """Input bytes read per second of cleaning, MB = 10^6 bytes."""
        return self.bytes_read / 1e6 / self.elapsed_seconds if self.elapsed_seconds else 0.0

    def summary(self) -> str:
        """The stats in one readable line, for the log."""
        removed = [
            f"{self.tombstones_removed} tombstones",
            f"{self.aborted_records_removed} of aborted transactions",
            f"{self.markers_removed} transaction markers",
        ]
        return (
            f"{self.segments_before} segments rewritten into {self.segments_after}; "
            f"{self.records_read} records read, {self.records_kept} kept, "
            f"{self.records_removed} removed (of which {', '.join(removed)}); "
            f"{self.bytes_read} bytes read, {self.bytes_written} written; "
            f"{self.map_keys} keys mapped in {self.map_seconds:.3f} s; "
            f"{self.elapsed_seconds:.3f} s in all ({self.mb_per_second:.1f} MB/s)"
        )

    @staticmethod
    def total(stats: Sequence[CleanerStats]) -> CleanerStats:
        fields = [f.name for f in dataclasses.fields(CleanerStats)]
        sums = {name: sum(getattr(s, name) for s in stats) for name in fields}
        sums["first_dirty_offset"] = -1
        return CleanerStats(**sums)


@dataclasses.dataclass(frozen=True, slots=True)
class CleanableSection:
    """The dirty section of a log and what decides whether to clean it now."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    #: The oldest first-batch timestamp of the dirty segments (-1 if none), for max lag.
    earliest_dirty_timestamp_ms: int
    #: The oldest dirty data is past max.compaction.lag.ms: clean whatever the ratio.
    forced: bool

    @property
    def dirty_ratio(self) -> float:
        return dirty_ratio(self.clean_bytes, self.dirty_bytes)


def dirty_ratio(clean_bytes: int, dirty_bytes: int) -> float:
    """Kafka's cleanable ratio: dirty bytes over the bytes of both sections (0 when empty)."""
    total = clean_bytes + dirty_bytes
    return dirty_bytes / total if total else 0.0


def _bytes_before(segments: Sequence[LogSegment], offset: int) -> int:
    """Bytes of whole batches below ``offset`` (a batch holding it counts as above)."""
    total = 0
    for i, segment in enumerate(segments):
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if upper is not None and upper <= offset:
            total += segment.size_bytes
            continue
        found = segment.translate_offset(offset)
        total += segment.size_bytes if found is None else found.position
        break
    return total


def first_uncleanable_offset(
    log: PartitionLog,
    first_dirty: int,
    now_ms: int,
    segments: Sequence[LogSegment] | None = None,
) -> int:
    """Where cleaning must stop (module docstring); at least ``first_dirty``.

    ``segments`` is a snapshot of ``log.segments`` when the caller already has one.
    """
    if segments is None:
        segments = log.segments
    # Never past the last stable offset: the data of an open transaction may still be aborted,
    # so it can neither shadow older records nor be removed yet (the LSO is at most the high
    # watermark).
    upper = min(log.last_stable_offset, segments[-1].base_offset)
    lag_ms = log.config.min_compaction_lag_ms
    if lag_ms > 0:
        for i, segment in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= first_dirty:
                continue  # wholly clean
            if segment.largest_timestamp_ms > now_ms - lag_ms:
                upper = min(upper, segment.base_offset)
                break
    return max(upper, first_dirty)


def cleanable_section(
    log: PartitionLog, *, first_dirty_offset: int, now_ms: int
) -> CleanableSection:
    """The clean and dirty sections of ``log`` given its checkpointed first dirty offset."""
    segments = log.segments
    start, end = log.log_start_offset, log.log_end_offset
    first_dirty = first_dirty_offset
    if not start <= first_dirty <= end:
        # As Kafka: a checkpoint below the log start (retention moved it) or past the log end
        # (a truncation) means the whole log is treated as dirty.
        if first_dirty > end or not log.config.delete:
            logger.warning(
                "%s: cleaner checkpoint %d is outside the log [%d, %d]; cleaning from the start",
                log.directory,
                first_dirty,
                start,
                end,
            )
        first_dirty = start
    uncleanable = first_uncleanable_offset(log, first_dirty, now_ms, segments)
    before_dirty = _bytes_before(segments, first_dirty)
    dirty_bytes = _bytes_before(segments, uncleanable) - before_dirty
    earliest = -1
    for i, segment in enumerate(segments[:-1]):
        if segments[i + 1].base_offset <= first_dirty or segment.base_offset >= uncleanable:
            continue
        first = segment.translate_offset(max(first_dirty, segment.base_offset))
        stamp = -1 if first is None else first.header.max_timestamp
        if stamp > 0 and (earliest < 0 or stamp < earliest):
            earliest = stamp
    lag_ms = log.config.max_compaction_lag_ms
    forced = dirty_bytes > 0 and 0 <= earliest < now_ms - lag_ms
    return CleanableSection(first_dirty, uncleanable, before_dirty, dirty_bytes, earliest, forced)


# ---------------------------------------------------------------------------------------------
# The cleaner


class LogCleaner:
    """Cleans compacted partition logs (rules and crash story in the module docstring).

    ``dedupe_buffer_bytes`` bounds the offset map (Kafka's ``log.cleaner.dedupe.buffer
    .size``, default 128 MiB); ``io_buffer_bytes`` is how many bytes of batches are read and
    decided at once (memory per run is a few times this). ``time_ms`` is the clock
    (injected by tests). ``filter_factory`` makes the retention rules of each pass, after
    the pass has found its section: by default the transaction-aware rules of
    :class:`~spark_mq.storage.cleaner_transactions.TransactionalCleanerFilter`;
    ``lambda log: CleanerFilter()`` gives the rules without transactions.
    """

    def __init__(
        self,
        *,
        time_ms: Callable[[], int] = wall_clock_ms,
        dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
        io_buffer_bytes: int = DEFAULT_IO_BUFFER_BYTES,
        filter_factory: Callable[[PartitionLog], CleanerFilter] | None = None,
    ) -> None:
        for key, value in (
            ("log.cleaner.dedupe.buffer.size", dedupe_buffer_bytes),
            ("log.cleaner.io.buffer.size", io_buffer_bytes),
        ):
            if type(value) is not int or value < 1024:
                raise ConfigError(
                    f"{key} must be an int of at least 1024 bytes, got {value!r}",
                    key=key,
                    value=value,
                )
        self._time_ms = time_ms
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.io_buffer_bytes = io_buffer_bytes
        self._filter_factory = filter_factory or TransactionalCleanerFilter.for_log

    def clean(
        self,
        log: PartitionLog,
        *,
        first_dirty_offset: int,
        now_ms: int | None = None,
        force: bool = False,
    ) -> CleanerStats | None:
        """Clean ``log`` if it qualifies; None if it does not (or the pass was abandoned).

        ``first_dirty_offset`` is the log's checkpoint (its log start if it has none);
        ``force`` ignores ``min.cleanable.dirty.ratio``. The returned stats' first dirty
        offset is the next checkpoint. Raises CorruptRecordError if a segment to rewrite
        holds an invalid batch, and StorageError (LogDirectoryFullError for a full disk) if
        the file system fails; what was not swapped in yet is left as it was. At most one
        pass runs per log at a time: a second one returns None.
        """
        config = log.config
        if not config.compact:
            return None
        now = self._time_ms() if now_ms is None else now_ms
        # The cleaner forces what appends alone would not: an idle log's active segment rolls
        # once its data is max.compaction.lag.ms old, so that the deadline holds for it too.
        try:
            log.roll_for_compaction_lag(now)
        except LogClosedError:
            return None
        section = cleanable_section(log, first_dirty_offset=first_dirty_offset, now_ms=now)
        if section.dirty_bytes == 0:
            return None
        ratio = section.dirty_ratio
        if not (force or section.forced or ratio >= config.min_cleanable_dirty_ratio):
            return None
        directory = str(log.directory)
        with _in_progress_lock:
            if directory in _in_progress:
                logger.info("%s is already being cleaned", directory)
                return None
            _in_progress.add(directory)
        try:
            return self._clean(log, section, now)
        except LogClosedError as exc:
            logger.info("cleaning of %s abandoned: %s", directory, exc)
            return None
        except OSError as exc:
            raise StorageError(f"cleaning {directory} failed: {exc}") from exc
        finally:
            with _in_progress_lock:
                _in_progress.discard(directory)

    def _clean(
        self, log: PartitionLog, section: CleanableSection, now_ms: int
    ) -> CleanerStats | None:
        started = time.perf_counter()
        config = log.config
        segments = log.segments
        cleaner_filter = self._filter_factory(log)
        offset_map = OffsetMap(self.dedupe_buffer_bytes)
        map_end, map_bytes_read = self._build_offset_map(
            segments, section, offset_map, cleaner_filter
        )
        offset_map.freeze()
        map_seconds = time.perf_counter() - started
        # Kafka's classic delete horizon, from the last segment of the clean section.
        clean_segments = [s for s in segments if s.base_offset < section.first_dirty_offset]
        horizon = None
        if clean_segments:
            horizon = clean_segments[-1].largest_timestamp_ms - config.delete_retention_ms
        rules = RewriteRules(cleaner_filter, offset_map, map_end, horizon)
        counters = RewriteCounters()
        to_clean = [s for s in segments[:-1] if s.base_offset < map_end]
        groups = group_segments(to_clean, segments[len(to_clean)].base_offset, config)
        for group in groups:
            new = clean_group(
                group,
                config=config,
                rules=rules,
                counters=counters,
                io_buffer_bytes=self.io_buffer_bytes,
                now_ms=now_ms,
            )
            if new is None:
                continue
            try:
                if counters.last_removed_marker_offset >= 0:
                    # A producer state snapshot taken while a transaction whose marker this
                    # group drops was open would leave it open forever in a later recovery
                    # that starts there; such snapshots go first (snapshots only save replay).
                    log.delete_producer_snapshots_through(counters.last_removed_marker_offset)
                swapped = log.replace_segments([new], group)
            except BaseException:
                discard_cleaned_segment(new)
                raise
            if not swapped:
                discard_cleaned_segment(new)
                logger.info("cleaning of %s abandoned: its segments changed", log.directory)
                return None
        if counters.null_key_records:
            logger.warning(
                "%s: %d records without a key were left in place; a compacted topic should "
                "refuse them at produce time",
                log.directory,
                counters.null_key_records,
            )
        stats = CleanerStats(
            bytes_read=counters.bytes_read,
            map_bytes_read=map_bytes_read,
            bytes_written=counters.bytes_written,
            records_read=counters.records_read,
            records_kept=counters.records_kept,
            tombstones_removed=counters.tombstones_removed,
            null_key_records=counters.null_key_records,
            aborted_records_removed=counters.aborted_records_removed,
            markers_removed=counters.markers_removed,
            empty_batches_kept=counters.empty_batches_kept,
            segments_before=len(to_clean),
            segments_after=len(groups),
            map_keys=len(offset_map),
            map_seconds=map_seconds,
            elapsed_seconds=time.perf_counter() - started,
            first_dirty_offset=map_end,
        )
        logger.info(
            "cleaned %s-%d up to offset %d: %s",
            log.topic,
            log.partition,
            map_end,
            stats.summary(),
        )
        return stats

    def _build_offset_map(
        self,
        segments: Sequence[LogSegment],
        section: CleanableSection,
        offset_map: OffsetMap,
        cleaner_filter: CleanerFilter,
    ) -> tuple[int, int]:
        """Fill the map from the dirty section; return where it ends and the bytes read."""
        first_dirty, end = section.first_dirty_offset, section.first_uncleanable_offset
        bytes_read = 0
        for i, segment in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= first_dirty:
                continue
            if segment.base_offset >= end:
                break
            first = segment.translate_offset(first_dirty)
            if first is None:
                continue
            for data, batches, file_position in read_runs(
                segment, first.position, self.io_buffer_bytes
            ):
                bytes_read += len(data)
                keys: list[pa.Array] = []
                offsets: list[Int64Array] = []
                for header, pos in batches:
                    if header.base_offset >= end:
                        break
                    validate_batch(
                        data, pos, path=str(segment.log_path), file_position=file_position
                    )
                    if (
                        header.last_offset < first_dirty
                        or header.record_count == 0
                        or not cleaner_filter.include_in_map(header)
                    ):
                        continue
                    body = decode_body(data, pos, header)
                    batch_offsets = to_numpy(body.column(0)).astype(np.int64) + header.base_offset
                    batch_keys = body.column(2)
                    wanted = (batch_offsets >= first_dirty) & (batch_offsets < end)
                    wanted &= to_numpy(batch_keys.is_valid())
                    if not wanted.all():
                        batch_keys = batch_keys.filter(from_numpy(wanted))
                        batch_offsets = batch_offsets[wanted]
                    keys.append(batch_keys)
                    offsets.append(batch_offsets)
                if keys:
                    run_keys, run_offsets = pa.concat_arrays(keys), np.concatenate(offsets)
                    taken = offset_map.add(run_keys, run_offsets)
                    if taken < len(run_keys):
                        return int(run_offsets[taken]), bytes_read
                    if offset_map.full:
                        return int(run_offsets[-1]) + 1, bytes_read
                if batches and batches[-1][0].base_offset >= end:
                    return end, bytes_read
        return end, bytes_read
