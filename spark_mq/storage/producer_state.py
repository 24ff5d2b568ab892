"""What a partition knows about each idempotent or transactional producer.

For every producer id that wrote to the partition the log keeps a :class:`ProducerStateEntry`:
its epoch, the sequence ranges and offsets of its last :data:`MAX_BATCHES_PER_PRODUCER`
batches (to recognise retried duplicates), its coordinator epoch, the first offset of its open
transaction, and its last timestamp (for expiry). The rules are Kafka's
(``ProducerStateManager`` / ``ProducerAppendInfo``):

- A batch whose sequence range equals one of the last five of the same epoch is a
  **duplicate**: the log writes nothing and answers with the original offsets.
- Within an epoch, a batch's first sequence must follow the last one (``last + 1``, wrapping
  from 2^31-1 to 0); anything else is :class:`~spark_mq.errors.OutOfOrderSequenceError`. A
  producer the partition has no state for (new, expired, or whose data was deleted) may start
  at any sequence.
- A **new epoch** starts at sequence 0; an **older epoch** is
  :class:`~spark_mq.errors.InvalidProducerEpochError` (a newer incarnation fenced it).
- A **transactional** batch opens a transaction if none is open; a non-transactional batch
  while one is open is :class:`~spark_mq.errors.InvalidTxnStateError`. A commit or abort
  **marker** closes it; a marker with an older coordinator epoch than one already seen is
  :class:`~spark_mq.errors.TransactionCoordinatorFencedError`.

Changes are staged: :meth:`ProducerStateManager.prepare_update` returns a
:class:`ProducerAppendInfo` that validates batch after batch without touching the manager,
and :meth:`ProducerStateManager.update` applies it once the append is on disk. A failed
validation therefore changes nothing.

**Snapshots** (``<20-digit offset>.snapshot`` in the partition directory) hold the whole state
as of an offset (the map end offset): taken when a segment rolls and at clean shutdown,
written atomically, CRC-32C protected. After a restart the log loads the newest snapshot at or
below where it must start replaying and replays batch headers (and the markers' control
records) from there to the log end. A snapshot that fails its checks is deleted and an older
one used, down to replaying from the log start. Layout, big-endian::

    magic "SMQP" (4)  version int16 (0)  crc uint32 (CRC-32C of everything after it)
    count int32, then per producer:
      producer id int64, epoch int16, coordinator epoch int32, last timestamp int64,
      open transaction first offset int64 (-1 none), batch count int8, then per batch:
        first sequence int32, last sequence int32, first offset int64, last offset int64,
        max timestamp int64

Threads: the owning log serialises every call under its lock.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final, NamedTuple

import crc32c

from spark_mq.errors import (
    CorruptCheckpointError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from spark_mq.storage.checkpoint_file import atomic_write_bytes
from spark_mq.storage.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    ControlRecord,
    ControlType,
)

log = logging.getLogger(__name__)

#: Kafka's ``NUM_BATCHES_TO_RETAIN``: how many recent batches per producer are kept for
#: duplicate detection (also the producer's max.in.flight.requests.per.connection bound).
MAX_BATCHES_PER_PRODUCER: Final = 5
#: Kafka's ``producer.id.expiration.ms`` default: one day.
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 24 * 3600 * 1000
SNAPSHOT_SUFFIX: Final = ".snapshot"
_SEQUENCE_MODULUS: Final = 2**31

_MAGIC: Final = b"SMQP"
_SNAPSHOT_VERSION: Final = 0
_FILE_HEADER = struct.Struct(">4shI")  # magic, version, crc
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhiqqb")
_BATCH = struct.Struct(">iiqqq")


class AppendOrigin(enum.Enum):
    """Who is appending: the checks differ (Kafka's AppendOrigin)."""

    CLIENT = "client"  # a producer: full sequence checks, no control batches
    COORDINATOR = "coordinator"  # the transaction coordinator: markers
    REPLICATION = "replication"  # a follower copying its leader: trust sequences


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


class LastRecord(NamedTuple):
    """What compaction must keep of a producer so that a replay of the log finds its state
    (Kafka's ``LastRecord``): the batch ending at ``last_data_offset``, which carries its last
    sequence; or, with no data batch in its current epoch (-1), its markers of
    ``producer_epoch``, which carry the epoch."""

    last_data_offset: int
    producer_epoch: int


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker: its data runs from ``first_offset`` to the marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclasses.dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: list[BatchMetadata] = dataclasses.field(default_factory=list)
    coordinator_epoch: int = -1
    last_timestamp_ms: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def copy(self) -> ProducerStateEntry:
        # Field by field: every append of an idempotent producer copies its entry, and
        # dataclasses.replace (which inspects the fields each call) costs several times more.
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            list(self.batches),
            self.coordinator_epoch,
            self.last_timestamp_ms,
            self.current_txn_first_offset,
        )

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            # A new epoch starts a new sequence space: older batches cannot be duplicates.
            self.batches.clear()
            self.producer_epoch = epoch


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == (last_seq + 1) % _SEQUENCE_MODULUS


class ProducerAppendInfo:
    """The staged changes of one producer within one append (validated, not yet applied)."""

    def __init__(
        self, producer_id: int, current: ProducerStateEntry | None, origin: AppendOrigin
    ) -> None:
        self.producer_id = producer_id
        self.origin = origin
        self._known = current is not None
        self.updated = current.copy() if current else ProducerStateEntry(producer_id)
        self.started_txn_first_offsets: list[int] = []

    def _check_epoch(self, epoch: int, what: str) -> None:
        if epoch < self.updated.producer_epoch:
            message = (
                f"{what} from producer {self.producer_id} has epoch {epoch}, older than the "
                f"current epoch {self.updated.producer_epoch}: a newer producer with the same id "
                "fenced this one; close it and create a new producer"
            )
            if self.origin is AppendOrigin.REPLICATION:
                log.warning("%s (accepted: replicating)", message)
                return
            raise InvalidProducerEpochError(
                message, producer_id=self.producer_id, producer_epoch=epoch
            )

    def _check_sequence(self, header: BatchHeader) -> None:
        first_seq = header.base_sequence
        if header.producer_epoch != self.updated.producer_epoch:
            if first_seq != 0 and self.updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {self.producer_id} started epoch {header.producer_epoch} at "
                    f"sequence {first_seq}; a new epoch must start at 0",
                    producer_id=self.producer_id,
                    producer_epoch=header.producer_epoch,
                )
            return
        # No state for this producer (new, expired, or its data deleted by retention): accept
        # any sequence, as Kafka does. Otherwise the next sequence must follow the last one
        # (NO_SEQUENCE, -1, is followed by 0).
        if not self._known or _in_sequence(self.updated.last_seq, first_seq):
            return
        last_seq = self.updated.last_seq
        raise OutOfOrderSequenceError(
            f"out of order sequence for producer {self.producer_id} epoch "
            f"{header.producer_epoch}: expected {(last_seq + 1) % _SEQUENCE_MODULUS}, got "
            f"{first_seq}; a batch was lost or reordered (the producer must reset)",
            producer_id=self.producer_id,
            producer_epoch=header.producer_epoch,
        )

    def append_data_batch(self, header: BatchHeader) -> None:
        """Validate a data batch (with its assigned offsets) and stage its effect."""
        self._check_epoch(header.producer_epoch, "batch")
        if self.origin is AppendOrigin.CLIENT and header.base_sequence != NO_SEQUENCE:
            self._check_sequence(header)
        entry = self.updated
        if header.is_transactional:
            if entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = header.base_offset
                self.started_txn_first_offsets.append(header.base_offset)
        elif entry.current_txn_first_offset is not None:
            raise InvalidTxnStateError(
                f"producer {self.producer_id} wrote a non-transactional batch while its "
                f"transaction from offset {entry.current_txn_first_offset} is open; commit or "
                "abort it first",
                producer_id=self.producer_id,
                producer_epoch=header.producer_epoch,
            )
        entry._set_epoch(header.producer_epoch)
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence,
                    header.last_sequence,
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                )
            )
            del entry.batches[:-MAX_BATCHES_PER_PRODUCER]
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, header.max_timestamp)

    def append_end_txn_marker(
        self, marker: ControlRecord, *, producer_epoch: int, offset: int, timestamp_ms: int
    ) -> CompletedTxn:
        """Validate a commit/abort marker at ``offset`` and stage the end of the transaction."""
        self._check_epoch(producer_epoch, "transaction marker")
        entry = self.updated
        if entry.coordinator_epoch > marker.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"transaction marker for producer {self.producer_id} carries coordinator epoch "
                f"{marker.coordinator_epoch}, older than {entry.coordinator_epoch} already seen: "
                "a newer transaction coordinator owns this producer",
                producer_id=self.producer_id,
                producer_epoch=producer_epoch,
            )
        first_offset = entry.current_txn_first_offset
        completed = CompletedTxn(
            self.producer_id,
            offset if first_offset is None else first_offset,
            offset,
            marker.type is ControlType.ABORT,
        )
        entry._set_epoch(producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.current_txn_first_offset = None
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        return completed


class ProducerStateManager:
    """Every producer's state in one partition, its open transactions and its snapshots."""

    def __init__(
        self,
        directory: Path,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id of every open transaction
        self._ongoing_txns: dict[int, int] = {}
        self.map_end_offset = 0

    # -----------------------------------------------------------------------------------------
    # State

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        return self._producers

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def ongoing_txns(self) -> Mapping[int, int]:
        """First offset to producer id of every open transaction."""
        return self._ongoing_txns

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction: readers of committed data stop there."""
        return min(self._ongoing_txns) if self._ongoing_txns else None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO right after ``completed`` closes (recorded with an aborted transaction)."""
        others = [first for first in self._ongoing_txns if first != completed.first_offset]
        return min(others) if others else completed.last_offset + 1

    def last_records(self) -> dict[int, LastRecord]:
        """Per producer, what compaction keeps so that its state survives (a new dict)."""
        return {
            pid: LastRecord(entry.last_data_offset, entry.producer_epoch)
            for pid, entry in self._producers.items()
        }

    def find_duplicate_batch(self, header: BatchHeader) -> BatchMetadata | None:
        entry = self._producers.get(header.producer_id)
        if entry is None or entry.producer_epoch != header.producer_epoch:
            return None
        return entry.find_duplicate(header.base_sequence, header.last_sequence)

    # -----------------------------------------------------------------------------------------
    # Updates

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        return ProducerAppendInfo(producer_id, self._producers.get(producer_id), origin)

    def update(self, info: ProducerAppendInfo) -> None:
        self._producers[info.producer_id] = info.updated
        for first_offset in info.started_txn_first_offsets:
            self._ongoing_txns[first_offset] = info.producer_id

    def complete_txn(self, completed: CompletedTxn) -> None:
        self._ongoing_txns.pop(completed.first_offset, None)

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` with no open transaction."""
        expired = [
            pid
            for pid, entry in self._producers.items()
            if entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp_ms >= self.producer_id_expiration_ms
        ]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> None:
        """Drop producers whose every batch is now below the log start (retention deleted them)."""
        gone = [
            pid
            for pid, entry in self._producers.items()
            if entry.current_txn_first_offset is None
            and 0 <= entry.last_data_offset < log_start_offset
        ]
        for pid in gone:
            del self._producers[pid]
        self.delete_snapshots_before(log_start_offset)

    def reset(self) -> None:
        self._producers.clear()
        self._ongoing_txns.clear()
        self.map_end_offset = 0

    # -----------------------------------------------------------------------------------------
    # Snapshots

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for entry in os.scandir(self.directory):
            name = entry.name
            if (
                name.endswith(SNAPSHOT_SUFFIX)
                and len(name) == 20 + len(SNAPSHOT_SUFFIX)
                and name[:20].isdigit()
            ):
                offsets.append(int(name[:20]))
        return sorted(offsets)

    def take_snapshot(self) -> Path:
        """Write the state as of ``map_end_offset`` (replacing a snapshot at that offset)."""
        body = bytearray(_COUNT.pack(len(self._producers)))
        for entry in self._producers.values():
            body += _PRODUCER.pack(
                entry.producer_id,
                entry.producer_epoch,
                entry.coordinator_epoch,
                entry.last_timestamp_ms,
                -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
                len(entry.batches),
            )
            for batch in entry.batches:
                body += _BATCH.pack(*batch)
        header = _FILE_HEADER.pack(_MAGIC, _SNAPSHOT_VERSION, crc32c.crc32c(bytes(body)))
        path = self._snapshot_path(self.map_end_offset)
        atomic_write_bytes(path, header + bytes(body))
        return path

    def _read_snapshot(self, path: Path) -> tuple[dict[int, ProducerStateEntry], dict[int, int]]:
        data = path.read_bytes()

        def corrupt(problem: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(
                f"producer state snapshot {path} is corrupt: {problem}", path=str(path)
            )

        if len(data) < _FILE_HEADER.size + _COUNT.size:
            raise corrupt("too short")
        magic, version, crc = _FILE_HEADER.unpack_from(data)
        if magic != _MAGIC or version != _SNAPSHOT_VERSION:
            raise corrupt(f"magic {magic!r} version {version}")
        if crc32c.crc32c(data[_FILE_HEADER.size :]) != crc:
            raise corrupt("CRC mismatch")
        try:
            producers: dict[int, ProducerStateEntry] = {}
            ongoing: dict[int, int] = {}
            pos = _FILE_HEADER.size
            (count,) = _COUNT.unpack_from(data, pos)
            pos += _COUNT.size
            for _ in range(count):
                pid, epoch, coord, last_ts, txn_first, n = _PRODUCER.unpack_from(data, pos)
                pos += _PRODUCER.size
                batches = []
                for _ in range(n):
                    batches.append(BatchMetadata(*_BATCH.unpack_from(data, pos)))
                    pos += _BATCH.size
                producers[pid] = ProducerStateEntry(
                    pid, epoch, batches, coord, last_ts, None if txn_first < 0 else txn_first
                )
                if txn_first >= 0:
                    ongoing[txn_first] = pid
        except struct.error as exc:
            raise corrupt(f"truncated entries ({exc})") from exc
        if pos != len(data):
            raise corrupt(f"{len(data) - pos} bytes after the last entry")
        return producers, ongoing

    def load_latest_snapshot(self, *, at_most: int) -> int | None:
        """Load the newest valid snapshot at or below ``at_most``; returns its offset or None.

        Snapshots above ``at_most`` (the log was truncated below them) and corrupt ones are
        deleted. With no usable snapshot the state is empty.
        """
        self.reset()
        for offset in reversed(self.snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset > at_most:
                path.unlink(missing_ok=True)
                continue
            try:
                self._producers, self._ongoing_txns = self._read_snapshot(path)
            except CorruptCheckpointError as exc:
                log.warning("%s; deleting it and trying an older one", exc)
                path.unlink(missing_ok=True)
                continue
            self.map_end_offset = offset
            return offset
        return None

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot in self.snapshot_offsets():
            if snapshot < offset:
                self._snapshot_path(snapshot).unlink(missing_ok=True)

    def delete_snapshots_after(self, offset: int) -> None:
        for snapshot in self.snapshot_offsets():
            if snapshot > offset:
                self._snapshot_path(snapshot).unlink(missing_ok=True)

    def __iter__(self) -> Iterator[ProducerStateEntry]:
        return iter(self._producers.values())
