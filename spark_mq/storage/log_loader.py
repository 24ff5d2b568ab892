"""Loading a partition directory, with crash recovery.

What a crash can leave in a partition directory, and what loading does about it:

- **A torn or corrupt tail** in the segments written after the last flush (the recovery
  point): after an unclean shutdown every segment from the one holding the recovery point is
  re-read, every batch validated (size, magic, CRC, Arrow body framing is checked lazily by
  readers, offsets increasing), and the log is cut at the first invalid byte. Segments after a
  cut are deleted: nothing after a hole is served. They are deleted *before* the cut is made,
  so a crash during recovery leaves the same cut for the next recovery to find, never a hole.
  Recovered segments are fsynced, and the recovery point moves to the new log end.
- **Missing or insane indexes** (a crash while they were being written or resized): an index
  that is absent or fails ``sanity_check`` is deleted and rebuilt from its ``.log`` file, in any
  segment, clean shutdown or not. Indexes are never trusted over the log. A rebuild does not
  cut the log by itself: invalid bytes it finds are cut by recovery as above, or, after a clean
  shutdown, at the end of the last segment; below the recovery point they stay, and the
  decoding reader refuses them.
- **Files marked ``.deleted``**: a segment deletion that had renamed its files but not yet
  removed them; loading finishes the deletion.
- **Stray index files with no ``.log``**: removed.
- **Files of an interrupted compaction** (:mod:`~spark_mq.storage.cleaner_swap`): ``*.cleaned``
  files (and a ``<base>.cleaned/`` directory) were never committed and are deleted, leaving
  the old segments as they were. A ``<base>.log.swap`` file is a committed clean: every old
  segment file whose base offset lies in ``[base, next offset of the swap)`` is deleted and
  the ``*.swap`` files of that base get their final names; missing indexes are then rebuilt
  like any others.

After a clean shutdown (the log directory's marker, managed by the LogManager) only the index
sanity checks run, so opening a large log is fast.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

from spark_mq.errors import CorruptIndexError
from spark_mq.storage.checkpoint_file import fsync_directory
from spark_mq.storage.cleaner_swap import (
    CLEANED_SUFFIX,
    SEGMENT_FILE_SUFFIXES,
    SWAP_SUFFIX,
    swapped_segment_end,
)
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_base_offset,
    segment_file_name,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LoadedLog:
    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    recovered_bytes_truncated: int
    #: Transaction indexes of segments from this offset on were emptied (recovered segments,
    #: or a failed sanity check): the log rebuilds them while replaying producer state. The
    #: log end offset when there is nothing to rebuild.
    txn_rebuild_from: int
    #: The first offset crash recovery re-read (the base of the segment holding the recovery
    #: point), the log end offset when it read nothing: the leader epoch cache learns the
    #: epochs of the batches from there (:mod:`~spark_mq.storage.leader_epoch_cache`).
    recovered_from: int


def _new_segment(directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size_bytes=config.segment_index_bytes,
        rolling_jitter_ms=0,
        created_ms=now_ms,
    )


def _remove_index_files(directory: Path, base_offset: int) -> None:
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (directory / segment_file_name(base_offset, suffix)).unlink(missing_ok=True)


def _open_segment(
    directory: Path, base_offset: int, config: LogConfig, now_ms: int
) -> tuple[LogSegment, int]:
    """Open an existing segment; rebuild its indexes if they are missing or fail the check.

    Returns the segment and the number of invalid bytes the rebuild found at the end of its
    ``.log`` file (0 when the indexes were fine). Those bytes are left in place: only
    :func:`_cut` removes them, after the segments that follow.
    """
    indexes_present = all(
        (directory / segment_file_name(base_offset, suffix)).exists()
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
    )
    segment: LogSegment | None = None
    try:
        if not indexes_present:
            raise CorruptIndexError(
                "index file missing",
                path=str(directory / segment_file_name(base_offset, INDEX_SUFFIX)),
            )
        segment = _new_segment(directory, base_offset, config, now_ms)
        segment.sanity_check()
        return segment, 0
    except CorruptIndexError as exc:
        log.warning("rebuilding indexes of segment %d in %s: %s", base_offset, directory, exc)
        if segment is not None:
            # Not segment.close(): that appends a final entry to the time index that has just
            # failed its check (and fails itself if that index is full or misaligned).
            segment.offset_index.delete()
            segment.time_index.delete()
            segment.txn_index.close()
            segment.records.close()
        _remove_index_files(directory, base_offset)
        segment = _new_segment(directory, base_offset, config, now_ms)
        invalid_bytes = segment.recover(max_message_bytes=config.max_message_bytes, truncate=False)
        return segment, invalid_bytes


def _cut(segments: list[LogSegment], i: int, invalid_bytes: int) -> int:
    """Cut the log inside ``segments[i]``, dropping its last ``invalid_bytes``; returns the
    bytes removed in all.

    The later segments go first (newest first, and the directory is fsynced), the invalid
    tail last: a crash part way through leaves segment ``i`` still invalid, so the next
    recovery finds the same cut and finishes it. Cutting first would let a crash leave a hole
    between segment ``i`` and a later segment that survived.
    """
    removed = 0
    for later in reversed(segments[i + 1 :]):
        log.warning("deleting segment %s after a corrupt tail", later.log_path)
        removed += later.size_bytes
        later.delete()
    del segments[i + 1 :]
    segment = segments[i]
    fsync_directory(segment.directory)
    segment.records.truncate_to(segment.size_bytes - invalid_bytes)
    segment.flush()
    return removed + invalid_bytes


def _clean_directory(directory: Path) -> list[int]:
    """Finish interrupted deletions, drop orphan files; return the base offsets of segments."""
    bases: set[int] = set()
    orphans: list[Path] = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
            Path(entry.path).unlink(missing_ok=True)
            continue
        if name.endswith(CLEANED_SUFFIX):  # a compaction that never committed
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                Path(entry.path).unlink(missing_ok=True)
            continue
        if name.endswith(SWAP_SUFFIX):  # a committed compaction: _complete_swaps finishes it
            continue
        base = parse_base_offset(name)
        if base is None:
            continue
        if name.endswith(LOG_SUFFIX):
            bases.add(base)
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)):
            orphans.append(Path(entry.path))
    for path in orphans:
        base = parse_base_offset(path.name)
        if base not in bases:
            path.unlink(missing_ok=True)
    return sorted(bases)


def _complete_swaps(directory: Path, bases: list[int]) -> list[int]:
    """Finish compactions that committed (``<base>.log.swap``) before a crash.

    Called right after :func:`_clean_directory`, which already removed ``*.deleted`` and
    ``*.cleaned`` files; returns the segment base offsets afterwards. The crash story is in
    :mod:`~spark_mq.storage.cleaner_swap`.
    """
    swaps = sorted(directory.glob("*" + SWAP_SUFFIX))
    if not swaps:
        return bases
    committed: set[int | None] = set()
    for path in swaps:
        base = parse_base_offset(path.name)
        if base is None or not path.name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            continue
        committed.add(base)
        # The old segment with this base is replaced whatever its size, hence the + 1.
        end = max(swapped_segment_end(path), base + 1)
        log.warning("finishing the compaction swap of %s (offsets %d to %d)", path, base, end)
        for entry in os.scandir(directory):
            old = parse_base_offset(entry.name)
            if old is not None and base <= old < end and entry.name.endswith(SEGMENT_FILE_SUFFIXES):
                Path(entry.path).unlink()
    fsync_directory(directory)
    for path in swaps:
        if parse_base_offset(path.name) in committed:
            path.rename(path.with_name(path.name[: -len(SWAP_SUFFIX)]))
        else:
            # An index .swap without its .log.swap cannot come from swap_in (it renames the
            # .log last); indexes are caches, so a stray one is dropped and rebuilt.
            path.unlink()
    fsync_directory(directory)
    return _clean_directory(directory)


def load_log(
    directory: Path,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int | None,
    had_clean_shutdown: bool,
    now_ms: int,
) -> LoadedLog:
    """Open every segment of ``directory`` and recover what needs recovering (module doc)."""
    directory.mkdir(parents=True, exist_ok=True)
    bases = _complete_swaps(directory, _clean_directory(directory))
    opened = [_open_segment(directory, base, config, now_ms) for base in bases]
    segments = [segment for segment, _ in opened]
    truncated_total = 0
    txn_rebuild_from: int | None = None
    recovered_from: int | None = None
    for segment in segments:
        try:
            segment.txn_index.sanity_check()
        except CorruptIndexError as exc:
            log.warning(
                "rebuilding transaction indexes from segment %d: %s", segment.base_offset, exc
            )
            txn_rebuild_from = segment.base_offset
            break

    if not had_clean_shutdown and segments:
        # Recover from the segment holding the recovery point (or the first one after it).
        first = 0
        for i, segment in enumerate(segments):
            if segment.base_offset <= recovery_point:
                first = i
        # Not ``txn_rebuild_from or ...``: a failed check of the index at offset 0 is 0.
        if txn_rebuild_from is None or segments[first].base_offset < txn_rebuild_from:
            txn_rebuild_from = segments[first].base_offset
        recovered_from = segments[first].base_offset
        unflushed = segments[first:]
        unflushed_bytes = sum(segment.size_bytes for segment in unflushed)
        # A partition that held nothing unflushed has nothing to tell; one that did says what
        # recovery reads, since that is what makes a start after a crash slow.
        log.log(
            logging.INFO if unflushed_bytes else logging.DEBUG,
            "recovering %s after an unclean shutdown: validating %d segment%s (%d bytes) from "
            "offset %d, the segment holding the recovery point %d",
            directory.name,
            len(unflushed),
            "" if len(unflushed) == 1 else "s",
            unflushed_bytes,
            segments[first].base_offset,
            recovery_point,
        )
        for i in range(first, len(segments)):
            segment = segments[i]
            invalid_bytes = segment.recover(
                max_message_bytes=config.max_message_bytes, truncate=False
            )
            if invalid_bytes:
                truncated_total += _cut(segments, i, invalid_bytes)
                break
            segment.flush()
    elif segments and opened[-1][1]:
        # A clean shutdown, yet rebuilding the last segment's indexes found a bad tail: cut
        # it, or appends would land after it.
        truncated_total += _cut(segments, len(segments) - 1, opened[-1][1])
    # Cuts only ever drop a suffix, so these are the segments kept before the last one.
    for segment, invalid_bytes in opened[: len(segments) - 1]:
        if invalid_bytes:
            # Below the recovery point nothing is cut (that would delete every later
            # segment); the decoding reader refuses these bytes when it reaches them.
            log.warning(
                "segment %s has %d invalid bytes at its end, below the recovery point",
                segment.log_path,
                invalid_bytes,
            )

    if not segments:
        base = max(log_start_offset or 0, 0)
        segments = [_new_segment(directory, base, config, now_ms)]

    if txn_rebuild_from is not None:
        for segment in segments:
            if segment.base_offset >= txn_rebuild_from:
                segment.txn_index.reset()
    # The active segment's indexes were trimmed at close; give them room for new entries.
    segments[-1].resize_indexes(config.segment_index_bytes)
    log_end_offset = segments[-1].next_offset()
    start = (
        segments[0].base_offset
        if log_start_offset is None
        else max(log_start_offset, segments[0].base_offset)
    )
    start = min(start, log_end_offset)
    # After a clean shutdown everything was flushed; after recovery everything left was
    # validated and fsynced above. Either way the whole log is now durable.
    return LoadedLog(
        segments=segments,
        log_start_offset=start,
        log_end_offset=log_end_offset,
        recovery_point=log_end_offset,
        recovered_bytes_truncated=truncated_total,
        txn_rebuild_from=log_end_offset
        if txn_rebuild_from is None
        else min(txn_rebuild_from, log_end_offset),
        recovered_from=log_end_offset
        if recovered_from is None
        else min(recovered_from, log_end_offset),
    )
