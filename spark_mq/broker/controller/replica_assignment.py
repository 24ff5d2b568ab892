"""Kafka's replica assignment for new topics and partitions (AdminUtils.assignReplicasToBrokers).

Without racks: brokers sorted by id. Partition p's first replica (its preferred leader) is
broker ``(p + start) % n``, so leaders go round the brokers. The other replicas follow the
first at a distance ``1 + (shift + j) % (n - 1)``, so replica j never lands on the leader, and
``shift`` grows by one each time the partitions have gone round all brokers once, so the
followers of one broker's leaders are spread over the others instead of always being its
neighbours. ``start`` and the initial ``shift`` are random, so topics do not all put their
partition 0 on the same broker.

With racks (every broker has ``broker.rack``): the same walk over a list that alternates
racks (rack a's first broker, rack b's first, ..., rack a's second, ...), skipping a broker
while some rack still has no replica of the partition, or while some broker still has none.
A partition then spans min(racks, replication factor) racks, and leaders and followers stay
even over brokers.

The randomness is injected (``rng``), so tests replay an assignment from its seed.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Literal

from spark_mq.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
)

#: Kafka's RackAwareMode: "enforced" refuses brokers with and without racks mixed, "safe"
#: then ignores racks, "disabled" always ignores them.
RackAwareMode = Literal["enforced", "safe", "disabled"]


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerMetadata:
    broker_id: int
    rack: str | None = None


def assign_replicas_to_brokers(
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[BrokerMetadata],
    *,
    rng: random.Random,
    rack_aware_mode: RackAwareMode = "enforced",
    start_partition_id: int = 0,
    topic: str = "",
) -> dict[int, tuple[int, ...]]:
    """Partition id -> replicas (first = preferred leader) for ``num_partitions`` partitions
    numbered from ``start_partition_id`` (non-zero when a topic grows)."""
    if num_partitions <= 0:
        raise InvalidPartitionsError(
            f"number of partitions must be larger than 0, got {num_partitions}",
            topic=topic,
            current=None,
            requested=num_partitions,
        )
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"replication factor must be larger than 0, got {replication_factor}"
        )
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)} (live brokers: {sorted(b.broker_id for b in brokers)}); start "
            "more brokers or lower the replication factor"
        )
    ids = [b.broker_id for b in brokers]
    if len(set(ids)) != len(ids):
        raise InvalidReplicaAssignmentError(f"broker ids must be distinct, got {ids}")
    with_rack = [b for b in brokers if b.rack is not None]
    if rack_aware_mode != "disabled" and with_rack and len(with_rack) != len(brokers):
        if rack_aware_mode == "enforced":
            without = sorted(b.broker_id for b in brokers if b.rack is None)
            raise InvalidReplicaAssignmentError(
                f"not all brokers have rack information (brokers {without} have no "
                "broker.rack): set broker.rack on every broker or on none"
            )
        with_rack = []
    if rack_aware_mode == "disabled" or not with_rack:
        return _assign_without_racks(
            num_partitions, replication_factor, sorted(ids), rng, start_partition_id
        )
    return _assign_with_racks(num_partitions, replication_factor, brokers, rng, start_partition_id)


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    # Distance 1..n-1 from the first replica: never the first replica itself.
    return (first + 1 + (shift + j) % (n - 1)) % n


def _assign_without_racks(
    num_partitions: int,
    replication_factor: int,
    broker_ids: list[int],
    rng: random.Random,
    start_partition_id: int,
) -> dict[int, tuple[int, ...]]:
    n = len(broker_ids)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    for partition in range(start_partition_id, start_partition_id + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [broker_ids[first]]
        replicas += [
            broker_ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
        ]
        out[partition] = tuple(replicas)
    return out


def rack_alternated_brokers(brokers: Sequence[BrokerMetadata]) -> list[int]:
    """Brokers ordered to alternate racks: racks sorted by name, brokers by id within each."""
    by_rack: dict[str, list[int]] = {}
    for b in brokers:
        assert b.rack is not None
        by_rack.setdefault(b.rack, []).append(b.broker_id)
    columns = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    depth = max(len(c) for c in columns)
    return [c[row] for row in range(depth) for c in columns if row < len(c)]


def _assign_with_racks(
    num_partitions: int,
    replication_factor: int,
    brokers: Sequence[BrokerMetadata],
    rng: random.Random,
    start_partition_id: int,
) -> dict[int, tuple[int, ...]]:
    rack_of = {b.broker_id: b.rack for b in brokers}
    arranged = rack_alternated_brokers(brokers)
    n = len(arranged)
    num_racks = len(set(rack_of.values()))
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    for partition in range(start_partition_id, start_partition_id + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = rack_of[broker]
                # Skip a broker whose rack already has a replica while another rack has
                # none, and a broker that has a replica while another broker has none.
                rack_ok = rack not in racks_used or len(racks_used) == num_racks
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    break
            replicas.append(broker)
            racks_used.add(rack)
            brokers_used.add(broker)
        out[partition] = tuple(replicas)
    return out
