"""RoundRobinAssignor: Kafka's documented examples, validity and balance."""

from __future__ import annotations

from assignor_strategies import FAST, ORDERS, Group, check_valid, groups, shuffled
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.client.assignors import Assignment, RoundRobinAssignor, Subscription

ROUND_ROBIN = RoundRobinAssignor()


def names(result: dict[str, Assignment]) -> dict[str, list[str]]:
    return {m: [str(tp) for tp in a.partitions] for m, a in result.items()}


def test_kafka_example_identical_subscriptions() -> None:
    subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    assert names(ROUND_ROBIN.assign({"t0": 3, "t1": 3}, subs)) == {
        "C0": ["t0-0", "t0-2", "t1-1"],
        "C1": ["t0-1", "t1-0", "t1-2"],
    }


def test_kafka_example_different_subscriptions() -> None:
    subs = {
        "C0": Subscription(["t0"]),
        "C1": Subscription(["t0", "t1"]),
        "C2": Subscription(["t0", "t1", "t2"]),
    }
    assert names(ROUND_ROBIN.assign({"t0": 1, "t1": 2, "t2": 3}, subs)) == {
        "C0": ["t0-0"],
        "C1": ["t1-0"],
        "C2": ["t1-1", "t2-0", "t2-1", "t2-2"],
    }


def test_the_deal_wraps_around_the_circle() -> None:
    # After t0-0 goes to b (the last member), the deal wraps to a for t1-0, skips b for
    # t2-0 (a is next but only b subscribes to t2).
    subs = {"a": Subscription(["t1"]), "b": Subscription(["t0", "t1", "t2"])}
    assert names(ROUND_ROBIN.assign({"t0": 1, "t1": 2, "t2": 1}, subs)) == {
        "a": ["t1-0"],
        "b": ["t0-0", "t1-1", "t2-0"],
    }


@FAST
@given(groups(history=False))
def test_every_partition_once(group: Group) -> None:
    check_valid(group, ROUND_ROBIN.assign(group.cluster, group.subscriptions))


@FAST
@given(groups(equal=True, history=False))
def test_identical_subscriptions_are_balanced_within_one(group: Group) -> None:
    counts = [
        len(a.partitions) for a in ROUND_ROBIN.assign(group.cluster, group.subscriptions).values()
    ]
    assert max(counts) - min(counts) <= 1, counts


@ORDERS
@given(groups(history=False), st.data())
def test_deterministic_whatever_the_input_order(group: Group, data: st.DataObject) -> None:
    expected = ROUND_ROBIN.assign(group.cluster, group.subscriptions)
    cluster, subscriptions = shuffled(group, data)
    assert ROUND_ROBIN.assign(cluster, subscriptions) == expected
