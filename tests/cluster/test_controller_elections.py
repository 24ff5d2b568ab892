"""The controller's controlled shutdown, ElectLeaders and auto rebalance against a real
ZooKeeper, with the controller in process and brokers registered by sessions of their own
(as in test_controller; nothing listens at their endpoints, so requests wait in the
senders' queues). What the elections write to the partition state znodes is checked
directly."""

from __future__ import annotations

from collections.abc import Callable

from test_controller import StartController, _state, brokers, start_controller  # noqa: F401
from waiting import wait_for

from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import create_topic, read_partition_state
from spark_mq.protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionState,
    ControlledShutdownRequest,
)
from spark_mq.protocol.elect_leaders import (
    PREFERRED,
    UNCLEAN,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersTopic,
)
from spark_mq.protocol.error_codes import ErrorCode


def _epoch(zk: ZkClient, broker_id: int) -> int:
    found = zk.get(znodes.broker_path(broker_id))
    assert found is not None
    return int(found[1].czxid)


def _codes(response: ElectLeadersResponse) -> dict[tuple[str, int], int]:
    return {
        (t.topic, p.partition): p.error_code
        for t in response.replica_election_results
        for p in t.partition_results
    }


def test_a_controlled_shutdown_moves_leaderships_and_leaves_isrs(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],  # noqa: F811
    start_controller: StartController,  # noqa: F811
) -> None:
    zk = clients()
    brokers(1, 2, 3)
    # 0: led by 1; 1: followed by 1; 2: only on 1; 3: led by 1, other replica shutting down.
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2, 3), 1: (2, 1, 3), 2: (1,), 3: (1, 3)}))
    controller = start_controller()
    wait_for(lambda: all(_state(zk, "t", p) is not None for p in range(4)), timeout_s=15)
    before = {p: read_partition_state(zk, "t", p) for p in range(4)}

    stale = controller.controlled_shutdown(ControlledShutdownRequest(1, _epoch(zk, 1) - 1))
    assert stale.result(15).error_code == ErrorCode.STALE_BROKER_EPOCH
    unknown = controller.controlled_shutdown(ControlledShutdownRequest(9, 1))
    assert unknown.result(15).error_code == ErrorCode.BROKER_NOT_AVAILABLE
    assert {p: read_partition_state(zk, "t", p) for p in range(4)} == before

    first = controller.controlled_shutdown(ControlledShutdownRequest(3, _epoch(zk, 3)))
    assert first.result(15).error_code == 0
    # Broker 3 left the ISR of partition 0, which broker 1 leads (leader epoch + 1).
    before[0] = read_partition_state(zk, "t", 0)
    assert before[0] is not None and before[0].value.isr == (1, 2)
    answer = controller.controlled_shutdown(ControlledShutdownRequest(1, _epoch(zk, 1)))
    response = answer.result(15)
    assert response.error_code == 0
    # 2 has one replica, 3's other replica is shutting down: neither is worth a retry.
    assert response.remaining_partitions == []
    after = {p: read_partition_state(zk, "t", p) for p in range(4)}
    old, new = before[0], after[0]
    assert old is not None and new is not None
    # Broker 3 is shutting down too: broker 2, the next in sync, leads.
    assert (new.value.leader, new.value.isr) == (2, (2,))
    assert new.value.leader_epoch == old.value.leader_epoch + 1
    followed = after[1]
    assert followed is not None and followed.value.leader == 2 and 1 not in followed.value.isr
    for p in (2, 3):
        kept = after[p]
        assert kept is not None and kept.value.leader == 1  # nobody else may lead


def test_elect_leaders_preferred_and_unclean(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],  # noqa: F811
    start_controller: StartController,  # noqa: F811
) -> None:
    zk = clients()
    brokers(2, 3)  # the preferred replica, 1, is down at first
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2, 3)}))
    controller = start_controller(auto_leader_rebalance_enable=False)
    wait_for(lambda: _state(zk, "t", 0) is not None, timeout_s=15)
    brokers(1)
    # The broker-change watch may fire after a barrier queued at once: wait until the
    # controller counts broker 1 live (the ISR change below must name live replicas only).
    wait_for(lambda: controller.wait_for_events() and 1 in controller.context.live_brokers, 15)

    def elect(kind: int, partitions: list[int] | None = None) -> dict[tuple[str, int], int]:
        topics = None if partitions is None else [ElectLeadersTopic("t", partitions)]
        future = controller.elect_leaders(ElectLeadersRequest(kind, topics))
        return _codes(future.result(15))

    # Broker 1 is alive but not in the ISR: it may not lead.
    assert elect(PREFERRED) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    assert elect(PREFERRED, [0, 7]) == {
        ("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    # The leader (2) adds broker 1 to the ISR, as it would once 1 caught up.
    current = read_partition_state(zk, "t", 0)
    assert current is not None
    added = AlterPartitionState("t", 0, current.value.leader_epoch, [2, 3, 1], current.version)
    assert (
        controller.alter_partition(AlterPartitionRequest(2, _epoch(zk, 2), [added]))
        .result(15)
        .partitions[0]
        .error_code
        == 0
    )
    assert elect(PREFERRED) == {("t", 0): ErrorCode.NONE}
    state = _state(zk, "t", 0)
    assert state is not None and state.leader == 1
    assert state.leader_epoch == current.value.leader_epoch + 1 and state.isr == (2, 3, 1)
    assert elect(PREFERRED, [0]) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    # UNCLEAN: a partition with a live leader needs none.
    assert elect(UNCLEAN, [0]) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    bad = controller.elect_leaders(ElectLeadersRequest(5, None)).result(15)
    assert bad.error_code == ErrorCode.INVALID_REQUEST


def test_auto_rebalance_moves_leadership_back_to_the_preferred_replica(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],  # noqa: F811
    start_controller: StartController,  # noqa: F811
) -> None:
    zk = clients()
    brokers(2, 3)
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1)}))
    controller = start_controller(
        leader_imbalance_check_interval_seconds=0.2, leader_imbalance_per_broker_percentage=10
    )
    wait_for(lambda: all(_state(zk, "t", p) is not None for p in range(2)), timeout_s=15)
    brokers(1)
    # As in test_elect_leaders_preferred_and_unclean: the ISR change below names broker 1,
    # so wait until the controller counts it live (its broker-change watch may come late).
    wait_for(lambda: controller.wait_for_events() and 1 in controller.context.live_brokers, 15)
    current = read_partition_state(zk, "t", 0)
    assert current is not None and current.value.leader == 2
    added = AlterPartitionState("t", 0, current.value.leader_epoch, [2, 3, 1], current.version)
    response = controller.alter_partition(AlterPartitionRequest(2, _epoch(zk, 2), [added]))
    assert response.result(15).partitions[0].error_code == 0
    wait_for(lambda: (s := _state(zk, "t", 0)) is not None and s.leader == 1, timeout_s=15)
    # Partition 1 was led by its preferred replica all along.
    assert (s := _state(zk, "t", 1)) is not None and s.leader == 2
