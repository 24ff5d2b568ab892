"""The leader epoch cache of one partition: where each leader epoch starts in the log.

Kafka's ``LeaderEpochFileCache``. Every batch carries the epoch of the leader that appended it
(``partitionLeaderEpoch``); the cache keeps, for each epoch that has data (or whose leader
took over at a log end), the offset of its first record. Replication asks it one question,
OffsetsForLeaderEpoch: *where does epoch E end in your log?* A follower that becomes one after
a leader change asks the leader that for its own latest epoch and truncates its log where the
two stop agreeing (KIP-101, KIP-279; :mod:`~spark_mq.storage.epoch_truncation`).

Entries are kept with epochs and start offsets both strictly increasing. The rules, as Kafka's:

- ``assign(epoch, start_offset)``: ignored if the epoch is the latest one and the offset not
  smaller (every append of the current leader calls it). Otherwise every entry whose epoch is
  >= ``epoch`` or whose start offset is >= ``start_offset`` is removed first (they cannot be
  right: a newer epoch starting here supersedes them), then the entry is added.
- ``end_offset_for(E, log_end)``: ``(E, log_end)`` if E is the latest epoch; else, with F the
  largest known epoch <= E and H the smallest > E: ``(F, start of H)``; ``(E, start of H)``
  when no epoch <= E is known (the data before was removed: the follower may keep what lies
  below the leader's first epoch); ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` when E is
  undefined (-1), larger than every known epoch, or the cache is empty.
- ``truncate_from_end(offset)``: drops the entries starting at or after ``offset`` (the log
  was truncated there).
- ``truncate_from_start(offset)``: drops the entries starting at or before ``offset`` except
  the last of them, which now starts at ``offset`` (the log start moved there).

File (``leader-epoch-checkpoint`` in the partition directory; docs/format.md), Kafka's text
format, ASCII, every line ending in ``\\n``::

    0          <- version
    2          <- number of entries
    0 0        <- epoch start_offset, one line per entry, by epoch
    3 1042

Every change is written at once with :func:`~spark_mq.storage.checkpoint_file.atomic_write_bytes`
(``.tmp``, fsync, rename, fsync the directory) *before* the in-memory entries change, so
after a crash the file holds the old or the new entries; an append assigns its epoch before
its batches are written, so the file never lacks the epoch of a batch on disk. Entries past
the log end that a crash leaves (the batch was never written) are dropped when the log is
loaded. A missing or corrupt file is rebuilt from the batches' ``partitionLeaderEpoch``
(:func:`load_leader_epoch_cache`), as is every segment that crash recovery re-read.

Threads: not thread-safe; the owning :class:`~spark_mq.storage.log.PartitionLog` calls it
under its lock.

    >>> import tempfile, pathlib
    >>> cache = LeaderEpochFileCache(pathlib.Path(tempfile.mkdtemp()) / LEADER_EPOCH_CHECKPOINT)
    >>> cache.assign(0, 0); cache.assign(2, 10)
    True
    True
    >>> cache.end_offset_for(1, log_end_offset=15)
    EpochEndOffset(leader_epoch=0, end_offset=10)
    >>> cache.end_offset_for(2, log_end_offset=15)
    EpochEndOffset(leader_epoch=2, end_offset=15)
"""

from __future__ import annotations

import bisect
import errno
import itertools
import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from spark_mq.errors import (
    CorruptCheckpointError,
    FencedLeaderEpochError,
    LogDirectoryFullError,
    StorageError,
)
from spark_mq.storage.checkpoint_file import MAX_OFFSET, atomic_write_bytes
from spark_mq.storage.segment import BatchPosition, LogSegment

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntry",
    "LeaderEpochFileCache",
    "assign_epoch_starts",
    "end_offset_for",
    "epoch_starts",
    "load_leader_epoch_cache",
    "truncated_from_end",
]

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
CHECKPOINT_VERSION: Final = 0
#: Kafka's ``RecordBatch.NO_PARTITION_LEADER_EPOCH`` / ``UNDEFINED_EPOCH``.
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1
#: Leader epochs are Kafka's int32.
MAX_EPOCH: Final = 2**31 - 1

_NUMBER: Final = re.compile(r"0|[1-9][0-9]{0,18}")


class EpochEntry(NamedTuple):
    """Epoch ``epoch`` starts at offset ``start_offset``."""

    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """An answer of OffsetsForLeaderEpoch: the largest epoch <= the one asked for that the
    log knows, and the offset where it ends (exclusive); both -1 when undefined."""

    leader_epoch: int
    end_offset: int


UNDEFINED: Final = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def end_offset_for(
    entries: Sequence[EpochEntry],
    requested_epoch: int,
    log_end_offset: int,
    epochs: Sequence[int] | None = None,
) -> EpochEndOffset:
    """OffsetsForLeaderEpoch's answer for ``requested_epoch`` from ``entries`` (monotonic), in
    a log ending at ``log_end_offset``; rules in the module doc. ``epochs`` is the entries'
    epochs when the caller keeps them."""
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED
    if requested_epoch == entries[-1].epoch:
        return EpochEndOffset(requested_epoch, log_end_offset)
    if epochs is None:
        epochs = [e.epoch for e in entries]
    higher = bisect.bisect_right(epochs, requested_epoch)
    if higher == len(entries):
        return UNDEFINED  # newer than anything this log has seen
    if higher == 0:
        return EpochEndOffset(requested_epoch, entries[0].start_offset)
    return EpochEndOffset(entries[higher - 1].epoch, entries[higher].start_offset)


def _assigned(entries: list[EpochEntry], entry: EpochEntry) -> list[EpochEntry] | None:
    """``entries`` with ``entry`` assigned (module doc), or None if nothing changes."""
    if entries:
        latest = entries[-1]
        if entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return None
    kept = [e for e in entries if e.epoch < entry.epoch and e.start_offset < entry.start_offset]
    # Entries are monotonic, so the ones removed are a suffix: what Kafka calls truncating
    # non-monotonic entries. Losing more than one, or one that started elsewhere, means the
    # log is being rewritten under a different history; say so.
    removed = entries[len(kept) :]
    if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
        log.warning(
            "leader epoch %d starting at %d replaces the entries %s",
            entry.epoch,
            entry.start_offset,
            ", ".join(f"{e.epoch}@{e.start_offset}" for e in removed),
        )
    kept.append(entry)
    return kept


def truncated_from_end(entries: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    return [e for e in entries if e.start_offset < end_offset]


def _truncated_from_start(entries: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    below = [e for e in entries if e.start_offset <= start_offset]
    if not below:
        return entries
    return [EpochEntry(below[-1].epoch, start_offset), *entries[len(below) :]]


class LeaderEpochFileCache:
    """The epoch -> start offset entries of one partition and their checkpoint file.

    ``entries`` must be monotonic (epochs and start offsets strictly increasing); they are
    taken as they are, without writing the file (:func:`load_leader_epoch_cache` builds a
    cache from the file or the log).
    """

    def __init__(self, path: str | Path, entries: Iterable[EpochEntry] = ()) -> None:
        self.path = Path(path)
        self._entries = [EpochEntry(*e) for e in entries]
        _check_monotonic(self._entries)
        self._epochs = [e.epoch for e in self._entries]

    def __repr__(self) -> str:
        listed = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochFileCache({str(self.path)!r}, [{listed}])"

    # -----------------------------------------------------------------------------------------
    # Questions

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def __len__(self) -> int:
        return len(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """OffsetsForLeaderEpoch's answer for ``requested_epoch`` (rules in the module doc)."""
        return end_offset_for(self._entries, requested_epoch, log_end_offset, self._epochs)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch of the entry holding ``offset`` (the last one starting at or before it),
        None if ``offset`` lies before every entry."""
        starts = [e.start_offset for e in self._entries]
        at = bisect.bisect_right(starts, offset)
        return self._entries[at - 1].epoch if at else None

    # -----------------------------------------------------------------------------------------
    # Changes: each one is written to the file before it is made in memory.

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the entries changed."""
        if not 0 <= epoch <= MAX_EPOCH or not 0 <= start_offset <= MAX_OFFSET:
            raise StorageError(
                f"invalid leader epoch entry epoch={epoch} start_offset={start_offset} for "
                f"{self.path}: both must be non-negative (epoch at most {MAX_EPOCH})"
            )
        updated = _assigned(self._entries, EpochEntry(epoch, start_offset))
        if updated is None:
            return False
        self._replace(updated)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries that start at or after ``end_offset`` (the new log end)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        self._replace(truncated_from_end(self._entries, end_offset))

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget what lies below ``start_offset`` (the new log start): entries starting at or
        before it go, except the last of them, which is moved to start there."""
        updated = _truncated_from_start(self._entries, start_offset)
        if updated != self._entries:
            self._replace(updated)

    def clear(self) -> None:
        """Forget every entry (the log was emptied and restarts elsewhere)."""
        if self._entries or not self.path.exists():
            self._replace([])

    def write(self) -> None:
        """Write the current entries to the file (after a rebuild)."""
        self._replace(list(self._entries))

    def _replace(self, entries: list[EpochEntry]) -> None:
        _check_monotonic(entries)
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in entries]
        data = ("\n".join(lines) + "\n").encode("ascii")
        try:
            atomic_write_bytes(self.path, data)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise LogDirectoryFullError(
                    f"writing {self.path} failed: the disk is full ({exc}); free space and retry",
                    path=str(self.path),
                ) from exc
            raise StorageError(f"writing {self.path} failed: {exc}") from exc
        self._entries = entries
        self._epochs = [e.epoch for e in entries]

    # -----------------------------------------------------------------------------------------
    # Reading the file

    @classmethod
    def read(cls, path: str | Path) -> LeaderEpochFileCache | None:
        """The cache in ``path``; None if the file does not exist.

        Raises :class:`~spark_mq.errors.CorruptCheckpointError` naming the file and line for
        anything that does not parse or breaks monotonicity.
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return cls(path, _parse(path, data))


def _check_monotonic(entries: Sequence[EpochEntry]) -> None:
    for before, after in itertools.pairwise(entries):
        assert before.epoch < after.epoch and before.start_offset < after.start_offset, entries


def _parse(path: Path, data: bytes) -> list[EpochEntry]:
    def corrupt(line: int, problem: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"corrupt leader epoch checkpoint {path} line {line}: {problem}. It is rebuilt from "
            "the log's batches when the log is opened",
            path=str(path),
            line=line,
        )

    raw = data.split(b"\n")
    if raw[-1]:
        raise corrupt(len(raw), "the last line has no newline (truncated file)")
    raw.pop()
    try:
        lines = [r.decode("ascii") for r in raw]
    except UnicodeDecodeError:
        raise corrupt(1, "non-ASCII bytes") from None
    if not lines or lines[0] != str(CHECKPOINT_VERSION):
        raise corrupt(1, f"expected version {CHECKPOINT_VERSION}, got {lines[:1]!r}")
    if len(lines) < 2 or not _NUMBER.fullmatch(lines[1]):
        raise corrupt(2, "missing or malformed entry count")
    if int(lines[1]) != len(lines) - 2:
        raise corrupt(2, f"line 2 announces {lines[1]} entries but the file has {len(lines) - 2}")
    entries: list[EpochEntry] = []
    for number, text in enumerate(lines[2:], start=3):
        fields = text.split(" ")
        if len(fields) != 2 or not all(_NUMBER.fullmatch(f) for f in fields):
            raise corrupt(number, f"expected 'epoch start_offset', got {text[:80]!r}")
        entry = EpochEntry(int(fields[0]), int(fields[1]))
        if entry.epoch > MAX_EPOCH or entry.start_offset > MAX_OFFSET:
            raise corrupt(number, f"epoch or offset out of range in {text[:80]!r}")
        if entries and not (
            entries[-1].epoch < entry.epoch and entries[-1].start_offset < entry.start_offset
        ):
            raise corrupt(number, "epochs and start offsets must both increase")
        entries.append(entry)
    return entries


def epoch_starts(
    epochs_and_bases: Iterable[tuple[int, int]], latest_epoch: int | None, name: str
) -> list[EpochEntry]:
    """The new epochs that an append of batches ``(partitionLeaderEpoch, baseOffset)`` starts,
    to assign before the batches are written.

    Checked first, so a refused append writes nothing: the epochs must never go back, within
    the append or against ``latest_epoch``, the newest epoch of the log (an older epoch is a
    deposed leader's, or a follower copying the wrong leader). Batches without an epoch (-1)
    start nothing.
    """
    starts: list[EpochEntry] = []
    latest = -1 if latest_epoch is None else latest_epoch
    for epoch, base_offset in epochs_and_bases:
        if epoch < 0 or epoch == latest:
            continue
        if epoch < latest:
            raise FencedLeaderEpochError(
                f"{name}: an append with leader epoch {epoch} at offset {base_offset} comes "
                f"after epoch {latest}; the writer is a deposed leader (or copies one): refresh "
                "the partition's leadership and retry"
            )
        starts.append(EpochEntry(epoch, base_offset))
        latest = epoch
    return starts


def assign_epoch_starts(
    cache: LeaderEpochFileCache,
    batches: Sequence[BatchPosition],
    leader_epoch: int | None,
    name: str,
) -> None:
    """Assign in ``cache`` the epochs an append starts, before its batches are written.

    ``leader_epoch`` is the epoch a leader's append stamped on every batch; None for a
    follower's append, whose batches keep their leaders' epochs (checked by
    :func:`epoch_starts`).
    """
    if leader_epoch is not None:
        # The leader's path, once per append: one epoch, and almost always the latest.
        if leader_epoch < 0 or leader_epoch == cache.latest_epoch:
            return
        pairs = [(leader_epoch, batches[0].header.base_offset)]
    else:
        pairs = [(b.header.partition_leader_epoch, b.header.base_offset) for b in batches]
    for start in epoch_starts(pairs, cache.latest_epoch, name):
        cache.assign(start.epoch, start.start_offset)


# ---------------------------------------------------------------------------------------------
# Loading with the log


def _rebuilt(
    entries: list[EpochEntry], segments: Sequence[LogSegment], from_offset: int
) -> list[EpochEntry] | None:
    """``entries`` with the epochs of the batches from ``from_offset`` on assigned (the
    segment holding it and those after), or None if nothing changes. Batches without an epoch
    (-1: appended outside replication) carry nothing to learn."""
    changed = False
    bases = [s.base_offset for s in segments]
    first = max(bisect.bisect_right(bases, from_offset) - 1, 0)
    for segment in segments[first:]:
        for header, _ in segment.records.headers():
            epoch = header.partition_leader_epoch
            if header.next_offset <= from_offset or epoch < 0:
                continue
            if entries and epoch <= entries[-1].epoch:
                # An older epoch after a newer one cannot come from an append (the log refuses
                # it); keep the first history, as Kafka's recovery does.
                continue
            updated = _assigned(entries, EpochEntry(epoch, header.base_offset))
            if updated is not None:
                entries, changed = updated, True
    return entries if changed else None


def load_leader_epoch_cache(
    directory: Path,
    segments: Sequence[LogSegment],
    *,
    log_start_offset: int,
    log_end_offset: int,
    recovered_from: int,
    name: str,
) -> LeaderEpochFileCache:
    """The partition's cache, made consistent with its loaded log.

    From the file when it is valid: its entries from ``recovered_from`` on (the first offset
    crash recovery re-read; the log end when there was none) are replaced by what the batches
    from there say, which also drops entries a crash left past the log end. From every batch
    of the log when the file is missing (a log written before the cache existed) or corrupt.
    Then the entries below the log start are forgotten. The file is rewritten if that changed
    anything; a missing file stays missing for an empty log (both mean no entries), so that
    opening a new log costs no fsync.
    """
    path = directory / LEADER_EPOCH_CHECKPOINT
    try:
        stored = LeaderEpochFileCache.read(path)
    except CorruptCheckpointError as exc:
        log.warning("%s: %s; rebuilding it from the log", name, exc)
        stored = None
    if stored is None:
        before: list[EpochEntry] | None = None
        entries: list[EpochEntry] = []
        recovered_from = log_start_offset
    else:
        before = list(stored.entries)
        entries = truncated_from_end(before, recovered_from)
    if recovered_from < log_end_offset:
        entries = _rebuilt(entries, segments, recovered_from) or entries
    entries = _truncated_from_start(entries, log_start_offset)
    cache = LeaderEpochFileCache(path, entries)
    if before is None:
        if path.exists() or log_end_offset > log_start_offset:
            cache.write()
    elif entries != before:
        cache.write()
    return cache
