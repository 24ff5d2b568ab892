"""The cooperative sticky assignor (``cooperative-sticky``), Kafka's ``CooperativeStickyAssignor``.

It computes the same balanced, sticky target as
:class:`~spark_mq.client.assignors.sticky.StickyAssignor`, but hands it out with the
incremental cooperative protocol of KIP-429. Members keep consuming their partitions while the
group rebalances and report them in ``Subscription.owned_partitions``, with the generation in
``Subscription.generation``. Ownership is resolved from those fields exactly as the sticky
assignor does (highest generation wins; equal generations cancel); ``user_data`` supplies the
generation only when the subscription carries none.

A partition cannot be handed from one member to another in a single round, because the old
owner is still consuming it until it learns that it lost it. So after computing the target,
the assignor withholds every partition that the target gives to a member while some other
member still reports owning it. The old owner sees the partition missing from its new
assignment and revokes it (committing its offsets and calling ``on_partitions_revoked``);
having revoked something, it asks for another rebalance straight away. In that second round
nobody owns the withheld partitions, so they are placed on the members that are now short,
and the group has reached the target. Partitions that the target leaves with their sole
owner are never withheld, so they are consumed without pause throughout.

The rule is applied to every claim a member reports, valid or not: a stale claim still means
a consumer may be reading the partition, and a second round is cheaper than two consumers
of one partition. In particular a partition claimed by two members of the same generation is
withheld from both, and both revoke it.

>>> from spark_mq.client.assignors import Subscription
>>> before = {"a": Subscription(["t"], [("t", 0), ("t", 1)], 1)}
>>> after_join = dict(before, b=Subscription(["t"]))
>>> first = CooperativeStickyAssignor().assign({"t": 2}, after_join)
>>> [str(tp) for tp in first["a"].partitions], [str(tp) for tp in first["b"].partitions]
(['t-0'], [])
>>> rejoined = {"a": Subscription(["t"], [("t", 0)], 2), "b": Subscription(["t"], [], 2)}
>>> second = CooperativeStickyAssignor().assign({"t": 2}, rejoined)
>>> [str(tp) for tp in second["a"].partitions], [str(tp) for tp in second["b"].partitions]
(['t-0'], ['t-1'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from spark_mq.client.assignors.assignor import (
    DEFAULT_GENERATION,
    Assignment,
    RebalanceProtocol,
    Subscription,
)
from spark_mq.client.assignors.metadata import StickyUserData, decode_sticky_user_data
from spark_mq.client.assignors.sticky import AbstractStickyAssignor
from spark_mq.client.records import TopicPartition


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """The sticky target, handed out incrementally: moving partitions wait one round."""

    name: ClassVar[str] = "cooperative-sticky"
    rebalance_protocol: ClassVar[RebalanceProtocol] = RebalanceProtocol.COOPERATIVE

    def ownership_claim(self, subscription: Subscription) -> StickyUserData:
        generation = subscription.generation
        if generation == DEFAULT_GENERATION and subscription.user_data:
            generation = decode_sticky_user_data(subscription.user_data).generation
        return StickyUserData(subscription.owned_partitions, generation)

    def assign(
        self,
        cluster_partitions: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        target = self.target(cluster_partitions, subscriptions)
        claimants: dict[TopicPartition, set[str]] = {}
        for member, subscription in subscriptions.items():
            for tp in subscription.owned_partitions:
                claimants.setdefault(tp, set()).add(member)
        result: dict[str, Assignment] = {}
        for member, partitions in target.items():
            kept = tuple(tp for tp in partitions if not claimants.get(tp, set()) - {member})
            result[member] = Assignment(kept)
        return result
