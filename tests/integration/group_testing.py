"""Helpers of the consumer-group integration tests: a broker tuned for quick rebalances,
and loops that poll several consumers from one thread until a condition holds.

Polling several consumers from one thread works because a rebalance does not block
``poll()`` beyond its timeout: each call advances the join a step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from spark_mq import Admin, Consumer, ConsumerRebalanceListener, Producer, TopicPartition

#: Broker settings for group tests: no initial rebalance delay, short sessions allowed, and
#: small preallocated indexes (__consumer_offsets has 50 partitions; 10 MiB index files each
#: would take a gigabyte of disk per test broker for nothing).
GROUP_BROKER = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "log.index.size.max.bytes": "65536",
}
#: Consumer settings: learn of rebalances quickly.
FAST_MEMBER = {"heartbeat_interval_ms": 100, "session_timeout_ms": 6000}
WAIT_S = 60.0


def servers(broker: Any) -> str:
    return str(broker.address)


def create_topic(broker: Any, name: str, partitions: int) -> None:
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.create_topic(name, partitions=partitions)


def produce(broker: Any, topic: str, count: int, partitions: int) -> None:
    """``count`` records per partition, value ``b"<partition>:<i>"``."""
    with Producer(bootstrap_servers=servers(broker)) as producer:
        for p in range(partitions):
            for i in range(count):
                producer.send(topic, f"{p}:{i}".encode(), partition=p)
        producer.flush()


def member(broker: Any, group: str = "g", **config: Any) -> Consumer:
    settings = {"auto_offset_reset": "earliest", **FAST_MEMBER, **config}
    return Consumer(bootstrap_servers=servers(broker), group_id=group, **settings)


def poll_all(
    consumers: Iterable[Consumer],
    until: Callable[[], bool],
    *,
    sink: Callable[[Consumer, Any], None] | None = None,
    timeout_s: float = WAIT_S,
    poll_ms: int = 50,
) -> None:
    """Poll every consumer in turn until ``until()``; records go to ``sink(consumer, r)``."""
    members = list(consumers)
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        for c in members:
            for records in c.poll(timeout_ms=poll_ms).values():
                if sink is not None:
                    for r in records:
                        sink(c, r)


def settled(consumers: Iterable[Consumer], partitions: set[TopicPartition]) -> bool:
    """Every member in the same generation, the assignments disjoint and covering
    ``partitions``."""
    members = list(consumers)
    generations = {c.group_metadata().generation_id for c in members}
    seen: list[TopicPartition] = [tp for c in members for tp in c.assignment()]
    return (
        len(generations) == 1
        and min(generations) > 0
        and len(seen) == len(set(seen))
        and set(seen) == partitions
        and all(c._coordinator is not None and c._coordinator.is_stable() for c in members)
    )


class Recorder(ConsumerRebalanceListener):
    """Records every listener call as (name, partitions)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, partitions: Any) -> None:
        self.calls.append(("revoked", frozenset(partitions)))

    def on_partitions_assigned(self, partitions: Any) -> None:
        self.calls.append(("assigned", frozenset(partitions)))

    def on_partitions_lost(self, partitions: Any) -> None:
        self.calls.append(("lost", frozenset(partitions)))

    def of(self, kind: str) -> set[TopicPartition]:
        return {tp for name, tps in self.calls if name == kind for tp in tps}
