"""A cluster broker's view of the cluster for Metadata answers (Kafka's ``ZkMetadataCache``).

The controller sends every live broker UpdateMetadata: the whole list of live brokers, and
the partitions whose state changed (every partition after a controller takes over or a broker
starts). This cache keeps what the latest such request said, so that any broker can answer a
client's Metadata about any partition, wherever it is hosted:

- live brokers: id, endpoints (one per listener) and rack;
- per partition: leader (-1: none), leader epoch, ISR, replicas, offline replicas, partition
  epoch (the state znode's version) and the controller epoch that wrote it;
- the controller's id, as the newest UpdateMetadata names it.

A partition whose leader is -2 (Kafka's ``LeaderDuringDelete``) belongs to a topic being
deleted: it is removed, and the topic with its last partition.

Atomicity: the state is one immutable :class:`MetadataSnapshot`. An update builds a new one
(copying only the topics it changes; the others are shared, never mutated after they are
published) and swaps the reference, so a reader that took :attr:`MetadataCache.snapshot`
once sees either the whole old or the whole new cluster, never half of an update.

Threads: :meth:`MetadataCache.update` runs on the event loop (the UpdateMetadata handler);
the lock only orders concurrent updates. Readers take :attr:`snapshot` from any thread,
without a lock.

The controller epoch and broker epoch fences are the handler's
(:mod:`~spark_mq.broker.controller_fence`), checked before :meth:`update`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from spark_mq.protocol.controller import UpdateMetadataBroker, UpdateMetadataRequest

#: ``leader`` of a partition being deleted (Kafka's ``LeaderDuringDelete``).
LEADER_DURING_DELETE = -2
#: ``leader`` of a partition that has none (every replica offline, or not elected yet).
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where one listener of a live broker is reached."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class LiveBroker:
    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        """The endpoint of ``listener``; None if the broker has no such listener."""
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        return None

    @classmethod
    def from_request(cls, broker: UpdateMetadataBroker) -> LiveBroker:
        endpoints = tuple(
            BrokerEndpoint(ep.listener, ep.host, ep.port, ep.security_protocol)
            for ep in broker.endpoints
        )
        return cls(broker.broker_id, endpoints, broker.rack)


@dataclass(frozen=True, slots=True)
class CachedPartition:
    """One partition as the controller last described it."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    partition_epoch: int
    controller_epoch: int


_EMPTY_TOPIC: Mapping[int, CachedPartition] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """The cluster at one UpdateMetadata: never changes once published."""

    brokers: Mapping[int, LiveBroker]
    topics: Mapping[str, Mapping[int, CachedPartition]]
    controller_id: int = -1
    controller_epoch: int = -1

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def partitions(self, topic: str) -> Mapping[int, CachedPartition]:
        """The partitions of ``topic`` by index (empty if the topic is unknown)."""
        return self.topics.get(topic, _EMPTY_TOPIC)

    def has_topic(self, topic: str) -> bool:
        return topic in self.topics

    def is_live(self, broker_id: int) -> bool:
        return broker_id in self.brokers


EMPTY_SNAPSHOT = MetadataSnapshot(MappingProxyType({}), MappingProxyType({}))


class MetadataCache:
    """The latest :class:`MetadataSnapshot`, replaced whole by each UpdateMetadata."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot = EMPTY_SNAPSHOT

    @property
    def snapshot(self) -> MetadataSnapshot:
        """The current snapshot; take it once per answer so the answer is consistent."""
        return self._snapshot

    def update(self, request: UpdateMetadataRequest) -> list[str]:
        """Apply an UpdateMetadata the fence accepted; returns the topics it deleted."""
        with self._lock:
            old = self._snapshot
            brokers = {b.broker_id: LiveBroker.from_request(b) for b in request.live_brokers}
            changed: dict[str, dict[int, CachedPartition]] = {}
            for state in request.partition_states:
                parts = changed.get(state.topic)
                if parts is None:
                    parts = changed[state.topic] = dict(old.partitions(state.topic))
                if state.leader == LEADER_DURING_DELETE:
                    parts.pop(state.partition, None)
                    continue
                parts[state.partition] = CachedPartition(
                    topic=state.topic,
                    partition=state.partition,
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    isr=tuple(state.isr),
                    replicas=tuple(state.replicas),
                    offline_replicas=tuple(state.offline_replicas),
                    partition_epoch=state.partition_epoch,
                    controller_epoch=state.controller_epoch,
                )
            topics = dict(old.topics)
            deleted: list[str] = []
            for name, parts in changed.items():
                if parts:
                    topics[name] = MappingProxyType(parts)
                elif name in topics:
                    del topics[name]
                    deleted.append(name)
            self._snapshot = MetadataSnapshot(
                brokers=MappingProxyType(brokers),
                topics=MappingProxyType(topics),
                controller_id=request.controller_id,
                controller_epoch=request.controller_epoch,
            )
            return deleted
