"""Verifying a log directory offline: every batch's header, CRC and body, per segment.

What ``spark-mq log verify`` runs (Kafka users know it as ``kafka-dump-log --deep-iteration``
on every segment). For each partition directory, each ``<base offset>.log`` file is read from
its first byte to its last and every batch is checked as the consumer checks it: the header
(size, magic byte, attributes, record count), the CRC-32C, and the body decoded in full
(:func:`~spark_mq.storage.batch_decoder.validate_batch_body`), plus what the log itself relies
on: offsets that only grow, from the segment's base offset on. Bytes that do not form a batch
are reported with their byte position and, when the header can still be read, the batch's base
offset; then the scan looks for the next intact batch (the one the bad batch's length field
points at, else the next position where a batch with a matching CRC starts), so one damaged
batch does not hide the state of the rest of the segment, and the report says at which offset
intact data resumes: where a consumer may ``seek`` to skip the damage.

With ``verify_index`` the offset and time indexes are checked against the batches too: the
file's own sanity check, every offset index entry pointing at the start of the batch with that
base offset, and every time index entry naming a batch's last offset with the largest
timestamp up to it.

Read-only by construction: files are opened with ``O_RDONLY`` and read with ``pread``; no lock
is taken, nothing is written, renamed or recovered, and no broker is started, so a read-only
directory (a mounted snapshot, a backup) can be inspected, and so can the directory of a
running broker. With a broker running, the end of its active segment may be an append in
progress (a torn tail that is not one: run again), and a segment deleted by retention or
replaced by the cleaner meanwhile is reported as it was when opened. Index files are mapped
read-only; verify the indexes of a stopped broker's directory (or a copy), since a running
broker resizes the active segment's indexes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from spark_mq.errors import CorruptIndexError, CorruptRecordError, StorageError
from spark_mq.storage.batch_decoder import validate_batch, validate_batch_body
from spark_mq.storage.offset_index import OffsetIndex
from spark_mq.storage.record_batch import HEADER_SIZE, KNOWN_CODEC_IDS, MAGIC, BatchHeader
from spark_mq.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    parse_base_offset,
)
from spark_mq.storage.time_index import TimeIndex
from spark_mq.storage.topic_names import parse_partition_dir_name

__all__ = [
    "BadBatch",
    "PartitionReport",
    "SegmentReport",
    "verify_log_dir",
    "verify_partition",
    "verify_segment",
]

#: Bytes read per ``pread`` while scanning (batches larger than this are read whole).
READ_CHUNK_BYTES: Final = 8 * 1024 * 1024
#: The position of the magic byte in a batch header (after baseOffset, batchLength, epoch).
_MAGIC_AT: Final = 16
_MAGIC_BYTE: Final = bytes([MAGIC])


@dataclasses.dataclass(frozen=True, slots=True)
class BadBatch:
    """Bytes of a ``.log`` file that do not form a valid batch."""

    position: int  # byte position in the .log file where the bad bytes start
    offset: int | None  # the base offset the header claims (None: no header left to read)
    reason: str
    #: Where intact batches start again: the byte position and that batch's base offset
    #: (None: no intact batch follows in this segment).
    resume_position: int | None
    resume_offset: int | None


@dataclasses.dataclass(slots=True)
class SegmentReport:
    """What verifying one ``.log`` file found."""

    path: Path
    base_offset: int
    size_bytes: int
    batches: int = 0  # intact batches
    records: int = 0  # records in intact batches (control records included)
    first_offset: int | None = None
    last_offset: int | None = None
    bad_batches: list[BadBatch] = dataclasses.field(default_factory=list)
    #: Only with ``verify_index``: what is wrong with the offset and time indexes.
    index_problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.bad_batches and not self.index_problems


@dataclasses.dataclass(slots=True)
class PartitionReport:
    """What verifying one partition directory found."""

    topic: str
    partition: int
    directory: Path
    segments: list[SegmentReport] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(segment.ok for segment in self.segments)


# ---------------------------------------------------------------------------------------------
# Reading a file without ever writing it


class _ReadOnlyFile:
    """A file opened ``O_RDONLY`` and read by position through one buffered window."""

    def __init__(self, path: Path) -> None:
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise StorageError(f"cannot open {path} for reading: {exc.strerror or exc}") from exc
        self.path = path
        self.size = os.fstat(self._fd).st_size
        self._buf = b""
        self._buf_start = 0

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer only at the end of the file)."""
        chunks = []
        while size > 0:
            chunk = os.pread(self._fd, size, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def window(self, position: int, size: int) -> tuple[bytes, int]:
        """A buffer holding ``[position, position + size)`` (or up to the end of the file)
        and where ``position`` is in it; reads ahead so small batches share one ``pread``."""
        rel = position - self._buf_start
        if rel < 0 or rel + size > len(self._buf):
            self._buf = self.read(position, max(size, READ_CHUNK_BYTES))
            self._buf_start = position
            rel = 0
        return self._buf, rel

    def close(self) -> None:
        os.close(self._fd)


# ---------------------------------------------------------------------------------------------
# One segment


class _Batch:
    """An intact batch, as the index checks need it."""

    __slots__ = ("base_offset", "last_offset", "max_timestamp_so_far")

    def __init__(self, base_offset: int, last_offset: int, max_timestamp_so_far: int) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.max_timestamp_so_far = max_timestamp_so_far


def verify_segment(
    path: Path, *, min_offset: int | None = None, verify_index: bool = False
) -> SegmentReport:
    """Check every batch of the ``.log`` file ``path`` (module docstring).

    ``min_offset`` is the lowest base offset the first batch may have (the end of the
    previous segment; by default the base offset in the file name).
    """
    base = parse_base_offset(path.name)
    if base is None:
        raise StorageError(f"{path} is not a segment file (<20-digit base offset>.log)")
    expected = base if min_offset is None else max(base, min_offset)
    file = _ReadOnlyFile(path)
    report = SegmentReport(path=path, base_offset=base, size_bytes=file.size)
    batches: dict[int, _Batch] = {}
    max_timestamp = -1
    try:
        pos = 0
        while pos < file.size:
            header, reason = _check_batch(file, pos, expected, base)
            if reason is None:
                assert header is not None
                report.batches += 1
                report.records += header.record_count
                if report.first_offset is None:
                    report.first_offset = header.base_offset
                report.last_offset = header.last_offset
                max_timestamp = max(max_timestamp, header.max_timestamp)
                batches[pos] = _Batch(header.base_offset, header.last_offset, max_timestamp)
                expected = header.next_offset
                pos += header.size
                continue
            resume = _resume_position(file, pos, header, expected)
            resume_offset = None
            if resume is not None:
                resume_offset = BatchHeader.unpack_from(file.read(resume, HEADER_SIZE)).base_offset
            report.bad_batches.append(
                BadBatch(
                    position=pos,
                    offset=None if header is None else header.base_offset,
                    reason=reason,
                    resume_position=resume,
                    resume_offset=resume_offset,
                )
            )
            if resume is None:
                break
            pos = resume
    finally:
        file.close()
    if verify_index:
        report.index_problems = _check_indexes(path, base, batches, report.bad_batches)
    return report


def _check_batch(
    file: _ReadOnlyFile, pos: int, expected_min_offset: int, segment_base: int
) -> tuple[BatchHeader | None, str | None]:
    """The header of the batch at ``pos`` (None when not even that is there) and what is
    wrong with the batch (None: nothing)."""
    available = file.size - pos
    if available < HEADER_SIZE:
        return None, (
            f"torn tail: the last {available} bytes are too few for a batch header "
            f"({HEADER_SIZE} bytes); a crash during an append leaves this"
        )
    buf, rel = file.window(pos, HEADER_SIZE)
    header = BatchHeader.unpack_from(buf, rel)
    size = min(max(header.size, HEADER_SIZE), available)
    buf, rel = file.window(pos, size)
    try:
        header = validate_batch(buf, rel, path=str(file.path), file_position=pos - rel)
        validate_batch_body(buf, rel, header)
    except CorruptRecordError as exc:
        reason = str(exc)
        if header.size > available and header.magic == MAGIC:
            reason += (
                " (a torn tail if this is the end of the newest segment, else a damaged length)"
            )
        return header, reason
    if header.base_offset < expected_min_offset:
        return header, (
            f"batch offsets {header.base_offset}..{header.last_offset} go backwards: expected "
            f"{expected_min_offset} or later"
        )
    if header.last_offset - segment_base > MAX_RELATIVE_OFFSET:
        return header, (
            f"batch last offset {header.last_offset} is too far past the segment's base offset "
            f"{segment_base} to be indexed"
        )
    return header, None


def _plausible_header(header: BatchHeader, space: int, min_offset: int) -> bool:
    """Cheap checks before a CRC: could a batch start here?"""
    return (
        header.magic == MAGIC
        and HEADER_SIZE <= header.size <= space
        and header.base_offset >= min_offset
        and header.last_offset_delta >= -1
        and 0 <= header.record_count <= header.last_offset_delta + 1
        and header.codec_id in KNOWN_CODEC_IDS
    )


def _intact_at(file: _ReadOnlyFile, pos: int, min_offset: int) -> bool:
    if file.size - pos < HEADER_SIZE:
        return False
    header = BatchHeader.unpack_from(file.read(pos, HEADER_SIZE))
    if not _plausible_header(header, file.size - pos, min_offset):
        return False
    try:
        validate_batch(file.read(pos, header.size))
    except CorruptRecordError:
        return False
    return True


def _resume_position(
    file: _ReadOnlyFile, pos: int, header: BatchHeader | None, min_offset: int
) -> int | None:
    """Where the next intact batch after the bad one at ``pos`` starts, or None.

    First where the bad batch's length field points (a batch damaged inside keeps its
    length), then every later position whose magic byte is right, checked cheaply first and
    by CRC last: a damaged length must not hide the intact batches after it.
    """
    if header is not None and header.magic == MAGIC and header.size >= HEADER_SIZE:
        following = pos + header.size
        if following < file.size and _intact_at(file, following, min_offset):
            return following
    for candidate in _magic_positions(file, pos + 1):
        if _intact_at(file, candidate, min_offset):
            return candidate
    return None


def _magic_positions(file: _ReadOnlyFile, start: int) -> Iterator[int]:
    """Every position from ``start`` whose byte at the magic byte's place is the magic byte."""
    chunk_start = start + _MAGIC_AT
    while chunk_start < file.size:
        chunk = file.read(chunk_start, READ_CHUNK_BYTES)
        if not chunk:
            return
        at = chunk.find(_MAGIC_BYTE)
        while at >= 0:
            yield chunk_start + at - _MAGIC_AT
            at = chunk.find(_MAGIC_BYTE, at + 1)
        chunk_start += len(chunk)


# ---------------------------------------------------------------------------------------------
# Indexes


def _check_indexes(
    log_path: Path, base: int, batches: dict[int, _Batch], bad_batches: list[BadBatch]
) -> list[str]:
    """What is wrong with the segment's offset and time indexes. Entries about bad batches
    are the batches' fault, not the indexes', and are not reported: an offset index entry may
    point at a bad batch whose header claims its offset, and time index entries past the
    first bad batch cannot be checked (its timestamps are unknown)."""
    problems: list[str] = []
    by_last_offset = {b.last_offset: b for b in batches.values()}
    bad_at = {bad.position: bad.offset for bad in bad_batches}
    unknown_from = min(
        (bad.offset if bad.offset is not None else base for bad in bad_batches), default=None
    )
    stem = log_path.name[: -len(LOG_SUFFIX)]
    offset_path = log_path.with_name(stem + INDEX_SUFFIX)
    time_path = log_path.with_name(stem + TIME_INDEX_SUFFIX)
    try:
        with OffsetIndex(offset_path, base, writable=False) as index:
            index.sanity_check()
            for n in range(index.entries):
                offset, position = index.entry(n)
                batch = batches.get(position)
                if bad_at.get(position) == offset:
                    continue
                if batch is None or batch.base_offset != offset:
                    problems.append(
                        f"{offset_path.name} entry {n} maps offset {offset} to position "
                        f"{position}, where no intact batch with that base offset starts"
                    )
    except FileNotFoundError:
        problems.append(f"{offset_path.name} is missing (a broker rebuilds it when it starts)")
    except CorruptIndexError as exc:
        problems.append(str(exc))
    try:
        with TimeIndex(time_path, base, writable=False) as index:
            index.sanity_check()
            for n in range(index.entries):
                timestamp, offset = index.entry(n)
                if unknown_from is not None and offset >= unknown_from:
                    break
                found = by_last_offset.get(offset)
                if found is None or found.max_timestamp_so_far != timestamp:
                    problems.append(
                        f"{time_path.name} entry {n} says the largest timestamp up to offset "
                        f"{offset} is {timestamp}, which the batches do not bear out"
                    )
    except FileNotFoundError:
        problems.append(f"{time_path.name} is missing (a broker rebuilds it when it starts)")
    except CorruptIndexError as exc:
        problems.append(str(exc))
    return problems


# ---------------------------------------------------------------------------------------------
# Partitions and directories


def _segment_files(directory: Path) -> list[Path]:
    files = [
        p
        for p in directory.iterdir()
        if p.name.endswith(LOG_SUFFIX) and parse_base_offset(p.name) is not None and p.is_file()
    ]
    return sorted(files, key=lambda p: parse_base_offset(p.name) or 0)


def verify_partition(
    directory: Path, *, verify_index: bool = False, topic: str | None = None
) -> PartitionReport:
    """Check every segment of one partition directory, oldest first; each segment's first
    batch must also start at or after the previous segment's end."""
    parsed = parse_partition_dir_name(directory.name)
    name, number = parsed if parsed is not None else (topic or directory.name, -1)
    report = PartitionReport(topic=name, partition=number, directory=directory)
    min_offset: int | None = None
    for path in _segment_files(directory):
        segment = verify_segment(path, min_offset=min_offset, verify_index=verify_index)
        report.segments.append(segment)
        if segment.last_offset is not None:
            min_offset = segment.last_offset + 1
    return report


def verify_log_dir(
    root: Path,
    *,
    topic: str | None = None,
    partition: int | None = None,
    verify_index: bool = False,
) -> list[PartitionReport]:
    """Check the partitions of the log directory ``root`` (all, one topic's, or one).

    ``root`` may also be one partition directory (``<topic>-<partition>``). Raises
    :class:`StorageError` when ``root`` is not a directory or nothing matches.
    """
    root = Path(root)
    if not root.is_dir():
        raise StorageError(f"{root} is not a directory")
    parsed = parse_partition_dir_name(root.name)
    if parsed is not None and _segment_files(root):
        candidates = [(parsed, root)]
    else:
        candidates = []
        for child in root.iterdir():
            found = parse_partition_dir_name(child.name)
            if found is not None and child.is_dir():
                candidates.append((found, child))
    selected = sorted(
        (key, path)
        for key, path in candidates
        if (topic is None or key[0] == topic) and (partition is None or key[1] == partition)
    )
    if not selected:
        if topic is None:
            what = "no partition directories (<topic>-<partition>/ with <base offset>.log files)"
        elif partition is None:
            what = f"no partition directory of topic {topic!r}"
        else:
            what = f"no directory {topic}-{partition}"
        raise StorageError(f"{root} holds {what}")
    return [verify_partition(path, verify_index=verify_index) for _, path in selected]
