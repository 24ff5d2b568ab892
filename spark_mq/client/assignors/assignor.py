"""The contract every partition assignor keeps, and the values it works on.

A consumer group's leader runs an assignor once per rebalance: it receives what every member
sent in its JoinGroup request (a :class:`Subscription`) and the partition count of every topic,
and returns one :class:`Assignment` per member, which the coordinator hands out in SyncGroup.
An assignor is a pure function of its inputs: it keeps no state between calls, does no I/O,
and gives the same answer whatever order the ``subscriptions`` mapping iterates in. All
ordering decisions use :func:`member_sort_key` and the natural order of ``(topic, partition)``.

The contract of :meth:`Assignor.assign`:

* Every member in ``subscriptions`` gets an entry, possibly empty.
* Every partition of a topic in ``cluster_partitions`` that at least one member subscribes to
  is assigned to exactly one member subscribed to that topic; a cooperative assignor may
  instead leave a partition out for one round while its previous owner revokes it.
* Topics a member subscribes to that are missing from ``cluster_partitions`` (not created yet,
  or not visible to the leader) are ignored, as Kafka does.
* The partitions of each :class:`Assignment` are sorted.

>>> from spark_mq.client.assignors import RangeAssignor, Subscription
>>> result = RangeAssignor().assign({"t": 3}, {"a": Subscription(["t"]), "b": Subscription(["t"])})
>>> [str(tp) for tp in result["a"].partitions], [str(tp) for tp in result["b"].partitions]
(['t-0', 't-1'], ['t-2'])
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final

from spark_mq.client.records import TopicPartition
from spark_mq.errors import UsageError

#: The generation a member reports before it has ever completed a rebalance; Kafka's -1.
DEFAULT_GENERATION: Final = -1


class RebalanceProtocol(enum.IntEnum):
    """How members hand partitions over during a rebalance (Kafka's ids, KIP-429).

    ``EAGER``: every member revokes all its partitions before it rejoins, so nothing is
    consumed while the group rebalances. ``COOPERATIVE``: members keep their partitions while
    rejoining; the assignment only withdraws the partitions that move, and a second rebalance
    hands them to their new owners once they are released. The order matters: a group runs the
    lowest protocol that all of a consumer's configured assignors support.
    """

    EAGER = 0
    COOPERATIVE = 1


def _partitions(items: Iterable[tuple[str, int]]) -> tuple[TopicPartition, ...]:
    return tuple(
        item if isinstance(item, TopicPartition) else TopicPartition(item[0], item[1])
        for item in items
    )


@dataclass(frozen=True, slots=True, init=False)
class Subscription:
    """What one member sends in JoinGroup: Kafka's ``ConsumerPartitionAssignor.Subscription``.

    ``topics``: the topics the member subscribes to. ``owned_partitions``: the partitions it
    holds right now (with the cooperative protocol; an eager member has revoked everything and
    sends none). ``generation``: the group generation in which it received them,
    :data:`DEFAULT_GENERATION` when it has none. ``group_instance_id``: its
    ``group.instance.id`` when it is a static member; it comes from the JoinGroup request, not
    from the metadata bytes. ``user_data``: the assignor's own bytes, from
    :meth:`Assignor.subscription_user_data`. Plain ``(topic, partition)`` tuples are accepted
    and stored as :class:`~spark_mq.client.TopicPartition`.
    """

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...]
    generation: int
    group_instance_id: str | None
    user_data: bytes

    def __init__(
        self,
        topics: Iterable[str],
        owned_partitions: Iterable[tuple[str, int]] = (),
        generation: int = DEFAULT_GENERATION,
        group_instance_id: str | None = None,
        user_data: bytes = b"",
    ) -> None:
        if isinstance(topics, str):
            raise UsageError(f"Subscription topics must be a collection of names, not {topics!r}")
        object.__setattr__(self, "topics", tuple(topics))
        object.__setattr__(self, "owned_partitions", _partitions(owned_partitions))
        object.__setattr__(self, "generation", generation)
        object.__setattr__(self, "group_instance_id", group_instance_id)
        object.__setattr__(self, "user_data", bytes(user_data))


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one member receives in SyncGroup: its sorted partitions and the assignor's bytes."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes = field(default=b"")


def member_sort_key(member_id: str, subscription: Subscription) -> tuple[int, str, str]:
    """The order in which assignors visit members, Kafka's ``MemberInfo`` order.

    Static members (with a ``group.instance.id``) come first, ordered by instance id, so a
    static member that restarts with a new member id lands in the same place; dynamic members
    follow, ordered by member id.
    """
    if subscription.group_instance_id is not None:
        return (0, subscription.group_instance_id, member_id)
    return (1, member_id, "")


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """The member ids of ``subscriptions`` in :func:`member_sort_key` order."""
    return sorted(subscriptions, key=lambda m: member_sort_key(m, subscriptions[m]))


def member_topic_sets(
    cluster_partitions: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    members: Sequence[str],
) -> list[frozenset[str]]:
    """For each of ``members``, the topics it subscribes to that exist in the cluster.

    Members usually share one subscription, so equal topic lists are converted once and
    share one frozenset: with 1,000 members subscribed to 10,000 topics this costs one pass
    over the topics, not ten million set insertions.
    """
    cache: dict[tuple[str, ...], frozenset[str]] = {}
    result: list[frozenset[str]] = []
    for member in members:
        topics = subscriptions[member].topics
        found = cache.get(topics)
        if found is None:
            found = cache[topics] = frozenset(t for t in topics if t in cluster_partitions)
        result.append(found)
    return result


def topic_subscribers(member_topics: Sequence[frozenset[str]]) -> dict[str, list[int]]:
    """For each topic some member subscribes to, the ascending indexes of its subscribers.

    Topics subscribed by the same members share one list, which callers must not modify.
    """
    classes: dict[frozenset[str], list[int]] = {}
    for index, topics in enumerate(member_topics):
        classes.setdefault(topics, []).append(index)
    class_members = list(classes.values())
    classes_by_topic: dict[str, list[int]] = {}
    for class_id, topics in enumerate(classes):
        for topic in topics:
            classes_by_topic.setdefault(topic, []).append(class_id)
    shared: dict[tuple[int, ...], list[int]] = {}
    result: dict[str, list[int]] = {}
    for topic, class_ids in classes_by_topic.items():
        key = tuple(class_ids)
        subscribers = shared.get(key)
        if subscribers is None:
            subscribers = shared[key] = sorted(i for c in class_ids for i in class_members[c])
        result[topic] = subscribers
    return result


def check_cluster_partitions(cluster_partitions: Mapping[str, int]) -> None:
    """Reject partition counts that no cluster can have, naming the topic."""
    for topic, count in cluster_partitions.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise UsageError(
                f"topic {topic!r} has partition count {count!r}: "
                "cluster_partitions maps each topic to a non-negative int"
            )


class Assignor(ABC):
    """A partition assignor: the group leader calls :meth:`assign` once per rebalance.

    Subclasses set ``name`` (the protocol name members vote with in JoinGroup, Kafka's) and
    ``rebalance_protocol`` (the most advanced :class:`RebalanceProtocol` they support; every
    assignor supports ``EAGER``), and implement :meth:`assign`. Instances hold no state.
    """

    name: ClassVar[str]
    rebalance_protocol: ClassVar[RebalanceProtocol] = RebalanceProtocol.EAGER

    def subscription_user_data(
        self,
        topics: Collection[str],
        owned_partitions: Sequence[tuple[str, int]],
        generation: int,
    ) -> bytes:
        """The bytes a member puts in ``Subscription.user_data`` when it joins.

        ``owned_partitions`` and ``generation`` describe what the member held after its last
        completed rebalance. Assignors that need no extra information return ``b""``.
        """
        del topics, owned_partitions, generation
        return b""

    @abstractmethod
    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Map every member id of ``subscriptions`` to its :class:`Assignment`.

        ``cluster_partitions`` maps each topic to its partition count.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
