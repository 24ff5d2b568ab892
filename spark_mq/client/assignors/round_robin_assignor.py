"""The round-robin assignor (protocol name ``roundrobin``), Kafka's ``RoundRobinAssignor``.

The round-robin assignor lists every partition of every topic that some member subscribes
to, sorted by topic name and then partition number, and deals them out like cards to the
members in :func:`~spark_mq.client.assignors.assignor.member_sort_key` order. The dealer
keeps one position in the circle of members for the whole deal; a member that does not
subscribe to the topic of the next partition is skipped, and the partition goes to the next
member round the circle that does. When every member subscribes to the same topics, partition
counts therefore differ by at most one. When subscriptions differ, the result can be uneven,
because the deal does not look ahead: see Kafka's example below, where ``C2`` gets four
partitions and ``C1`` one.

Like range it ignores previous ownership and runs the eager protocol only. Finding the next
subscribed member uses a binary search in the sorted positions of the topic's subscribers,
so a deal costs ``O(partitions * log(members))`` however sparse the subscriptions are.

>>> from spark_mq.client.assignors import Subscription
>>> subs = {
...     "C0": Subscription(["t0"]),
...     "C1": Subscription(["t0", "t1"]),
...     "C2": Subscription(["t0", "t1", "t2"]),
... }
>>> result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
>>> {m: [str(tp) for tp in a.partitions] for m, a in result.items()}
{'C0': ['t0-0'], 'C1': ['t1-0'], 'C2': ['t1-1', 't2-0', 't2-1', 't2-2']}
"""

from __future__ import annotations

from bisect import bisect_left
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


class RoundRobinAssignor(Assignor):
    """All partitions, sorted, dealt round the sorted members, skipping non-subscribers."""

    name: ClassVar[str] = "roundrobin"

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        check_cluster_partitions(cluster_partitions)
        members = sorted_members(subscriptions)
        # For each topic, the positions in the circle of the members subscribed to it.
        positions_by_topic = topic_subscribers(
            member_topic_sets(cluster_partitions, subscriptions, members)
        )

        assigned: list[list[TopicPartition]] = [[] for _ in members]
        cursor = 0  # The position of the member who is dealt the next partition.
        for topic in sorted(positions_by_topic):
            positions = positions_by_topic[topic]
            for partition in range(cluster_partitions[topic]):
                index = bisect_left(positions, cursor)
                position = positions[index] if index < len(positions) else positions[0]
                assigned[position].append(TopicPartition(topic, partition))
                cursor = (position + 1) % len(members)
        return {m: Assignment(tuple(assigned[i])) for i, m in enumerate(members)}
