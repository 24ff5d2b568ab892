"""Producer state: Kafka's idempotence rules, snapshots, rebuilds after a crash, expiry.

The rules are exercised through :meth:`PartitionLog.append`, the way a produce request reaches
them, and every refused append is checked to have changed nothing (no bytes, no offsets, no
producer state). Restarts come in three kinds: a clean close and reopen, a crash image (a copy
of the directory taken while the log is open, which is what SIGKILL leaves since the page
cache survives) reopened unclean, and the same with its snapshots deleted or damaged. After
every restart the state must equal the state before it, entry for entry.

The property test at the end re-appends any subsequence of already-appended idempotent
batches, in any order, across restarts: nothing is ever written twice, a retry of one of a
producer's last five batches gets the original offsets back, and anything older (or from a
fenced epoch) is refused.

The clock is injected (``time_ms=``) and record timestamps come from it, so expiry happens
exactly when a test moves the clock; nothing sleeps.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_testing import START_MS, Clock, OpenLog

from spark_mq.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateError,
    StorageError,
    TransactionCoordinatorFencedError,
)
from spark_mq.storage.log import FetchIsolation, LogAppendInfo, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.producer_state import (
    MAX_BATCHES_PER_PRODUCER,
    SNAPSHOT_SUFFIX,
    AppendOrigin,
    BatchMetadata,
    LastRecord,
    ProducerStateEntry,
    ProducerStateManager,
)
from spark_mq.storage.record_batch import (
    BatchHeader,
    ControlType,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
)

INT32_MAX = 2**31 - 1
PID = 1000
EPOCH = 3


def batch(
    seq: int,
    records: int = 1,
    *,
    pid: int = PID,
    epoch: int = EPOCH,
    transactional: bool = False,
    now_ms: int = START_MS,
) -> bytes:
    """An idempotent (or transactional) batch whose values name its producer and sequences."""
    values = [f"{pid}/{epoch}/{(seq + i) % 2**31}".encode() for i in range(records)]
    return encode_batch(
        pa.array(values, pa.binary()),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
        now_ms=now_ms,
    )


def plain(records: int = 1, tag: str = "plain") -> bytes:
    return encode_batch(
        pa.array([f"{tag}/{i}".encode() for i in range(records)], pa.binary()), now_ms=START_MS
    )


def marker(
    control_type: ControlType, *, pid: int = PID, epoch: int = EPOCH, coordinator_epoch: int = 0
) -> bytes:
    return encode_control_batch(
        control_type,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=START_MS,
    )


def state_of(log: PartitionLog) -> dict[int, ProducerStateEntry]:
    """A deep copy of every producer's entry, to compare before and after."""
    return {pid: entry.copy() for pid, entry in log.producer_state.producers.items()}


def values_of(log: PartitionLog, start: int = 0) -> list[bytes]:
    """Every value from ``start`` to the high watermark (a read stops at a segment's end)."""
    values: list[bytes] = []
    while start < log.high_watermark:
        table = log.read_records(start, 64 * 1024 * 1024)
        assert table.num_rows, f"nothing read at {start} below {log.high_watermark}"
        values += table.column("value").to_pylist()
        start = table.column("offset")[-1].as_py() + 1
    return values


E = TypeVar("E", bound=StorageError)


def assert_refused(log: PartitionLog, data: bytes, error: type[E], **kwargs: Any) -> E:
    """``data`` is refused with ``error`` and the append changed nothing at all."""
    before = (
        log.log_end_offset,
        log.size_bytes,
        state_of(log),
        dict(log.producer_state.ongoing_txns),
    )
    with pytest.raises(error) as caught:
        log.append(data, **kwargs)
    after = (
        log.log_end_offset,
        log.size_bytes,
        state_of(log),
        dict(log.producer_state.ongoing_txns),
    )
    assert after == before
    return caught.value


def assert_duplicate(log: PartitionLog, data: bytes, original: LogAppendInfo) -> None:
    """``data`` is recognised as a retry of ``original``: nothing written, same offsets."""
    end, size = log.log_end_offset, log.size_bytes
    info = log.append(data)
    assert info.is_duplicate
    assert (info.first_offset, info.last_offset) == (original.first_offset, original.last_offset)
    assert (info.num_batches, info.num_records, info.valid_bytes) == (0, 0, 0)
    assert (log.log_end_offset, log.size_bytes) == (end, size)


# ---------------------------------------------------------------------------------------------
# Duplicates


def test_retry_of_any_of_the_last_five_batches_is_a_duplicate(open_log: OpenLog) -> None:
    log = open_log()
    infos = []
    seq = 0
    for records in (1, 3, 2, 1, 4):
        log.append(plain(2))  # offsets and sequences must not line up
        infos.append(log.append(batch(seq, records)))
        seq += records
    for i in [4, 0, 2, 2, 1, 3]:
        original = infos[i]
        first_seq = sum((1, 3, 2, 1, 4)[:i])
        assert_duplicate(log, batch(first_seq, (1, 3, 2, 1, 4)[i]), original)
    # A duplicate changes nothing about what comes next.
    assert not log.append(batch(seq)).is_duplicate
    assert values_of(log).count(f"{PID}/{EPOCH}/0".encode()) == 1


def test_only_the_last_five_batches_are_remembered(open_log: OpenLog) -> None:
    log = open_log()
    infos = [log.append(batch(seq)) for seq in range(MAX_BATCHES_PER_PRODUCER + 1)]
    entry = log.producer_state.entry(PID)
    assert entry is not None
    assert [b.first_seq for b in entry.batches] == list(range(1, MAX_BATCHES_PER_PRODUCER + 1))
    # Older than the window: Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER, never a second copy.
    assert_refused(log, batch(0), OutOfOrderSequenceError)
    assert_duplicate(log, batch(1), infos[1])


def test_a_duplicate_needs_the_same_epoch_and_sequence_range(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(0, 3))
    # Same first sequence, another range: not the same batch, and out of order.
    assert_refused(log, batch(0, 2), OutOfOrderSequenceError)
    assert_refused(log, batch(1, 2), OutOfOrderSequenceError)
    # Same range, newer epoch: a new epoch starts at 0, so this one is appended, not a duplicate.
    info = log.append(batch(0, 3, epoch=EPOCH + 1))
    assert not info.is_duplicate
    assert info.first_offset == 3
    # The original, from the now fenced epoch, is refused rather than answered.
    assert_refused(log, batch(0, 3), InvalidProducerEpochError)


def test_duplicates_are_per_producer(open_log: OpenLog) -> None:
    log = open_log()
    a = log.append(batch(0, 2, pid=1))
    b = log.append(batch(0, 2, pid=2))
    assert (a.first_offset, b.first_offset) == (0, 2)
    assert_duplicate(log, batch(0, 2, pid=2), b)
    assert_duplicate(log, batch(0, 2, pid=1), a)
    # A third producer with the same sequences is simply new.
    assert log.append(batch(0, 2, pid=3)).first_offset == 4


# ---------------------------------------------------------------------------------------------
# Sequences and epochs


@pytest.mark.parametrize(
    ("next_seq", "why"),
    [
        (4, "gap of one"),
        (100, "large gap"),
        (1, "behind, inside a batch"),
        (0, "behind, new range"),
    ],
)
def test_a_sequence_that_does_not_follow_is_out_of_order(
    open_log: OpenLog, next_seq: int, why: str
) -> None:
    log = open_log()
    log.append(batch(0, 2))
    log.append(batch(2))  # last sequence 2, next expected 3
    error = assert_refused(log, batch(next_seq), OutOfOrderSequenceError)
    assert (error.producer_id, error.producer_epoch) == (PID, EPOCH), why
    assert "expected 3" in str(error)
    log.append(batch(3))


def test_an_older_epoch_is_fenced_for_data_and_markers(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(0, epoch=5))
    error = assert_refused(log, batch(1, epoch=4), InvalidProducerEpochError)
    assert (error.producer_id, error.producer_epoch) == (PID, 4)
    assert_refused(
        log,
        marker(ControlType.ABORT, epoch=4),
        InvalidProducerEpochError,
        origin=AppendOrigin.COORDINATOR,
    )
    with pytest.raises(InvalidProducerEpochError):
        log.append_transaction_marker(
            ControlType.COMMIT, producer_id=PID, producer_epoch=4, coordinator_epoch=0
        )
    log.append(batch(1, epoch=5))


def test_a_new_epoch_must_start_at_sequence_zero(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(0, 5))
    assert_refused(log, batch(5, epoch=EPOCH + 1), OutOfOrderSequenceError)
    assert_refused(log, batch(1, epoch=EPOCH + 1), OutOfOrderSequenceError)
    log.append(batch(0, epoch=EPOCH + 1))
    entry = log.producer_state.entry(PID)
    assert entry is not None
    assert entry.producer_epoch == EPOCH + 1
    assert [b.first_seq for b in entry.batches] == [0], "a new epoch forgets the old batches"


def test_an_epoch_bumped_by_a_marker_restarts_sequences_at_zero(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(0, 2, transactional=True))
    # The coordinator aborts with a bumped epoch (as Kafka does when it fences a producer).
    log.append_transaction_marker(
        ControlType.ABORT, producer_id=PID, producer_epoch=EPOCH + 1, coordinator_epoch=0
    )
    assert_refused(log, batch(2, epoch=EPOCH + 1), OutOfOrderSequenceError)
    assert_refused(log, batch(2), InvalidProducerEpochError)
    log.append(batch(0, epoch=EPOCH + 1))


@pytest.mark.parametrize(
    ("first_seq", "counts"),
    [
        (INT32_MAX, [1, 1, 1]),  # last sequence 2^31-1 exactly, then 0
        (INT32_MAX - 2, [3, 2]),  # ends at 2^31-1
        (INT32_MAX - 1, [4, 1]),  # one batch crosses the wrap: 2^31-2 .. 1
        (INT32_MAX - 5, [2, 2, 2, 2, 2, 2, 2]),  # more than five batches across the wrap
    ],
)
def test_sequences_wrap_after_int32_max(
    open_log: OpenLog, first_seq: int, counts: list[int]
) -> None:
    log = open_log()
    seq = first_seq
    infos = []
    for count in counts:
        infos.append((seq, count, log.append(batch(seq, count))))
        seq = (seq + count) % 2**31
    entry = log.producer_state.entry(PID)
    assert entry is not None
    assert entry.last_seq == (seq - 1) % 2**31
    # Before the wrap is "behind", not "ahead": refused, and the retries are recognised.
    assert_refused(log, batch(INT32_MAX - 10), OutOfOrderSequenceError)
    assert_refused(log, batch((seq + 1) % 2**31), OutOfOrderSequenceError)
    for first, count, info in infos[-MAX_BATCHES_PER_PRODUCER:]:
        assert_duplicate(log, batch(first, count), info)
    assert not log.append(batch(seq)).is_duplicate


def test_a_batch_ending_exactly_at_int32_max_is_followed_by_zero(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(INT32_MAX - 3, 4))
    entry = log.producer_state.entry(PID)
    assert entry is not None
    assert entry.last_seq == INT32_MAX
    assert_refused(log, batch(1), OutOfOrderSequenceError)
    log.append(batch(0))


@pytest.mark.parametrize("first_seq", [0, 1, 17, 2**30, INT32_MAX])
def test_an_unknown_producer_may_start_at_any_sequence(open_log: OpenLog, first_seq: int) -> None:
    log = open_log()
    log.append(plain())
    info = log.append(batch(first_seq, 2))
    assert info.first_offset == 1
    assert_refused(log, batch(first_seq), OutOfOrderSequenceError)
    log.append(batch((first_seq + 2) % 2**31))


def test_replication_trusts_the_leaders_sequences(open_log: OpenLog) -> None:
    """A follower copies what its leader accepted: no sequence checks, no duplicate answers."""
    log = open_log()
    log.append(batch(0))
    gap = encode_batch(
        pa.array([b"x"]), producer_id=PID, producer_epoch=EPOCH, base_sequence=7, base_offset=1
    )
    info = log.append(gap, assign_offsets=False)
    assert (info.first_offset, info.is_duplicate) == (1, False)
    entry = log.producer_state.entry(PID)
    assert entry is not None
    assert entry.last_seq == 7


# ---------------------------------------------------------------------------------------------
# Transactions and what only the coordinator may do


def test_a_non_transactional_batch_inside_a_transaction_is_refused(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(0, transactional=True))
    error = assert_refused(log, batch(1), InvalidTxnStateError)
    assert "offset 0" in str(error)
    # Another producer is not affected, and once the transaction ends the producer may write.
    log.append(batch(0, pid=PID + 1))
    log.append_transaction_marker(
        ControlType.COMMIT, producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=0
    )
    assert log.append(batch(1)).first_offset == 3


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(0, transactional=True))
    log.append_transaction_marker(
        ControlType.COMMIT, producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=4
    )
    log.append(batch(1, transactional=True))
    assert_refused(
        log,
        marker(ControlType.ABORT, coordinator_epoch=3),
        TransactionCoordinatorFencedError,
        origin=AppendOrigin.COORDINATOR,
    )
    with pytest.raises(TransactionCoordinatorFencedError) as caught:
        log.append_transaction_marker(
            ControlType.ABORT, producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=0
        )
    assert (caught.value.producer_id, caught.value.producer_epoch) == (PID, EPOCH)
    assert log.last_stable_offset == 2, "the fenced marker closed nothing"
    # The same coordinator epoch, and a newer one, are accepted.
    log.append_transaction_marker(
        ControlType.ABORT, producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=4
    )
    log.append(batch(2, transactional=True))
    log.append_transaction_marker(
        ControlType.COMMIT, producer_id=PID, producer_epoch=EPOCH, coordinator_epoch=9
    )
    entry = log.producer_state.entry(PID)
    assert entry is not None
    assert entry.coordinator_epoch == 9


@pytest.mark.parametrize("origin", [None, AppendOrigin.CLIENT])
def test_a_control_batch_from_a_client_is_refused(
    open_log: OpenLog, origin: AppendOrigin | None
) -> None:
    log = open_log()
    log.append(batch(0, transactional=True))
    error = assert_refused(log, marker(ControlType.COMMIT), InvalidRecordError, origin=origin)
    assert "coordinator" in str(error)
    assert log.last_stable_offset == 0
    info = log.append(marker(ControlType.COMMIT), origin=AppendOrigin.COORDINATOR)
    assert info.first_offset == 1
    assert log.last_stable_offset == 2


def test_an_idempotent_client_sends_one_batch_per_append(open_log: OpenLog) -> None:
    log = open_log()
    assert_refused(log, batch(0) + batch(1), InvalidRecordError)
    assert_refused(log, plain() + batch(0), InvalidRecordError)
    assert_refused(log, batch(0, transactional=True) + plain(), InvalidRecordError)
    # Plain batches may come several at a time, as before.
    assert log.append(plain(2) + plain(3)).num_batches == 2
    assert log.append(batch(0)).first_offset == 5


def test_producer_state_errors_belong_to_one_family() -> None:
    for error in (
        OutOfOrderSequenceError,
        InvalidProducerEpochError,
        TransactionCoordinatorFencedError,
        InvalidTxnStateError,
    ):
        assert issubclass(error, ProducerStateError)
        assert issubclass(error, StorageError)
        assert not error.retriable


# ---------------------------------------------------------------------------------------------
# Snapshots and restarts


def snapshot_files(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{SNAPSHOT_SUFFIX}"))


def build_history(log: PartitionLog, clock: Clock) -> dict[int, LogAppendInfo]:
    """Three producers over several segments: idempotent, transactional (one transaction left
    open), an epoch bump, plain writes in between. Returns each producer's last data append."""
    last: dict[int, LogAppendInfo] = {}
    seqs = {1: 0, 2: 0, 3: INT32_MAX - 4}
    for round_no in range(12):
        clock.now_ms += 10
        for pid in (1, 2, 3):
            n = 1 + (round_no + pid) % 3
            txn = pid == 2
            last[pid] = log.append(
                batch(seqs[pid], n, pid=pid, transactional=txn, now_ms=clock.now_ms)
            )
            seqs[pid] = (seqs[pid] + n) % 2**31
        log.append(plain(2, tag=f"r{round_no}"))
        if round_no % 3 == 1:  # the transaction of the last round stays open
            log.append_transaction_marker(
                ControlType.ABORT if round_no % 2 else ControlType.COMMIT,
                producer_id=2,
                producer_epoch=EPOCH,
                coordinator_epoch=round_no,
            )
    # Producer 1 starts a new epoch late, so the snapshots hold both epochs over time.
    last[1] = log.append(batch(0, 2, pid=1, epoch=EPOCH + 1, now_ms=clock.now_ms))
    return last


HISTORY_CONFIG = LogConfig(segment_bytes=4 * 1024)


def test_snapshots_are_taken_at_every_roll_and_at_close(open_log: OpenLog) -> None:
    log = open_log(HISTORY_CONFIG)
    log.append(plain(3))
    log.roll()
    assert snapshot_files(log.directory) == [], "no producers yet, nothing to save"
    log.append(batch(0))
    log.roll()
    assert [p.name for p in snapshot_files(log.directory)] == [f"{4:020d}{SNAPSHOT_SUFFIX}"]
    log.append(batch(1, 2))
    end = log.log_end_offset
    log.close()
    names = [p.name for p in snapshot_files(log.directory)]
    assert names == [f"{4:020d}{SNAPSHOT_SUFFIX}", f"{end:020d}{SNAPSHOT_SUFFIX}"]


def test_producer_state_survives_a_clean_restart(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(HISTORY_CONFIG)
    last = build_history(log, clock)
    assert log.num_segments > 3
    before = state_of(log)
    ongoing = dict(log.producer_state.ongoing_txns)
    lso = log.last_stable_offset
    assert ongoing, "the history leaves a transaction open"
    log.close()
    log = open_log(HISTORY_CONFIG, had_clean_shutdown=True, recovery_point=log.recovery_point)
    assert state_of(log) == before
    assert dict(log.producer_state.ongoing_txns) == ongoing
    assert log.last_stable_offset == lso
    for pid, info in last.items():
        entry = before[pid]
        newest = entry.batches[-1]
        assert_duplicate(
            log,
            batch(
                newest.first_seq,
                info.last_offset - info.first_offset + 1,
                pid=pid,
                epoch=entry.producer_epoch,
                transactional=pid == 2,
                now_ms=newest.timestamp_ms,
            ),
            info,
        )


SNAPSHOT_DAMAGE = [
    "kept",
    "deleted",
    "newest-corrupt",
    "all-corrupt",
    "newest-truncated",
    "newest-garbage-appended",
    "newest-empty",
    "newest-wrong-magic",
]


def damage_snapshots(directory: Path, damage: str) -> list[Path]:
    """Apply ``damage`` to the snapshots in ``directory``; returns the files damaged."""
    files = snapshot_files(directory)
    assert files, "the history must have produced snapshots"
    if damage == "kept":
        return []
    if damage == "deleted":
        for path in files:
            path.unlink()
        return []
    targets = files if damage == "all-corrupt" else files[-1:]
    for path in targets:
        data = bytearray(path.read_bytes())
        if damage in ("newest-corrupt", "all-corrupt"):
            data[len(data) // 2] ^= 0x40
        elif damage == "newest-truncated":
            del data[-7:]
        elif damage == "newest-garbage-appended":
            data += b"\x00garbage"
        elif damage == "newest-empty":
            data = bytearray()
        elif damage == "newest-wrong-magic":
            data[0:4] = b"XXXX"
        path.write_bytes(bytes(data))
    return targets


@pytest.mark.parametrize("recovery", ["recovery-point", "from-zero", "clean"])
@pytest.mark.parametrize("damage", SNAPSHOT_DAMAGE)
def test_producer_state_is_rebuilt_after_a_crash(
    open_log: OpenLog, clock: Clock, tmp_path: Path, damage: str, recovery: str
) -> None:
    """A crash image (a copy of the open log's directory), with its snapshots kept, deleted or
    damaged: the state comes back exactly, from an older snapshot or the log start if need be."""
    log = open_log(HISTORY_CONFIG)
    last = build_history(log, clock)
    if recovery == "clean":
        log.close()
    before = state_of(log)
    ongoing = dict(log.producer_state.ongoing_txns)
    lso = log.last_stable_offset
    copy = tmp_path / "copy"
    shutil.copytree(log.directory, copy)
    damaged = damage_snapshots(copy, damage)
    reopened = open_log(
        HISTORY_CONFIG,
        directory=copy,
        had_clean_shutdown=recovery == "clean",
        recovery_point={"recovery-point": log.recovery_point, "from-zero": 0}.get(
            recovery, log.log_end_offset
        ),
    )
    assert state_of(reopened) == before
    assert dict(reopened.producer_state.ongoing_txns) == ongoing
    assert reopened.last_stable_offset == lso
    for path in damaged:
        assert not path.exists(), f"the damaged snapshot {path.name} must be deleted, not kept"
    # Duplicates sent before the crash are still recognised; the next sequences are accepted.
    for pid, info in last.items():
        entry = before[pid]
        newest = entry.batches[-1]
        count = info.last_offset - info.first_offset + 1
        retry = batch(
            newest.first_seq,
            count,
            pid=pid,
            epoch=entry.producer_epoch,
            transactional=pid == 2,
            now_ms=newest.timestamp_ms,
        )
        assert_duplicate(reopened, retry, info)
        reopened.append(
            batch(
                (newest.last_seq + 1) % 2**31,
                pid=pid,
                epoch=entry.producer_epoch,
                transactional=pid == 2,
            )
        )


def test_state_is_rebuilt_from_the_log_start_without_any_snapshot(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(HISTORY_CONFIG)
    build_history(log, clock)
    before = state_of(log)
    log.close()
    for path in snapshot_files(log.directory):
        path.unlink()
    log = open_log(HISTORY_CONFIG, had_clean_shutdown=True, recovery_point=log.log_end_offset)
    assert state_of(log) == before


def test_a_batch_emptied_by_compaction_is_replayed_for_the_producers_state(
    open_log: OpenLog,
) -> None:
    """An empty batch that spans offsets (a producer's last batch after compaction) carries
    the producer's last sequence and epoch; a rebuild from the log alone must use it."""
    log = open_log()
    original = encode_batch(
        pa.array([b"a", b"b", b"c"]), producer_id=4, producer_epoch=1, base_sequence=10, now_ms=7
    )
    log.append(encode_empty_batch(BatchHeader.unpack_from(original)), assign_offsets=False)
    assert log.producer_state.last_records() == {4: LastRecord(2, 1)}
    log.close()
    for path in snapshot_files(log.directory):
        path.unlink()
    log = open_log(had_clean_shutdown=False)
    entry = log.producer_state.entry(4)
    assert entry is not None
    assert (entry.producer_epoch, entry.last_seq, entry.last_timestamp_ms) == (1, 12, 7)
    assert log.append(original).is_duplicate
    assert log.read_records(0).num_rows == 0


def test_snapshot_round_trip_and_fallback(tmp_path: Path) -> None:
    """The manager alone: a snapshot reads back equal; a bad one is deleted and an older one
    used; one above the requested offset (the log was cut below it) is deleted."""
    state = ProducerStateManager(tmp_path)
    entries = {
        1: ProducerStateEntry(
            1,
            7,
            [BatchMetadata(i, i + 1, 10 * i, 10 * i + 1, START_MS + i) for i in range(5)],
            coordinator_epoch=3,
            last_timestamp_ms=START_MS + 4,
            current_txn_first_offset=40,
        ),
        2**62: ProducerStateEntry(2**62, 32767, [], -1, -1, None),
        5: ProducerStateEntry(5, 0, [BatchMetadata(INT32_MAX, 0, 7, 8, 9)], 0, 9, None),
    }
    for offset, count in ((50, 1), (80, 2), (120, 3)):
        state.reset()
        state._producers = {k: v.copy() for k, v in list(entries.items())[:count]}
        state._ongoing_txns = {40: 1}
        state.update_map_end_offset(offset)
        state.take_snapshot()
    assert state.snapshot_offsets() == [50, 80, 120]

    loaded = ProducerStateManager(tmp_path)
    assert loaded.load_latest_snapshot(at_most=2**63 - 1) == 120
    assert dict(loaded.producers) == entries
    assert dict(loaded.ongoing_txns) == {40: 1}
    assert loaded.first_unstable_offset() == 40
    assert loaded.map_end_offset == 120

    newest = tmp_path / f"{120:020d}{SNAPSHOT_SUFFIX}"
    data = bytearray(newest.read_bytes())
    data[-1] ^= 1
    newest.write_bytes(bytes(data))
    assert loaded.load_latest_snapshot(at_most=2**63 - 1) == 80
    assert not newest.exists()
    assert set(loaded.producers) == set(list(entries)[:2])

    assert loaded.load_latest_snapshot(at_most=79) == 50
    assert loaded.snapshot_offsets() == [50]
    assert loaded.load_latest_snapshot(at_most=49) is None
    assert loaded.snapshot_offsets() == []
    assert dict(loaded.producers) == {}
    assert loaded.map_end_offset == 0


def test_stray_files_are_not_taken_for_snapshots(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    for name in (
        "1.snapshot",
        "0000000000000000000x.snapshot",
        "00000000000000000007.snap",
        f"{7:020d}{SNAPSHOT_SUFFIX}.tmp",
    ):
        (tmp_path / name).write_bytes(b"junk")
    assert state.snapshot_offsets() == []
    assert state.load_latest_snapshot(at_most=100) is None


def test_truncation_rolls_producer_state_back(open_log: OpenLog) -> None:
    log = open_log(HISTORY_CONFIG)
    infos = [log.append(batch(seq)) for seq in range(4)]
    log.roll()
    infos += [log.append(batch(seq)) for seq in range(4, 8)]
    log.truncate_to(infos[6].first_offset)
    entry = log.producer_state.entry(PID)
    assert entry is not None
    assert entry.last_seq == 5
    assert [b.first_seq for b in entry.batches] == [1, 2, 3, 4, 5]
    assert snapshot_files(log.directory) == [log.directory / f"{4:020d}{SNAPSHOT_SUFFIX}"]
    # The cut batches are gone, so their retry is appended again (at the new log end).
    info = log.append(batch(6))
    assert (info.is_duplicate, info.first_offset) == (False, infos[6].first_offset)
    assert_duplicate(log, batch(2), infos[2])
    # Cutting everything of a producer makes it unknown: it may start anywhere.
    log.truncate_to(0)
    assert log.producer_state.entry(PID) is None
    log.append(batch(12345))


# ---------------------------------------------------------------------------------------------
# Expiry and retention


def test_idle_producers_expire_after_producer_id_expiration_ms(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(producer_id_expiration_ms=60_000)
    log.append(batch(0, pid=1, now_ms=clock.now_ms))
    clock.now_ms += 30_000
    original = log.append(batch(0, pid=2, now_ms=clock.now_ms))
    log.append(batch(0, pid=3, transactional=True, now_ms=clock.now_ms))
    clock.now_ms += 29_999
    assert log.remove_expired_producers() == 0
    clock.now_ms += 1  # producer 1 has now been idle exactly 60 s
    assert log.remove_expired_producers() == 1
    assert set(log.producer_state.producers) == {2, 3}
    # Expired means unknown: any sequence is accepted again, and old retries are not recognised.
    assert not log.append(batch(500, pid=1, now_ms=clock.now_ms)).is_duplicate
    clock.now_ms += 10**9
    assert log.remove_expired_producers() == 2, "an open transaction keeps its producer"
    assert set(log.producer_state.producers) == {3}
    info = log.append(batch(0, pid=2, now_ms=clock.now_ms))
    assert (info.is_duplicate, info.first_offset) == (False, log.log_end_offset - 1)
    assert info.first_offset != original.first_offset


def test_the_record_timestamp_not_the_append_time_counts_for_expiry(
    open_log: OpenLog, clock: Clock
) -> None:
    log = open_log(producer_id_expiration_ms=1_000)
    log.append(batch(0, now_ms=clock.now_ms + 5_000))  # a producer clock ahead of the broker's
    clock.now_ms += 5_999
    assert log.remove_expired_producers() == 0
    clock.now_ms += 1
    assert log.remove_expired_producers() == 1


def test_expiry_setting_is_kept_by_reopened_logs(open_log: OpenLog, clock: Clock) -> None:
    log = open_log(producer_id_expiration_ms=1_000)
    log.append(batch(0, now_ms=clock.now_ms))
    log.close()
    log = open_log(
        producer_id_expiration_ms=1_000, had_clean_shutdown=True, recovery_point=log.log_end_offset
    )
    assert log.producer_state.producer_id_expiration_ms == 1_000
    clock.now_ms += 1_000
    assert log.remove_expired_producers() == 1


def test_producers_whose_data_was_deleted_are_forgotten(open_log: OpenLog) -> None:
    log = open_log(HISTORY_CONFIG)
    log.append(batch(0, pid=1))
    log.append(batch(0, pid=2, transactional=True))
    log.roll()
    log.append(batch(1, pid=3))
    log.roll()
    log.append(batch(0, pid=3 + 1))
    log.delete_records_before(2)
    assert set(log.producer_state.producers) == {2, 3, 4}, "an open transaction is kept"
    assert all(int(p.name[:20]) >= 2 for p in snapshot_files(log.directory))


# ---------------------------------------------------------------------------------------------
# Property: re-appending old batches never writes anything twice


@dataclasses.dataclass
class Acked:
    pid: int
    epoch: int
    first_seq: int
    records: int
    data: bytes
    info: LogAppendInfo


PRODUCERS = (11, 12, 13)
STARTS = st.sampled_from([0, INT32_MAX - 3, INT32_MAX, 1_000_000])
RESTARTS = st.sampled_from(["none"] * 6 + ["clean", "crash", "crash-no-snapshots"])


class Restarter:
    """Restarts one log in a temporary root: clean, or from a crash image (a copy)."""

    def __init__(self, root: Path, config: LogConfig) -> None:
        self.root = root
        self.config = config
        self.generation = 0
        self.log = self._open(clean=False, recovery_point=0)

    @property
    def directory(self) -> Path:
        return self.root / f"gen-{self.generation}"

    def _open(self, *, clean: bool, recovery_point: int) -> PartitionLog:
        return PartitionLog.open(
            self.directory,
            self.config,
            topic="t",
            partition=0,
            had_clean_shutdown=clean,
            recovery_point=recovery_point,
            time_ms=lambda: START_MS,
        )

    def restart(self, kind: str, rng: random.Random) -> None:
        if kind == "none":
            return
        log = self.log
        if kind == "clean":
            log.close()
            self.log = self._open(clean=True, recovery_point=log.recovery_point)
            return
        crashed = self.directory
        self.generation += 1
        shutil.copytree(crashed, self.directory)
        log.close()
        shutil.rmtree(crashed)
        if kind == "crash-no-snapshots":
            for path in snapshot_files(self.directory):
                path.unlink()
        self.log = self._open(clean=False, recovery_point=rng.randint(0, log.recovery_point))


@settings(
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    starts=st.lists(STARTS, min_size=len(PRODUCERS), max_size=len(PRODUCERS)),
    appends=st.lists(
        st.tuples(
            st.sampled_from(PRODUCERS), st.integers(1, 4), st.integers(0, 7), st.integers(0, 3)
        ),
        min_size=1,
        max_size=25,
    ),
    picks=st.lists(st.integers(0, 10**6), max_size=20),
    restarts=st.lists(RESTARTS, min_size=2, max_size=2),
    segment_bytes=st.sampled_from([2 * 1024, 5 * 1024, 1024 * 1024]),
    seed=st.integers(0, 2**32 - 1),
)
def test_reappending_old_batches_never_duplicates_a_record(
    *,
    starts: list[int],
    appends: list[tuple[int, int, int, int]],
    picks: list[int],
    restarts: list[str],
    segment_bytes: int,
    seed: int,
) -> None:
    """Append idempotent batches of several producers (with plain batches and an epoch bump
    in between), restart, then re-append any of them in any order, with repeats.

    A retry of one of the producer's last five batches of its current epoch answers with
    the original offsets; an older one is out of order; one from a fenced epoch is refused;
    nothing is ever appended. The log then holds every record exactly once, in order.
    """
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=segment_bytes)
    with tempfile.TemporaryDirectory(prefix="dedup-") as root:
        restarter = Restarter(Path(root), config)
        try:
            next_seq = dict(zip(PRODUCERS, starts, strict=True))
            epoch = dict.fromkeys(PRODUCERS, 0)
            acked: list[Acked] = []
            expected_values: list[bytes] = []
            for i, (pid, records, bump_draw, plain_records) in enumerate(appends):
                if bump_draw == 0 and i > 0:  # one append in eight starts a new epoch
                    epoch[pid] += 1
                    next_seq[pid] = 0
                data = batch(next_seq[pid], records, pid=pid, epoch=epoch[pid])
                info = restarter.log.append(data)
                assert not info.is_duplicate
                acked.append(Acked(pid, epoch[pid], next_seq[pid], records, data, info))
                expected_values += [
                    f"{pid}/{epoch[pid]}/{(next_seq[pid] + j) % 2**31}".encode()
                    for j in range(records)
                ]
                next_seq[pid] = (next_seq[pid] + records) % 2**31
                if plain_records:
                    restarter.log.append(plain(plain_records, tag=f"p{i}"))
                    expected_values += [f"p{i}/{j}".encode() for j in range(plain_records)]
                if i == len(appends) // 2:
                    restarter.restart(restarts[0], rng)
            restarter.restart(restarts[1], rng)

            log = restarter.log
            end, size = log.log_end_offset, log.size_bytes
            recent = {
                pid: [a for a in acked if a.pid == pid and a.epoch == epoch[pid]][
                    -MAX_BATCHES_PER_PRODUCER:
                ]
                for pid in PRODUCERS
            }
            for pick in picks:
                old = acked[pick % len(acked)]
                if old.epoch < epoch[old.pid]:
                    with pytest.raises(InvalidProducerEpochError):
                        log.append(old.data)
                elif any(old is a for a in recent[old.pid]):
                    info = log.append(old.data)
                    assert info.is_duplicate
                    assert (info.first_offset, info.last_offset) == (
                        old.info.first_offset,
                        old.info.last_offset,
                    )
                else:
                    with pytest.raises(OutOfOrderSequenceError):
                        log.append(old.data)
                assert (log.log_end_offset, log.size_bytes) == (end, size)

            assert values_of(log) == expected_values
            for pid in {a.pid for a in acked}:
                info = log.append(batch(next_seq[pid], pid=pid, epoch=epoch[pid]))
                assert not info.is_duplicate
        finally:
            restarter.log.close()


def test_read_committed_is_unaffected_by_idempotent_non_transactional_writes(
    open_log: OpenLog,
) -> None:
    log = open_log()
    log.append(batch(0, 3))
    assert log.last_stable_offset == log.high_watermark == 3
    table = log.read_records(0, isolation=FetchIsolation.TXN_COMMITTED)
    assert table.num_rows == 3


def test_an_entry_copy_keeps_every_field_and_owns_its_batches() -> None:
    """copy() lists the fields one by one (the append path copies an entry per batch): a
    field added to ProducerStateEntry and left out there would come back as its default."""
    entry = ProducerStateEntry(7, 3, [BatchMetadata(0, 4, 100, 104, 1)], 9, 1234, 100)
    assert all(
        getattr(entry, f.name) != f.default
        for f in dataclasses.fields(entry)
        if f.default is not dataclasses.MISSING
    ), "give every field a non-default value here"
    copied = entry.copy()
    assert copied == entry
    copied.batches.append(BatchMetadata(5, 5, 105, 105, 2))
    assert len(entry.batches) == 1
