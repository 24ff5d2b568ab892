"""What the controller knows of the cluster (Kafka's ControllerContext): live brokers and
their epochs, every topic's replica assignment, every partition's leadership as last read
from or written to ZooKeeper (with the state znode's version, the partition epoch), the
partition and replica states, and the topics queued for deletion.

Built from ZooKeeper when a broker becomes controller and kept current by the controller's
events; ZooKeeper stays the truth, this is the controller's cache of it. Used only on the
controller's event thread (no lock), except :meth:`ControllerContext.snapshot_leadership`,
a copy for readers on other threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from ..zk.controller_election import ControllerEpoch
from ..zk.znodes import BrokerRegistration, PartitionState, Versioned
from .reassignment_sets import ReplicaAssignment
from .state_machines import (
    PartitionState as PartitionPhase,
)
from .state_machines import (
    ReplicaState,
    StateTracker,
    partition_tracker,
    replica_tracker,
)

#: (topic, partition)
TopicPartition = tuple[str, int]


@dataclasses.dataclass
class ControllerContext:
    """The controller's view; see the module docstring."""

    epoch: ControllerEpoch
    #: Told of every partition leader an election writes (True: unclean): the broker's
    #: election metrics. Every kind of election calls it (offline, controlled shutdown,
    #: preferred, reassignment).
    on_leader_elected: Callable[[bool], None] = lambda _unclean: None
    live_brokers: dict[int, BrokerRegistration] = dataclasses.field(default_factory=dict)
    #: Broker id -> broker epoch (czxid of its registration).
    broker_epochs: dict[int, int] = dataclasses.field(default_factory=dict)
    #: Topic -> partition -> replicas (the first is the preferred leader).
    assignments: dict[str, dict[int, tuple[int, ...]]] = dataclasses.field(default_factory=dict)
    leadership: dict[TopicPartition, Versioned[PartitionState]] = dataclasses.field(
        default_factory=dict
    )
    partition_states: StateTracker[TopicPartition, PartitionPhase] = dataclasses.field(
        default_factory=partition_tracker
    )
    replica_states: StateTracker[tuple[str, int, int], ReplicaState] = dataclasses.field(
        default_factory=replica_tracker
    )
    topics_to_delete: set[str] = dataclasses.field(default_factory=set)
    #: Partitions being reassigned: their RS (also in ``assignments``), AR and RR.
    reassignments: dict[TopicPartition, ReplicaAssignment] = dataclasses.field(default_factory=dict)
    #: Live brokers in controlled shutdown (Kafka's shuttingDownBrokerIds): still registered
    #: and still sent requests, but never elected leader (see :attr:`eligible_ids`).
    shutting_down_brokers: set[int] = dataclasses.field(default_factory=set)

    @property
    def live_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def eligible_ids(self) -> set[int]:
        """Live brokers that may lead (Kafka's liveBrokerIds, which leaves out the brokers
        shutting down; ``live_ids`` is its liveOrShuttingDownBrokerIds)."""
        return set(self.live_brokers) - self.shutting_down_brokers

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp[0], {}).get(tp[1], ())

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for topic in sorted(self.assignments) for tp in self.partitions_of(topic)]

    def partitions_on(self, broker_ids: Iterable[int]) -> list[TopicPartition]:
        """Partitions with a replica on any of ``broker_ids``."""
        wanted = set(broker_ids)
        return [tp for tp in self.all_partitions() if wanted & set(self.replicas(tp))]

    def partitions_led_by(self, broker_ids: Iterable[int]) -> list[TopicPartition]:
        wanted = set(broker_ids)
        return [tp for tp, v in self.leadership.items() if v.value.leader in wanted]

    def is_being_deleted(self, tp: TopicPartition) -> bool:
        return tp[0] in self.topics_to_delete

    def remove_topic(self, topic: str) -> None:
        """Forget a deleted topic: its assignment, leadership and states."""
        for tp in self.partitions_of(topic):
            self.leadership.pop(tp, None)
            self.partition_states.forget(tp)
            for broker in self.replicas(tp):
                self.replica_states.forget((tp[0], tp[1], broker))
            self.reassignments.pop(tp, None)
        self.assignments.pop(topic, None)
        self.topics_to_delete.discard(topic)

    def snapshot_leadership(self) -> dict[TopicPartition, PartitionState]:
        """A copy of every partition's leadership, for readers on other threads."""
        return {tp: v.value for tp, v in list(self.leadership.items())}
