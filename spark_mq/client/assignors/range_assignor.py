"""The range assignor (protocol name ``range``), Kafka's ``RangeAssignor``.

The range assignor works on one topic at a time. It lists the members subscribed to the
topic in :func:`~spark_mq.client.assignors.assignor.member_sort_key` order (static members by
``group.instance.id`` first, then the rest by member id) and cuts the topic's partitions,
in partition order, into that many contiguous ranges. With ``n`` partitions and ``c`` members
every member gets ``n // c`` partitions and the first ``n % c`` members one more. Because
each topic is split on its own, the first members collect the extra partition of every topic:
with two members and two topics of three partitions each, the first member ends up with four
partitions and the second with two. That is the price of its one useful property: members
get the same partition numbers of topics with equal partition counts, which lets a consumer
join co-partitioned topics locally.

It ignores who owned what before, so a rebalance can move many partitions; it runs the
eager protocol only.

>>> from spark_mq.client.assignors import Subscription
>>> subs = {"c0": Subscription(["t0", "t1"]), "c1": Subscription(["t0", "t1"])}
>>> result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs)
>>> [str(tp) for tp in result["c0"].partitions]
['t0-0', 't0-1', 't1-0', 't1-1']
>>> [str(tp) for tp in result["c1"].partitions]
['t0-2', 't1-2']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from spark_mq.client.assignors.assignor import (
    Assignment,
    Assignor,
    Subscription,
    check_cluster_partitions,
    member_topic_sets,
    sorted_members,
    topic_subscribers,
)
from spark_mq.client.records import TopicPartition


class RangeAssignor(Assignor):
    """Per topic, contiguous ranges of partitions to the sorted subscribed members."""

    name: ClassVar[str] = "range"

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        check_cluster_partitions(cluster_partitions)
        members = sorted_members(subscriptions)
        member_topics = member_topic_sets(cluster_partitions, subscriptions, members)
        subscribers_by_topic = topic_subscribers(member_topics)

        assigned: list[list[TopicPartition]] = [[] for _ in members]
        for topic in sorted(subscribers_by_topic):
            subscribers = subscribers_by_topic[topic]
            count = cluster_partitions[topic]
            per_member, extra = divmod(count, len(subscribers))
            start = 0
            # Only the first min(count, subscribers) members get anything, so a topic with one
            # partition costs one step however many members subscribe to it.
            for index in range(min(count, len(subscribers))):
                length = per_member + (1 if index < extra else 0)
                assigned[subscribers[index]].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
                start += length
            assert start == count, (topic, start, count)
        # Topics are visited in sorted order, so each member's list is already sorted.
        return {m: Assignment(tuple(assigned[i])) for i, m in enumerate(members)}
