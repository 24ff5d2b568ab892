"""Controller election and epoch fencing against a real ZooKeeper: one winner of a race, the
epoch bumped by one per election, a deposed controller's writes refused by the epoch check,
re-election when the controller's session ends, and partition state compare-and-set."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from kazoo.client import TransactionRequest
from kazoo.exceptions import BadVersionError
from waiting import wait_for

from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.controller_election import (
    ControllerElector,
    ControllerEpoch,
    checked_commit,
    read_controller_epoch,
    read_controller_id,
    register_controller_and_increment_epoch,
)
from spark_mq.broker.zk.partition_states import (
    create_partition_states,
    create_topic,
    read_partition_state,
    read_topic_assignment,
    read_topic_config,
    update_partition_states,
)
from spark_mq.errors import ControllerMovedError, TopicExistsError


def _set(path: str, value: bytes) -> Callable[[TransactionRequest], None]:
    return lambda txn: txn.set_data(path, value)


def test_racing_brokers_elect_exactly_one_controller(clients: Callable[[], ZkClient]) -> None:
    zks = [clients() for _ in range(5)]
    barrier = threading.Barrier(len(zks))
    won: list[tuple[int, ControllerEpoch]] = []
    lost: list[int] = []

    def run(broker_id: int, zk: ZkClient) -> None:
        barrier.wait()
        try:
            won.append((broker_id, register_controller_and_increment_epoch(zk, broker_id, 0)))
        except ControllerMovedError:
            lost.append(broker_id)

    threads = [threading.Thread(target=run, args=(i, zk)) for i, zk in enumerate(zks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 4
    winner, epoch = won[0]
    assert epoch.epoch == 1
    assert read_controller_id(zks[0]) == winner
    assert read_controller_epoch(zks[0]) == znodes.Versioned(1, epoch.zk_version)


def test_electors_agree_and_a_closed_controller_is_replaced_with_the_next_epoch(
    clients: Callable[[], ZkClient],
) -> None:
    zks = [clients() for _ in range(3)]
    electors = [ControllerElector(zk, broker_id) for broker_id, zk in enumerate(zks)]
    for e in electors:
        e.start()
    wait_for(lambda: sum(e.is_active for e in electors) == 1, timeout_s=15.0)
    first = next(e for e in electors if e.is_active)
    epoch = first.active_epoch
    assert epoch is not None and epoch.epoch == 1
    wait_for(lambda: all(e.controller_id == first.broker_id for e in electors), timeout_s=15.0)

    zks[first.broker_id].close()  # the session ends: /controller goes with it

    rest = [e for e in electors if e is not first]
    wait_for(lambda: sum(e.is_active for e in rest) == 1, timeout_s=15.0)
    second = next(e for e in rest if e.is_active)
    assert second.active_epoch is not None and second.active_epoch.epoch == epoch.epoch + 1
    assert read_controller_id(zks[second.broker_id]) == second.broker_id


def test_a_deposed_controller_cannot_write(clients: Callable[[], ZkClient]) -> None:
    admin = clients()
    admin.kazoo.create("/data", b"initial")
    # Broker 1 wins without an elector, so that it cannot win again below: it stands for a
    # controller that is still busy with an operation begun under its epoch.
    old_zk = clients()
    old_epoch = register_controller_and_increment_epoch(old_zk, 1, 0)
    checked_commit(old_zk, old_epoch, _set("/data", b"by-1"), "write")
    assert admin.kazoo.get("/data")[0] == b"by-1"

    # Another broker takes over while broker 1 still has its session (an admin deleting
    # /controller is Kafka's way to force a move).
    new = ControllerElector(clients(), 2)
    new.start()
    wait_for(lambda: new.controller_id == 1, timeout_s=15.0)
    admin.kazoo.delete(znodes.CONTROLLER)
    wait_for(lambda: new.is_active, timeout_s=15.0)
    assert new.active_epoch is not None and new.active_epoch.epoch == old_epoch.epoch + 1

    # Whatever broker 1 believes, a write with its epoch is refused as a whole.
    with pytest.raises(ControllerMovedError, match="another broker is controller"):
        checked_commit(old_zk, old_epoch, _set("/data", b"stale"), "write")
    assert admin.kazoo.get("/data")[0] == b"by-1"
    new.checked_commit(_set("/data", b"by-2"), "write")
    assert admin.kazoo.get("/data")[0] == b"by-2"


def test_an_elector_resigns_when_its_write_is_refused(clients: Callable[[], ZkClient]) -> None:
    resigned = threading.Event()
    elector = ControllerElector(clients(), 1, on_resigned=resigned.set)
    elector.start()
    wait_for(lambda: elector.is_active, timeout_s=15.0)
    # Someone bumps the epoch behind the elector's back (as a newer controller's election
    # does); the elector learns it from its next write.
    admin = clients()
    admin.kazoo.set(znodes.CONTROLLER_EPOCH, b"5")
    with pytest.raises(ControllerMovedError):
        elector.checked_commit(_set(znodes.CONTROLLER_EPOCH, b"6"), "write")
    assert resigned.wait(10) and not elector.is_active
    with pytest.raises(ControllerMovedError, match="not controller"):
        elector.checked_commit(_set(znodes.CONTROLLER_EPOCH, b"6"), "write")
    assert admin.kazoo.get(znodes.CONTROLLER_EPOCH)[0] == b"5"


def test_partition_states_are_created_and_changed_by_compare_and_set(
    clients: Callable[[], ZkClient],
) -> None:
    zk = clients()
    assignment = znodes.TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1)})
    create_topic(zk, "t", assignment, {"retention.ms": "1000"})
    with pytest.raises(TopicExistsError):
        create_topic(zk, "t", assignment)
    assert read_topic_assignment(zk, "t") == assignment
    assert read_topic_config(zk, "t") == {"retention.ms": "1000"}

    epoch = register_controller_and_increment_epoch(zk, 1, 0)
    state = znodes.PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    assert create_partition_states(zk, epoch, {("t", 0): state}) == {("t", 0): 0}
    assert read_partition_state(zk, "t", 0) == znodes.Versioned(state, 0)

    shrunk = znodes.PartitionState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    assert update_partition_states(zk, epoch, {("t", 0): znodes.Versioned(shrunk, 0)}) == {
        ("t", 0): 1
    }
    # A second writer that read version 0 loses the compare-and-set.
    moved = znodes.PartitionState(leader=2, leader_epoch=1, isr=(2,), controller_epoch=1)
    result = update_partition_states(zk, epoch, {("t", 0): znodes.Versioned(moved, 0)})
    assert isinstance(result[("t", 0)], BadVersionError)
    assert read_partition_state(zk, "t", 0) == znodes.Versioned(shrunk, 1)

    # After another election the old epoch cannot even create.
    zk.kazoo.delete(znodes.CONTROLLER)
    register_controller_and_increment_epoch(clients(), 2, 0)
    with pytest.raises(ControllerMovedError):
        update_partition_states(zk, epoch, {("t", 0): znodes.Versioned(moved, 1)})
    with pytest.raises(ControllerMovedError):
        create_partition_states(zk, epoch, {("t", 1): state})
    assert read_partition_state(zk, "t", 1) is None


def test_an_election_from_a_stale_epoch_read_is_refused(
    clients: Callable[[], ZkClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Broker 1 read epoch 1 before broker 2's election and the end of broker 2's session;
    # its commit must not reuse epoch 2.
    zk = clients()
    first = register_controller_and_increment_epoch(zk, 2, 0)
    stale = read_controller_epoch(zk)
    zk.kazoo.delete(znodes.CONTROLLER)
    second = register_controller_and_increment_epoch(zk, 2, 0)
    zk.kazoo.delete(znodes.CONTROLLER)
    assert (first.epoch, second.epoch) == (1, 2)
    from spark_mq.broker.zk import controller_election

    monkeypatch.setattr(controller_election, "_read_or_create_controller_epoch", lambda _zk: stale)
    with pytest.raises(ControllerMovedError):
        register_controller_and_increment_epoch(clients(), 1, 0)
    assert read_controller_id(zk) is None
    current = read_controller_epoch(zk)
    assert current is not None and current.value == 2
