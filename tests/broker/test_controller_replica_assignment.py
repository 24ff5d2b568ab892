"""Kafka's replica assignment: invariants by Hypothesis, and the spread properties Kafka's
own AdminUtils tests check (leaders even, followers spread, racks used)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.broker.controller.replica_assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
    rack_alternated_brokers,
)
from spark_mq.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)


@st.composite
def clusters(draw: st.DrawFn, racks: bool) -> tuple[list[BrokerMetadata], int, int, int]:
    ids = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True))
    rack_names = ["a", "b", "c", "d"][: draw(st.integers(1, 4))]
    brokers = [BrokerMetadata(i, draw(st.sampled_from(rack_names)) if racks else None) for i in ids]
    rf = draw(st.integers(1, len(brokers)))
    partitions = draw(st.integers(1, 60))
    seed = draw(st.integers(0, 2**32))
    return brokers, rf, partitions, seed


def _check_common(
    result: dict[int, tuple[int, ...]], brokers: list[BrokerMetadata], rf: int, partitions: int
) -> None:
    ids = {b.broker_id for b in brokers}
    assert sorted(result) == list(range(partitions))
    for replicas in result.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= ids
    # Leaders (first replicas) go round the brokers: counts differ by at most one.
    leaders = Counter(r[0] for r in result.values())
    counts = [leaders.get(i, 0) for i in ids]
    assert max(counts) - min(counts) <= 1


@settings(max_examples=300, deadline=None)
@given(clusters(racks=False))
def test_without_racks_every_partition_gets_rf_distinct_brokers_and_leaders_are_even(
    cluster: tuple[list[BrokerMetadata], int, int, int],
) -> None:
    brokers, rf, partitions, seed = cluster
    result = assign_replicas_to_brokers(partitions, rf, brokers, rng=random.Random(seed))
    _check_common(result, brokers, rf, partitions)
    # Every replica, leader or not, is spread evenly too when partitions fill whole rounds.
    if partitions % len(brokers) == 0:
        load = Counter(b for r in result.values() for b in r)
        assert len(set(load.values())) == 1


@settings(max_examples=300, deadline=None)
@given(clusters(racks=True))
def test_with_racks_each_partition_spans_as_many_racks_as_it_can(
    cluster: tuple[list[BrokerMetadata], int, int, int],
) -> None:
    brokers, rf, partitions, seed = cluster
    result = assign_replicas_to_brokers(partitions, rf, brokers, rng=random.Random(seed))
    _check_common(result, brokers, rf, partitions)
    rack_of = {b.broker_id: b.rack for b in brokers}
    num_racks = len(set(rack_of.values()))
    for replicas in result.values():
        assert len({rack_of[b] for b in replicas}) == min(rf, num_racks)


def test_the_seed_replays_the_assignment_and_different_seeds_differ() -> None:
    brokers = [BrokerMetadata(i) for i in range(5)]
    one = assign_replicas_to_brokers(10, 3, brokers, rng=random.Random(7))
    assert one == assign_replicas_to_brokers(10, 3, brokers, rng=random.Random(7))
    starts = {
        assign_replicas_to_brokers(1, 1, brokers, rng=random.Random(seed))[0] for seed in range(50)
    }
    assert len(starts) > 1, "the start broker is random"


def test_followers_of_one_leader_are_spread_over_the_other_brokers() -> None:
    # With the shift growing each round, broker 0's partitions do not all have the same
    # follower (Kafka's reason for the shift).
    brokers = [BrokerMetadata(i) for i in range(5)]
    result = assign_replicas_to_brokers(25, 2, brokers, rng=random.Random(3))
    followers = {r[1] for r in result.values() if r[0] == 0}
    assert len(followers) == 4


def test_growing_a_topic_continues_the_round_robin() -> None:
    brokers = [BrokerMetadata(i) for i in range(3)]
    grown = assign_replicas_to_brokers(3, 2, brokers, rng=random.Random(1), start_partition_id=3)
    assert sorted(grown) == [3, 4, 5]
    assert sorted(r[0] for r in grown.values()) == [0, 1, 2]


def test_rack_alternated_list() -> None:
    brokers = [
        BrokerMetadata(0, "a"),
        BrokerMetadata(1, "a"),
        BrokerMetadata(2, "a"),
        BrokerMetadata(3, "b"),
        BrokerMetadata(4, "c"),
        BrokerMetadata(5, "c"),
    ]
    assert rack_alternated_brokers(brokers) == [0, 3, 4, 1, 5, 2]


def test_replication_factor_above_live_brokers_is_a_clear_error() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="3 larger than available brokers: 2"):
        assign_replicas_to_brokers(
            1, 3, [BrokerMetadata(1), BrokerMetadata(2)], rng=random.Random(0)
        )
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers(1, 0, [BrokerMetadata(1)], rng=random.Random(0))
    with pytest.raises(InvalidPartitionsError):
        assign_replicas_to_brokers(0, 1, [BrokerMetadata(1)], rng=random.Random(0))


def test_mixed_racks_are_refused_unless_racks_are_ignored() -> None:
    brokers = [BrokerMetadata(1, "a"), BrokerMetadata(2), BrokerMetadata(3, "b")]
    with pytest.raises(InvalidReplicaAssignmentError, match=r"brokers \[2\] have no broker.rack"):
        assign_replicas_to_brokers(3, 2, brokers, rng=random.Random(0))
    safe = assign_replicas_to_brokers(3, 2, brokers, rng=random.Random(0), rack_aware_mode="safe")
    assert all(len(set(r)) == 2 for r in safe.values())
