"""What the admin client describes: a topic's partitions (leader, leader epoch, replicas, ISR,
offline replicas) and configuration overrides, and the cluster (its id, controller and live
brokers). Plain frozen values, built from Metadata and DescribeConfigs answers by
:class:`~spark_mq.client.admin.Admin`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PartitionDescription:
    """One partition of a described topic."""

    partition: int
    #: The leader's broker id; -1 while the partition has none (LEADER_NOT_AVAILABLE).
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    #: Replicas on a broker that is down or whose log directory failed.
    offline_replicas: tuple[int, ...] = ()

    @property
    def under_replicated(self) -> bool:
        """Fewer in-sync replicas than replicas (kafka-topics'
        ``--under-replicated-partitions``)."""
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True)
class TopicDescription:
    """What :meth:`Admin.describe_topic` returns: partitions with their leaders, and the
    topic's configuration overrides (keys set on the topic, not the broker defaults)."""

    name: str
    partitions: tuple[PartitionDescription, ...]
    configs: dict[str, str]
    #: The topic's id ("" when the answering broker does not know it).
    topic_id: str = ""

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    @property
    def replication_factor(self) -> int:
        """Replicas of the first partition, as kafka-topics reports it (0: no partitions)."""
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True)
class ClusterDescription:
    """What :meth:`Admin.describe_cluster` returns: the cluster id, the controller's broker
    id (-1 while none is elected) and the live brokers as ``(id, host, port, rack)``."""

    cluster_id: str
    controller_id: int
    brokers: tuple[tuple[int, str, int, str | None], ...]

    @property
    def broker_ids(self) -> frozenset[int]:
        return frozenset(b[0] for b in self.brokers)
