"""The controller against a real ZooKeeper: it runs in-process (elected through the real
``/controller`` multi-op) with brokers registered by real sessions of their own, so a broker
dies when its session is closed. What it writes to the partition state znodes is checked
directly; its requests go to the registered endpoints (nothing listens there in these
tests, so they wait in the senders' queues and are counted in ``Controller.sent``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from waiting import wait_for

from spark_mq.broker.controller.channel import BrokerResponse
from spark_mq.broker.controller.controller import Controller, ControllerConfig
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.broker_registration import BrokerRegistrar
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.controller_election import (
    ControllerEpoch,
    register_controller_and_increment_epoch,
)
from spark_mq.broker.zk.membership import get_or_create_inter_broker_secret
from spark_mq.broker.zk.partition_states import create_topic, read_partition_state
from spark_mq.broker.zk.topic_admin import ZkTopicAdmin
from spark_mq.cluster.zookeeper_server import free_loopback_port
from spark_mq.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    UnsupportedVersionError,
)
from spark_mq.protocol.controller import LeaderAndIsrRequest, LeaderAndIsrResponse
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.log_config import LogConfig

StartController = Callable[..., Controller]


def register_broker(zk: ZkClient, broker_id: int, rack: str | None = None) -> int:
    """Register ``broker_id`` on ``zk``'s session (closing it ends the broker); its epoch."""
    endpoint = znodes.EndPoint("PLAINTEXT", "127.0.0.1", free_loopback_port())
    registrar = BrokerRegistrar(
        zk, lambda: znodes.BrokerRegistration(broker_id, (endpoint,), rack, 0)
    )
    return registrar.register()


@pytest.fixture
def brokers(clients: Callable[[], ZkClient]) -> Callable[..., dict[int, ZkClient]]:
    """``brokers(1, 2, 3)``: each registered on a session of its own, by id."""

    def make(*ids: int) -> dict[int, ZkClient]:
        out = {}
        for broker_id in ids:
            out[broker_id] = clients()
            register_broker(out[broker_id], broker_id)
        return out

    return make


@pytest.fixture
def start_controller(clients: Callable[[], ZkClient]) -> Iterator[StartController]:
    """``start_controller(broker_id=100)``: elect ``broker_id`` and start its controller."""
    made: list[Controller] = []

    def start(broker_id: int = 100, **config: object) -> Controller:
        zk = clients()
        secret = get_or_create_inter_broker_secret(zk)
        epoch = register_controller_and_increment_epoch(zk, broker_id, 0)
        moved: list[tuple[ControllerEpoch, str]] = []
        controller = Controller(
            zk,
            epoch,
            ControllerConfig(broker_id, secret, reconnect_backoff_ms=50, **config),  # type: ignore[arg-type]
            on_controller_moved=lambda e, reason: moved.append((e, reason)),
        )
        controller.moved = moved  # type: ignore[attr-defined]
        controller.start()
        made.append(controller)
        assert controller.wait_for_events()  # Startup done: it knows the live brokers
        return controller

    yield start
    for controller in made:
        controller.shutdown()
        controller.join()


@pytest.fixture
def admin(clients: Callable[[], ZkClient]) -> ZkTopicAdmin:
    return ZkTopicAdmin(
        clients(),
        default_replication_factor=3,
        log_defaults=LogConfig(),
        rng=random.Random(7),
    )


def _state(zk: ZkClient, topic: str, partition: int) -> znodes.PartitionState | None:
    found = read_partition_state(zk, topic, partition)
    return None if found is None else found.value


def _wait_leader(
    zk: ZkClient, leader: int, topic: str = "t", partition: int = 0
) -> znodes.PartitionState:
    """The partition's state once its leader is ``leader`` (-1: none)."""
    wait_for(
        lambda: (s := _state(zk, topic, partition)) is not None and s.leader == leader,
        timeout_s=15,
    )
    state = _state(zk, topic, partition)
    assert state is not None
    return state


def test_startup_brings_the_partitions_of_existing_topics_online(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
) -> None:
    zk = clients()
    brokers(1, 2)  # broker 3 is not running
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2, 3), 1: (3, 2, 1)}))
    controller = start_controller()
    wait_for(lambda: _state(zk, "t", 1) is not None, timeout_s=15)
    epoch = controller.epoch.epoch
    assert _state(zk, "t", 0) == znodes.PartitionState(1, 0, (1, 2), epoch)
    # The preferred leader (3) is down: the first live replica leads.
    assert _state(zk, "t", 1) == znodes.PartitionState(2, 0, (2, 1), epoch)
    assert controller.wait_for_events()
    # UpdateMetadata first, then the FULL LeaderAndIsr, to each live broker.
    assert controller.sent[1] >= 2 and controller.sent[2] >= 2 and controller.sent[3] == 0


def test_create_topic_with_replication_factor_3_on_3_live_brokers(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
    admin: ZkTopicAdmin,
) -> None:
    zk = clients()
    brokers(1, 2, 3)
    controller = start_controller()
    assignment = admin.create_topic("orders", 6, None, {"retention.ms": "60000"})
    assert all(sorted(r) == [1, 2, 3] for r in assignment.values())
    # Leaders go round the brokers.
    assert sorted(r[0] for r in assignment.values()) == [1, 1, 2, 2, 3, 3]
    assert admin.wait_for_leaders("orders", 15_000)
    for partition, replicas in assignment.items():
        state = _state(zk, "orders", partition)
        assert state is not None
        assert state.leader == replicas[0] and state.leader in state.isr
        assert sorted(state.isr) == [1, 2, 3] and state.leader_epoch == 0
        assert state.controller_epoch == controller.epoch.epoch


def test_a_replication_factor_above_the_live_brokers_is_refused_naming_both_counts(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    admin: ZkTopicAdmin,
) -> None:
    zk = clients()
    brokers(1, 2)
    with pytest.raises(InvalidReplicationFactorError) as info:
        admin.create_topic("t", 1, 3, {})
    message = str(info.value)
    assert "only 2 brokers are live ([1, 2])" in message
    assert "1 more broker must be running" in message
    assert "default.replication.factor" not in message
    with pytest.raises(InvalidReplicationFactorError, match=r"default\.replication\.factor"):
        admin.create_topic("t", 1, None, {})  # the admin's default is 3
    assert zk.get(znodes.topic_path("t")) is None


def test_a_dead_broker_loses_its_leaderships_to_the_isr_and_leaves_every_isr(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
) -> None:
    zk = clients()
    sessions = brokers(1, 2, 3)
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}))
    controller = start_controller()
    wait_for(lambda: all(_state(zk, "t", p) is not None for p in range(3)), timeout_s=15)
    before = {p: read_partition_state(zk, "t", p) for p in range(3)}

    sessions[1].close()  # broker 1 dies: its registration goes with its session

    def settled() -> bool:
        states = [_state(zk, "t", p) for p in range(3)]
        return all(s is not None and 1 not in s.isr for s in states)

    wait_for(settled, timeout_s=15)
    after = {p: read_partition_state(zk, "t", p) for p in range(3)}
    for p in range(3):
        old, new = before[p], after[p]
        assert old is not None and new is not None
        assert new.value.leader_epoch == old.value.leader_epoch + 1
        assert new.version == old.version + 1  # one compare-and-set, at the version read
        assert new.value.leader != 1 and new.value.leader in new.value.isr
        assert new.value.controller_epoch == controller.epoch.epoch
    # Partition 0 was led by broker 1: the next replica in the ISR leads it now.
    assert after[0] is not None and after[0].value.leader == 2
    assert after[0].value.isr == (2, 3)
    # The others keep their leader; broker 1 only left their ISR.
    assert after[1] is not None and after[1].value.leader == 2
    assert after[2] is not None and after[2].value.leader == 3


def test_a_partition_whose_only_in_sync_replica_dies_stays_offline_without_unclean_election(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
) -> None:
    zk = clients()
    sessions = brokers(1, 2)
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2)}))
    # Broker 2 is a replica but not in sync.
    zk.kazoo.create(
        znodes.partition_state_path("t", 0),
        znodes.PartitionState(1, 4, (1,), 0).encode(),
        makepath=True,
    )
    start_controller()
    sessions[1].close()
    state = _wait_leader(zk, -1)
    # No leader, and the ISR keeps its last member: the partition waits for broker 1.
    assert state is not None and state.isr == (1,) and state.leader_epoch == 5


def test_unclean_leader_election_elects_an_out_of_sync_replica_when_enabled(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
) -> None:
    zk = clients()
    sessions = brokers(1, 2)
    create_topic(
        zk,
        "t",
        znodes.TopicAssignment({0: (1, 2)}),
        {"unclean.leader.election.enable": "true"},
    )
    zk.kazoo.create(
        znodes.partition_state_path("t", 0),
        znodes.PartitionState(1, 4, (1,), 0).encode(),
        makepath=True,
    )
    start_controller()
    sessions[1].close()
    state = _wait_leader(zk, 2)
    assert state is not None and state.isr == (2,) and state.leader_epoch == 5


def test_a_returning_broker_brings_its_offline_partition_back_online(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
) -> None:
    zk = clients()
    sessions = brokers(1, 2)
    create_topic(zk, "t", znodes.TopicAssignment({0: (1,)}))
    controller = start_controller()
    _wait_leader(zk, 1)
    sessions[1].close()
    _wait_leader(zk, -1)
    brokers(1)
    state = _wait_leader(zk, 1)
    assert state is not None and state.leader_epoch == 2 and state.isr == (1,)
    assert controller.active


def test_a_deposed_controller_writes_no_partition_state_and_resigns(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
    admin: ZkTopicAdmin,
) -> None:
    zk = clients()
    brokers(1)
    old = start_controller(broker_id=100)
    admin.create_topic("before", 1, 1, {})
    assert admin.wait_for_leaders("before", 15_000)  # it could write while it was controller
    assert old.wait_for_events()

    # Another broker wins an election (as after a pause that outlasted the old session).
    zk.kazoo.delete(znodes.CONTROLLER)
    newer = register_controller_and_increment_epoch(clients(), 200, 0)
    assert newer.epoch == old.epoch.epoch + 1

    admin.create_topic("after", 1, 1, {})
    wait_for(lambda: not old.active, timeout_s=15)
    assert old.moved == [(old.epoch, old.moved[0][1])]  # type: ignore[attr-defined]
    assert "another broker is controller" in old.moved[0][1]  # type: ignore[attr-defined]
    assert zk.get(znodes.partition_state_path("after", 0)) is None


def test_adding_partitions_brings_the_new_ones_online(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
    admin: ZkTopicAdmin,
) -> None:
    zk = clients()
    brokers(1, 2)
    start_controller()
    admin.create_topic("t", 2, 2, {})
    assert admin.wait_for_leaders("t", 15_000)
    admin.create_partitions("t", 5)
    assert admin.wait_for_leaders("t", 15_000, range(5))
    for p in range(5):
        state = _state(zk, "t", p)
        assert state is not None and sorted(state.isr) == [1, 2]
    with pytest.raises(InvalidPartitionsError, match="can only be added"):
        admin.create_partitions("t", 5)


def test_topic_deletion_removes_every_znode_of_the_topic(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
    admin: ZkTopicAdmin,
) -> None:
    zk = clients()
    brokers(1, 2, 3)
    controller = start_controller()
    admin.create_topic("doomed", 3, 3, {"retention.ms": "1000"})
    admin.create_topic("kept", 1, 3, {})
    assert admin.wait_for_leaders("doomed", 15_000) and admin.wait_for_leaders("kept", 15_000)
    assert controller.wait_for_events()
    sent_before = dict(controller.sent)

    admin.delete_topic("doomed")
    wait_for(lambda: admin.topic_gone("doomed"), timeout_s=15)
    for path in (
        znodes.topic_path("doomed"),
        znodes.topic_config_path("doomed"),
        znodes.delete_topic_path("doomed"),
    ):
        assert zk.get(path) is None, path
    assert zk.children(znodes.DELETE_TOPICS) == []
    assert zk.get(znodes.partition_state_path("kept", 0)) is not None
    assert "doomed" not in controller.context.assignments
    # Every live replica was sent UpdateMetadata (leader -2) and StopReplica.
    assert all(controller.sent[b] >= sent_before[b] + 2 for b in (1, 2, 3))
    # The name is free again.
    admin.create_topic("doomed", 1, 1, {})
    assert admin.wait_for_leaders("doomed", 15_000)


def test_a_deletion_request_for_an_unknown_topic_is_removed(
    clients: Callable[[], ZkClient], start_controller: StartController
) -> None:
    zk = clients()
    zk.kazoo.create(znodes.delete_topic_path("ghost"), b"", makepath=True)
    start_controller()
    wait_for(lambda: zk.children(znodes.DELETE_TOPICS) == [], timeout_s=15)


def test_a_new_controller_takes_dead_brokers_out_of_the_isr_and_elects_from_the_rest(
    clients: Callable[[], ZkClient],
    brokers: Callable[..., dict[int, ZkClient]],
    start_controller: StartController,
) -> None:
    zk = clients()
    brokers(2, 3)  # broker 1 died while there was no controller
    create_topic(zk, "t", znodes.TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1)}))
    for p, leader in ((0, 1), (1, 2)):
        zk.kazoo.create(
            znodes.partition_state_path("t", p),
            znodes.PartitionState(leader, 3, (1, 2, 3), 0).encode(),
            makepath=True,
        )
    controller = start_controller()
    led, followed = _state(zk, "t", 0), _state(zk, "t", 1)
    assert led is not None and followed is not None
    # Its leadership went to the next in-sync replica; it left the ISR of the other.
    assert (led.leader, led.isr, led.leader_epoch) == (2, (2, 3), 4)
    assert (followed.leader, followed.isr, followed.leader_epoch) == (2, (2, 3), 4)
    assert led.controller_epoch == followed.controller_epoch == controller.epoch.epoch


def test_a_broker_that_saw_a_newer_controller_makes_this_one_resign(
    brokers: Callable[..., dict[int, ZkClient]], start_controller: StartController
) -> None:
    brokers(1)
    controller = start_controller()
    request = LeaderAndIsrRequest(100, controller.epoch.epoch, -1, [], [])
    refused = UnsupportedVersionError("LEADER_AND_ISR is not served by this broker")
    controller.on_response(BrokerResponse(1, request, None, refused))
    # An answer with another error is logged; the controller goes on.
    assert controller.active and controller.responses[-1].error is refused
    stale = LeaderAndIsrResponse(int(ErrorCode.STALE_CONTROLLER_EPOCH), [], "seen epoch 9")
    controller.on_response(BrokerResponse(1, request, stale))
    assert not controller.active
    assert "STALE_CONTROLLER_EPOCH" in controller.moved[0][1]  # type: ignore[attr-defined]
