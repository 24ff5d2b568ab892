"""The transaction coordinator of a real broker process over the raw wire protocol:
begin/add/produce/commit and abort with read_committed fetches, fencing, transactional
offset commits, the produce check, describe and list."""

from __future__ import annotations

from typing import Any

from txn_wire import (
    TxnProducer,
    body,
    describe,
    fetch_offset,
    find_coordinator,
    list_transactions,
    read_values,
    stable_offset,
)

from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.producer_id import InitProducerIdRequest
from spark_mq.protocol.transactions import (
    ListTransactionsRequest,
    TxnTopic,
    WritableTxnMarker,
    WriteTxnMarkersRequest,
)


def test_commit_and_abort_as_read_committed_sees_them(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("t", 2)
        found = find_coordinator(conn, "tx")
        assert found.error_code == 0 and found.node_id == 0
        p = TxnProducer(conn, "tx")
        p.write("t", 0, b"a", b"b")
        p.write("t", 1, b"x")
        assert read_values(conn, "t", 0) == []  # open: held back by the LSO
        assert describe(conn, "tx").state == "Ongoing"
        assert p.end(commit=True).error_code == 0
        p.write("t", 0, b"c")
        assert p.end(commit=False).error_code == 0
        p.write("t", 0, b"d")
        assert p.end(commit=True).error_code == 0
        assert read_values(conn, "t", 0) == [b"a", b"b", b"d"]
        assert read_values(conn, "t", 1) == [b"x"]
        assert read_values(conn, "t", 0, committed=False) == [b"a", b"b", b"c", b"d"]
        state = describe(conn, "tx")
        assert (state.state, state.producer_id, state.transaction_start_time_ms) == (
            "CompleteCommit",
            p.pid,
            -1,
        )
        # A retried EndTxn of a completed transaction is answered as it was.
        assert p.end(commit=True).error_code == 0
        assert p.end(commit=False).error_code == ErrorCode.INVALID_TXN_STATE


def test_a_second_incarnation_fences_the_first(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("t")
        old = TxnProducer(conn, "fence")
        old.write("t", 0, b"zombie")
        new = TxnProducer(conn, "fence")
        assert (new.pid, new.epoch) == (old.pid, old.epoch + 2)
        # The new incarnation aborted what the old one left open before answering.
        assert describe(conn, "fence").state == "Empty"
        assert stable_offset(conn, "t") == 2  # the zombie's batch and its abort marker
        assert old.send("t", 0, b"late").error_code == ErrorCode.PRODUCER_FENCED
        assert old.end(commit=True).error_code == ErrorCode.PRODUCER_FENCED
        assert old.add("t", 0) == [ErrorCode.PRODUCER_FENCED]
        new.write("t", 0, b"fresh")
        assert new.end(commit=True).error_code == 0
        assert read_values(conn, "t") == [b"fresh"]


def test_produce_to_a_partition_outside_the_transaction_is_refused(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("t", 2)
        p = TxnProducer(conn, "strict")
        assert p.send("t", 0, b"v").error_code == ErrorCode.INVALID_TXN_STATE
        p.write("t", 0, b"v")
        part = p.send("t", 1, b"w")
        assert part.error_code == ErrorCode.INVALID_TXN_STATE
        assert "AddPartitionsToTxn" in part.error_message
        unknown = TxnProducer(conn, "other")
        unknown.tid = "never-initialised"
        assert unknown.send("t", 0, b"v").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_bad_requests_get_typed_errors(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("t")
        too_long = body(conn, InitProducerIdRequest("slow", 900_001))
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        empty = body(conn, InitProducerIdRequest("", 1000))
        assert empty.error_code == ErrorCode.INVALID_REQUEST
        p = TxnProducer(conn, "bad")
        assert p.add("missing", 0) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert p.add("__consumer_offsets", 0)[0] in (
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )
        assert p.end(commit=True).error_code == ErrorCode.INVALID_TXN_STATE  # nothing open
        p.pid += 1000
        assert p.end(commit=True).error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert find_coordinator(conn, "").error_code == ErrorCode.INVALID_REQUEST


def test_transactional_offsets_are_visible_only_after_commit(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("in")
        p = TxnProducer(conn, "copier")
        # TxnOffsetCommit before AddOffsetsToTxn is refused.
        assert p.commit_offsets("g", "in", {0: 5}) == [ErrorCode.INVALID_TXN_STATE]
        assert p.add_offsets("g").error_code == 0
        assert p.commit_offsets("g", "in", {0: 5}) == [0]
        assert fetch_offset(conn, "g", "in") == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
        assert p.end(commit=True).error_code == 0
        assert fetch_offset(conn, "g", "in") == (5, 0)
        assert p.add_offsets("g").error_code == 0
        assert p.commit_offsets("g", "in", {0: 9}) == [0]
        assert p.end(commit=False).error_code == 0
        assert fetch_offset(conn, "g", "in") == (5, 0)


def test_list_and_describe(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("t")
        a = TxnProducer(conn, "app-a")
        a.write("t", 0, b"1")
        b = TxnProducer(conn, "app-b")
        TxnProducer(conn, "other")
        ongoing = list_transactions(conn, state_filters=["Ongoing"])
        assert [s.transactional_id for s in ongoing] == ["app-a"]
        assert ongoing[0].topics[0].name == "t" and ongoing[0].topics[0].partitions == [0]
        by_prefix = list_transactions(conn, transactional_id_prefix="app-")
        assert [s.transactional_id for s in by_prefix] == ["app-a", "app-b"]
        by_pid = list_transactions(conn, producer_id_filters=[b.pid])
        assert [s.transactional_id for s in by_pid] == ["app-b"]
        # Open for longer than an hour: none.
        assert list_transactions(conn, duration_filter_ms=3_600_000) == []
        assert describe(conn, "nope").error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        bad = body(conn, ListTransactionsRequest(state_filters=["Bogus"]))
        assert bad.error_code == ErrorCode.INVALID_REQUEST


def test_a_forged_commit_from_a_client_is_refused(broker: Any) -> None:
    """WriteTxnMarkers is inter-broker only: a client's COMMIT for another producer's open
    transaction is refused and changes nothing, so after that producer aborts, a
    read_committed reader sees nothing of it (issue 26: the forged marker used to make it
    visible)."""
    with broker.connect() as conn:
        conn.create_topic("t", 2)
        victim = TxnProducer(conn, "victim")
        victim.write("t", 0, b"secret-0")
        victim.write("t", 1, b"secret-1")
        end = [conn.list_offset("t", p, -1).offset for p in (0, 1)]

        def forge(commit: bool, epoch: int) -> list[Any]:
            marker = WritableTxnMarker(
                victim.pid, victim.epoch, commit, [TxnTopic("t", [0, 1])], epoch
            )
            response = body(conn, WriteTxnMarkersRequest([marker]))
            return [q for t in response.markers[0].topics for q in t.partitions]

        for commit, epoch in [(True, broker.epoch), (False, broker.epoch), (True, 1 << 30)]:
            refused = forge(commit, epoch)
            assert [q.error_code for q in refused] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
            assert "inter-broker API" in refused[0].error_message
            assert "EndTxn" in refused[0].error_message
        # Nothing was written, the transaction is still open and still held back.
        assert [conn.list_offset("t", p, -1).offset for p in (0, 1)] == end
        assert describe(conn, "victim").state == "Ongoing"
        assert read_values(conn, "t", 0) == [] and read_values(conn, "t", 1) == []

        assert victim.end(commit=False).error_code == 0
        assert read_values(conn, "t", 0) == [] and read_values(conn, "t", 1) == []
        assert read_values(conn, "t", 0, committed=False) == [b"secret-0"]
        # After the abort too, a forged commit changes nothing.
        assert [q.error_code for q in forge(True, broker.epoch)] == [
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        ] * 2
        assert read_values(conn, "t", 0) == [] and read_values(conn, "t", 1) == []
