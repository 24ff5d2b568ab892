"""The group client's join, heartbeat, commit and leave logic against a scripted coordinator
(``group_peer.ScriptedBroker``): each test scripts what the coordinator answers and checks
what the member does, including the rebalance listener calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from group_peer import ScriptedBroker, scripted_broker

from spark_mq.client.assignors import (
    Assignment,
    decode_subscription,
    encode_assignment,
)
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ConsumerConfig
from spark_mq.client.errors import CommitFailedError
from spark_mq.client.group import ConsumerCoordinator, ConsumerRebalanceListener, MemberState
from spark_mq.client.group.offsets import OffsetAndMetadata
from spark_mq.client.records import TopicPartition
from spark_mq.client.subscription_state import SubscriptionState
from spark_mq.errors import FencedInstanceIdError
from spark_mq.protocol.group_offsets import (
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResponse,
)
from spark_mq.protocol.groups import (
    FindCoordinatorRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

T = "t"


def tps(*partitions: int) -> set[TopicPartition]:
    return {TopicPartition(T, p) for p in partitions}


def wait_until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


class OneMemberGroup:
    """A coordinator for a group of one member (or a follower, with ``leader=False``),
    whose answers a test can steer: the next heartbeat error, the commit error, the
    assignment SyncGroup hands out."""

    def __init__(self) -> None:
        self.generation = 0
        self.member_id = "m-1"
        self.leader = True
        self.heartbeat_errors: list[int] = []
        self.commit_error = 0
        self.assignments: list[tuple[TopicPartition, ...]] = []
        self.committed: dict[TopicPartition, int] = {}
        self.hold_join = threading.Event()
        self.hold_join.set()

    def __call__(self, request: Any) -> Any:
        if isinstance(request, JoinGroupRequest):
            if not request.member_id:
                return JoinGroupResponse(79, member_id=self.member_id)
            self.hold_join.wait(10)
            self.generation += 1
            protocol = request.protocols[0]
            members = (
                [JoinGroupMember(self.member_id, protocol.metadata, request.group_instance_id)]
                if self.leader
                else []
            )
            leader = self.member_id if self.leader else "other"
            return JoinGroupResponse(
                0, self.generation, "consumer", protocol.name, leader, self.member_id, members
            )
        if isinstance(request, SyncGroupRequest):
            if self.assignments:
                data = encode_assignment(Assignment(self.assignments.pop(0)))
            else:
                data = {a.member_id: a.assignment for a in request.assignments}.get(
                    request.member_id, b""
                )
            return SyncGroupResponse(0, data)
        if isinstance(request, HeartbeatRequest):
            code = self.heartbeat_errors.pop(0) if self.heartbeat_errors else 0
            return HeartbeatResponse(code)
        if isinstance(request, LeaveGroupRequest):
            return LeaveGroupResponse(0)
        if isinstance(request, OffsetCommitRequest):
            if not self.commit_error:
                for topic in request.topics:
                    for p in topic.partitions:
                        self.committed[TopicPartition(topic.name, p.partition)] = p.committed_offset
            return OffsetCommitResponse(
                [
                    OffsetCommitTopicResponse(
                        t.name,
                        [
                            OffsetCommitPartitionResponse(p.partition, self.commit_error)
                            for p in t.partitions
                        ],
                    )
                    for t in request.topics
                ]
            )
        if isinstance(request, OffsetFetchRequest):
            topics = request.topics or []
            return OffsetFetchResponse(
                0,
                [
                    OffsetFetchTopicResponse(
                        t.name,
                        [
                            OffsetFetchPartitionResponse(
                                p, self.committed.get(TopicPartition(t.name, p), -1)
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in topics
                ],
            )
        raise AssertionError(f"unexpected request {request!r}")


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, partitions: Any) -> None:
        self.calls.append(("revoked", set(partitions)))

    def on_partitions_assigned(self, partitions: Any) -> None:
        self.calls.append(("assigned", set(partitions)))

    def on_partitions_lost(self, partitions: Any) -> None:
        self.calls.append(("lost", set(partitions)))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[ScriptedBroker]:
    yield from scripted_broker(tmp_path, {T: 3})


class Member:
    """A ConsumerCoordinator with its subscription state, as the consumer wires them."""

    def __init__(self, broker: ScriptedBroker, **settings: Any) -> None:
        props = {
            "bootstrap.servers": broker.address,
            "group.id": "g",
            "heartbeat.interval.ms": 50,
            "session.timeout.ms": 6000,
            "partition.assignment.strategy": "range",
            "enable.auto.commit": False,
            **settings,
        }
        self.config = ConsumerConfig.from_properties(props)
        self.cluster = Cluster(self.config)
        self.subs = SubscriptionState()
        self.removed: list[TopicPartition] = []
        self.coordinator = ConsumerCoordinator(
            self.config, self.cluster, self.subs, on_partitions_removed=self.removed.append
        )
        self.listener = Recorder()

    def subscribe(self) -> None:
        self.subs.subscribe([T])
        self.coordinator.subscription_changed(self.listener)

    def poll_until_stable(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.coordinator.is_stable() and time.monotonic() < deadline:
            self.coordinator.poll(deadline, wait_for_join=True)
        assert self.coordinator.is_stable()

    def poll_until(self, condition: Any, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition() and time.monotonic() < deadline:
            self.coordinator.poll(time.monotonic() + 0.05, wait_for_join=True)
        assert condition()

    def close(self) -> None:
        self.coordinator.leave("test over", closing=True)
        self.coordinator.close()
        self.cluster.close()


@pytest.fixture
def group(broker: ScriptedBroker) -> OneMemberGroup:
    script = OneMemberGroup()
    broker.handler = script
    return script


@pytest.fixture
def member(broker: ScriptedBroker, group: OneMemberGroup) -> Iterator[Member]:
    m = Member(broker)
    yield m
    m.close()


def test_join_retries_with_the_member_id_and_the_leader_assigns(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    member.subscribe()
    member.poll_until_stable()
    joins = broker.of(JoinGroupRequest)
    assert [j.member_id for j in joins] == ["", "m-1"]
    assert joins[1].protocols[0].name == "range"
    assert decode_subscription(joins[1].protocols[0].metadata).topics == (T,)
    assert member.subs.assignment() == tps(0, 1, 2)
    assert member.listener.calls == [("assigned", tps(0, 1, 2))]
    assert member.coordinator.generation().generation_id == 1
    assert member.coordinator.state is MemberState.STABLE


def test_a_heartbeat_that_says_rebalancing_makes_an_eager_member_revoke_and_rejoin(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    member.subscribe()
    member.poll_until_stable()
    group.heartbeat_errors = [27]  # REBALANCE_IN_PROGRESS
    group.assignments = [(TopicPartition(T, 2),)]
    member.poll_until(lambda: member.coordinator.generation().generation_id == 2)
    assert member.listener.calls == [
        ("assigned", tps(0, 1, 2)),
        ("revoked", tps(0, 1, 2)),
        ("assigned", tps(2)),
    ]
    assert member.subs.assignment() == tps(2)
    assert set(member.removed) == tps(0, 1, 2)


def test_a_removed_member_loses_its_partitions_and_rejoins_without_a_member_id(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    member.subscribe()
    member.poll_until_stable()
    group.heartbeat_errors = [25]  # UNKNOWN_MEMBER_ID
    member.poll_until(lambda: member.coordinator.generation().generation_id == 2)
    assert member.listener.calls[1] == ("lost", tps(0, 1, 2))
    assert [j.member_id for j in broker.of(JoinGroupRequest)] == ["", "m-1", "", "m-1"]


def test_cooperative_rebalance_revokes_only_what_moves_then_rejoins(
    broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    member = Member(broker, **{"partition.assignment.strategy": "cooperative-sticky"})
    try:
        member.subscribe()
        group.leader = False
        group.assignments = [(TopicPartition(T, 0), TopicPartition(T, 1))]
        member.poll_until_stable()
        assert member.subs.assignment() == tps(0, 1)
        # A rebalance: the (scripted) leader takes t-1 away; the member keeps t-0 meanwhile.
        group.heartbeat_errors = [27]
        group.assignments = [(TopicPartition(T, 0),), (TopicPartition(T, 0),)]
        member.subs.seek(TopicPartition(T, 0), 7)
        member.poll_until(lambda: member.coordinator.generation().generation_id == 3)
        member.poll_until_stable()
        joins = broker.of(JoinGroupRequest)
        claim = decode_subscription(joins[2].protocols[0].metadata)
        assert set(claim.owned_partitions) == tps(0, 1) and claim.generation == 1
        second = decode_subscription(joins[3].protocols[0].metadata)
        assert set(second.owned_partitions) == tps(0)
        assert member.listener.calls == [
            ("assigned", tps(0, 1)),
            ("revoked", tps(1)),
            ("assigned", set()),
            ("assigned", set()),
        ]
        assert member.subs.position(TopicPartition(T, 0)) == 7  # kept throughout
        assert member.removed == [TopicPartition(T, 1)]
    finally:
        member.close()


def test_a_commit_with_a_stale_generation_fails_and_the_partitions_are_lost(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    member.subscribe()
    member.poll_until_stable()
    group.commit_error = 22  # ILLEGAL_GENERATION
    with pytest.raises(CommitFailedError) as info:
        member.coordinator.commit_sync(
            {TopicPartition(T, 0): OffsetAndMetadata(5)}, timeout_ms=5000
        )
    assert (info.value.reason, info.value.generation_id) == ("ILLEGAL_GENERATION", 1)
    assert not member.coordinator.generation().is_valid
    group.commit_error = 0
    member.poll_until_stable()
    assert ("lost", tps(0, 1, 2)) in member.listener.calls
    member.coordinator.commit_sync({TopicPartition(T, 0): OffsetAndMetadata(5)}, timeout_ms=5000)
    assert group.committed == {TopicPartition(T, 0): 5}
    assert broker.of(OffsetCommitRequest)[-1].generation_id == 2


def test_async_commit_callbacks_run_in_order_from_a_later_poll(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    member.subscribe()
    member.poll_until_stable()
    done: list[tuple[int, object]] = []
    for offset in (1, 2, 3):
        member.coordinator.commit_async(
            {TopicPartition(T, 0): OffsetAndMetadata(offset)},
            lambda offsets, error: done.append((offsets[TopicPartition(T, 0)].offset, error)),
        )
    member.poll_until(lambda: len(done) == 3)
    assert done == [(1, None), (2, None), (3, None)]
    assert group.committed[TopicPartition(T, 0)] == 3


def test_the_heartbeat_thread_leaves_when_poll_is_not_called(
    broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    member = Member(broker, **{"max.poll.interval.ms": 300})
    try:
        member.subscribe()
        member.poll_until_stable()
        broker.wait_for(LeaveGroupRequest)  # no poll() for 300 ms: the member leaves
        wait_until(lambda: not member.coordinator.generation().is_valid)
        member.poll_until_stable()
        assert member.listener.calls[1] == ("lost", tps(0, 1, 2))
    finally:
        member.close()


def test_a_static_member_does_not_leave_on_close_a_dynamic_one_does(
    broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    static = Member(broker, **{"group.instance.id": "i-1"})
    static.subscribe()
    static.poll_until_stable()
    static.close()
    assert broker.of(LeaveGroupRequest) == []
    assert static.listener.calls[-1] == ("revoked", tps(0, 1, 2))
    dynamic = Member(broker)
    dynamic.subscribe()
    dynamic.poll_until_stable()
    dynamic.close()
    assert [m.member_id for m in broker.of(LeaveGroupRequest)[0].members] == ["m-1"]


def test_fenced_instance_id_is_fatal(broker: ScriptedBroker, group: OneMemberGroup) -> None:
    member = Member(broker, **{"group.instance.id": "i-1"})
    try:
        group.heartbeat_errors = [82]  # FENCED_INSTANCE_ID, for the first heartbeat
        member.subscribe()
        member.poll_until_stable()
        broker.wait_for(HeartbeatRequest)
        with pytest.raises(FencedInstanceIdError):
            member.poll_until(lambda: False, timeout_s=5)
        with pytest.raises(FencedInstanceIdError):
            member.coordinator.poll(time.monotonic(), wait_for_join=False)
    finally:
        member.close()


def test_committed_offsets_are_read_back(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    group.committed = {TopicPartition(T, 1): 42}
    found = member.coordinator.committer.fetch_committed(tps(0, 1), timeout_ms=5000)
    assert found == {TopicPartition(T, 0): None, TopicPartition(T, 1): OffsetAndMetadata(42)}


def test_a_listener_error_is_raised_from_poll_after_the_rebalance_completes(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    class Boom(ConsumerRebalanceListener):
        def on_partitions_assigned(self, partitions: Any) -> None:
            raise RuntimeError("boom")

    member.subs.subscribe([T])
    member.coordinator.subscription_changed(Boom())
    with pytest.raises(RuntimeError, match="boom"):
        member.coordinator.poll(time.monotonic() + 10, wait_for_join=True)
    assert member.coordinator.is_stable()
    assert member.subs.assignment() == tps(0, 1, 2)


def test_a_coordinator_lost_while_stable_is_found_again_and_heartbeats_go_on(
    member: Member, broker: ScriptedBroker, group: OneMemberGroup
) -> None:
    group.heartbeat_errors = [16]  # NOT_COORDINATOR, for the first heartbeat
    member.subscribe()
    member.poll_until_stable()
    lookups = len(broker.of(FindCoordinatorRequest))
    member.poll_until(lambda: len(broker.of(FindCoordinatorRequest)) > lookups)
    heartbeats = len(broker.of(HeartbeatRequest))
    broker.wait_for(HeartbeatRequest, heartbeats + 1)
    assert member.coordinator.is_stable()
    assert member.coordinator.generation().generation_id == 1  # no rebalance
