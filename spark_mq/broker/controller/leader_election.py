"""Kafka's leader election rules for the controller (PartitionLeaderElectionAlgorithms).

Pure functions of the assignment, the live brokers and the current ISR; the controller
writes their result to ZooKeeper with a compare-and-set (:mod:`spark_mq.broker.zk`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from spark_mq.errors import StateChangeFailedError

from ..zk.znodes import PartitionState


def initial_leader_and_isr(
    topic: str,
    partition: int,
    assignment: Sequence[int],
    live_brokers: Collection[int],
    controller_epoch: int,
) -> PartitionState:
    """NewPartition -> OnlinePartition: the first live replica leads, in leader epoch 0,
    and every live replica is in the ISR."""
    live = [b for b in assignment if b in live_brokers]
    if not live:
        raise StateChangeFailedError(
            f"partition {topic}-{partition} cannot come online: none of its replicas "
            f"{list(assignment)} is alive"
        )
    return PartitionState(
        leader=live[0], leader_epoch=0, isr=tuple(live), controller_epoch=controller_epoch
    )


def offline_partition_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live_brokers: Collection[int],
    *,
    unclean_leader_election_enable: bool,
) -> tuple[int | None, bool]:
    """Kafka's offline partition election: the first replica in assignment order that is
    alive and in the ISR; failing that, and only if unclean election is allowed, the first
    live replica. Returns (leader or None, whether the election was unclean)."""
    for broker in assignment:
        if broker in live_brokers and broker in isr:
            return broker, False
    if unclean_leader_election_enable:
        for broker in assignment:
            if broker in live_brokers:
                return broker, True
    return None, False


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live_brokers: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    """Kafka's controlled shutdown election: the first replica in assignment order that is
    alive, in the ISR and not shutting down; None if there is none (the partition stays
    with its leader until that broker stops)."""
    for broker in assignment:
        if broker in live_brokers and broker in isr and broker not in shutting_down:
            return broker
    return None


def preferred_replica_leader(
    assignment: Sequence[int], isr: Collection[int], live_brokers: Collection[int]
) -> int | None:
    """Kafka's preferred replica election: the first replica of the assignment (the
    preferred leader) if it is alive and in the ISR, else None. Never another replica: a
    preferred election moves leadership only to where it was meant to be."""
    if assignment and assignment[0] in live_brokers and assignment[0] in isr:
        return assignment[0]
    return None
