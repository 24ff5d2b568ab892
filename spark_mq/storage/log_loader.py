"""Loading a partition directory, with crash recovery.

What a crash can leave in a partition directory, and what loading does about it:

- **A torn or corrupt tail** in the segments written after the last flush (the recovery
  point): after an unclean shutdown every segment from the one holding the recovery point is
  re-read, every batch validated (size, magic, CRC, Arrow body framing is checked lazily by
  readers, offsets increasing), and the log is cut at the first invalid byte. Segments after a
  cut are deleted: nothing after a hole is served. Recovered segments are fsynced, and the
  recovery point moves to the new log end.
- **Missing or insane indexes** (a crash while they were being written or resized): an index
  that is absent or fails ``sanity_check`` is deleted and rebuilt from its ``.log`` file, in any
  segment, clean shutdown or not. Indexes are never trusted over the log.
- **Files marked ``.deleted``**: a segment deletion that had renamed its files but not yet
  removed them; loading finishes the deletion.
- **Stray index files with no ``.log``**: removed.

After a clean shutdown (the log directory's marker, managed by the LogManager) only the index
sanity checks run, so opening a large log is fast.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from spark_mq.errors import CorruptIndexError
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
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


def _open_segment(directory: Path, base_offset: int, config: LogConfig, now_ms: int) -> LogSegment:
    """Open an existing segment; rebuild its indexes if they are missing or fail the check."""
    indexes_present = all(
        (directory / segment_file_name(base_offset, suffix)).exists()
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
    )
    segment: LogSegment | None = None
    try:
        if not indexes_present:
            raise CorruptIndexError(
                "index file missing", path=str(directory / segment_file_name(base_offset, INDEX_SUFFIX))
            )
        segment = _new_segment(directory, base_offset, config, now_ms)
        segment.sanity_check()
        return segment
    except CorruptIndexError as exc:
        log.warning("rebuilding indexes of segment %d in %s: %s", base_offset, directory, exc)
        if segment is not None:
            segment.close()
        _remove_index_files(directory, base_offset)
        segment = _new_segment(directory, base_offset, config, now_ms)
        segment.recover(max_message_bytes=config.max_message_bytes)
        return segment


def _clean_directory(directory: Path) -> list[int]:
    """Finish interrupted deletions, drop orphan files; return the base offsets of segments."""
    bases: set[int] = set()
    orphans: list[Path] = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(DELETED_SUFFIX) or name.endswith(".tmp"):
            Path(entry.path).unlink(missing_ok=True)
            continue
        base = parse_base_offset(name)
        if base is None:
            continue
        if name.endswith(LOG_SUFFIX):
            bases.add(base)
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            orphans.append(Path(entry.path))
    for path in orphans:
        base = parse_base_offset(path.name)
        if base not in bases:
            path.unlink(missing_ok=True)
    return sorted(bases)


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
    bases = _clean_directory(directory)
    segments = [_open_segment(directory, base, config, now_ms) for base in bases]
    truncated_total = 0

    if not had_clean_shutdown and segments:
        # Recover from the segment holding the recovery point (or the first one after it).
        first = 0
        for i, segment in enumerate(segments):
            if segment.base_offset <= recovery_point:
                first = i
        i = first
        while i < len(segments):
            segment = segments[i]
            truncated = segment.recover(max_message_bytes=config.max_message_bytes)
            truncated_total += truncated
            segment.flush()
            if truncated:
                for later in segments[i + 1 :]:
                    log.warning("deleting segment %s after a corrupt tail", later.log_path)
                    truncated_total += later.size_bytes
                    later.delete()
                del segments[i + 1 :]
                break
            i += 1

    if not segments:
        base = max(log_start_offset or 0, 0)
        segments = [_new_segment(directory, base, config, now_ms)]

    log_end_offset = segments[-1].next_offset()
    start = segments[0].base_offset if log_start_offset is None else max(log_start_offset, segments[0].base_offset)
    start = min(start, log_end_offset)
    # After a clean shutdown everything was flushed; after recovery everything left was
    # validated and fsynced above. Either way the whole log is now durable.
    return LoadedLog(
        segments=segments,
        log_start_offset=start,
        log_end_offset=log_end_offset,
        recovery_point=log_end_offset,
        recovered_bytes_truncated=truncated_total,
    )
