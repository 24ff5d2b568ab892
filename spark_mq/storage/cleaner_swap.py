"""Cleaned segments: rewriting a group of segments by the retention rules, and swapping
the result in, safely across crashes.

The log cleaner (:mod:`spark_mq.storage.log_cleaner`) decides *what* to clean: the sections,
the offset map, the groups. This module does the rest for one group of consecutive inactive
segments, named by its first base offset ``B``.

Rewriting (:func:`clean_group`) reads the group in runs of whole batches, checks every
batch's CRC, and asks a :class:`~spark_mq.storage.cleaner_filter.CleanerFilter` what to keep
(the protocol is in :mod:`~spark_mq.storage.cleaner_filter`): per batch first
(:class:`BatchRetention`), then per record, vectorised over the run. A batch that keeps every
record is copied byte for byte; one that keeps some is re-encoded with the survivors and its
header fields (base offset, lastOffsetDelta, producer id, epoch, base sequence, attributes,
leader epoch, codec); one that keeps none is dropped, or kept empty (header fields and both
timestamps kept, no records: :func:`~spark_mq.storage.record_batch.encode_empty_batch`) when
the filter says a producer needs it. Batches at or past the end of the offset map are copied.
A single-segment group in which no batch changes is not rewritten at all. The new segment's
``.txnindex`` holds the old segments' entries that the filter keeps.

Swapping: the new segment's files go through three names, as in Kafka; only renames move them
from one to the next, and each rename is atomic:

1. ``B.log.cleaned``, ``B.index.cleaned``, ``B.timeindex.cleaned`` (and ``B.txnindex.cleaned``
   when the group has aborted transactions): written, then fsynced. A crash here leaves
   ``*.cleaned`` files, which mean *not committed*: loading deletes them and the old segments
   stay as they were. The files are created through a transient directory ``B.cleaned/``
   (:func:`create_cleaned_segment`), which loading deletes the same way.
2. ``*.swap``: :func:`swap_in` renames ``B.log.cleaned`` to ``B.log.swap`` first: **that
   rename is the commit point**. The index files follow, then the directory is fsynced.
   From here on a crash is finished forward: loading finds ``B.log.swap``, deletes every old
   segment file whose base offset lies in ``[B, next offset of the swap)`` (the old segment
   ``B`` included, whatever its size), deletes leftover ``*.cleaned`` index files (indexes are
   caches, rebuilt when missing), and renames every ``B.*.swap`` to its final name.
3. The old segments are renamed to ``*.deleted`` one by one (a crash leaves them for loading,
   which deletes ``*.deleted`` files first of all), then the new segment's files get their
   final names, index files first and ``B.log`` last, so ``B.log.swap`` exists until the
   swap is complete. The directory is fsynced, the log starts serving the new segment, and
   the ``*.deleted`` files are removed.

What loading leaves, wherever the crash: before the commit, the old log; after it, the new
segment in place of every old segment that starts below its next offset. Old segments of the
group that start at or past that offset held only records the clean removed (the new segment
ends with the last record kept); they survive such a crash with their old content, as in
Kafka. Either way the log is the cleaned log below some segment boundary and the uncleaned
log above it: valid, with the same newest record per key. The next clean removes the rest.

Threads: :func:`swap_in` is called by
:meth:`~spark_mq.storage.log.PartitionLog.replace_segments` under the log's lock, so no
append, roll, retention or truncation interleaves with the renames. Everything else runs on
the cleaner's thread, reading inactive segments (appends only touch the active one) and
writing files no one else knows about.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from spark_mq.errors import CorruptRecordError, StorageError
from spark_mq.storage.arrow_arrays import from_numpy, to_numpy
from spark_mq.storage.batch_decoder import decode_body, validate_batch
from spark_mq.storage.checkpoint_file import fsync_directory
from spark_mq.storage.cleaner_filter import BatchRetention, CleanerFilter, RecordsToDecide
from spark_mq.storage.codecs import codec_for_id
from spark_mq.storage.file_records import FileRecords
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import (
    HEADER_SIZE,
    BatchHeader,
    TimestampType,
    encode_batch,
    encode_empty_batch,
)
from spark_mq.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    BatchPosition,
    LogSegment,
    segment_file_name,
)

CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
#: The files of one segment. A ``.swap`` recovery deletes old files with these suffixes only
#: (never producer state snapshots, which are also named by offset).
SEGMENT_FILE_SUFFIXES: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Run = list[tuple[BatchHeader, int]]  # (header, position in the run's bytes) of each batch


class LatestOffsets(Protocol):
    """The offset map, as the rewrite sees it (:class:`~spark_mq.storage.log_cleaner.OffsetMap`)."""

    def latest_offsets(self, keys: pa.Array) -> Int64Array: ...


@dataclasses.dataclass(frozen=True, slots=True)
class RewriteRules:
    """Everything one pass decides by: the filter, the map and where it ends, the horizon."""

    filter: CleanerFilter
    offset_map: LatestOffsets
    #: Records at or past this offset are not cleaned by this pass.
    map_end_offset: int
    #: Tombstones (and markers that govern nothing) in segments whose largest timestamp is
    #: at or below this go; None: none go.
    delete_horizon_ms: int | None


@dataclasses.dataclass(slots=True)
class RewriteCounters:
    """What the rewrites of one pass did, summed over its groups."""

    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    null_key_records: int = 0
    aborted_records_removed: int = 0  # records of batches removed whole (aborted data)
    markers_removed: int = 0
    empty_batches_kept: int = 0  # batches kept without records for their producer's sake
    #: Offset of the last transaction marker removed so far (-1: none).
    last_removed_marker_offset: int = -1


# ---------------------------------------------------------------------------------------------
# Grouping, reading, rewriting


def group_segments(
    segments: Sequence[LogSegment], next_base_offset: int, config: LogConfig
) -> list[list[LogSegment]]:
    """Consecutive segments merged while their sizes fit one segment (Kafka's grouping).

    A group's ``.log`` sizes add up to at most ``segment.bytes``, each index's entries to at
    most ``segment.index.bytes``, and its offsets (up to the next segment's base offset) fit
    the indexes' 32-bit relative offsets. ``next_base_offset`` is the base offset of the
    segment after the last one given.
    """
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_bytes = segments[i].size_bytes
        index_bytes = segments[i].offset_index.entries * segments[i].offset_index.ENTRY_SIZE
        time_bytes = segments[i].time_index.entries * segments[i].time_index.ENTRY_SIZE
        i += 1
        while i < len(segments):
            candidate = segments[i]
            upper = segments[i + 1].base_offset if i + 1 < len(segments) else next_base_offset
            more_index = candidate.offset_index.entries * candidate.offset_index.ENTRY_SIZE
            more_time = candidate.time_index.entries * candidate.time_index.ENTRY_SIZE
            if (
                log_bytes + candidate.size_bytes > config.segment_bytes
                or index_bytes + more_index > config.segment_index_bytes
                or time_bytes + more_time > config.segment_index_bytes
                or upper - 1 - group[0].base_offset > MAX_RELATIVE_OFFSET
            ):
                break
            group.append(candidate)
            log_bytes += candidate.size_bytes
            index_bytes += more_index
            time_bytes += more_time
            i += 1
        groups.append(group)
    return groups


def read_runs(
    segment: LogSegment, start_position: int, io_buffer_bytes: int
) -> Iterator[tuple[bytes, Run, int]]:
    """``(bytes, [(header, position in bytes)], file position)`` for runs of whole batches.

    Each run is one ``pread`` of at most ``io_buffer_bytes`` (a larger batch is read alone),
    and together the runs cover the file from ``start_position`` to its end: bytes that are
    not whole batches raise CorruptRecordError rather than being silently left out of a
    rewrite. CRCs are checked by the caller.
    """
    records = segment.records
    size = records.size_bytes
    pos = start_position
    while pos < size:
        buf = records.read(pos, min(io_buffer_bytes, size - pos))
        batches: Run = []
        rel = 0
        while len(buf) - rel >= HEADER_SIZE:
            header = BatchHeader.unpack_from(buf, rel)
            if header.size < HEADER_SIZE or rel + header.size > len(buf):
                break
            batches.append((header, rel))
            rel += header.size
        if not batches:
            # One batch larger than the buffer (read alone), or bytes that are no batch at all.
            big = BatchHeader.unpack_from(buf) if len(buf) >= HEADER_SIZE else None
            if big is None or big.size < HEADER_SIZE or pos + big.size > size:
                raise CorruptRecordError(
                    f"bytes at position {pos} of {records.path} are not a whole record batch",
                    path=str(records.path),
                    position=pos,
                )
            buf = records.read(pos, big.size)
            batches, rel = [(big, 0)], big.size
        yield buf, batches, pos
        pos += rel


def clean_group(
    group: Sequence[LogSegment],
    *,
    config: LogConfig,
    rules: RewriteRules,
    counters: RewriteCounters,
    io_buffer_bytes: int,
    now_ms: int,
) -> LogSegment | None:
    """Rewrite ``group`` into a flushed ``*.cleaned`` segment; None if nothing would change.

    Every batch of the group is shown to the filter, in offset order, even when the group
    turns out unchanged: the filter's view of transactions spans the whole pass.
    """
    new = create_cleaned_segment(group[0].directory, group[0].base_offset, config, now_ms)
    try:
        changed = len(group) > 1
        for segment in group:
            horizon = rules.delete_horizon_ms
            retain_deletes = horizon is None or segment.largest_timestamp_ms > horizon
            for data, batches, file_position in read_runs(segment, 0, io_buffer_bytes):
                counters.bytes_read += len(data)
                pieces, positions, run_changed = _clean_run(
                    data,
                    batches,
                    path=str(segment.log_path),
                    file_position=file_position,
                    retain_deletes=retain_deletes,
                    rules=rules,
                    counters=counters,
                )
                changed |= run_changed
                if pieces:
                    size = sum(len(p) for p in pieces)
                    new.append(pieces, positions)
                    counters.bytes_written += size
        if changed:
            entries = [txn for old in group for txn in old.txn_index.all_aborted_txns()]
            retained = rules.filter.retained_txn_index(entries, map_end_offset=rules.map_end_offset)
            for txn in retained:
                new.txn_index.append(txn)
            new.on_become_inactive()
            mtime_ns = max(os.stat(s.log_path).st_mtime_ns for s in group)
            os.utime(new.log_path, ns=(mtime_ns, mtime_ns))  # as Kafka: keep the data's age
            new.flush()
    except BaseException:
        discard_cleaned_segment(new)
        raise
    if not changed:
        discard_cleaned_segment(new)  # never flushed: an unchanged group costs no fsync
        return None
    return new


def _clean_run(
    data: bytes,
    batches: Run,
    *,
    path: str,
    file_position: int,
    retain_deletes: bool,
    rules: RewriteRules,
    counters: RewriteCounters,
) -> tuple[list[bytes | memoryview], list[BatchPosition], bool]:
    """Apply the rules to one run of batches; return the output pieces and positions.

    Data batches are checked first and their records decided together; then, in offset
    order, each batch is written (or not) and its fate reported to the filter, and a control
    batch is checked only when its turn comes, after every batch before it was decided.
    """
    view = memoryview(data)
    cleaner_filter = rules.filter
    map_end = rules.map_end_offset
    decisions: list[BatchRetention | None] = []  # None: a marker, checked in its turn
    bodies: dict[int, pa.RecordBatch] = {}
    for i, (header, pos) in enumerate(batches):
        validate_batch(data, pos, path=path, file_position=file_position)
        counters.records_read += header.record_count
        retention: BatchRetention | None
        if header.base_offset >= map_end:
            retention = BatchRetention.COPY  # not cleaned by this pass
        elif header.is_control:
            retention = None
        else:
            retention = cleaner_filter.check_batch(header, retain_deletes=retain_deletes)
        decisions.append(retention)
        needs_records = retention in (BatchRetention.DELETE_EMPTY, BatchRetention.RETAIN_EMPTY)
        if needs_records and header.record_count:
            bodies[i] = decode_body(data, pos, header)
    keep_all = _decide(batches, bodies, retain_deletes, rules, counters)
    pieces: list[bytes | memoryview] = []
    positions: list[BatchPosition] = []
    out_size = 0
    changed = False
    for i, (header, pos) in enumerate(batches):
        retention = decisions[i]
        if retention is None:
            retention = cleaner_filter.check_batch(header, retain_deletes=retain_deletes)
        original = view[pos : pos + header.size]
        piece = _output(original, header, retention, bodies.get(i), keep_all.get(i))
        cleaner_filter.batch_retained(header, piece is not None)
        if retention in (BatchRetention.DELETE, BatchRetention.EMPTY):
            if header.is_control:
                counters.markers_removed += 1
                counters.last_removed_marker_offset = header.base_offset
            else:
                counters.aborted_records_removed += header.record_count
        if piece is None:
            changed = True
            continue
        out_header = header
        if piece is not original:  # re-encoded with fewer records, or emptied
            changed = True
            out_header = BatchHeader.unpack_from(piece)
            if out_header.record_count == 0:
                counters.empty_batches_kept += 1
        counters.records_kept += out_header.record_count
        positions.append(BatchPosition(out_header, out_size))
        pieces.append(piece)
        out_size += out_header.size
    return pieces, positions, changed


def _output(
    original: memoryview,
    header: BatchHeader,
    retention: BatchRetention,
    body: pa.RecordBatch | None,
    keep: BoolArray | None,
) -> bytes | memoryview | None:
    """What is written for one batch: its bytes as they are, a rewrite, or None (removed)."""
    if retention is BatchRetention.COPY:
        return original
    if retention is BatchRetention.DELETE:
        return None
    if retention is BatchRetention.EMPTY:
        assert not header.is_control, "a marker cannot be emptied"
        return original if header.record_count == 0 else encode_empty_batch(header)
    # DELETE_EMPTY or RETAIN_EMPTY: as the record rule decides.
    retain_empty = retention is BatchRetention.RETAIN_EMPTY
    if body is None or keep is None:
        # No records to decide (an empty batch): it stays only if it must.
        return original if retain_empty else None
    if keep.all():
        return original
    if keep.any():
        return _rewrite(body, header, keep)
    return encode_empty_batch(header) if retain_empty else None


def _decide(
    batches: Run,
    bodies: dict[int, pa.RecordBatch],
    retain_deletes: bool,
    rules: RewriteRules,
    counters: RewriteCounters,
) -> dict[int, BoolArray]:
    """Run the record rule over every decoded batch of a run at once; masks per batch."""
    if not bodies:
        return {}
    order = sorted(bodies)
    offsets = np.concatenate(
        [to_numpy(bodies[i].column(0)).astype(np.int64) + batches[i][0].base_offset for i in order]
    )
    keys = pa.concat_arrays([bodies[i].column(2) for i in order])
    values = pa.concat_arrays([bodies[i].column(3) for i in order])
    has_key = to_numpy(keys.is_valid())
    tombstone = to_numpy(values.is_null())
    records = RecordsToDecide(offsets, rules.offset_map.latest_offsets(keys), has_key, tombstone)
    keep = rules.filter.retain_records(
        records, map_end_offset=rules.map_end_offset, retain_deletes=retain_deletes
    )
    counters.null_key_records += int((~has_key & (offsets < rules.map_end_offset)).sum())
    counters.tombstones_removed += int((tombstone & ~keep).sum())
    masks: dict[int, BoolArray] = {}
    start = 0
    for i in order:
        n = bodies[i].num_rows
        masks[i] = keep[start : start + n]
        start += n
    return masks


def _rewrite(body: pa.RecordBatch, header: BatchHeader, keep: BoolArray) -> bytes:
    """The batch with only the ``keep`` records (possibly none), its header fields preserved."""
    kept = body.filter(from_numpy(keep))
    stamps = kept.column(1)
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        # Readers see maxTimestamp (the append time) for every record of such a batch; writing
        # it into the column keeps that value as the rewritten batch's maxTimestamp.
        stamps = from_numpy(np.full(kept.num_rows, header.max_timestamp, np.int64))
    return encode_batch(
        kept.column(3),
        key=kept.column(2),
        timestamp=stamps,
        headers=kept.column(4),
        offset_delta=kept.column(0),
        codec=codec_for_id(header.codec_id),
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        timestamp_type=header.timestamp_type,
        last_offset_delta=header.last_offset_delta,
        # A rewritten batch keeps its body's layout: a small varint batch stays small.
        body_encoding="varint" if header.is_varint else "arrow",
    )


# ---------------------------------------------------------------------------------------------
# Files and the swap


class _SegmentFile(Protocol):
    """What every file object of a segment offers: its path, and an atomic rename."""

    @property
    def path(self) -> Path: ...

    def rename(self, new_path: str | os.PathLike[str]) -> None: ...


def segment_files(segment: LogSegment) -> tuple[_SegmentFile, ...]:
    """The file objects of ``segment``, the ``.log`` file first."""
    return (segment.records, segment.offset_index, segment.time_index, segment.txn_index)


def create_cleaned_segment(
    directory: Path, base_offset: int, config: LogConfig, now_ms: int
) -> LogSegment:
    """A new, empty segment whose files are named ``<base>.<suffix>.cleaned`` in ``directory``.

    :class:`LogSegment` names its files after its base offset, and the old segment with the
    same base offset still owns those names, so the segment is created in a transient
    directory ``<base>.cleaned/`` and its open files are moved out under their ``.cleaned``
    names before anything is written (the objects follow their files). Loading deletes that
    directory and every ``*.cleaned`` file if a crash leaves them.
    """
    staging = directory / segment_file_name(base_offset, CLEANED_SUFFIX)
    discard_cleaned_files(directory, base_offset)
    staging.mkdir()
    segment = LogSegment(
        staging,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size_bytes=config.segment_index_bytes,
        created_ms=now_ms,
    )
    try:
        for item in segment_files(segment):
            item.rename(directory / (item.path.name + CLEANED_SUFFIX))
        leftovers = sorted(os.listdir(staging))
        if leftovers:
            # A new kind of segment file that segment_files() does not know: it would be
            # left behind by every swap. Fail loudly rather than lose it.
            raise StorageError(
                f"segment {base_offset} created files {leftovers} that the cleaner does not "
                "know how to swap; add them to cleaner_swap.segment_files()"
            )
        staging.rmdir()
    except BaseException:
        segment.delete()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    segment.directory = directory
    return segment


def discard_cleaned_files(directory: Path, base_offset: int) -> None:
    """Remove what an abandoned cleaning of the group at ``base_offset`` left behind."""
    shutil.rmtree(directory / segment_file_name(base_offset, CLEANED_SUFFIX), ignore_errors=True)
    for suffix in SEGMENT_FILE_SUFFIXES:
        (directory / segment_file_name(base_offset, suffix + CLEANED_SUFFIX)).unlink(
            missing_ok=True
        )


def discard_cleaned_segment(segment: LogSegment) -> None:
    """Delete a cleaned segment that was never committed; one that was is left to recovery.

    After the commit point (``.log.swap``) the files belong to the log: if the swap failed
    half way, the next load finishes it, so nothing may be deleted here. Either way the
    segment's descriptors are closed.
    """
    if segment.records.path.name.endswith(CLEANED_SUFFIX):
        segment.delete()
    else:
        segment.close()


def _change_suffix(segment: LogSegment, old: str, new: str, *, log_first: bool) -> None:
    items = segment_files(segment)
    for item in items if log_first else reversed(items):
        name = item.path.name
        assert name.endswith(old), f"{item.path} should end in {old!r}"
        item.rename(item.path.with_name(name[: len(name) - len(old)] + new))


def swap_in(
    directory: Path, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]
) -> None:
    """Commit cleaned segments and retire the old ones, by renames (module docstring).

    ``new_segments`` have flushed ``*.cleaned`` files. Afterwards the new files have their
    final names and the old segments' files are ``*.deleted``, still open; the caller
    (holding the log's lock) puts the new segments in the log and deletes the old ones.
    """
    for segment in new_segments:
        _change_suffix(segment, CLEANED_SUFFIX, SWAP_SUFFIX, log_first=True)
    # The commit must be durable before the first old file disappears.
    fsync_directory(directory)
    for segment in old_segments:
        segment.rename_to_deleted()
    for segment in new_segments:
        _change_suffix(segment, SWAP_SUFFIX, "", log_first=False)
    fsync_directory(directory)


def swapped_segment_end(path: Path) -> int:
    """Next offset of the segment in the ``.log.swap`` file ``path`` (its base if empty).

    The swap was fsynced before it was committed, so its batch headers are trusted here,
    as for any segment below the recovery point.
    """
    base_name = path.name.split(".", 1)[0]
    end = int(base_name)
    records = FileRecords(path, writable=False)
    try:
        for header, _ in records.headers():
            end = header.next_offset
    finally:
        records.close()
    return end
