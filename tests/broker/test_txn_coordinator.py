"""The transaction coordinator's core with an in-memory ``__transaction_state`` and marker
writer: producers and fencing, write-before-change, recovery rules, two-phase decisions
recorded once, timeouts and expiry (with an explicit clock)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from spark_mq.broker.coordinator_topic import Record
from spark_mq.broker.producer_ids import MAX_PRODUCER_EPOCH
from spark_mq.broker.txn import two_phase
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.broker.txn.coordinator import CRASH_AFTER_DECISION, TransactionCoordinator
from spark_mq.broker.txn.owners import IllegalOwnerTransitionError, OwnerState
from spark_mq.broker.txn.records import Decision, DecisionEntry
from spark_mq.broker.txn.state import TopicPartition, TxnState
from spark_mq.broker.txn.state_topic import LoadedTransactions, partition_for
from spark_mq.crash_points import CrashPoints
from spark_mq.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    OwnerInstanceConflictError,
    ProducerFencedError,
)
from spark_mq.protocol.transactions import AbortTxnsRequest as Abort
from spark_mq.protocol.transactions import CommitPreparedTxnsRequest as Commit
from spark_mq.protocol.transactions import PreparedTxnRef
from spark_mq.protocol.transactions import TxnAbortOwner as AbortOwner
from spark_mq.protocol.transactions import TxnCommitOwner as CommitOwner
from spark_mq.protocol.transactions import TxnOwnerScope as Scope

T0 = 1_700_000_000_000
S = TxnState


class MemoryStore:
    """``__transaction_state`` in memory: appends in order; ``fail`` makes appends raise."""

    def __init__(self) -> None:
        self.appends: list[tuple[int, list[Record]]] = []
        self.fail: Exception | None = None

    def partition_for(self, key: str) -> int:
        return partition_for(key, 4)

    def append(self, key: str, records: Sequence[Record], now_ms: int) -> None:
        if self.fail is not None:
            raise self.fail
        self.appends.append((self.partition_for(key), list(records)))

    def loaded(self) -> LoadedTransactions:
        loaded = LoadedTransactions()
        for _, records in self.appends:
            for key, value in records:
                loaded.apply(key, value)
        return loaded


class Markers:
    """Records every marker; partitions in ``fail`` fail."""

    def __init__(self) -> None:
        self.written: list[tuple[TopicPartition, int, int, bool]] = []
        self.fail: set[TopicPartition] = set()

    def write(
        self,
        partitions: Iterable[TopicPartition],
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int | None = None,
    ) -> dict[TopicPartition, Exception]:
        failed: dict[TopicPartition, Exception] = {}
        for tp in sorted(partitions):
            if tp in self.fail:
                failed[tp] = OSError("disk gone")
            else:
                self.written.append((tp, producer_id, producer_epoch, commit))
        return failed


class Harness:
    def __init__(self, store: MemoryStore | None = None, **config: Any) -> None:
        self.store = store or MemoryStore()
        self.markers = Markers()
        self.ids = iter(range(100, 1000))
        self.crashes: list[str] = []
        self.config = TxnConfig.from_properties(config)
        self.c = TransactionCoordinator(
            self.config,
            self.store,
            self.markers,
            new_producer_id=lambda: next(self.ids),
            crash_points=CrashPoints({}, crash=lambda scope, _: self.crashes.append(scope)),
        )
        self.now = T0

    def restarted(self) -> Harness:
        h = Harness(self.store, **self.config.overrides())
        h.now = self.now
        h.c.load(self.store.loaded(), h.now)
        h.c.recover(h.now)
        return h

    def init(self, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
        return self.c.init_producer_id(tid, timeout_ms, -1, -1, self.now)

    def begin(self, tid: str, *partitions: TopicPartition) -> tuple[int, int]:
        pid, epoch = self.init(tid)
        self.c.add_partitions(tid, pid, epoch, partitions or [("t", 0)], self.now)
        return pid, epoch

    def state(self, tid: str) -> TxnState:
        return self.c.txns[tid].state


def test_first_init_gives_a_new_id_and_later_ones_bump_the_epoch() -> None:
    h = Harness()
    assert h.init("a") == (100, 0)
    assert h.init("a") == (100, 1)
    assert h.init("b") == (101, 0)
    assert len(h.store.appends) == 3  # each change written before it took effect


def test_init_fences_and_aborts_what_the_old_incarnation_left_open() -> None:
    h = Harness()
    pid, epoch = h.begin("a", ("t", 0), ("t", 1))
    assert h.init("a") == (pid, epoch + 2)
    # The abort markers carry the fencing epoch, so the old producer is refused everywhere.
    assert h.markers.written == [
        (("t", 0), pid, epoch + 1, False),
        (("t", 1), pid, epoch + 1, False),
    ]
    assert h.state("a") is S.EMPTY
    with pytest.raises(ProducerFencedError):
        h.c.end_txn("a", pid, epoch, True, h.now)
    with pytest.raises(ProducerFencedError):
        h.c.add_partitions("a", pid, epoch, [("t", 2)], h.now)


def test_epoch_exhaustion_moves_to_a_new_producer_id() -> None:
    h = Harness()
    pid, _ = h.init("a")
    txn = h.c.txns["a"]
    h.c.txns["a"] = txn.transition(S.EMPTY, h.now, producer_epoch=MAX_PRODUCER_EPOCH)
    new_pid, epoch = h.init("a")
    assert (new_pid != pid, epoch) == (True, 0)
    assert h.c.txns["a"].last_producer_id == pid
    with pytest.raises(ProducerFencedError):
        h.c.add_partitions("a", pid, MAX_PRODUCER_EPOCH, [("t", 0)], h.now)


def test_timeout_limits() -> None:
    h = Harness(transaction_max_timeout_ms=1000)
    with pytest.raises(InvalidTransactionTimeoutError):
        h.init("a", timeout_ms=1001)
    with pytest.raises(InvalidTransactionTimeoutError):
        h.init("a", timeout_ms=0)


def test_a_failed_append_changes_nothing() -> None:
    h = Harness()
    pid, epoch = h.begin("a")
    h.store.fail = OSError("full")
    with pytest.raises(CoordinatorNotAvailableError):
        h.c.end_txn("a", pid, epoch, True, h.now)
    assert h.state("a") is S.ONGOING and h.markers.written == []


def test_failed_markers_leave_the_decision_pending_and_are_retried() -> None:
    h = Harness()
    pid, epoch = h.begin("a", ("t", 0), ("t", 1))
    h.markers.fail = {("t", 1)}
    h.c.end_txn("a", pid, epoch, True, h.now)  # the decision is durable: success
    assert h.state("a") is S.PREPARE_COMMIT
    with pytest.raises(ConcurrentTransactionsError):
        h.c.add_partitions("a", pid, epoch, [("t", 0)], h.now)
    h.c.end_txn("a", pid, epoch, True, h.now)  # a retry of the same decision is fine
    with pytest.raises(ConcurrentTransactionsError):
        h.c.end_txn("a", pid, epoch, False, h.now)
    h.markers.fail = set()
    assert h.c.retry_pending(h.now) == 1
    assert h.state("a") is S.COMPLETE_COMMIT


def test_recovery_aborts_ongoing_keeps_prepared_and_finishes_decided() -> None:
    h = Harness()
    ongoing = h.begin("ongoing")
    prepared = h.begin("prepared")
    two_phase.prepare(h.c, "prepared", *prepared, h.now)
    decided = h.begin("decided")
    h.markers.fail = {("t", 0)}
    h.c.end_txn("decided", *decided, False, h.now)
    assert h.state("decided") is S.PREPARE_ABORT
    r = h.restarted()
    assert r.state("ongoing") is S.COMPLETE_ABORT
    assert r.c.txns["ongoing"].producer_epoch == ongoing[1] + 1  # fenced
    assert r.state("prepared") is S.PREPARED
    assert r.state("decided") is S.COMPLETE_ABORT
    assert sorted((tp, commit) for tp, _, _, commit in r.markers.written) == [
        (("t", 0), False),
        (("t", 0), False),
    ]


def test_a_two_phase_decision_record_decides_after_a_crash_before_the_rest() -> None:
    h = Harness()
    refs = []
    for tid in ("s-0", "s-1"):
        pid, epoch = h.begin(tid, (tid, 0))
        two_phase.prepare(h.c, tid, pid, epoch, h.now)
        refs.append(PreparedTxnRef(tid, pid, epoch))
    # Crash right after the decision record: only it reaches the log.
    h.c.write_decision(
        "job",
        Decision(
            3,
            h.now,
            tuple(
                DecisionEntry(
                    r.transactional_id,
                    r.producer_id,
                    r.producer_epoch,
                    h.c.txns[r.transactional_id].txn_number,
                    True,
                )
                for r in refs
            ),
        ),
        h.now,
    )
    r = h.restarted()
    assert [r.state(t) for t in ("s-0", "s-1")] == [S.COMPLETE_COMMIT] * 2
    assert {(tp, commit) for tp, _, _, commit in r.markers.written} == {
        (("s-0", 0), True),
        (("s-1", 0), True),
    }
    assert two_phase.last_sequence(r.c, "job") == 3


def test_a_decision_never_applies_to_a_later_transaction_of_the_same_epoch() -> None:
    h = Harness()
    pid, epoch = h.begin("s", ("t", 0))
    two_phase.prepare(h.c, "s", pid, epoch, h.now)
    ref = PreparedTxnRef("s", pid, epoch)
    out = two_phase.commit(h.c, Commit([ref], CommitOwner("job", 0)), h.now)
    assert out.committed and h.state("s") is S.COMPLETE_COMMIT
    # Same producer, same epoch, next transaction, prepared: the old decision is not its.
    h.c.add_partitions("s", pid, epoch, [("t", 0)], h.now)
    two_phase.prepare(h.c, "s", pid, epoch, h.now)
    assert h.restarted().state("s") is S.PREPARED


def test_replayed_sequence_aborts_and_reports_already_committed() -> None:
    h = Harness()
    refs = []
    for tid in ("a", "b"):
        pid, epoch = h.begin(tid)
        two_phase.prepare(h.c, tid, pid, epoch, h.now)
        refs.append(PreparedTxnRef(tid, pid, epoch))
    first = two_phase.commit(h.c, Commit(refs[:1], CommitOwner("o", 5)), h.now)
    assert first.committed and first.last_sequence == 5
    again = two_phase.commit(h.c, Commit(refs[1:], CommitOwner("o", 4)), h.now)
    assert again.already_committed and not again.committed and again.last_sequence == 5
    assert h.state("b") is S.COMPLETE_ABORT


def _prepared(h: Harness, tid: str) -> PreparedTxnRef:
    pid, epoch = h.begin(tid)
    two_phase.prepare(h.c, tid, pid, epoch, h.now)
    return PreparedTxnRef(tid, pid, epoch)


def _commit_s(
    h: Harness, refs: list[PreparedTxnRef], sequence: int, instance: str | None = None
) -> Any:
    """A commit of owner ``s`` (scope ``s/``)."""
    request = Commit(refs, CommitOwner("s", sequence, instance), Scope("s/"))
    return two_phase.commit(h.c, request, h.now)


def _abort_s(h: Harness, refs: list[PreparedTxnRef], instance: str | None = None) -> Any:
    """An abort of owner ``s`` (scope ``s/``)."""
    return two_phase.abort(h.c, Abort(refs, AbortOwner("s", instance), Scope("s/")), h.now)


def test_an_owner_bound_to_an_instance_refuses_another_and_decides_nothing() -> None:
    """A Spark query from a new checkpoint numbers its batches from 0 again: were its commits
    taken as replays of the sink id's earlier batches, its output would be dropped."""
    h = Harness()
    assert _commit_s(h, [_prepared(h, "s/a/0")], 3, "q1").committed
    in_flight = h.begin("s/a/1")  # the first query's next batch, still being written
    other = _prepared(h, "s/b/0")  # the second query's batch 0
    for decide in (
        lambda: _commit_s(h, [other], 0, "q2"),
        lambda: _commit_s(h, [other], 9, "q2"),
        lambda: _abort_s(h, [other], "q2"),
    ):
        with pytest.raises(OwnerInstanceConflictError, match="belongs to instance 'q1'"):
            decide()
    # Nothing was decided: neither the second query's batch nor the first one's open one.
    assert h.state("s/b/0") is S.PREPARED and h.state("s/a/1") is S.ONGOING
    assert two_phase.last_sequence(h.c, "s") == 3
    # The bound instance goes on; a request without an instance is not checked and keeps
    # the binding, which survives a restart.
    two_phase.prepare(h.c, "s/a/1", *in_flight, h.now)
    ref = PreparedTxnRef("s/a/1", *in_flight)
    assert _commit_s(h, [ref], 4, "q1").committed
    assert _commit_s(h, [_prepared(h, "s/a/2")], 5).committed
    assert h.state("s/b/0") is S.COMPLETE_ABORT  # the prefix abort of sequence 5's commit
    r = h.restarted()
    with pytest.raises(OwnerInstanceConflictError):
        _commit_s(r, [], 6, "q2")
    assert r.c.owners["s"].instance == "q1"


def test_an_owner_without_an_instance_is_bound_by_its_next_commit_naming_one() -> None:
    h = Harness()
    assert _commit_s(h, [_prepared(h, "s/0")], 0).committed
    assert h.c.owners["s"].instance is None
    assert h.c.owners["s"].state is OwnerState.ACTIVE
    _abort_s(h, [], "q7")  # an abort checks, but never binds
    assert h.c.owners["s"].instance is None
    assert _commit_s(h, [_prepared(h, "s/1")], 1, "q8").committed
    assert h.c.owners["s"].instance == "q8"
    assert h.c.owners["s"].state is OwnerState.BOUND
    with pytest.raises(OwnerInstanceConflictError):
        _abort_s(h, [], "q7")


@pytest.mark.parametrize(
    "request_",
    [
        Commit([], CommitOwner("s", 0, "")),
        Abort([], AbortOwner("s", ""), Scope("s/")),
        Commit([], CommitOwner("", 0)),
        Commit([], CommitOwner("s", -1)),
        Abort([], None, Scope("")),
        Abort([], None, Scope("s/", close=True)),
        Commit([], None, Scope("s/", close=True)),
        Abort([PreparedTxnRef("a", 1, 0), PreparedTxnRef("a", 1, 0)]),
    ],
    ids=[
        "empty-instance",
        "empty-abort-instance",
        "empty-owner",
        "no-sequence",
        "empty-prefix",
        "close-without-owner",
        "commit-close-without-owner",
        "id-twice",
    ],
)
def test_each_request_type_refuses_what_it_cannot_mean(request_: Commit | Abort) -> None:
    h = Harness()
    decide = two_phase.commit if isinstance(request_, Commit) else two_phase.abort
    with pytest.raises(InvalidRequestError):
        decide(h.c, request_, h.now)  # type: ignore[operator]
    assert h.store.appends == []


def test_a_closed_owner_refuses_every_late_transaction_under_its_prefix() -> None:
    h = Harness()
    # A job's task prepared; another is still writing; a third has only initialised.
    done_pid, done_epoch = h.begin("job/0")
    two_phase.prepare(h.c, "job/0", done_pid, done_epoch, h.now)
    late_pid, late_epoch = h.begin("job/1")
    idle_pid, idle_epoch = h.init("job/2")
    out = two_phase.abort(
        h.c,
        Abort(
            [PreparedTxnRef("job/0", done_pid, done_epoch)],
            AbortOwner("job"),
            Scope("job/", close=True),
        ),
        h.now,
    )
    assert out.aborted_others == ["job/1"]
    assert h.state("job/0") is S.COMPLETE_ABORT and h.state("job/1") is S.COMPLETE_ABORT
    # The late ones can neither grow, prepare nor start again: nothing is left to hang.
    with pytest.raises(ProducerFencedError, match="owner 'job', which is closed"):
        h.c.add_partitions("job/2", idle_pid, idle_epoch, [("t", 0)], h.now)
    with pytest.raises(ProducerFencedError, match="closed"):
        two_phase.prepare(h.c, "job/2", idle_pid, idle_epoch, h.now)
    with pytest.raises(ProducerFencedError):
        two_phase.prepare(h.c, "job/1", late_pid, late_epoch, h.now)
    with pytest.raises(ProducerFencedError, match="closed"):
        h.init("job/7")
    assert h.state("job/2") is S.EMPTY and "job/7" not in h.c.txns
    # Other ids, even ones sharing the owner's name without its prefix, are untouched.
    h.begin("job-2/0")
    h.begin("jobs/0")
    # The close is durable, and a later record of the owner keeps it.
    r = h.restarted()
    with pytest.raises(ProducerFencedError):
        r.init("job/3")
    again = two_phase.abort(r.c, Abort([], AbortOwner("job"), Scope("job/", True)), r.now)
    assert again.aborted_others == []
    with pytest.raises(InvalidRequestError, match="already closed prefix 'job/'"):
        two_phase.abort(r.c, Abort([], AbortOwner("job"), Scope("jo", True)), r.now)
    with pytest.raises(ProducerFencedError):
        r.restarted().init("job/3")


def test_a_closing_commit_commits_then_refuses_a_straggler() -> None:
    h = Harness()
    pid, epoch = h.begin("batch/0")
    two_phase.prepare(h.c, "batch/0", pid, epoch, h.now)
    out = two_phase.commit(
        h.c,
        Commit(
            [PreparedTxnRef("batch/0", pid, epoch)], CommitOwner("batch", 0), Scope("batch/", True)
        ),
        h.now,
    )
    assert out.committed and h.state("batch/0") is S.COMPLETE_COMMIT
    assert two_phase.last_sequence(h.c, "batch") == 0
    # A speculative copy of task 0 that starts after the commit gets nowhere.
    with pytest.raises(ProducerFencedError):
        h.init("batch/0")
    assert h.state("batch/0") is S.COMPLETE_COMMIT


def test_prepared_takes_no_partitions_and_is_not_timed_out_by_the_producer_timeout() -> None:
    h = Harness(transaction_prepared_max_timeout_ms=100_000)
    pid, epoch = h.begin("p")
    two_phase.prepare(h.c, "p", pid, epoch, h.now)
    with pytest.raises(InvalidTxnStateError):
        h.c.add_partitions("p", pid, epoch, [("t", 1)], h.now)
    h.begin("o")
    h.now += 60_001
    assert h.c.abort_timed_out(h.now) == 1  # only the Ongoing one
    assert (h.state("p"), h.state("o")) == (S.PREPARED, S.COMPLETE_ABORT)
    h.now += 40_000
    assert h.c.abort_timed_out(h.now) == 1
    assert h.state("p") is S.COMPLETE_ABORT


def test_a_prepared_transaction_whose_owner_went_quiet_is_aborted() -> None:
    """The tasks of a Spark job prepare under the job's prefix; if no decision comes and no
    task of the job is active for the timeout, the driver is presumed dead."""
    h = Harness()
    t0 = h.now
    ids = {tid: h.begin(tid) for tid in ("job/0", "job/1", "other/0", "solo/0")}
    h.now = t0 + 500
    two_phase.prepare(h.c, "job/0", *ids["job/0"], h.now, owner_prefix="job/")
    two_phase.prepare(h.c, "other/0", *ids["other/0"], h.now, owner_prefix="other/")
    two_phase.prepare(h.c, "solo/0", *ids["solo/0"], h.now)  # no owner prefix
    h.now = t0 + 900
    two_phase.prepare(h.c, "job/1", *ids["job/1"], h.now, owner_prefix="job/")
    h.now = t0 + 50_000
    h.init("other/1")  # a retry of another task of "other/": its owner is alive
    h.now = t0 + 60_900
    # job/ has been quiet for exactly its transactions' timeout (60 s): not yet.
    assert h.c.abort_timed_out(h.now) == 0
    h.now += 1
    assert h.c.abort_timed_out(h.now) == 2
    assert (h.state("job/0"), h.state("job/1")) == (S.COMPLETE_ABORT, S.COMPLETE_ABORT)
    assert (h.state("other/0"), h.state("solo/0")) == (S.PREPARED, S.PREPARED)
    # The prefix is durable. Activity is not: a restart counts as activity of every owner,
    # and the quiet owner's transaction ends a timeout after it.
    r = h.restarted()
    assert r.c.txns["other/0"].owner_prefix == "other/"
    r.now = t0 + 60_901 + 60_000
    assert r.c.abort_timed_out(r.now) == 0
    r.now += 1
    assert r.c.abort_timed_out(r.now) == 1
    assert (r.state("other/0"), r.state("solo/0")) == (S.COMPLETE_ABORT, S.PREPARED)
    assert r.c.txns["other/0"].owner_prefix is None  # cleared with the transaction


def test_a_running_task_keeps_its_owner_alive() -> None:
    """A straggler task computes for longer than the timeout before it sends anything: its
    heartbeats keep the job's prepared transactions until it stops sending them."""
    h = Harness()
    t0 = h.now
    pid, epoch = h.begin("job/0")
    two_phase.prepare(h.c, "job/0", pid, epoch, h.now, owner_prefix="job/")
    h.init("job/1")  # the straggler: initialised, computing, nothing sent yet
    for beat in range(1, 7):
        h.now = t0 + beat * 15_000
        h.c.owner_heartbeat("job/", h.now)
        assert h.c.abort_timed_out(h.now) == 0
    # Its executor died: 60 s after its last heartbeat the owner is quiet.
    h.now = t0 + 90_000 + 60_000
    assert h.c.abort_timed_out(h.now) == 0
    h.now += 1
    assert h.c.abort_timed_out(h.now) == 1 and h.state("job/0") is S.COMPLETE_ABORT
    with pytest.raises(InvalidRequestError, match="non-empty owner prefix"):
        h.c.owner_heartbeat("", h.now)


def test_the_coordinators_own_transitions_are_no_sign_of_life() -> None:
    """A sibling's transaction that the coordinator aborts on its timeout, after the last
    client request, does not extend the owner's life."""
    h = Harness()
    t0 = h.now
    pid, epoch = h.begin("job/0")
    two_phase.prepare(h.c, "job/0", pid, epoch, h.now, owner_prefix="job/")
    h.now = t0 + 30_000
    sibling_pid, sibling_epoch = h.init("job/1", timeout_ms=50_000)
    h.c.add_partitions("job/1", sibling_pid, sibling_epoch, [("t", 1)], h.now)
    h.now = t0 + 80_001
    assert h.c.abort_timed_out(h.now) == 1 and h.state("job/1") is S.COMPLETE_ABORT
    h.now = t0 + 90_001  # 60 s after the sibling's last request, 10 s after its abort
    assert h.c.abort_timed_out(h.now) == 1 and h.state("job/0") is S.COMPLETE_ABORT


@pytest.mark.parametrize("prefix", ["", "job/0", "jab/", "job/0/"])
def test_an_owner_prefix_must_be_a_strict_prefix_of_the_id(prefix: str) -> None:
    h = Harness()
    pid, epoch = h.begin("job/0")
    with pytest.raises(InvalidRequestError, match="strict prefix"):
        two_phase.prepare(h.c, "job/0", pid, epoch, h.now, owner_prefix=prefix)
    assert h.state("job/0") is S.ONGOING


def test_idle_ids_expire_with_a_tombstone_but_open_ones_never() -> None:
    h = Harness(transactional_id_expiration_ms=1000)
    h.init("idle")
    h.begin("busy")
    h.now += 1000
    assert h.c.expire_ids(h.now) == 1
    assert set(h.c.txns) == {"busy"}
    assert set(h.restarted().c.txns) == {"busy"}


def test_closed_owners_expire_like_ids_but_open_ones_and_streams_never() -> None:
    h = Harness(transactional_id_expiration_ms=1000)

    def close(owner: str) -> None:
        two_phase.abort(h.c, Abort([], AbortOwner(owner), Scope(owner + "/", True)), h.now)

    pid, epoch = h.begin("stream/0")
    two_phase.prepare(h.c, "stream/0", pid, epoch, h.now)
    ref = PreparedTxnRef("stream/0", pid, epoch)
    two_phase.commit(h.c, Commit([ref], CommitOwner("stream", 4), Scope("stream/")), h.now)
    close("done")
    h.begin("busy/0", ("u", 0))
    h.markers.fail.add(("u", 0))  # the abort of busy/0 cannot write its marker yet
    close("busy")
    assert h.state("busy/0") is S.PREPARE_ABORT
    h.now += 999
    assert h.c.expire_ids(h.now) == 0
    h.now += 1
    h.c.expire_ids(h.now)
    assert set(h.c.owners) == {"stream", "busy"}  # a stream's sequence guards replays
    assert set(h.c.owners.closed_prefixes()) == {"busy/"}
    h.init("done/0")  # the job is long over: its id may be used again
    with pytest.raises(ProducerFencedError):
        h.init("busy/1")
    assert set(h.restarted().c.owners) == {"stream", "busy"}


def test_the_crash_hook_exits_after_the_decision_and_before_markers() -> None:
    h = Harness()
    h.c.crash_points = dataclasses.replace(h.c.crash_points, armed_at={CRASH_AFTER_DECISION: ""})
    pid, epoch = h.begin("a")
    h.c.end_txn("a", pid, epoch, True, h.now)
    assert h.crashes == ["process"]
    # (the crash is fake here, so the call goes on.)
    assert h.store.loaded().txns["a"].state in (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)


def test_an_illegal_owner_record_is_refused_before_it_is_written() -> None:
    h = Harness()
    assert _commit_s(h, [_prepared(h, "s/0")], 0, "q1").committed
    written = len(h.store.appends)
    for record in (Decision(1, h.now, (), instance="q2"), Decision(1, h.now, ())):
        with pytest.raises(IllegalOwnerTransitionError):
            h.c.write_decision("s", record, h.now)
    assert len(h.store.appends) == written
    assert h.c.owners["s"].state is OwnerState.BOUND
