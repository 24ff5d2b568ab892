"""A local cluster as ZooKeeper describes it now: the controller, the registered brokers
and every partition's replicas, leader and ISR (what ``spark-mq cluster status`` shows and
cluster tests wait on). Read-only: each call reads the znodes afresh through the given
session.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from spark_mq.broker.zk import partition_states, znodes
from spark_mq.broker.zk.client import ZkClient


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as ZooKeeper describes it (``state`` None: not online yet)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: znodes.PartitionState | None

    def is_offline(self, live_brokers: Collection[int]) -> bool:
        """No leader, or a leader that is not alive (Kafka's offline partition)."""
        return self.state is None or self.state.leader not in live_brokers

    @property
    def is_under_replicated(self) -> bool:
        """Fewer in-sync replicas than assigned ones."""
        return self.state is not None and len(self.state.isr) < len(self.replicas)


def controller_id(zk: ZkClient) -> int | None:
    """The broker id ``/controller`` names now; None while there is no controller."""
    found = zk.get(znodes.CONTROLLER)
    return None if found is None else znodes.ControllerRegistration.decode(found[0]).broker_id


def controller_epoch(zk: ZkClient) -> int | None:
    """The epoch of the controller ``/controller_epoch`` holds; None before the first."""
    found = zk.get(znodes.CONTROLLER_EPOCH)
    return None if found is None else znodes.decode_controller_epoch(found[0])


def registered_brokers(zk: ZkClient) -> dict[int, znodes.BrokerRegistration]:
    """The brokers registered under ``/brokers/ids`` now."""
    out = {}
    for child in zk.children(znodes.BROKER_IDS):
        found = zk.get(znodes.broker_path(int(child)))
        if found is not None:
            out[int(child)] = znodes.BrokerRegistration.decode(int(child), found[0])
    return out


def partitions(zk: ZkClient) -> list[PartitionView]:
    """Every partition of every topic as ZooKeeper holds it now: its assigned replicas
    and, once the controller has brought it online, its leader and ISR."""
    out = []
    for topic in sorted(partition_states.list_topics(zk)):
        assignment = partition_states.read_topic_assignment(zk, topic)
        if assignment is None:  # deleted meanwhile
            continue
        for partition, replicas in sorted(assignment.partitions.items()):
            found = partition_states.read_partition_state(zk, topic, partition)
            state = None if found is None else found.value
            out.append(PartitionView(topic, partition, replicas, state))
    return out
