"""The controller's partition and replica state machines: the transition tables are Kafka's,
illegal moves are refused with a typed error, and a batch moves the legal keys only."""

from __future__ import annotations

import pytest

from spark_mq.broker.controller.leader_election import (
    initial_leader_and_isr,
    offline_partition_leader,
)
from spark_mq.broker.controller.state_machines import (
    PARTITION_VALID_PREVIOUS,
    REPLICA_VALID_PREVIOUS,
    PartitionState,
    ReplicaState,
    partition_tracker,
    replica_tracker,
)
from spark_mq.errors import StateChangeFailedError

P = PartitionState
R = ReplicaState

# Kafka's tables written out as (from, to) pairs, independently of the module's layout.
KAFKA_PARTITION_MOVES = {
    (P.NON_EXISTENT, P.NEW),
    (P.NEW, P.ONLINE),
    (P.ONLINE, P.ONLINE),
    (P.OFFLINE, P.ONLINE),
    (P.NEW, P.OFFLINE),
    (P.ONLINE, P.OFFLINE),
    (P.OFFLINE, P.OFFLINE),
    (P.OFFLINE, P.NON_EXISTENT),
}
KAFKA_REPLICA_MOVES = {
    (R.NON_EXISTENT, R.NEW),
    *((s, R.ONLINE) for s in (R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE)),
    *((s, R.OFFLINE) for s in (R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE)),
    (R.OFFLINE, R.DELETION_STARTED),
    (R.DELETION_STARTED, R.DELETION_SUCCESSFUL),
    (R.OFFLINE, R.DELETION_INELIGIBLE),
    (R.DELETION_STARTED, R.DELETION_INELIGIBLE),
    (R.DELETION_SUCCESSFUL, R.NON_EXISTENT),
}


def test_tables_are_kafkas() -> None:
    assert {(a, b) for b, froms in PARTITION_VALID_PREVIOUS.items() for a in froms} == (
        KAFKA_PARTITION_MOVES
    )
    assert {(a, b) for b, froms in REPLICA_VALID_PREVIOUS.items() for a in froms} == (
        KAFKA_REPLICA_MOVES
    )


@pytest.mark.parametrize("old", list(P))
@pytest.mark.parametrize("new", list(P))
def test_partition_tracker_follows_the_table(old: P, new: P) -> None:
    tracker = partition_tracker()
    path = {
        P.NON_EXISTENT: [],
        P.NEW: [P.NEW],
        P.ONLINE: [P.NEW, P.ONLINE],
        P.OFFLINE: [P.NEW, P.OFFLINE],
    }[old]
    for step in path:
        tracker.move(("t", 0), step)
    assert tracker.state(("t", 0)) == old
    if (old, new) in KAFKA_PARTITION_MOVES:
        tracker.move(("t", 0), new)
        assert tracker.state(("t", 0)) == new
    else:
        with pytest.raises(StateChangeFailedError, match=f"from {old.value} to {new.value}"):
            tracker.move(("t", 0), new)
        assert tracker.state(("t", 0)) == old


def test_replica_deletion_path_and_batch_refusals() -> None:
    tracker = replica_tracker()
    a, b = ("t", 0, 1), ("t", 0, 2)
    assert tracker.move_all([a, b], R.NEW) == {}
    tracker.move(a, R.ONLINE)
    refused = tracker.move_all([a, b], R.DELETION_STARTED)
    assert set(refused) == {a, b}  # neither is offline yet
    tracker.move_all([a, b], R.OFFLINE)
    for state in (R.DELETION_STARTED, R.DELETION_SUCCESSFUL, R.NON_EXISTENT):
        tracker.move(a, state)
    assert tracker.state(a) == R.NON_EXISTENT
    assert tracker.keys_in(R.OFFLINE) == [b]


def test_new_partition_leader_is_the_first_live_replica() -> None:
    state = initial_leader_and_isr("t", 0, [3, 1, 2], {1, 2}, controller_epoch=4)
    assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch) == (
        1,
        0,
        (1, 2),
        4,
    )
    with pytest.raises(StateChangeFailedError, match="none of its replicas"):
        initial_leader_and_isr("t", 0, [3], {1, 2}, controller_epoch=4)


def test_offline_election_prefers_live_isr_and_unclean_only_when_enabled() -> None:
    assert offline_partition_leader(
        [1, 2, 3], {2, 3}, {1, 3}, unclean_leader_election_enable=False
    ) == (3, False)
    assert offline_partition_leader(
        [1, 2, 3], {2}, {1, 3}, unclean_leader_election_enable=False
    ) == (None, False)
    assert offline_partition_leader(
        [1, 2, 3], {2}, {3, 1}, unclean_leader_election_enable=True
    ) == (1, True)
