"""A participant's and a decider's side of a two-phase decision that spans coordinators
(spark_mq.broker.txn.participants), on the coordinator core with an in-memory
``__transaction_state``: votes hold a transaction, a decision applies once and a repeat is a
no-op, a contradicting one is refused, a "no decision" answer vetoes a later commit, and a
quiet owner's transaction waits for the termination protocol's verdict."""

from __future__ import annotations

import pytest
from test_txn_coordinator import Harness

from spark_mq.broker.txn import participants, two_phase
from spark_mq.broker.txn.records import DecisionEntry
from spark_mq.broker.txn.state import TxnState
from spark_mq.errors import ConcurrentTransactionsError, InvalidTxnStateError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.transactions import CommitPreparedTxnsRequest, PreparedTxnRef
from spark_mq.protocol.txn_participants import (
    CheckPreparedTxnsRequest,
    DecidedTxn,
    DecideTxnsRequest,
    QueriedTxn,
    QueryTxnDecisionsRequest,
)


def _prepared(h: Harness, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    pid, epoch = h.c.init_producer_id(tid, timeout_ms, -1, -1, h.now)
    h.c.add_partitions(tid, pid, epoch, [("t", 0)], h.now)
    two_phase.prepare(h.c, tid, pid, epoch, h.now, owner_prefix="job/")
    return pid, epoch


def _vote(h: Harness, tid: str, pid: int, epoch: int) -> int:
    answer = participants.check(
        h.c, CheckPreparedTxnsRequest([PreparedTxnRef(tid, pid, epoch)], True), h.now
    )
    (result,) = answer.results
    assert result.error_code == ErrorCode.NONE, result.error_message
    return result.txn_number


def test_a_decision_applies_once_and_a_repeat_is_a_no_op() -> None:
    h = Harness()
    pid, epoch = _prepared(h, "job/1")
    number = _vote(h, "job/1", pid, epoch)
    decision = DecideTxnsRequest("job@1", [DecidedTxn("job/1", pid, epoch, number, True)])
    assert [r.error_code for r in participants.decide(h.c, decision, h.now)] == [0]
    assert h.state("job/1") is TxnState.COMPLETE_COMMIT
    written = list(h.markers.written)
    assert written == [(("t", 0), pid, epoch, True)]
    # Delivered again (the decider moved before it saw the acknowledgement): nothing new.
    assert [r.error_code for r in participants.decide(h.c, decision, h.now)] == [0]
    assert h.markers.written == written
    # A decision contradicting the outcome is refused, never applied.
    wrong = DecideTxnsRequest("job@1", [DecidedTxn("job/1", pid, epoch, number, False)])
    (result,) = participants.decide(h.c, wrong, h.now)
    assert result.error_code == ErrorCode.INVALID_TXN_STATE
    assert h.state("job/1") is TxnState.COMPLETE_COMMIT


def test_a_vote_holds_the_transaction_against_aborts_of_its_own() -> None:
    h = Harness()
    pid, epoch = _prepared(h, "job/1", timeout_ms=1000)
    h.now += 900
    _vote(h, "job/1", pid, epoch)  # held until 1900 ms after the prepare
    # A new incarnation must wait for the decision it voted for.
    with pytest.raises(ConcurrentTransactionsError):
        h.c.init_producer_id("job/1", 1000, -1, -1, h.now)
    # And a quiet owner's timeout (1000 ms after the prepare) does not abort it meanwhile.
    h.now += 300
    h.c.abort_timed_out(h.now)
    assert h.state("job/1") is TxnState.PREPARED


def test_a_quiet_owners_transaction_waits_for_the_termination_verdict() -> None:
    h = Harness()
    _prepared(h, "job/1", timeout_ms=1000)
    asked: list[str] = []

    def ask(txn: object, _now: int) -> bool:
        asked.append(getattr(txn, "transactional_id", ""))
        return False  # the verdict is not in yet

    h.c.guards.presume_abort = ask
    h.now += 5000
    h.c.abort_timed_out(h.now)
    assert asked == ["job/1"]
    assert h.state("job/1") is TxnState.PREPARED
    h.c.guards.presume_abort = None  # one node: every decision is here
    h.c.abort_timed_out(h.now)
    assert h.state("job/1") is TxnState.COMPLETE_ABORT


def test_no_decision_answer_vetoes_a_later_commit_of_the_transaction() -> None:
    decider = Harness()
    query = QueryTxnDecisionsRequest([QueriedTxn("job/9", 7, 0, 1, "job/", 1000)])
    decider.now += 10_000  # the owner was last active at the load, long ago
    decider.c.owners.load({}, decider.now - 10_000)
    (answer,) = participants.answer_query(decider.c, query, decider.now, [0]).answers
    assert (answer.decision, answer.owner_active) == (-1, False)
    # A commit whose vote was collected before the question must not land after it.
    votes = two_phase.RemoteVotes({"job/9": DecisionEntry("job/9", 7, 0, 1, True)}, {}, [])
    request = CommitPreparedTxnsRequest([PreparedTxnRef("job/9", 7, 0)])
    with pytest.raises(InvalidTxnStateError):
        two_phase.commit(decider.c, request, decider.now, votes, decider_key="job")


def test_a_held_decision_answers_the_question() -> None:
    decider = Harness()
    votes = two_phase.RemoteVotes({"job/9": DecisionEntry("job/9", 7, 0, 1, True)}, {}, [])
    request = CommitPreparedTxnsRequest([PreparedTxnRef("job/9", 7, 0)])
    outcome = two_phase.commit(decider.c, request, decider.now, votes, decider_key="job/9")
    assert outcome.committed and outcome.delivery is not None
    name, entries = outcome.delivery
    assert [e.transactional_id for e in entries] == ["job/9"]
    assert name in decider.c.anonymous and name in decider.c.guards.remote_deliveries
    # Kept although no local transaction is pending: its participant was not told yet.
    decider.c.retry_pending(decider.now)
    assert name in decider.c.anonymous
    query = QueryTxnDecisionsRequest([QueriedTxn("job/9", 7, 0, 1, "job/", 1000)])
    (answer,) = participants.answer_query(decider.c, query, decider.now, [0]).answers
    assert answer.decision == 1
