"""RangeAssignor: Kafka's documented examples, validity and per-topic balance."""

from __future__ import annotations

from assignor_strategies import FAST, ORDERS, Group, check_valid, groups, shuffled
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.client.assignors import Assignment, RangeAssignor, Subscription

RANGE = RangeAssignor()


def names(result: dict[str, Assignment]) -> dict[str, list[str]]:
    return {m: [str(tp) for tp in a.partitions] for m, a in result.items()}


def test_kafka_example_two_members_two_topics() -> None:
    # RangeAssignor's javadoc: C0 gets the first two partitions of each topic.
    subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    assert names(RANGE.assign({"t0": 3, "t1": 3}, subs)) == {
        "C0": ["t0-0", "t0-1", "t1-0", "t1-1"],
        "C1": ["t0-2", "t1-2"],
    }


def test_static_members_sort_by_instance_id_first() -> None:
    subs = {
        "a": Subscription(["t"]),
        "b": Subscription(["t"], group_instance_id="z"),
        "c": Subscription(["t"], group_instance_id="y"),
    }
    assert names(RANGE.assign({"t": 5}, subs)) == {
        "c": ["t-0", "t-1"],
        "b": ["t-2", "t-3"],
        "a": ["t-4"],
    }


def test_unknown_topics_and_empty_members() -> None:
    subs = {"a": Subscription(["nope"]), "b": Subscription(["t", "nope"])}
    assert names(RANGE.assign({"t": 2, "u": 4}, subs)) == {"a": [], "b": ["t-0", "t-1"]}


@FAST
@given(groups(history=False))
def test_every_partition_once_and_each_topic_balanced(group: Group) -> None:
    result = RANGE.assign(group.cluster, group.subscriptions)
    check_valid(group, result)
    for topic in group.cluster:
        counts = [
            sum(tp.topic == topic for tp in result[m].partitions)
            for m, sub in group.subscriptions.items()
            if topic in sub.topics
        ]
        if counts:
            assert max(counts) - min(counts) <= 1, (topic, counts)


@ORDERS
@given(groups(history=False), st.data())
def test_deterministic_whatever_the_input_order(group: Group, data: st.DataObject) -> None:
    expected = RANGE.assign(group.cluster, group.subscriptions)
    cluster, subscriptions = shuffled(group, data)
    assert RANGE.assign(cluster, subscriptions) == expected
