"""The sticky assignor (protocol name ``sticky``), Kafka's ``StickyAssignor`` (KIP-54).

The sticky assignor has two goals, in this order. First, the assignment is balanced: no
partition could be moved to a member that subscribes to its topic and holds two or more
partitions fewer, so members with identical subscriptions hold counts within one of each
other. Second, as many partitions as possible stay with the member that owned them, so a
rebalance moves only what it must: the partitions of members that left, and the surplus of
members that hold more than their share. :mod:`~spark_mq.client.assignors.sticky_balance`
describes how the balanced assignment is found.

Who owns what is decided first. Each member reports the partitions it owned and the
generation in which it got them. With the eager protocol a member has revoked everything
before it rejoins, so this assignor (eager) reads both from its own ``user_data``, written by
:meth:`StickyAssignor.subscription_user_data`; a member that sent no user data falls back to
the :class:`~spark_mq.client.assignors.assignor.Subscription` fields. A claim counts only if
the partition still exists and the member still subscribes to its topic. When several
members claim the same partition, the claim from the highest generation wins: the others come
from members that missed a rebalance and are stale. Two claims from the same generation
cannot both be right, so neither is honoured and the partition is placed as if it were new.

It runs the eager protocol. :mod:`~spark_mq.client.assignors.cooperative_sticky` gives the
same target assignment incrementally.

Kafka's example: three members subscribed to four topics of two partitions each; the first
assignment deals the partitions round the members, and when ``C1`` leaves, its three
partitions are spread over ``C0`` and ``C2`` and nothing else moves.

>>> from spark_mq.client.assignors import Subscription
>>> topics = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
>>> sticky = StickyAssignor()
>>> first = sticky.assign(topics, {m: Subscription(topics) for m in ("C0", "C1", "C2")})
>>> [str(tp) for tp in first["C0"].partitions]
['t0-0', 't1-1', 't3-0']
>>> def rejoin(member):
...     data = sticky.subscription_user_data(topics, first[member].partitions, 1)
...     return Subscription(topics, user_data=data)
>>> second = sticky.assign(topics, {m: rejoin(m) for m in ("C0", "C2")})
>>> [str(tp) for tp in second["C0"].partitions], [str(tp) for tp in second["C2"].partitions]
(['t0-0', 't1-1', 't2-0', 't3-0'], ['t0-1', 't1-0', 't2-1', 't3-1'])
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import ClassVar

from spark_mq.client.assignors.assignor import (
    Assignment,
    Assignor,
    Subscription,
    check_cluster_partitions,
    member_topic_sets,
    sorted_members,
)
from spark_mq.client.assignors.metadata import (
    StickyUserData,
    decode_sticky_user_data,
    encode_sticky_user_data,
)
from spark_mq.client.assignors.sticky_balance import balance
from spark_mq.client.records import TopicPartition


def resolve_ownership(
    cluster_partitions: Mapping[str, int],
    member_topics: Sequence[frozenset[str]],
    claims: Sequence[StickyUserData],
) -> list[list[TopicPartition]]:
    """The partitions each member (by index) validly owns; see the module docstring.

    The answer does not depend on the order of members: a claim wins by generation alone,
    and ties cancel each other.
    """
    winner: dict[TopicPartition, tuple[int, int]] = {}  # partition -> (generation, member)
    contested: set[TopicPartition] = set()
    for member, claim in enumerate(claims):
        for tp in dict.fromkeys(claim.owned_partitions):
            count = cluster_partitions.get(tp.topic)
            if count is None or not 0 <= tp.partition < count:
                continue
            previous = winner.get(tp)
            if previous is None or claim.generation > previous[0]:
                winner[tp] = (claim.generation, member)
                contested.discard(tp)
            elif claim.generation == previous[0]:
                contested.add(tp)
    owned: list[list[TopicPartition]] = [[] for _ in claims]
    for tp, (_, member) in winner.items():
        # A stale member's claim is dropped even if the winner no longer subscribes.
        if tp not in contested and tp.topic in member_topics[member]:
            owned[member].append(tp)
    return owned


class AbstractStickyAssignor(Assignor):
    """The sticky target assignment; subclasses say where ownership claims come from."""

    def subscription_user_data(
        self,
        topics: Collection[str],
        owned_partitions: Sequence[tuple[str, int]],
        generation: int,
    ) -> bytes:
        """The member's owned partitions and their generation, encoded as sticky user data."""
        del topics
        owned = tuple(TopicPartition(t, p) for t, p in owned_partitions)
        return encode_sticky_user_data(StickyUserData(owned, generation))

    @abstractmethod
    def ownership_claim(self, subscription: Subscription) -> StickyUserData:
        """The partitions ``subscription``'s member says it owns, and their generation."""

    def target(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, list[TopicPartition]]:
        """The balanced, sticky assignment before any cooperative adjustment."""
        check_cluster_partitions(cluster_partitions)
        members = sorted_members(subscriptions)
        member_topics = member_topic_sets(cluster_partitions, subscriptions, members)
        claims = [self.ownership_claim(subscriptions[m]) for m in members]
        owned = resolve_ownership(cluster_partitions, member_topics, claims)
        assigned = balance(cluster_partitions, member_topics, owned)
        return dict(zip(members, assigned, strict=True))

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        target = self.target(cluster_partitions, subscriptions)
        return {m: Assignment(tuple(tps)) for m, tps in target.items()}


class StickyAssignor(AbstractStickyAssignor):
    """Balanced and sticky, eager protocol; ownership travels in the user data."""

    name: ClassVar[str] = "sticky"

    def ownership_claim(self, subscription: Subscription) -> StickyUserData:
        if subscription.user_data:
            return decode_sticky_user_data(subscription.user_data)
        return StickyUserData(subscription.owned_partitions, subscription.generation)
