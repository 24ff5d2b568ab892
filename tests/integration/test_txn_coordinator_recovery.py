"""The transaction coordinator across broker crashes (SIGKILL, and the test hook that exits
between a decision and its markers), timeouts and id expiration, on real broker processes."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from txn_wire import (
    TxnProducer,
    body,
    commit,
    describe,
    fetch_offset,
    owner_sequence,
    read_values,
    wait_until,
)

from spark_mq.broker.txn.coordinator import CRASH_AFTER_DECISION
from spark_mq.crash_points import ENV as CRASH_ENV
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.transactions import OwnerHeartbeatRequest


@pytest.mark.slow
def test_sigkill_aborts_ongoing_keeps_prepared_and_committed_offsets(start_broker: Any) -> None:
    broker = start_broker()
    with broker.connect() as conn:
        conn.create_topic("t")
        conn.create_topic("in")
        done = TxnProducer(conn, "done")
        assert done.add_offsets("g").error_code == 0
        assert done.commit_offsets("g", "in", {0: 5}) == [0]
        done.write("t", 0, b"committed")
        assert done.end(commit=True).error_code == 0
        ongoing = TxnProducer(conn, "ongoing")
        ongoing.write("t", 0, b"open")
        assert ongoing.add_offsets("g2").error_code == 0
        assert ongoing.commit_offsets("g2", "in", {0: 3}) == [0]
        prepared = TxnProducer(conn, "prepared")
        prepared.write("t", 0, b"prepared")
        assert prepared.prepare().error_code == 0
    broker.kill()
    broker = start_broker()
    with broker.connect() as conn:
        state = describe(conn, "ongoing")
        assert state.state == "CompleteAbort"
        assert state.producer_epoch == ongoing.epoch + 1  # fenced
        ongoing.conn = conn
        assert ongoing.send("t", 0, b"late").error_code == ErrorCode.PRODUCER_FENCED
        assert describe(conn, "prepared").state == "Prepared"
        assert fetch_offset(conn, "g", "in") == (5, 0)
        assert fetch_offset(conn, "g2", "in") == (-1, 0)  # aborted, and no longer pending
        assert read_values(conn, "t") == [b"committed"]  # the prepared one holds the LSO
        result = commit(conn, [prepared.ref()], owner="x", sequence=0)
        assert result.error_code == 0
        assert read_values(conn, "t") == [b"committed", b"prepared"]
    broker.kill()
    broker = start_broker()
    with broker.connect() as conn:
        assert owner_sequence(conn, "x") == 0
        assert describe(conn, "prepared").state == "CompleteCommit"
        assert read_values(conn, "t") == [b"committed", b"prepared"]


@pytest.mark.slow
def test_crash_between_decision_and_markers_finishes_on_restart(
    start_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CRASH_ENV, CRASH_AFTER_DECISION)
    broker = start_broker()
    with broker.connect() as conn:
        conn.create_topic("t")
        conn.create_topic("in")
        p = TxnProducer(conn, "decided")
        p.write("t", 0, b"v")
        assert p.add_offsets("g").error_code == 0
        assert p.commit_offsets("g", "in", {0: 42}) == [0]
        with pytest.raises(OSError):
            p.end(commit=True)
    assert broker.proc.wait(30) == -signal.SIGKILL
    monkeypatch.delenv(CRASH_ENV)
    broker = start_broker()
    with broker.connect() as conn:
        assert describe(conn, "decided").state == "CompleteCommit"
        assert read_values(conn, "t") == [b"v"]
        assert fetch_offset(conn, "g", "in") == (42, 0)


@pytest.mark.slow
def test_crash_after_a_two_phase_decision_commits_every_transaction(
    start_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CRASH_ENV, CRASH_AFTER_DECISION)
    broker = start_broker()
    with broker.connect() as conn:
        conn.create_topic("out", 2)
        refs = []
        for i in range(2):
            p = TxnProducer(conn, f"sink-{i}")
            p.write("out", i, f"v{i}".encode())
            assert p.prepare().error_code == 0
            refs.append(p.ref())
        with pytest.raises(OSError):
            commit(conn, refs, owner="job", sequence=4)
    assert broker.proc.wait(30) == -signal.SIGKILL
    monkeypatch.delenv(CRASH_ENV)
    broker = start_broker()
    with broker.connect() as conn:
        assert owner_sequence(conn, "job") == 4
        assert [describe(conn, f"sink-{i}").state for i in range(2)] == ["CompleteCommit"] * 2
        assert read_values(conn, "out", 0) == [b"v0"]
        assert read_values(conn, "out", 1) == [b"v1"]
        # The driver retries the same decision after its own restart: nothing doubles.
        replay = commit(conn, refs, owner="job", sequence=4)
        assert replay.already_committed
        assert read_values(conn, "out", 0) == [b"v0"]


def test_timed_out_transactions_are_aborted_and_fenced(start_broker: Any) -> None:
    broker = start_broker(
        overrides={
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "50",
            "transaction.prepared.max.timeout.ms": "400",
        }
    )
    with broker.connect() as conn:
        conn.create_topic("t")
        slow = TxnProducer(conn, "slow", timeout_ms=200)
        slow.write("t", 0, b"late")
        patient = TxnProducer(conn, "patient", timeout_ms=200)
        patient.write("t", 0, b"prepared")
        assert patient.prepare().error_code == 0
        wait_until(lambda: describe(conn, "slow").state == "CompleteAbort", "the timeout abort")
        assert describe(conn, "slow").producer_epoch == slow.epoch + 1
        assert slow.end(commit=True).error_code == ErrorCode.PRODUCER_FENCED
        assert slow.send("t", 0, b"more").error_code == ErrorCode.PRODUCER_FENCED
        # The prepared one outlived the ordinary timeout; its own, longer one ends it.
        wait_until(
            lambda: describe(conn, "patient").state == "CompleteAbort", "the prepared timeout"
        )
        assert read_values(conn, "t") == []


def test_a_prepared_transaction_of_a_quiet_owner_is_aborted(start_broker: Any) -> None:
    """A job's tasks prepared under its prefix and its driver died: once no task of the job
    has been active for the transactions' timeout, readers are no longer held back."""
    broker = start_broker(
        overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "50"}
    )
    with broker.connect() as conn:
        conn.create_topic("t")
        tasks = [TxnProducer(conn, f"job/{p}", timeout_ms=300) for p in range(2)]
        for task in tasks:
            task.write("t", 0, f"from {task.tid}".encode())
            assert task.prepare(owner_prefix="job/").error_code == 0
        plain = TxnProducer(conn, "plain/0", timeout_ms=300)
        plain.write("t", 0, b"prepared without an owner prefix")
        assert plain.prepare().error_code == 0
        wait_until(
            lambda: [describe(conn, t.tid).state for t in tasks] == ["CompleteAbort"] * 2,
            "the quiet owner's prepared transactions to be aborted",
        )
        assert describe(conn, "plain/0").state == "Prepared"  # the prepared limit applies
        # A writer of another job still computing keeps that job's prepared one alive.
        busy = TxnProducer(conn, "busy/0", timeout_ms=300)
        busy.write("t", 0, b"prepared while a sibling computes")
        assert busy.prepare(owner_prefix="busy/").error_code == 0
        deadline = time.monotonic() + 1.5  # five timeouts
        while time.monotonic() < deadline:
            assert body(conn, OwnerHeartbeatRequest("busy/")).error_code == 0
            time.sleep(0.05)
        assert describe(conn, "busy/0").state == "Prepared"
        wait_until(lambda: describe(conn, "busy/0").state == "CompleteAbort", "the quiet owner")
        assert body(conn, OwnerHeartbeatRequest("")).error_code == ErrorCode.INVALID_REQUEST
        bad = TxnProducer(conn, "job/9", timeout_ms=300)
        bad.write("t", 0, b"x")
        refused = bad.prepare(owner_prefix="job/9")
        assert refused.error_code == ErrorCode.INVALID_REQUEST
        assert "strict prefix" in refused.error_message


def test_idle_transactional_ids_expire(start_broker: Any) -> None:
    broker = start_broker(
        overrides={
            "transactional.id.expiration.ms": "200",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "50",
        }
    )
    with broker.connect() as conn:
        conn.create_topic("t")
        idle = TxnProducer(conn, "idle")
        busy = TxnProducer(conn, "busy")
        busy.write("t", 0, b"open")
        wait_until(
            lambda: describe(conn, "idle").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
            "the idle id to expire",
        )
        assert describe(conn, "busy").state == "Ongoing"  # an open transaction never expires
        again = TxnProducer(conn, "idle")
        assert again.pid != idle.pid  # forgotten: a new producer id
