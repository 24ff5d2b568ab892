"""CooperativeStickyAssignor: incremental hand-over (KIP-429) converging to the sticky target."""

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
    rejoin,
    shuffled,
)
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.client.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RebalanceProtocol,
    StickyAssignor,
    Subscription,
)
from spark_mq.client.records import TopicPartition

COOPERATIVE = CooperativeStickyAssignor()


def claims(group: Group) -> dict[TopicPartition, set[str]]:
    found: dict[TopicPartition, set[str]] = {}
    for m, sub in group.subscriptions.items():
        for tp in sub.owned_partitions:
            found.setdefault(tp, set()).add(m)
    return found


def check_no_transfer_in_one_round(group: Group, result: dict[str, Assignment]) -> None:
    """A partition goes to a member that did not own it only if nobody else reports it."""
    claimed = claims(group)
    for member, assignment in result.items():
        for tp in assignment.partitions:
            others = claimed.get(tp, set()) - {member}
            assert not others, f"{tp} handed to {member} while {sorted(others)} still own it"


def test_protocol_and_name() -> None:
    assert COOPERATIVE.name == "cooperative-sticky"
    assert COOPERATIVE.rebalance_protocol is RebalanceProtocol.COOPERATIVE
    assert StickyAssignor.rebalance_protocol is RebalanceProtocol.EAGER


def test_generation_from_user_data_when_the_subscription_has_none() -> None:
    data = COOPERATIVE.subscription_user_data(["t"], [], 7)
    subs = {
        "a": Subscription(["t"], [("t", 0)], user_data=data),  # generation 7, via user data
        "b": Subscription(["t"], [("t", 0), ("t", 1)], 6),
    }
    target = COOPERATIVE.target({"t": 2}, subs)
    assert target == {"a": [TopicPartition("t", 0)], "b": [TopicPartition("t", 1)]}
    # a keeps t-0 in the target, but b still reports it: withheld until b revokes it.
    assert COOPERATIVE.assign({"t": 2}, subs) == {
        "a": Assignment(()),
        "b": Assignment((TopicPartition("t", 1),)),
    }


@FAST
@given(conflicting_groups())
def test_revoked_partitions_are_never_handed_over_in_the_same_round(group: Group) -> None:
    result = COOPERATIVE.assign(group.cluster, group.subscriptions)
    check_valid(group, result, complete=False)
    check_no_transfer_in_one_round(group, result)
    target = COOPERATIVE.target(group.cluster, group.subscriptions)
    claimed = claims(group)
    for member, partitions in target.items():
        kept = set(result[member].partitions)
        assert kept <= set(partitions)
        for tp in partitions:
            # A partition the target leaves with its only owner is never revoked.
            if claimed.get(tp) == {member}:
                assert tp in kept, f"{member} keeps {tp} in the target but it was revoked"


@FAST
@given(groups())
def test_first_round_withholds_exactly_the_moving_partitions(group: Group) -> None:
    target = StickyAssignor().assign(group.cluster, group.subscriptions)
    result = COOPERATIVE.assign(group.cluster, group.subscriptions)
    check_no_transfer_in_one_round(group, result)
    for member, assignment in result.items():
        owned = set(group.subscriptions[member].owned_partitions)
        expected = {
            tp for tp in target[member].partitions if tp in owned or tp not in claims(group)
        }
        assert set(assignment.partitions) == expected, member


@FAST
@given(groups(equal=True))
def test_two_rounds_reach_the_sticky_target(group: Group) -> None:
    first = COOPERATIVE.assign(group.cluster, group.subscriptions)
    second_group = rejoin(first, group)
    second = COOPERATIVE.assign(second_group.cluster, second_group.subscriptions)
    check_valid(group, second)
    check_balanced(group, second)
    for member in first:  # The second round only adds.
        assert set(first[member].partitions) <= set(second[member].partitions), member
    # Over both rounds, exactly the partitions the eager sticky assignor moves have moved.
    assert len(moves(group, second)) == minimal_moves(group)
    sticky = StickyAssignor().assign(group.cluster, group.subscriptions)
    assert sorted(len(a.partitions) for a in second.values()) == sorted(
        len(a.partitions) for a in sticky.values()
    )
    # And the group is stable: a third round changes nothing.
    third_group = rejoin(second, second_group)
    assert COOPERATIVE.assign(third_group.cluster, third_group.subscriptions) == second


@FAST
@given(conflicting_groups())
def test_any_group_settles_within_three_rounds(group: Group) -> None:
    current = group
    result = COOPERATIVE.assign(current.cluster, current.subscriptions)
    for _ in range(2):
        current = rejoin(result, current)
        result = COOPERATIVE.assign(current.cluster, current.subscriptions)
        check_no_transfer_in_one_round(current, result)
    check_valid(group, result)
    check_balanced(group, result)


@ORDERS
@given(conflicting_groups(), st.data())
def test_deterministic_whatever_the_input_order(group: Group, data: st.DataObject) -> None:
    expected = COOPERATIVE.assign(group.cluster, group.subscriptions)
    cluster, subscriptions = shuffled(group, data)
    result = COOPERATIVE.assign(cluster, subscriptions)
    assert result == expected
    assert list(result) == list(expected)
