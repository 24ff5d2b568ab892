"""The group handlers and GroupService in-process: a BrokerCore over a LogManager in
tmp_path, requests through the handler table, no sockets, a clock the test owns."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.group.offsets_topic import OFFSETS_TOPIC
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.protocol import group_offsets as go
from spark_mq.protocol import groups as gp
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.error_codes import ErrorCode as E
from spark_mq.protocol.framing import RequestHeader
from spark_mq.protocol.metadata import MetadataRequest
from spark_mq.storage.log_manager import LogManager

TCP = BrokerAddress("127.0.0.1", 9092)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Broker:
    """A core on a directory, openable again (a restart), with a fake clock."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = Clock()
        self.core: BrokerCore | None = None
        self.logs: LogManager | None = None

    def open(self) -> BrokerCore:
        self.logs = LogManager(self.root)
        config = ServerConfig.from_properties(
            {
                "log.dirs": str(self.root),
                "group.initial.rebalance.delay.ms": "0",
                "offsets.topic.num.partitions": "4",
            }
        )
        self.core = BrokerCore(config, self.logs, BrokerMeta.take_over(self.root), clock=self.clock)
        return self.core

    def close(self) -> None:
        if self.core is not None:
            self.core.groups.close()
            self.core.close()
        if self.logs is not None:
            self.logs.close()
        self.core = self.logs = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path / "mq")
    b.open()
    yield b
    b.close()


async def call(core: BrokerCore, request: Any, listener: BrokerAddress = TCP) -> Any:
    spec = spec_for_request(request)
    ctx = RequestContext(core, RequestHeader(spec.key, 0, 1, "cli"), listener, "127.0.0.1:5000")
    # Through the dispatcher, which answers what a handler raises, as the connection does.
    response = await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(b""))
    assert response is not None
    return response.body


def join(member_id: str = "", group: str = "g") -> gp.JoinGroupRequest:
    protocols = [gp.JoinGroupProtocol("range", b"sub")]
    return gp.JoinGroupRequest(group, 10_000, 30_000, member_id, "consumer", protocols)


async def joined_member(core: BrokerCore, group: str = "g") -> str:
    first = await call(core, join(group=group))
    assert first.error_code == E.MEMBER_ID_REQUIRED
    return str(first.member_id)


def test_find_coordinator_creates_the_offsets_topic_lazily(broker):
    core = broker.core

    async def main() -> None:
        assert not core.logs.topic_exists(OFFSETS_TOPIC)
        found = await call(core, gp.FindCoordinatorRequest("g"))
        assert (found.error_code, found.node_id, found.host, found.port) == (
            0,
            0,
            "127.0.0.1",
            9092,
        )
        assert core.logs.describe_topic(OFFSETS_TOPIC).partition_count == 4
        unix = BrokerAddress(unix_path="/tmp/x.sock")
        found = await call(core, gp.FindCoordinatorRequest("g"), unix)
        assert (found.host, found.port) == ("unix:/tmp/x.sock", 0)
        unknown_type = await call(core, gp.FindCoordinatorRequest("t", key_type=7))
        assert unknown_type.error_code == E.INVALID_REQUEST
        empty = await call(core, gp.FindCoordinatorRequest(""))
        assert empty.error_code == E.INVALID_GROUP_ID
        metadata = await call(core, MetadataRequest([OFFSETS_TOPIC]))
        assert metadata.topics[0].is_internal

    asyncio.run(main())


def test_join_sync_heartbeat_commit_fetch_through_the_handlers(broker):
    core = broker.core

    async def main() -> None:
        a = await joined_member(core)
        first = await call(core, join(a))
        assert (first.error_code, first.generation_id, first.leader) == (0, 1, a)
        b = await joined_member(core)
        # b's join waits for a to rejoin; a's rejoin completes the round for both.
        b_join = asyncio.create_task(call(core, join(b)))
        await asyncio.sleep(0)
        assert not b_join.done()
        a_join = await call(core, join(a))
        b_answer = await b_join
        assert a_join.generation_id == b_answer.generation_id == 2
        assert [m.member_id for m in a_join.members] == [a, b] and b_answer.members == []
        follower = asyncio.create_task(call(core, gp.SyncGroupRequest("g", 2, b)))
        await asyncio.sleep(0)
        assert not follower.done()
        assignments = [gp.SyncGroupAssignment(a, b"A"), gp.SyncGroupAssignment(b, b"B")]
        leader = await call(core, gp.SyncGroupRequest("g", 2, a, assignments))
        assert (leader.assignment, (await follower).assignment) == (b"A", b"B")
        assert (await call(core, gp.HeartbeatRequest("g", 2, b))).error_code == 0
        stale = await call(core, gp.HeartbeatRequest("g", 1, b))
        assert stale.error_code == E.ILLEGAL_GENERATION and "generation 1" in stale.error_message

        await call(core, MetadataRequest(["t"], allow_auto_topic_creation=True))
        commit = go.OffsetCommitRequest(
            "g",
            [
                go.OffsetCommitTopic(
                    "t", [go.OffsetCommitPartition(0, 42, 3, "m"), go.OffsetCommitPartition(5, 1)]
                ),
                go.OffsetCommitTopic("missing", [go.OffsetCommitPartition(0, 1)]),
            ],
            generation_id=2,
            member_id=b,
        )
        committed = await call(core, commit)
        codes = [[p.error_code for p in t.partitions] for t in committed.topics]
        assert codes == [[0, E.UNKNOWN_TOPIC_OR_PARTITION], [E.UNKNOWN_TOPIC_OR_PARTITION]]
        fetched = await call(core, go.OffsetFetchRequest("g", [go.OffsetFetchTopic("t", [0, 1])]))
        parts = fetched.topics[0].partitions
        assert [
            (p.partition, p.committed_offset, p.committed_leader_epoch, p.metadata) for p in parts
        ] == [
            (0, 42, 3, "m"),
            (1, -1, -1, None),
        ]
        everything = await call(core, go.OffsetFetchRequest("g"))
        assert [(t.name, [p.partition for p in t.partitions]) for t in everything.topics] == [
            ("t", [0])
        ]

        described = (await call(core, gp.DescribeGroupsRequest(["g"]))).groups[0]
        assert (described.group_state, described.members[0].client_id) == ("Stable", "cli")
        assert described.members[0].client_host == "/127.0.0.1"
        listed = await call(core, gp.ListGroupsRequest())
        assert [(g.group_id, g.group_state) for g in listed.groups] == [("g", "Stable")]
        left = await call(
            core, gp.LeaveGroupRequest("g", [gp.LeavingMember(a), gp.LeavingMember(b)])
        )
        assert [m.error_code for m in left.members] == [0, 0]
        deleted = await call(core, gp.DeleteGroupsRequest(["g"]))
        assert deleted.results[0].error_code == 0

    asyncio.run(main())


def test_groups_and_offsets_survive_a_restart(broker):
    async def first_life(core: BrokerCore) -> str:
        await call(core, MetadataRequest(["t"], allow_auto_topic_creation=True))
        a = await joined_member(core)
        await call(core, join(a))
        await call(core, gp.SyncGroupRequest("g", 1, a, [gp.SyncGroupAssignment(a, b"mine")]))
        commit = go.OffsetCommitRequest(
            "g", [go.OffsetCommitTopic("t", [go.OffsetCommitPartition(0, 7)])], 1, a
        )
        assert (await call(core, commit)).topics[0].partitions[0].error_code == 0
        return a

    member = asyncio.run(first_life(broker.core))
    broker.close()
    core = broker.open()

    async def second_life() -> None:
        fetched = await call(core, go.OffsetFetchRequest("g"))
        assert fetched.topics[0].partitions[0].committed_offset == 7
        # The member carries on with its generation and gets its assignment again.
        assert (await call(core, gp.HeartbeatRequest("g", 1, member))).error_code == 0
        again = await call(core, gp.SyncGroupRequest("g", 1, member))
        assert again.assignment == b"mine"

    asyncio.run(second_life())


def test_the_service_arms_one_timer_at_the_earliest_deadline(broker):
    core = broker.core
    service = core.groups

    async def main() -> None:
        a = await joined_member(core)
        await call(core, join(a))
        deadline = service.coordinator.next_deadline_ms()
        assert deadline is not None and service._timer_deadline_ms == deadline
        assert service._timer is not None
        # Time passes (the test's clock), the timer fires: a's session (10 s) expires.
        broker.clock.now += 10_000
        service._fire()
        described = (await call(core, gp.DescribeGroupsRequest(["g"]))).groups[0]
        assert described.group_state == "Empty"

    asyncio.run(main())


def test_close_answers_waiting_joins(broker):
    core = broker.core

    async def main() -> None:
        a = await joined_member(core)
        await call(core, join(a))
        b = await joined_member(core)
        waiting = asyncio.create_task(call(core, join(b)))
        await asyncio.sleep(0)
        core.groups.close()
        answer = await waiting
        assert answer.error_code == E.COORDINATOR_NOT_AVAILABLE
        after = await call(core, join(a))
        assert after.error_code == E.COORDINATOR_NOT_AVAILABLE

    asyncio.run(main())
