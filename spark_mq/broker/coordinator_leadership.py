"""Which partitions of a coordinator's internal topic this broker started or stopped leading.

In a cluster, the group coordinator of a group is the leader of the group's
``__consumer_offsets`` partition, and the transaction coordinator of a transactional id the
leader of its ``__transaction_state`` partition. As Kafka's ``onLeadershipChange`` does, after
a LeaderAndIsr or StopReplica request is applied the broker tells each coordinator which
partitions of its topic it now leads (with the leader epoch, which is the coordinator epoch
of that partition: it grows on every move) and which it no longer leads (now a follower, or
stopped): the coordinator loads the first and unloads the second.

A coordinator registers a :class:`LeadershipListener` for its topic with
:meth:`~spark_mq.broker.replica_manager.ReplicaManager.add_leadership_listener`. A listener is
called on the event loop thread and must not block: loading a partition is its own task.
The same partition may be announced as elected again with a higher epoch (a re-election of
the same broker): a listener treats that as a new coordinator epoch.

A single node has no controller and never announces anything: its coordinators own every
partition from the start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Protocol

from spark_mq.broker.partition import Partition, ReplicaState


@dataclasses.dataclass(frozen=True, slots=True)
class LeadershipChange:
    """Partitions of one topic whose leadership changed on this broker: ``elected`` as
    ``(partition, leader epoch)``, ``resigned`` as partition numbers (each sorted)."""

    elected: tuple[tuple[int, int], ...]
    resigned: tuple[int, ...]

    def __bool__(self) -> bool:
        return bool(self.elected or self.resigned)


class LeadershipListener(Protocol):
    """A coordinator told which partitions of its topic it gained or lost."""

    def on_leadership_change(self, change: LeadershipChange) -> None: ...


def leadership_change(touched: Iterable[Partition], topic: str) -> LeadershipChange:
    """The change to ``topic``'s partitions among those a controller request touched."""
    elected: dict[int, int] = {}
    resigned: set[int] = set()
    for part in touched:
        if part.topic != topic:
            continue
        if part.state is ReplicaState.LEADER:
            elected[part.index] = part.leader_epoch
            resigned.discard(part.index)
        else:
            resigned.add(part.index)
            elected.pop(part.index, None)
    return LeadershipChange(tuple(sorted(elected.items())), tuple(sorted(resigned)))
