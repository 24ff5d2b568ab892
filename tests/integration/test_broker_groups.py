"""The group coordinator of a real broker process, spoken to with RawConnection:
FindCoordinator on both listeners, a rebalance across connections, commits and fetches, and
groups and offsets surviving a restart and a crash."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from spark_mq.broker.group.offsets_topic import OFFSETS_TOPIC
from spark_mq.protocol import group_offsets as go
from spark_mq.protocol import groups as gp
from spark_mq.protocol.error_codes import ErrorCode as E

OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}


def join(conn: Any, member_id: str = "", group: str = "g") -> Any:
    request = gp.JoinGroupRequest(
        group, 10_000, 30_000, member_id, "consumer", [gp.JoinGroupProtocol("range", b"sub")]
    )
    return conn.call(request).body


def first_join(conn: Any, group: str = "g") -> Any:
    """MEMBER_ID_REQUIRED, then the join with the id given."""
    first = join(conn, group=group)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    return join(conn, first.member_id, group=group)


def commit(conn: Any, offsets: dict[int, int], generation: int, member_id: str) -> list[int]:
    parts = [go.OffsetCommitPartition(p, o) for p, o in offsets.items()]
    request = go.OffsetCommitRequest("g", [go.OffsetCommitTopic("t", parts)], generation, member_id)
    return [p.error_code for p in conn.call(request).body.topics[0].partitions]


def fetch(conn: Any) -> dict[int, int]:
    body = conn.call(go.OffsetFetchRequest("g")).body
    assert body.error_code == 0
    return {p.partition: p.committed_offset for t in body.topics for p in t.partitions}


def test_find_coordinator_and_a_one_member_group(start_broker):
    broker = start_broker(overrides=OVERRIDES)
    with broker.connect() as conn:
        found = conn.call(gp.FindCoordinatorRequest("g")).body
        assert (found.error_code, found.node_id) == (0, 0)
        assert (found.host, found.port) == (broker.address.host, broker.address.port)
    with broker.connect(unix=True) as conn:
        found = conn.call(gp.FindCoordinatorRequest("g")).body
        assert (found.host, found.port) == (str(broker.unix_address), 0)
        conn.create_topic("t", 2)
        joined = first_join(conn)
        assert (joined.error_code, joined.generation_id, joined.leader) == (
            0,
            1,
            joined.member_id,
        )
        me = joined.member_id
        sync = gp.SyncGroupRequest("g", 1, me, [gp.SyncGroupAssignment(me, b"both")])
        assert conn.call(sync).body.assignment == b"both"
        assert conn.call(gp.HeartbeatRequest("g", 1, me)).body.error_code == 0
        assert commit(conn, {0: 10, 1: 20}, 1, me) == [0, 0]
        assert fetch(conn) == {0: 10, 1: 20}
        internal = [t for t in conn.metadata().topics if t.name == OFFSETS_TOPIC]
        assert internal and internal[0].is_internal and len(internal[0].partitions) == 5


def test_two_members_rebalance_across_connections(start_broker):
    broker = start_broker(overrides=OVERRIDES)
    with broker.connect() as a, broker.connect() as b:
        a_id = first_join(a).member_id
        b_first = join(b)
        answers: dict[str, Any] = {}
        # b's join blocks until a rejoins, so it runs on a thread of its own.
        waiting = threading.Thread(
            target=lambda: answers.setdefault("b", join(b, b_first.member_id))
        )
        waiting.start()
        heartbeat = gp.HeartbeatRequest("g", 1, a_id)
        deadline = time.monotonic() + 30
        # Until b's join has reached the coordinator (heartbeats are answered at once).
        while a.call(heartbeat).body.error_code != E.REBALANCE_IN_PROGRESS:
            assert time.monotonic() < deadline, "b's JoinGroup never reached the broker"
        answers["a"] = join(a, a_id)
        waiting.join(30)
        assert "b" in answers, "b's JoinGroup was not answered after a rejoined"
        assert answers["a"].generation_id == answers["b"].generation_id == 2
        assert [m.member_id for m in answers["a"].members] == [a_id, b_first.member_id]
        described = a.call(gp.DescribeGroupsRequest(["g"])).body.groups[0]
        assert (described.group_state, len(described.members)) == ("CompletingRebalance", 2)


def _first_life(broker: Any) -> str:
    with broker.connect() as conn:
        conn.create_topic("t", 2)
        me = first_join(conn).member_id
        sync = gp.SyncGroupRequest("g", 1, me, [gp.SyncGroupAssignment(me, b"mine")])
        assert conn.call(sync).body.error_code == 0
        assert commit(conn, {0: 5, 1: 6}, 1, me) == [0, 0]
        assert commit(conn, {0: 7}, 1, me) == [0]
    return str(me)


def _second_life(broker: Any, me: str) -> None:
    with broker.connect() as conn:
        assert fetch(conn) == {0: 7, 1: 6}
        described = conn.call(gp.DescribeGroupsRequest(["g"])).body.groups[0]
        assert (described.group_state, described.members[0].member_id) == ("Stable", me)
        assert conn.call(gp.HeartbeatRequest("g", 1, me)).body.error_code == 0
        assert conn.call(gp.SyncGroupRequest("g", 1, me)).body.assignment == b"mine"


@pytest.mark.slow
def test_groups_and_offsets_survive_a_restart(start_broker):
    first = start_broker(overrides=OVERRIDES)
    me = _first_life(first)
    assert first.stop() == 0
    _second_life(start_broker(overrides=OVERRIDES), me)


@pytest.mark.slow
def test_groups_and_offsets_survive_a_crash(start_broker):
    first = start_broker(overrides=OVERRIDES)
    me = _first_life(first)
    first.kill()
    _second_life(start_broker(overrides=OVERRIDES), me)
