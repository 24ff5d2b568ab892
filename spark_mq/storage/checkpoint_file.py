"""Offset checkpoint files and the atomic file replacement they are written with.

A log directory keeps per-partition offsets in small text files, in Kafka's format, so that
opening the directory does not have to scan every log (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``)::

    0                 <- version, always 0
    2                 <- number of entries that follow
    events 0 1042     <- topic, partition, offset: one line per entry, single spaces
    events 1 977

Every line, the last one included, ends with ``\\n``; the file is ASCII (topic names are). The
file is not checksummed: it is small and written atomically, and a reader validates the
version, the count and every line, and raises :class:`~spark_mq.errors.CorruptCheckpointError`
naming the file and the line otherwise. A missing file reads as empty.

Atomic replacement (:func:`atomic_write_bytes`) and what a crash at each step leaves:

1. write ``<file>.tmp`` (created or truncated), flush and fsync it: a crash leaves the old
   ``<file>`` intact and maybe a torn ``.tmp``, which readers never look at and the next write
   truncates;
2. rename ``<file>.tmp`` over ``<file>``: atomic, so a reader sees the old or the new file;
3. fsync the directory: until then a power failure may bring back the old file (never a torn
   one), because the rename is not yet durable.

So after any crash, ``<file>`` is complete: the old version or the new one. Callers decide
which old value is acceptable (a stale recovery point only means more recovery work).

Thread safety: an :class:`OffsetCheckpointFile` has no lock. Two concurrent writers of the same
file would share the ``.tmp`` file, so callers serialise writes (the log manager does so under
its lock). Reads may run concurrently with a write and see the old or the new file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from spark_mq.errors import CorruptCheckpointError, InvalidTopicError, UsageError
from spark_mq.storage.topic_names import MAX_PARTITION_NUMBER, validate_topic_name

CHECKPOINT_VERSION: Final = 0
TMP_SUFFIX: Final = ".tmp"
#: Offsets are Kafka's int64; a checkpointed offset is never negative.
MAX_OFFSET: Final = 2**63 - 1

_NUMBER: Final = re.compile(r"0|[1-9][0-9]{0,18}")


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make the creation, rename or removal of entries in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    tmp_path: str | os.PathLike[str] | None = None,
    mode: int | None = None,
) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    Writes ``tmp_path`` (default ``<path>.tmp``, in the same directory so the rename stays on
    one filesystem), fsyncs it, renames it over ``path`` and fsyncs the directory. ``mode``
    (e.g. 0o600 for secrets) is set on the temporary file before anything is written to it,
    even when a crash left one behind, so the content is never readable more widely.
    """
    target = Path(path)
    tmp = Path(tmp_path) if tmp_path is not None else target.with_name(target.name + TMP_SUFFIX)
    assert tmp.parent == target.parent, "the rename must stay in one directory to be atomic"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode or 0o644)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    fsync_directory(target.parent)


def _format(mapping: Mapping[tuple[str, int], int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(mapping))]
    for (topic, partition), offset in sorted(mapping.items()):
        # Validate before writing, so that nothing is written that read() would refuse.
        validate_topic_name(topic)
        for what, value, limit in (
            ("partition", partition, MAX_PARTITION_NUMBER),
            ("offset", offset, MAX_OFFSET),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise UsageError(
                    f"checkpoint entry for {topic!r} partition {partition!r}: the {what} must be "
                    f"an int from 0 to {limit}, got {value!r}"
                )
        lines.append(f"{topic} {partition} {offset}")
    return ("\n".join(lines) + "\n").encode("ascii")


class OffsetCheckpointFile:
    """One checkpoint file of ``(topic, partition) -> offset``, in Kafka's text format.

    >>> import tempfile, pathlib
    >>> f = OffsetCheckpointFile(pathlib.Path(tempfile.mkdtemp()) / "ckpt")
    >>> f.write({("events", 0): 42})
    >>> f.read()
    {('events', 0): 42}
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({str(self.path)!r})"

    def write(self, mapping: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file with ``mapping`` (entries sorted by topic, partition)."""
        atomic_write_bytes(self.path, _format(mapping))

    def read(self) -> dict[tuple[str, int], int]:
        """The entries of the file; ``{}`` if it does not exist.

        Raises :class:`CorruptCheckpointError` naming the file and line if anything is off: an
        unknown version, a count that does not match the entries, a malformed or duplicate
        entry, or a last line without its newline (a truncated file).
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        return self._parse(data)

    def _corrupt(self, line: int | None, problem: str) -> CorruptCheckpointError:
        where = f"{self.path}" if line is None else f"{self.path} line {line}"
        return CorruptCheckpointError(
            f"corrupt checkpoint file {where}: {problem}. The file is rewritten from the live "
            "logs on the next checkpoint; remove it to start from no checkpointed offsets",
            path=str(self.path),
            line=line,
        )

    def _parse(self, data: bytes) -> dict[tuple[str, int], int]:
        if not data:
            raise self._corrupt(1, "the file is empty (expected the version on line 1)")
        raw_lines = data.split(b"\n")
        # A complete file ends with a newline, so split() leaves an empty last element; anything
        # else means the last line was cut short, and its number may be cut short with it.
        if raw_lines[-1]:
            raise self._corrupt(len(raw_lines), "the last line has no newline (truncated file)")
        raw_lines.pop()
        lines: list[str] = []
        for number, raw in enumerate(raw_lines, start=1):
            try:
                lines.append(raw.decode("ascii"))
            except UnicodeDecodeError:
                raise self._corrupt(number, f"non-ASCII bytes {raw[:40]!r}") from None

        if lines[0] != str(CHECKPOINT_VERSION):
            raise self._corrupt(
                1, f"unsupported version {lines[0][:40]!r}, expected {CHECKPOINT_VERSION}"
            )
        if len(lines) < 2:
            raise self._corrupt(2, "missing the entry count")
        if not _NUMBER.fullmatch(lines[1]):
            raise self._corrupt(2, f"entry count {lines[1][:40]!r} is not a non-negative integer")
        expected = int(lines[1])
        found = len(lines) - 2
        if found != expected:
            # Point at the first surplus entry, or at the count when entries are missing.
            raise self._corrupt(
                3 + expected if found > expected else 2,
                f"line 2 announces {expected} entries but the file has {found}",
            )

        entries: dict[tuple[str, int], int] = {}
        for number, line_text in enumerate(lines[2:], start=3):
            fields = line_text.split(" ")
            if len(fields) != 3:
                raise self._corrupt(
                    number,
                    f"expected 'topic partition offset' separated by single spaces, "
                    f"got {line_text[:80]!r}",
                )
            topic, partition_text, offset_text = fields
            try:
                validate_topic_name(topic)
            except InvalidTopicError as exc:
                raise self._corrupt(number, str(exc)) from exc
            if not _NUMBER.fullmatch(partition_text) or int(partition_text) > MAX_PARTITION_NUMBER:
                raise self._corrupt(number, f"partition {partition_text[:40]!r} is not valid")
            if not _NUMBER.fullmatch(offset_text) or int(offset_text) > MAX_OFFSET:
                raise self._corrupt(number, f"offset {offset_text[:40]!r} is not valid")
            key = (topic, int(partition_text))
            if key in entries:
                raise self._corrupt(number, f"duplicate entry for {topic!r} partition {key[1]}")
            entries[key] = int(offset_text)
        return entries
