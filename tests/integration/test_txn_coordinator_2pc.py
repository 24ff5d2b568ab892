"""Two-phase commit on a real broker over the raw wire protocol: prepare, commit as one
decision tagged (owner, sequence), replays, abort_prefix, all or nothing."""

from __future__ import annotations

from typing import Any

from txn_wire import TxnProducer, abort, commit, describe, owner_sequence, read_values

from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.transactions import PreparedTxnRef


def _prepared(conn: Any, tid: str, value: bytes, partition: int = 0) -> TxnProducer:
    p = TxnProducer(conn, tid)
    p.write("out", partition, value)
    prepared = p.prepare()
    assert prepared.error_code == 0, prepared.error_message
    assert [(t.name, t.partitions) for t in prepared.topics] == [("out", [partition])]
    return p


def test_commit_as_one_decision_and_a_replay_aborts(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("out", 2)
        a = _prepared(conn, "sink-0", b"a", 0)
        b = _prepared(conn, "sink-1", b"b", 1)
        # Prepared: not readable, no more partitions, no more data.
        assert read_values(conn, "out", 0) == []
        assert a.add("out", 1) == [ErrorCode.INVALID_TXN_STATE]
        assert describe(conn, "sink-0").state == "Prepared"
        assert describe(conn, "sink-0").prepared_time_ms > 0
        assert owner_sequence(conn, "job") == -1
        done = commit(conn, [a.ref(), b.ref()], owner="job", sequence=0)
        assert done.error_code == 0 and not done.already_committed
        assert done.last_sequence == 0
        assert [r.error_code for r in done.results] == [0, 0]
        assert read_values(conn, "out", 0) == [b"a"]
        assert read_values(conn, "out", 1) == [b"b"]
        assert owner_sequence(conn, "job") == 0
        # The same batch again (a replay after a driver failure): aborted, not doubled.
        c = _prepared(conn, "sink-0", b"a-again", 0)
        replay = commit(conn, [c.ref()], owner="job", sequence=0)
        assert replay.error_code == 0 and replay.already_committed
        assert replay.last_sequence == 0
        assert describe(conn, "sink-0").state == "CompleteAbort"
        assert read_values(conn, "out", 0) == [b"a"]
        d = _prepared(conn, "sink-1", b"next", 1)
        later = commit(conn, [d.ref()], owner="job", sequence=1)
        assert later.error_code == 0 and later.last_sequence == 1
        assert read_values(conn, "out", 1) == [b"b", b"next"]


def test_commit_is_all_or_nothing(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("out")
        a = _prepared(conn, "aon-a", b"a")
        b = _prepared(conn, "aon-b", b"b")
        stale = PreparedTxnRef(b.tid, b.pid, b.epoch - 1 if b.epoch else b.epoch + 5)
        failed = commit(conn, [a.ref(), stale], owner="o", sequence=3)
        assert failed.error_code == ErrorCode.PRODUCER_FENCED
        assert [r.error_code for r in failed.results] == [0, ErrorCode.PRODUCER_FENCED]
        assert describe(conn, "aon-a").state == "Prepared"
        assert owner_sequence(conn, "o") == -1
        missing = commit(conn, [a.ref(), PreparedTxnRef("ghost", 1, 0)], owner="o", sequence=3)
        assert missing.results[1].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        ok = commit(conn, [a.ref(), b.ref()], owner="o", sequence=3)
        assert ok.error_code == 0
        assert read_values(conn, "out") == [b"a", b"b"]


def test_abort_prefix_ends_leftovers_in_the_same_decision(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("out")
        leftover = _prepared(conn, "job-7-old", b"stale")
        open_one = TxnProducer(conn, "job-7-open")
        open_one.write("out", 0, b"half")
        unrelated = _prepared(conn, "other-1", b"keep")
        fresh = _prepared(conn, "job-7-new", b"fresh")
        done = commit(conn, [fresh.ref()], owner="job-7", sequence=0, scope="job-7")
        assert done.error_code == 0
        assert sorted(done.aborted_others) == ["job-7-old", "job-7-open"]
        assert describe(conn, leftover.tid).state == "CompleteAbort"
        assert describe(conn, "job-7-open").state == "CompleteAbort"
        assert describe(conn, "other-1").state == "Prepared"
        # The open one was fenced: its producer can no longer write.
        assert open_one.send("out", 0, b"late").error_code == ErrorCode.PRODUCER_FENCED
        aborted = abort(conn, [unrelated.ref()])
        assert aborted.error_code == 0
        assert read_values(conn, "out") == [b"fresh"]
        # Aborting again is answered as done.
        assert abort(conn, [unrelated.ref()]).error_code == 0


def test_bad_two_phase_requests(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("out")
        a = _prepared(conn, "bad-a", b"a")
        no_sequence = commit(conn, [a.ref()], owner="o")
        assert no_sequence.error_code == ErrorCode.INVALID_REQUEST
        twice = commit(conn, [a.ref(), a.ref()], owner="o", sequence=0)
        assert twice.error_code == ErrorCode.INVALID_REQUEST
        ongoing = TxnProducer(conn, "bad-b")
        ongoing.write("out", 0, b"b")
        not_prepared = commit(conn, [ongoing.ref()], owner="o", sequence=0)
        assert not_prepared.results[0].error_code == ErrorCode.INVALID_TXN_STATE
        # The producer of a prepared transaction may still end it itself.
        assert a.end(commit=True).error_code == 0
        assert read_values(conn, "out") == [b"a"]
        assert ongoing.end(commit=False).error_code == 0
        assert read_values(conn, "out") == [b"a"]
