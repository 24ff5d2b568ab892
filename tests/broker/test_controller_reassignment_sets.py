"""The sets of a partition reassignment (RS, AR, RR, ORS, TRS) and the checks of a requested
target, against Kafka's worked example in ``KafkaController.onPartitionReassignment``."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.broker.controller.context import ControllerContext
from spark_mq.broker.controller.reassignment import (
    full_assignment,
    known_brokers,
    list_partition_reassignments,
    record_reassignments,
)
from spark_mq.broker.controller.reassignment_sets import ReplicaAssignment, check_target
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.controller_election import ControllerEpoch
from spark_mq.errors import CorruptZnodeError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.reassignment import ListPartitionReassignmentsRequest


def test_kafkas_example_moves_1_2_3_to_4_5_6() -> None:
    moving = ReplicaAssignment((1, 2, 3)).reassign_to([4, 5, 6])
    assert moving == ReplicaAssignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert moving.origin == (1, 2, 3)
    assert moving.target == (4, 5, 6)
    assert moving.is_being_reassigned


def test_an_overlapping_move_keeps_the_shared_replicas_and_puts_the_target_first() -> None:
    moving = ReplicaAssignment((1, 2)).reassign_to([2, 3])
    assert moving == ReplicaAssignment((2, 3, 1), (3,), (1,))


def test_a_reorder_is_no_move_at_all() -> None:
    same = ReplicaAssignment((1, 2, 3)).reassign_to([3, 1, 2])
    assert same == ReplicaAssignment((3, 1, 2))
    assert not same.is_being_reassigned


def test_a_new_target_starts_from_the_original_replicas_not_the_moving_set() -> None:
    moving = ReplicaAssignment((1, 2)).reassign_to([2, 3])
    again = moving.reassign_to([2, 4])
    assert again == ReplicaAssignment((2, 4, 1), (4,), (1,))  # 3 is dropped, not kept
    # Cancelling goes back to the original replicas in the order RS holds them (as Kafka's
    # ``originReplicas``): ZooKeeper keeps no other record of their first order.
    cancelled = moving.reassign_to(moving.origin)
    assert cancelled == ReplicaAssignment((2, 1))


@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=5, unique=True),
    st.lists(st.integers(0, 8), min_size=1, max_size=5, unique=True),
)
def test_the_sets_always_recover_origin_and_target(origin: list[int], target: list[int]) -> None:
    moving = ReplicaAssignment(tuple(origin)).reassign_to(target)
    assert list(moving.target) == target
    assert set(moving.origin) == set(origin)
    assert set(moving.replicas) == set(origin) | set(target)
    assert set(moving.adding) == set(target) - set(origin)
    assert set(moving.removing) == set(origin) - set(target)


CURRENT = ReplicaAssignment((1, 2))
BROKERS = {1, 2, 3}


@pytest.mark.parametrize(
    ("target", "current", "code", "match"),
    [
        ([2, 3], None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "t-0 does not exist"),
        (None, CURRENT, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "nothing to cancel"),
        ([], CURRENT, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "empty"),
        ([2, 2], CURRENT, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "more than once"),
        ([2, 9], CURRENT, ErrorCode.INVALID_REPLICA_ASSIGNMENT, r"brokers \[9\] that are not"),
        ([2, -1], CURRENT, ErrorCode.INVALID_REPLICA_ASSIGNMENT, r"brokers \[-1\]"),
    ],
)
def test_bad_targets_are_refused_with_kafkas_codes(
    target: list[int] | None,
    current: ReplicaAssignment | None,
    code: int,
    match: str,
) -> None:
    refused = check_target("t", 0, target, current, BROKERS)
    assert refused is not None
    assert refused[0] == code
    assert re.search(match, refused[1]), refused[1]


def test_good_targets_and_a_real_cancellation_pass() -> None:
    assert check_target("t", 0, [2, 3], CURRENT, BROKERS) is None
    assert check_target("t", 0, None, CURRENT.reassign_to([2, 3]), BROKERS) is None


# ---------------------------------------------------------------------------------------------
# What the controller's context holds of reassignments (no ZooKeeper needed)


def _context() -> ControllerContext:
    ctx = ControllerContext(ControllerEpoch(1, 1))
    endpoint = znodes.EndPoint("PLAINTEXT", "h1", 9001)
    ctx.live_brokers[1] = znodes.BrokerRegistration(1, (endpoint,), None, 0)
    return ctx


def test_moves_in_progress_are_read_from_the_topic_znode_and_listed() -> None:
    ctx = _context()
    assignment = znodes.TopicAssignment.decode(
        "t",
        b'{"version":2,"partitions":{"0":[2,3,1],"1":[1,2]},'
        b'"adding_replicas":{"0":[3]},"removing_replicas":{"0":[1]}}',
    )
    ctx.assignments["t"] = dict(assignment.partitions)
    record_reassignments(ctx, "t", assignment)
    assert ctx.reassignments == {("t", 0): ReplicaAssignment((2, 3, 1), (3,), (1,))}
    assert full_assignment(ctx, ("t", 1)) == ReplicaAssignment((1, 2))
    assert full_assignment(ctx, ("t", 5)) is None
    # Broker 1 is live; 2 and 3 are down but hold replicas; 4 is no broker of the cluster.
    assert known_brokers(ctx) == {1, 2, 3}
    listed = list_partition_reassignments(ctx, ListPartitionReassignmentsRequest())
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in listed.topics] == [
        ("t", [0])
    ]
    moving = listed.topics[0].partitions[0]
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == (
        [2, 3, 1],
        [3],
        [1],
    )
    ctx.remove_topic("t")
    assert not ctx.reassignments


def test_adding_and_removing_sets_that_do_not_fit_the_replicas_are_a_corrupt_znode() -> None:
    assignment = znodes.TopicAssignment.decode(
        "t",
        b'{"version":2,"partitions":{"0":[1,2]},"adding_replicas":{"0":[3]},'
        b'"removing_replicas":{}}',
    )
    with pytest.raises(CorruptZnodeError, match="do not fit its replicas"):
        record_reassignments(_context(), "t", assignment)
