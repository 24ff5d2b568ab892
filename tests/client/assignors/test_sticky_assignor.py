"""StickyAssignor: balance, minimal movement, ownership resolution, Kafka's examples."""

from __future__ import annotations

from assignor_strategies import (
    FAST,
    ORDERS,
    Group,
    check_balanced,
    check_valid,
    conflicting_groups,
    groups,
    minimal_moves,
    moves,
    owners,
    rejoin,
    shuffled,
    valid_previous,
)
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.client.assignors import Assignment, StickyAssignor, StickyUserData, Subscription
from spark_mq.client.assignors.sticky import resolve_ownership
from spark_mq.client.records import TopicPartition

STICKY = StickyAssignor()


def names(result: dict[str, Assignment]) -> dict[str, list[str]]:
    return {m: [str(tp) for tp in a.partitions] for m, a in result.items()}


def joined(result: dict[str, Assignment], topics: dict[str, list[str]]) -> dict[str, Subscription]:
    """The members of ``topics`` rejoining after ``result``, ownership in their user data."""
    return {
        m: Subscription(
            ts,
            user_data=STICKY.subscription_user_data(
                ts, result[m].partitions if m in result else [], 1
            ),
        )
        for m, ts in topics.items()
    }


def test_kafka_example_identical_subscriptions_member_leaves() -> None:
    cluster = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    everyone = {m: list(cluster) for m in ("C0", "C1", "C2")}
    first = STICKY.assign(cluster, joined({}, everyone))
    assert names(first) == {
        "C0": ["t0-0", "t1-1", "t3-0"],
        "C1": ["t0-1", "t2-0", "t3-1"],
        "C2": ["t1-0", "t2-1"],
    }
    second = STICKY.assign(cluster, joined(first, {"C0": list(cluster), "C2": list(cluster)}))
    # Round robin would reshuffle everything; sticky only spreads C1's three partitions.
    assert names(second) == {
        "C0": ["t0-0", "t1-1", "t2-0", "t3-0"],
        "C2": ["t0-1", "t1-0", "t2-1", "t3-1"],
    }


def test_kafka_example_different_subscriptions() -> None:
    cluster = {"t0": 1, "t1": 2, "t2": 3}
    topics = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    first = STICKY.assign(cluster, joined({}, topics))
    # Round robin gives C2 four partitions and C1 one; sticky places t2 first.
    assert names(first) == {"C0": ["t0-0"], "C1": ["t1-0", "t1-1"], "C2": ["t2-0", "t2-1", "t2-2"]}
    del topics["C0"]
    second = STICKY.assign(cluster, joined(first, topics))
    assert names(second) == {"C1": ["t0-0", "t1-0", "t1-1"], "C2": ["t2-0", "t2-1", "t2-2"]}


def test_user_data_takes_precedence_over_subscription_fields() -> None:
    data = STICKY.subscription_user_data(["t"], [("t", 1)], 4)
    subs = {
        "a": Subscription(["t"], [("t", 0)], 9, user_data=data),
        "b": Subscription(["t"], [("t", 0)], 3),
    }
    # a's user data says it owns t-1 (generation 4), so b's claim on t-0 stands.
    assert names(STICKY.assign({"t": 2}, subs)) == {"a": ["t-1"], "b": ["t-0"]}


def test_highest_generation_wins_a_conflicting_claim() -> None:
    subs = {
        "old": Subscription(["t"], [("t", 0), ("t", 1)], 2),
        "new": Subscription(["t"], [("t", 1), ("t", 2), ("t", 3)], 3),
    }
    assert names(STICKY.assign({"t": 4}, subs)) == {
        "new": ["t-1", "t-2"],
        "old": ["t-0", "t-3"],
    }


def claim(generation: int, *partitions: str) -> StickyUserData:
    return StickyUserData(
        tuple(TopicPartition(p.split("-")[0], int(p.split("-")[1])) for p in partitions),
        generation,
    )


def test_resolve_ownership_rules() -> None:
    cluster = {"t": 3, "u": 1}
    topics = [frozenset({"t"}), frozenset({"t"}), frozenset({"t", "u"})]
    claims = [
        claim(5, "t-0", "t-1", "u-0"),  # u-0: no longer subscribed
        claim(5, "t-1", "t-2", "t-7"),  # t-1: tied with member 0; t-7 does not exist
        claim(4, "t-0", "t-2", "u-0", "x-0"),  # generation 4 is stale; x does not exist
    ]
    # Member 0 wins u-0 but no longer subscribes: the partition is free, and member 2's
    # stale claim does not revive.
    assert resolve_ownership(cluster, topics, claims) == [
        [TopicPartition("t", 0)],
        [TopicPartition("t", 2)],
        [],
    ]


@FAST
@given(groups())
def test_valid_and_balanced(group: Group) -> None:
    result = STICKY.assign(group.cluster, group.subscriptions)
    check_valid(group, result)
    check_balanced(group, result)


@FAST
@given(conflicting_groups())
def test_valid_and_balanced_with_conflicting_claims(group: Group) -> None:
    result = STICKY.assign(group.cluster, group.subscriptions)
    check_valid(group, result)
    check_balanced(group, result)


@FAST
@given(groups(equal=True))
def test_identical_subscriptions_move_the_minimum(group: Group) -> None:
    # The lower bound: a partition whose owner stays (and still subscribes) moves only if
    # that owner holds more than its quota; see minimal_moves for the exact count.
    result = STICKY.assign(group.cluster, group.subscriptions)
    moved = moves(group, result)
    assert len(moved) == minimal_moves(group), moved
    counts = {m: len(a.partitions) for m, a in result.items()}
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    owned = {m: 0 for m in group.subscriptions}
    for m in valid_previous(group).values():
        owned[m] += 1
    floor = min(counts.values())
    for tp in moved:
        loser = group.previous[tp]
        assert owned[loser] > floor, f"{loser} owned {owned[loser]} <= {floor} but lost {tp}"
        assert counts[loser] >= floor


@FAST
@given(groups())
def test_a_balanced_assignment_is_kept_as_is(group: Group) -> None:
    # Whatever the subscriptions, feeding the result back (a rebalance with no change in
    # members or topics) moves nothing.
    first = STICKY.assign(group.cluster, group.subscriptions)
    again = STICKY.assign(group.cluster, rejoin(first, group).subscriptions)
    assert again == first


@FAST
@given(groups(equal=True, history=False), st.integers(1, 3))
def test_members_joining_take_only_what_they_must(group: Group, joining: int) -> None:
    first = STICKY.assign(group.cluster, group.subscriptions)
    later = rejoin(first, group)
    topics = next(iter(group.subscriptions.values())).topics
    for i in range(joining):
        later.subscriptions[f"new-{i}"] = Subscription(topics)
    result = STICKY.assign(later.cluster, later.subscriptions)
    check_valid(later, result)
    assert len(moves(later, result)) == minimal_moves(later)
    # Every moved partition ends with a newcomer: existing members never swap among themselves.
    now = owners(result)
    assert all(now[tp].startswith("new-") for tp in moves(later, result))


@ORDERS
@given(groups(), st.data())
def test_deterministic_whatever_the_input_order(group: Group, data: st.DataObject) -> None:
    expected = STICKY.assign(group.cluster, group.subscriptions)
    cluster, subscriptions = shuffled(group, data)
    result = STICKY.assign(cluster, subscriptions)
    assert result == expected
    assert list(result) == list(expected)
