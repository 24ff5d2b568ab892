"""Transactions in the partition log: markers, the last stable offset, read_committed, txnindex.

The first part pins single behaviours: where the LSO sits, what ``read_committed``
(``FetchIsolation.TXN_COMMITTED``) and ``read_uncommitted`` (``HIGH_WATERMARK``) return, one
``.txnindex`` entry per abort in the segment of its marker, and the rebuild of those entries
after an unclean restart (index files deleted, emptied or torn on a crash image).

The second part is a Hypothesis state machine checked against a reference model. Several
transactional producers write interleaved transactions, other producers write idempotent and
plain batches in between, and the coordinator commits or aborts (sometimes bumping the
producer or coordinator epoch). Rolls (small ``segment.bytes``), truncation, clean restarts and
crashes (a copy of the open log's directory, with snapshots or transaction indexes damaged as
a crash may leave them) come in between, so snapshot loading, replay and the txnindex rebuild
run all the time. The model is only the list of batches in the log: everything it expects
(open transactions, the LSO, each producer's state, the aborted transactions and what each
isolation level reads) is derived from that list by replaying it, which also makes truncation
trivial for the model. On failure Hypothesis prints the steps and a reproduction blob.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from log_testing import START_MS, OpenLog

from spark_mq.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from spark_mq.storage.batch_decoder import decode_records, iter_batches
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.producer_state import MAX_BATCHES_PER_PRODUCER, SNAPSHOT_SUFFIX
from spark_mq.storage.record_batch import NO_PRODUCER_EPOCH, ControlType, encode_batch
from spark_mq.storage.txn_index import AbortedTxn

COMMIT = ControlType.COMMIT
ABORT = ControlType.ABORT
BIG = 64 * 1024 * 1024


class Writer:
    """A transactional (or idempotent) producer of one log, tracking its own sequence."""

    def __init__(self, log: PartitionLog, pid: int, *, epoch: int = 0) -> None:
        self.log = log
        self.pid = pid
        self.epoch = epoch
        self.seq = 0

    def write(self, *values: str, transactional: bool = True) -> int:
        """Append one batch of ``values``; returns its first offset."""
        data = encode_batch(
            pa.array([v.encode() for v in values], pa.binary()),
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=transactional,
            now_ms=START_MS,
        )
        info = self.log.append(data)
        self.seq += len(values)
        return info.first_offset

    def end(self, control_type: ControlType, *, coordinator_epoch: int = 0) -> int:
        """The coordinator's marker for this producer; returns its offset."""
        return self.log.append_transaction_marker(
            control_type,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            coordinator_epoch=coordinator_epoch,
        ).first_offset


def plain(log: PartitionLog, *values: str) -> int:
    data = encode_batch(pa.array([v.encode() for v in values], pa.binary()), now_ms=START_MS)
    return log.append(data).first_offset


def consume(
    log: PartitionLog, start: int, isolation: FetchIsolation, max_bytes: int = BIG
) -> list[tuple[int, bytes]]:
    """What a consumer reads from ``start`` until the log has nothing more for it.

    Like Kafka's consumer it uses :meth:`PartitionLog.read` and decodes the bytes itself, so
    that it can move past fetches that hold only aborted data or markers: the next fetch starts
    after the last whole batch of the previous one. Checks on the way that no record is at or
    past the fetch's bound and that the position stops exactly at the bound.
    """
    offset = start
    out: list[tuple[int, bytes]] = []
    for _ in range(100_000):
        info = log.read(offset, max_bytes, isolation=isolation)
        bound = (
            info.last_stable_offset
            if isolation is FetchIsolation.TXN_COMMITTED
            else info.high_watermark
        )
        if isolation is FetchIsolation.TXN_COMMITTED:
            assert info.aborted_transactions is not None
        else:
            assert info.aborted_transactions is None
        if info.records is None:
            assert offset >= bound, f"nothing read at {offset}, below the bound {bound}"
            return out
        with info.records as file_range:
            data = file_range.read()
        table = decode_records(
            data,
            start_offset=offset,
            end_offset=bound,
            aborted_transactions=info.aborted_transactions,
        )
        offsets = table.column("offset").to_pylist()
        assert all(o < bound for o in offsets), f"read past the bound {bound}: {offsets}"
        out += zip(offsets, table.column("value").to_pylist(), strict=True)
        next_offset = max(header.next_offset for header, _ in iter_batches(data))
        assert offset < next_offset <= bound, (offset, next_offset, bound)
        # Only the aborted transactions this fetch can meet, not every later one.
        for txn in info.aborted_transactions or ():
            assert txn.last_offset >= offset and txn.first_offset < next_offset, (txn, offset)
        offset = next_offset
    raise AssertionError("the consumer made no progress")


def committed_values(log: PartitionLog, start: int = 0) -> list[bytes]:
    return [v for _, v in consume(log, start, FetchIsolation.TXN_COMMITTED)]


def uncommitted_values(log: PartitionLog, start: int = 0) -> list[bytes]:
    return [v for _, v in consume(log, start, FetchIsolation.HIGH_WATERMARK)]


def txn_index_entries(log: PartitionLog) -> list[tuple[int, AbortedTxn]]:
    """Every transaction index entry of the log, with the base offset of its segment."""
    return [(s.base_offset, txn) for s in log.segments for txn in s.txn_index.all_aborted_txns()]


# ---------------------------------------------------------------------------------------------
# The last stable offset


def test_lso_is_the_first_offset_of_the_oldest_open_transaction(open_log: OpenLog) -> None:
    log = open_log()
    a, b = Writer(log, 1), Writer(log, 2)
    assert log.last_stable_offset == 0
    plain(log, "p0", "p1")
    assert log.last_stable_offset == 2
    a_first = a.write("a0")
    assert (a_first, log.last_stable_offset) == (2, 2)
    plain(log, "p2")
    b_first = b.write("b0", "b1")
    a.write("a1")
    assert log.last_stable_offset == a_first
    assert dict(log.producer_state.ongoing_txns) == {a_first: 1, b_first: 2}
    a.end(COMMIT)
    assert log.last_stable_offset == b_first
    b.end(ABORT)
    assert log.last_stable_offset == log.high_watermark == log.log_end_offset
    assert log.producer_state.ongoing_txns == {}


def test_lso_is_capped_by_the_high_watermark(open_log: OpenLog) -> None:
    log = open_log(high_watermark_follows_log_end=False)
    w = Writer(log, 1)
    plain(log, "p0", "p1", "p2")
    assert log.high_watermark == 0
    assert log.last_stable_offset == 0
    log.update_high_watermark(3)
    first = w.write("t0")
    assert log.last_stable_offset == 3
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == first == 3
    w.end(COMMIT)
    assert log.last_stable_offset == 4, "capped by the high watermark, which is before the marker"
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 5
    assert committed_values(log) == [b"p0", b"p1", b"p2", b"t0"]


def test_lso_is_never_below_the_log_start(open_log: OpenLog) -> None:
    """Deleting records may remove the head of an open transaction; the LSO then stays at the
    log start (as Kafka clamps it), not at an offset no reader may ask for."""
    log = open_log()
    w = Writer(log, 1)
    w.write("t0")
    plain(log, "p0")
    log.roll()
    plain(log, "p1")
    assert log.last_stable_offset == 0
    assert log.delete_records_before(2) == 2
    assert log.last_stable_offset == 2
    info = log.read(2, isolation=FetchIsolation.TXN_COMMITTED)
    assert (info.records, info.last_stable_offset) == (None, 2)
    w.end(COMMIT)
    assert log.last_stable_offset == log.log_end_offset
    assert committed_values(log, 2) == [b"p1"]


def test_read_committed_after_retention_deleted_the_head_of_an_aborted_transaction(
    open_log: OpenLog,
) -> None:
    log = open_log()
    w = Writer(log, 1)
    w.write("t0")
    plain(log, "p0")
    log.roll()
    w.write("t1")
    w.end(ABORT)
    plain(log, "p1")
    log.delete_records_before(2)
    assert committed_values(log, 2) == [b"p1"]
    assert uncommitted_values(log, 2) == [b"t1", b"p1"]
    log.close()
    reopened = open_log(
        had_clean_shutdown=True, recovery_point=log.log_end_offset, log_start_offset=2
    )
    assert committed_values(reopened, 2) == [b"p1"]


def test_lso_survives_restarts(open_log: OpenLog, tmp_path: Path) -> None:
    log = open_log(LogConfig(segment_bytes=2048))
    w = Writer(log, 1)
    plain(log, "p")
    first = w.write("t0")
    for i in range(6):
        plain(log, f"q{i}")
    assert log.num_segments > 2
    copy = tmp_path / "copy"
    shutil.copytree(log.directory, copy)
    log.close()
    clean = open_log(had_clean_shutdown=True, recovery_point=log.log_end_offset)
    crashed = open_log(directory=copy, recovery_point=0)
    for reopened in (clean, crashed):
        assert reopened.last_stable_offset == first
        assert committed_values(reopened) == [b"p"]
    # The coordinator can still end the transaction after the restart.
    Writer(crashed, 1).end(COMMIT)
    assert committed_values(crashed) == [b"p", b"t0", *(f"q{i}".encode() for i in range(6))]


# ---------------------------------------------------------------------------------------------
# read_committed and read_uncommitted


def test_read_committed_drops_aborted_data_and_stops_at_the_lso(open_log: OpenLog) -> None:
    log = open_log()
    a, b, c = Writer(log, 1), Writer(log, 2), Writer(log, 3)
    a.write("a0", "a1")
    b.write("b0")
    plain(log, "p0")
    Writer(log, 9).write("i0", transactional=False)  # idempotent, not transactional
    a.write("a2")
    b.write("b1")
    a.end(ABORT)
    c.write("c0")  # stays open: the LSO
    b.end(COMMIT)
    plain(log, "p1")
    lso = log.last_stable_offset
    assert lso == 8
    assert committed_values(log) == [b"b0", b"p0", b"i0", b"b1"]
    # From inside the aborted transaction, and from its very end.
    assert committed_values(log, 1) == [b"b0", b"p0", b"i0", b"b1"]
    assert committed_values(log, 5) == [b"b1"]
    assert committed_values(log, lso) == []
    assert committed_values(log, log.log_end_offset) == []
    # read_uncommitted: every data record up to the high watermark, never a marker.
    assert uncommitted_values(log) == [
        b"a0", b"a1", b"b0", b"p0", b"i0", b"a2", b"b1", b"c0", b"p1",
    ]  # fmt: skip
    # The decoding reader agrees (one segment here, so one read returns everything).
    table = log.read_records(0, isolation=FetchIsolation.TXN_COMMITTED)
    assert table.column("value").to_pylist() == [b"b0", b"p0", b"i0", b"b1"]
    assert table.column("offset").to_pylist() == [2, 3, 4, 6]
    table = log.read_records(0, isolation=FetchIsolation.HIGH_WATERMARK)
    assert table.num_rows == 9
    info = log.read(0, isolation=FetchIsolation.TXN_COMMITTED)
    # The LSO recorded with the abort is b's first offset: b was open when a aborted.
    assert info.aborted_transactions == (AbortedTxn(1, 0, 7, 2),)
    assert info.last_stable_offset == lso
    if info.records is not None:
        info.records.close()


def test_aborted_transactions_of_the_same_producer_one_after_another(open_log: OpenLog) -> None:
    log = open_log()
    w = Writer(log, 1)
    for round_no, decision in enumerate([ABORT, COMMIT, ABORT, ABORT, COMMIT]):
        w.write(f"{round_no}a")
        plain(log, f"{round_no}p")
        w.write(f"{round_no}b")
        w.end(decision)
    expected = []
    for round_no, decision in enumerate([ABORT, COMMIT, ABORT, ABORT, COMMIT]):
        if decision is COMMIT:
            expected += [f"{round_no}a", f"{round_no}p", f"{round_no}b"]
        else:
            expected += [f"{round_no}p"]
    assert committed_values(log) == [v.encode() for v in expected]
    for max_bytes in (1, 700, 2000):
        got = [v for _, v in consume(log, 0, FetchIsolation.TXN_COMMITTED, max_bytes)]
        assert got == [v.encode() for v in expected]


def test_a_fetch_collects_only_the_aborted_transactions_it_can_meet(open_log: OpenLog) -> None:
    """The aborted transactions of a fetch are bounded by the fetched batches, not by the LSO:
    otherwise every fetch would carry every later abort, and a full scan would be quadratic."""
    log = open_log()
    w = Writer(log, 1)
    firsts = []
    for i in range(20):
        firsts.append(w.write(f"t{i}"))
        w.end(ABORT)
        plain(log, f"p{i}")
    first_batch = log.read(0, 1, isolation=FetchIsolation.TXN_COMMITTED)
    assert first_batch.aborted_transactions == (AbortedTxn(1, 0, 1, 2),)
    if first_batch.records is not None:
        first_batch.records.close()
    middle = log.read(firsts[10], 1, isolation=FetchIsolation.TXN_COMMITTED)
    assert [t.first_offset for t in middle.aborted_transactions or ()] == [firsts[10]]
    if middle.records is not None:
        middle.records.close()
    everything = log.read(0, BIG, isolation=FetchIsolation.TXN_COMMITTED)
    assert [t.first_offset for t in everything.aborted_transactions or ()] == firsts
    if everything.records is not None:
        everything.records.close()
    assert committed_values(log) == [f"p{i}".encode() for i in range(20)]


def test_a_commit_or_abort_without_data_is_harmless(open_log: OpenLog) -> None:
    log = open_log()
    w = Writer(log, 1)
    plain(log, "p")
    marker = w.end(ABORT)
    w.end(COMMIT)
    assert txn_index_entries(log) == [(0, AbortedTxn(1, marker, marker, marker + 1))]
    assert committed_values(log) == uncommitted_values(log) == [b"p"]
    assert log.last_stable_offset == log.log_end_offset == 3


# ---------------------------------------------------------------------------------------------
# The transaction index


def test_each_abort_adds_one_entry_in_the_segment_of_its_marker(open_log: OpenLog) -> None:
    log = open_log()
    a, b = Writer(log, 1), Writer(log, 2)
    a_first = a.write("a0")
    b_first = b.write("b0")
    log.roll()
    a.write("a1")
    assert txn_index_entries(log) == []
    marker_a = a.end(ABORT)  # b is still open: the LSO after the abort is b's first offset
    b.write("b1")
    log.roll()
    marker_b = b.end(ABORT)
    c_first = a.write("a2")
    a.end(COMMIT)  # commits add nothing
    assert [s.base_offset for s in log.segments] == [0, 2, 5]
    assert txn_index_entries(log) == [
        (2, AbortedTxn(1, a_first, marker_a, b_first)),
        (5, AbortedTxn(2, b_first, marker_b, marker_b + 1)),
    ]
    assert c_first == marker_b + 1
    assert (log.directory / f"{0:020d}.txnindex").exists() is False
    assert committed_values(log) == [b"a2"]


def _damage_txn_index(path: Path, damage: str) -> None:
    if damage == "deleted":
        path.unlink()
    elif damage == "emptied":
        path.write_bytes(b"")
    elif damage == "last-entry-lost":
        path.write_bytes(path.read_bytes()[:-34])
    elif damage == "torn":
        path.write_bytes(path.read_bytes()[:-5])
    elif damage == "garbage":
        path.write_bytes(path.read_bytes() + b"\xff" * 34)
    else:
        raise AssertionError(damage)


def _log_with_aborts(log: PartitionLog) -> None:
    """Aborted and committed transactions of two producers over several 2 KiB segments; the
    first and the active segment hold an abort marker."""
    first = Writer(log, 5)
    first.write("first")
    first.end(ABORT)
    writers = [Writer(log, 1), Writer(log, 2)]
    for round_no in range(8):
        for w in writers:
            w.write(f"{w.pid}:{round_no}")
        plain(log, f"p{round_no}")
        w = writers[round_no % 2]
        w.end(ABORT if round_no % 3 else COMMIT)
    writers[0].end(ABORT)
    assert log.num_segments >= 4
    assert log.segments[0].txn_index.all_aborted_txns()
    assert log.active_segment.txn_index.all_aborted_txns()
    assert log.recovery_point == log.active_segment.base_offset


def _txn_index_damage_cases() -> Iterator[tuple[str, str, str]]:
    """With the recovery point at 0 every segment is recovered, so any damage is fair. With
    the log's own recovery point only the active segment is recovered: below it an index that
    lost whole entries is what a flushed file can never look like, so only damage that a check
    detects (torn, garbage) is applied there."""
    for which in ("first", "middle", "active", "all"):
        for damage in ("deleted", "emptied", "last-entry-lost", "torn", "garbage"):
            yield "from-zero", which, damage
            if damage in ("torn", "garbage") or which == "active":
                yield "recovery-point", which, damage


@pytest.mark.parametrize(("recovery", "which", "damage"), list(_txn_index_damage_cases()))
def test_txn_index_is_rebuilt_after_an_unclean_restart(
    open_log: OpenLog, tmp_path: Path, which: str, damage: str, recovery: str
) -> None:
    """On a crash image, a transaction index that is gone, short or torn comes back whole
    (see ``_txn_index_damage_cases`` for which damage is applied where)."""
    config = LogConfig(segment_bytes=2048)
    log = open_log(config)
    _log_with_aborts(log)
    entries = txn_index_entries(log)
    committed, uncommitted = committed_values(log), uncommitted_values(log)
    recovery_point = 0 if recovery == "from-zero" else log.recovery_point
    copy = tmp_path / "copy"
    shutil.copytree(log.directory, copy)
    with_entries = sorted({base for base, _ in entries})  # the segments with a .txnindex file
    middle = len(with_entries) // 2
    targets = {
        "first": with_entries[:1],
        "middle": with_entries[middle : middle + 1],
        "active": with_entries[-1:],
        "all": with_entries,
    }[which]
    for base in targets:
        _damage_txn_index(copy / f"{base:020d}.txnindex", damage)
    reopened = open_log(config, directory=copy, recovery_point=recovery_point)
    assert txn_index_entries(reopened) == entries
    assert committed_values(reopened) == committed
    assert uncommitted_values(reopened) == uncommitted
    for segment in reopened.segments:
        segment.txn_index.sanity_check()


def test_a_torn_txn_index_in_the_first_segment_is_rebuilt_below_the_recovery_point(
    open_log: OpenLog, tmp_path: Path
) -> None:
    """Offset 0 is a segment base like any other: the loader once took a failed check of the
    first segment's index for "nothing to rebuild" when recovery started later, and the next
    read_committed fetch raised CorruptIndexError."""
    config = LogConfig(segment_bytes=2048)
    log = open_log(config)
    _log_with_aborts(log)
    assert log.recovery_point > log.segments[1].base_offset
    entries = txn_index_entries(log)
    copy = tmp_path / "copy"
    shutil.copytree(log.directory, copy)
    _damage_txn_index(copy / f"{0:020d}.txnindex", "torn")
    reopened = open_log(config, directory=copy, recovery_point=log.recovery_point)
    assert txn_index_entries(reopened) == entries
    assert committed_values(reopened) == committed_values(log)


def test_truncation_reopens_a_transaction_and_drops_its_index_entry(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=2048))
    w = Writer(log, 1)
    first = w.write("t0")
    plain(log, "p0")
    log.roll()
    w.write("t1")
    marker = w.end(ABORT)
    plain(log, "p1")
    assert txn_index_entries(log) == [(2, AbortedTxn(1, first, marker, marker + 1))]
    assert committed_values(log) == [b"p0", b"p1"]
    log.truncate_to(marker)
    assert txn_index_entries(log) == []
    assert log.last_stable_offset == first
    assert dict(log.producer_state.ongoing_txns) == {first: 1}
    assert committed_values(log) == []
    w.seq = 2
    w.end(COMMIT)
    assert committed_values(log) == [b"t0", b"p0", b"t1"]


# ---------------------------------------------------------------------------------------------
# The reference model


@dataclasses.dataclass(frozen=True, slots=True)
class ModelBatch:
    """A batch as the model knows it; ``data`` is the bytes sent, for retries."""

    base_offset: int
    values: tuple[bytes, ...]  # empty for a marker
    producer_id: int = -1
    epoch: int = NO_PRODUCER_EPOCH
    first_seq: int = -1
    transactional: bool = False
    control: ControlType | None = None
    coordinator_epoch: int = -1
    data: bytes = b""

    @property
    def next_offset(self) -> int:
        return self.base_offset + (1 if self.control is not None else len(self.values))

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    @property
    def last_seq(self) -> int:
        return (self.first_seq + len(self.values) - 1) % 2**31


@dataclasses.dataclass
class ModelProducer:
    epoch: int = NO_PRODUCER_EPOCH
    batches: list[ModelBatch] = dataclasses.field(default_factory=list)
    coordinator_epoch: int = -1
    txn_first: int | None = None

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def summary(self) -> tuple[int, list[tuple[int, int, int, int]], int, int | None]:
        batches = [(b.first_seq, b.last_seq, b.base_offset, b.last_offset) for b in self.batches]
        return self.epoch, batches, self.coordinator_epoch, self.txn_first


PLAIN, OPEN, COMMITTED, ABORTED = "plain", "open", "committed", "aborted"


@dataclasses.dataclass
class Replay:
    """What the log must know, derived from the list of its batches alone."""

    producers: dict[int, ModelProducer] = dataclasses.field(default_factory=dict)
    open_txns: dict[int, int] = dataclasses.field(default_factory=dict)  # first offset -> pid
    status: dict[int, str] = dataclasses.field(default_factory=dict)  # data batch -> status
    aborted: list[AbortedTxn] = dataclasses.field(default_factory=list)


def replay(batches: list[ModelBatch]) -> Replay:
    r = Replay()
    in_txn: dict[int, list[ModelBatch]] = {}
    for b in batches:
        if b.producer_id < 0:
            r.status[b.base_offset] = PLAIN
            continue
        p = r.producers.setdefault(b.producer_id, ModelProducer())
        if b.control is not None:
            first = b.base_offset if p.txn_first is None else p.txn_first
            if b.control is ABORT:
                others = [f for f in r.open_txns if f != first]
                lso = min(others) if others else b.base_offset + 1
                r.aborted.append(AbortedTxn(b.producer_id, first, b.base_offset, lso))
            for member in in_txn.pop(b.producer_id, []):
                r.status[member.base_offset] = COMMITTED if b.control is COMMIT else ABORTED
            r.open_txns.pop(first, None)
            p.txn_first = None
            p.set_epoch(b.epoch)
            p.coordinator_epoch = b.coordinator_epoch
            continue
        if b.transactional:
            if p.txn_first is None:
                p.txn_first = b.base_offset
                r.open_txns[b.base_offset] = b.producer_id
            in_txn.setdefault(b.producer_id, []).append(b)
            r.status[b.base_offset] = OPEN
        else:
            r.status[b.base_offset] = PLAIN
        p.set_epoch(b.epoch)
        p.batches.append(b)
        del p.batches[:-MAX_BATCHES_PER_PRODUCER]
    return r


TXN_PIDS = (1, 2, 3)
IDEMPOTENT_PIDS = (7,)
ALL_PIDS = TXN_PIDS + IDEMPOTENT_PIDS
DEFAULT_INDEX_BYTES = 10 * 1024 * 1024
CLEAN_DAMAGE = ("none", "no-snapshots", "corrupt-snapshot", "torn-txn-index")
CRASH_DAMAGE = (
    "none",
    "no-snapshots",
    "corrupt-snapshot",
    "torn-txn-index",
    "lost-txn-index",
    "none",
)


class TransactionMachine(RuleBasedStateMachine):
    """Interleaved transactions, idempotent and plain writes, markers, restarts, truncation."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="txn-model-"))
        self.generation = 0
        self.now_ms = START_MS
        self.batches: list[ModelBatch] = []
        self.hw = 0
        self.hw_follows = True
        self.config = LogConfig()
        self.log: PartitionLog | None = None
        self.client_epoch = dict.fromkeys(ALL_PIDS, 0)
        self.coordinator_epoch = dict.fromkeys(TXN_PIDS, 0)
        self.start_seq = dict.fromkeys(ALL_PIDS, 0)
        self.value_counter = 0
        self.model = Replay()

    # -----------------------------------------------------------------------------------------
    # Helpers

    @property
    def directory(self) -> Path:
        return self.root / f"gen-{self.generation}"

    @property
    def the_log(self) -> PartitionLog:
        assert self.log is not None
        return self.log

    @property
    def log_end(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    @property
    def lso(self) -> int:
        first_open = min(self.model.open_txns, default=self.hw)
        return min(first_open, self.hw)

    def open_log(self, *, clean: bool, recovery_point: int) -> None:
        self.log = PartitionLog.open(
            self.directory,
            self.config,
            topic="txn",
            partition=0,
            recovery_point=recovery_point,
            had_clean_shutdown=clean,
            time_ms=lambda: self.now_ms,
            high_watermark_follows_log_end=self.hw_follows,
        )
        self.hw = self.log_end

    def remodel(self) -> None:
        self.model = replay(self.batches)

    def values(self, n: int) -> tuple[bytes, ...]:
        self.value_counter += n
        return tuple(f"v{self.value_counter - n + i}".encode() for i in range(n))

    def next_seq(self, pid: int) -> int:
        p = self.model.producers.get(pid)
        if p is None:
            return self.start_seq[pid]  # unknown: any sequence is accepted
        if p.epoch != self.client_epoch[pid]:
            return 0  # a new epoch starts at 0
        return (p.batches[-1].last_seq + 1) % 2**31 if p.batches else 0

    def encode(
        self, pid: int, n: int, *, transactional: bool, epoch: int | None = None
    ) -> tuple[bytes, ModelBatch]:
        values = self.values(n)
        epoch = self.client_epoch[pid] if epoch is None else epoch
        seq = self.next_seq(pid)
        data = encode_batch(
            pa.array(values, pa.binary()),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=transactional,
            now_ms=self.now_ms,
        )
        batch = ModelBatch(self.log_end, values, pid, epoch, seq, transactional, data=data)
        return data, batch

    def appended(self, batches: list[ModelBatch]) -> None:
        self.batches += batches
        if self.hw_follows:
            self.hw = self.log_end
        self.remodel()

    def expect_refused(self, data: bytes, error: type[Exception], **kwargs: Any) -> None:
        log = self.the_log
        before = (log.log_end_offset, log.size_bytes)
        with pytest.raises(error):
            log.append(data, **kwargs)
        assert (log.log_end_offset, log.size_bytes) == before

    def records(self, start: int, end: int, statuses: set[str]) -> list[tuple[int, bytes]]:
        out = []
        for b in self.batches:
            if b.control is not None or self.model.status[b.base_offset] not in statuses:
                continue
            out += [
                (b.base_offset + i, v)
                for i, v in enumerate(b.values)
                if start <= b.base_offset + i < end
            ]
        return out

    def boundaries(self) -> list[int]:
        return sorted({b.base_offset for b in self.batches} | {self.log_end})

    def check_reads(self, start: int, max_bytes: int) -> None:
        log = self.the_log
        committed = self.records(start, self.lso, {PLAIN, COMMITTED})
        everything = self.records(start, self.hw, {PLAIN, COMMITTED, ABORTED, OPEN})
        assert consume(log, start, FetchIsolation.TXN_COMMITTED, max_bytes) == committed
        assert consume(log, start, FetchIsolation.HIGH_WATERMARK, max_bytes) == everything
        # The decoding reader returns a prefix of the same, from one segment.
        for isolation, expected in (
            (FetchIsolation.TXN_COMMITTED, committed),
            (FetchIsolation.HIGH_WATERMARK, everything),
        ):
            table = log.read_records(start, max_bytes, isolation=isolation)
            got = list(
                zip(
                    table.column("offset").to_pylist(),
                    table.column("value").to_pylist(),
                    strict=True,
                )
            )
            assert got == expected[: len(got)]

    def check_everything(self) -> None:
        self.check_reads(0, BIG)
        self.state_matches_the_model()

    # -----------------------------------------------------------------------------------------
    # Setup and teardown

    @initialize(
        segment_bytes=st.integers(3 * 1024, 12 * 1024),
        index_interval_bytes=st.sampled_from([0, 700, 4096]),
        segment_index_bytes=st.sampled_from([240, 60, DEFAULT_INDEX_BYTES]),
        hw_follows=st.sampled_from([True, False]),
        start_seqs=st.lists(
            st.sampled_from([0, 2**31 - 3, 12345]), min_size=len(ALL_PIDS), max_size=len(ALL_PIDS)
        ),
    )
    def open_new_log(
        self,
        segment_bytes: int,
        index_interval_bytes: int,
        segment_index_bytes: int,
        hw_follows: bool,
        start_seqs: list[int],
    ) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
        )
        self.hw_follows = hw_follows
        self.start_seq = dict(zip(ALL_PIDS, start_seqs, strict=True))
        self.open_log(clean=False, recovery_point=0)

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -----------------------------------------------------------------------------------------
    # Invariants

    @invariant()
    def offsets_match_the_model(self) -> None:
        if self.log is None:
            return
        log = self.log
        assert log.log_end_offset == self.log_end
        assert log.high_watermark == self.hw
        assert log.last_stable_offset == self.lso
        for first in self.model.open_txns:
            assert log.last_stable_offset <= first, "the LSO passed an open transaction"

    @invariant()
    def state_matches_the_model(self) -> None:
        if self.log is None:
            return
        log = self.log
        got = {
            pid: (
                e.producer_epoch,
                [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches],
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
            for pid, e in log.producer_state.producers.items()
        }
        assert got == {pid: p.summary() for pid, p in self.model.producers.items()}
        assert dict(log.producer_state.ongoing_txns) == self.model.open_txns
        entries = txn_index_entries(log)
        assert [txn for _, txn in entries] == self.model.aborted
        bases = [s.base_offset for s in log.segments]
        for base, txn in entries:
            i = bases.index(base)
            upper = bases[i + 1] if i + 1 < len(bases) else log.log_end_offset
            assert base <= txn.last_offset < upper, f"{txn} is not in the segment of its marker"

    # -----------------------------------------------------------------------------------------
    # Writes

    @rule(pid=st.sampled_from(TXN_PIDS), n=st.integers(1, 4))
    def transactional_write(self, pid: int, n: int) -> None:
        data, batch = self.encode(pid, n, transactional=True)
        info = self.the_log.append(data)
        assert (info.first_offset, info.last_offset, info.is_duplicate) == (
            batch.base_offset,
            batch.last_offset,
            False,
        )
        self.appended([batch])

    @rule(pid=st.sampled_from(ALL_PIDS), n=st.integers(1, 4))
    def non_transactional_write(self, pid: int, n: int) -> None:
        data, batch = self.encode(pid, n, transactional=False)
        p = self.model.producers.get(pid)
        if p is not None and p.txn_first is not None:
            self.expect_refused(data, InvalidTxnStateError)
            return
        info = self.the_log.append(data)
        assert (info.first_offset, info.last_offset) == (batch.base_offset, batch.last_offset)
        self.appended([batch])

    @rule(counts=st.lists(st.integers(1, 4), min_size=1, max_size=3))
    def plain_write(self, counts: list[int]) -> None:
        batches = []
        offset = self.log_end
        for n in counts:
            values = self.values(n)
            batches.append(ModelBatch(offset, values))
            offset += n
        data = b"".join(
            encode_batch(pa.array(b.values, pa.binary()), now_ms=self.now_ms) for b in batches
        )
        info = self.the_log.append(data)
        assert (info.first_offset, info.last_offset) == (self.log_end, offset - 1)
        self.appended(batches)

    @rule(
        pid=st.sampled_from(TXN_PIDS),
        commit=st.booleans(),
        bump_coordinator=st.sampled_from([False, False, True]),
        bump_epoch=st.sampled_from([False, False, False, True]),
    )
    def end_transaction(
        self, pid: int, commit: bool, bump_coordinator: bool, bump_epoch: bool
    ) -> None:
        if bump_coordinator:
            self.coordinator_epoch[pid] += 1
        if bump_epoch:
            self.client_epoch[pid] += 1
        control = COMMIT if commit else ABORT
        offset = self.log_end
        info = self.the_log.append_transaction_marker(
            control,
            producer_id=pid,
            producer_epoch=self.client_epoch[pid],
            coordinator_epoch=self.coordinator_epoch[pid],
        )
        assert (info.first_offset, info.last_offset) == (offset, offset)
        marker = ModelBatch(
            offset,
            (),
            pid,
            self.client_epoch[pid],
            control=control,
            transactional=True,
            coordinator_epoch=self.coordinator_epoch[pid],
        )
        self.appended([marker])

    @precondition(lambda self: any(p.coordinator_epoch >= 1 for p in self.model.producers.values()))
    @rule(data=st.data())
    def marker_from_a_fenced_coordinator(self, data: st.DataObject) -> None:
        pid = data.draw(
            st.sampled_from(
                sorted(pid for pid, p in self.model.producers.items() if p.coordinator_epoch >= 1)
            ),
            label="pid",
        )
        log = self.the_log
        before = (log.log_end_offset, log.size_bytes)
        with pytest.raises(TransactionCoordinatorFencedError):
            log.append_transaction_marker(
                ABORT,
                producer_id=pid,
                producer_epoch=self.client_epoch[pid],
                coordinator_epoch=self.model.producers[pid].coordinator_epoch - 1,
            )
        assert (log.log_end_offset, log.size_bytes) == before

    @precondition(lambda self: any(p.epoch >= 1 for p in self.model.producers.values()))
    @rule(data=st.data(), transactional=st.booleans())
    def write_from_a_fenced_epoch(self, data: st.DataObject, transactional: bool) -> None:
        pid = data.draw(
            st.sampled_from(sorted(pid for pid, p in self.model.producers.items() if p.epoch >= 1)),
            label="pid",
        )
        stale, _ = self.encode(
            pid, 1, transactional=transactional, epoch=self.model.producers[pid].epoch - 1
        )
        self.expect_refused(stale, InvalidProducerEpochError)

    @precondition(lambda self: any(p.batches for p in self.model.producers.values()))
    @rule(data=st.data())
    def retry_a_recent_batch(self, data: st.DataObject) -> None:
        """A producer resends one of its last five batches: the original offsets come back."""
        candidates = [b for p in self.model.producers.values() for b in p.batches]
        old = data.draw(st.sampled_from(candidates), label="batch")
        log = self.the_log
        before = (log.log_end_offset, log.size_bytes)
        info = log.append(old.data)
        assert info.is_duplicate
        assert (info.first_offset, info.last_offset) == (old.base_offset, old.last_offset)
        assert (log.log_end_offset, log.size_bytes) == before

    # -----------------------------------------------------------------------------------------
    # High watermark, rolls, truncation

    @precondition(lambda self: not self.hw_follows)
    @rule(data=st.data())
    def move_high_watermark(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(self.boundaries()), label="high_watermark")
        assert self.the_log.update_high_watermark(offset) == offset
        self.hw = offset

    @rule()
    def roll(self) -> None:
        self.the_log.roll()
        assert self.the_log.active_segment.base_offset == self.log_end

    @precondition(lambda self: self.log_end > 0)
    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log_end + 2), label="offset")
        self.the_log.truncate_to(offset)
        if offset < self.log_end:
            cut = next(i for i, b in enumerate(self.batches) if b.next_offset > offset)
            del self.batches[cut:]
            self.hw = min(self.hw, self.log_end)
            self.remodel()
        self.check_everything()

    # -----------------------------------------------------------------------------------------
    # Reads

    @rule(data=st.data(), max_bytes=st.sampled_from([1, 1500, 6000, BIG]))
    def read_from_anywhere(self, data: st.DataObject, max_bytes: int) -> None:
        start = data.draw(st.integers(0, self.log_end), label="start")
        self.check_reads(start, max_bytes)

    # -----------------------------------------------------------------------------------------
    # Restarts

    def damage(self, damage: str, recovered_from: int, data: st.DataObject) -> None:
        """Apply to the (closed) directory a fault a crash may leave behind.

        Snapshots may be missing or corrupt. A transaction index may be torn anywhere (a size
        that is not a whole number of entries is always detected), and in segments from the
        one being recovered on, where nothing was flushed, it may also have lost entries or
        the whole file.
        """
        directory = self.directory
        if damage == "no-snapshots":
            for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
                path.unlink()
        elif damage == "corrupt-snapshot":
            snapshots = sorted(directory.glob(f"*{SNAPSHOT_SUFFIX}"))
            if snapshots:
                path = data.draw(st.sampled_from(snapshots), label="snapshot")
                raw = bytearray(path.read_bytes())
                raw[data.draw(st.integers(0, len(raw) - 1), label="byte")] ^= 0x10
                path.write_bytes(bytes(raw))
        elif damage in ("torn-txn-index", "lost-txn-index"):
            indexes = sorted(p for p in directory.glob("*.txnindex") if p.stat().st_size)
            if damage == "lost-txn-index":
                indexes = [p for p in indexes if int(p.name[:20]) >= recovered_from]
            if not indexes:
                return
            path = data.draw(st.sampled_from(indexes), label="txnindex")
            size = path.stat().st_size
            if damage == "torn-txn-index":
                keep = data.draw(st.integers(0, size - 1).filter(lambda n: n % 34), label="keep")
            else:
                keep = data.draw(st.integers(0, size // 34 - 1), label="entries") * 34
            with path.open("r+b") as f:
                f.truncate(keep)

    @rule(data=st.data(), damage=st.sampled_from(CLEAN_DAMAGE))
    def close_and_reopen_clean(self, data: st.DataObject, damage: str) -> None:
        log = self.the_log
        log.close()
        self.damage(damage, self.log_end, data)
        self.open_log(clean=True, recovery_point=log.recovery_point)
        self.check_everything()

    @rule(data=st.data(), damage=st.sampled_from(CRASH_DAMAGE))
    def crash_and_recover(self, data: st.DataObject, damage: str) -> None:
        """A process crash: the files as they are now, never closed; reopened unclean."""
        log = self.the_log
        recovery_point = data.draw(st.integers(0, log.recovery_point), label="recovery_point")
        bases = [s.base_offset for s in log.segments]
        recovered_from = max((b for b in bases if b <= recovery_point), default=bases[0])
        crashed = self.directory
        self.generation += 1
        shutil.copytree(crashed, self.directory)
        log.close()
        shutil.rmtree(crashed)
        self.damage(damage, recovered_from, data)
        self.open_log(clean=False, recovery_point=recovery_point)
        self.check_everything()


TestTransactionModel = TransactionMachine.TestCase
TestTransactionModel.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
