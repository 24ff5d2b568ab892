"""Reading and writing topics and partition states in ZooKeeper.

Topic creation is an admin write, as in Kafka's AdminZkClient: ``/config/topics/<t>`` first
(so a broker that sees the topic also sees its overrides), then ``/brokers/topics/<t>``,
which the controller watches. Deletion is a request: ``/admin/delete_topics/<t>``.

Partition states are controller writes: each goes behind the ``/controller_epoch`` check
(:mod:`.controller_election`), and an update is a compare-and-set at the znode version the
controller last read (the partition epoch). A lost compare-and-set comes back as
:class:`~kazoo.exceptions.BadVersionError` in the result for that partition, for the caller
to re-read and decide again, as Kafka's controller does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from kazoo.client import TransactionRequest
from kazoo.exceptions import NodeExistsError

from spark_mq.errors import TopicExistsError

from . import znodes
from .client import ZkClient, translate_errors
from .controller_election import ControllerEpoch, checked_commit_many

#: (topic, partition)
TopicPartition = tuple[str, int]
_AddOps = Callable[[TransactionRequest], None]


def create_topic(
    zk: ZkClient,
    topic: str,
    assignment: znodes.TopicAssignment,
    config: Mapping[str, str] | None = None,
) -> None:
    """Write a new topic's overrides and assignment; :class:`TopicExistsError` if it exists."""
    with translate_errors(f"creating topic {topic}"):
        if zk.kazoo.exists(znodes.topic_path(topic)) is not None:
            raise TopicExistsError(f"topic {topic!r} already exists", topic=topic)
        overrides = znodes.TopicConfigOverrides(dict(config or {})).encode()
        config_path = znodes.topic_config_path(topic)
        # Overrides left by an earlier, deleted topic of the same name are replaced.
        if zk.kazoo.exists(config_path) is None:
            zk.kazoo.create(config_path, overrides, makepath=True)
        else:
            zk.kazoo.set(config_path, overrides)
        try:
            zk.kazoo.create(znodes.topic_path(topic), assignment.encode(), makepath=True)
        except NodeExistsError as exc:
            raise TopicExistsError(f"topic {topic!r} already exists", topic=topic) from exc


def list_topics(zk: ZkClient) -> list[str]:
    return zk.children(znodes.TOPICS)


def read_topic_assignment(zk: ZkClient, topic: str) -> znodes.TopicAssignment | None:
    found = zk.get(znodes.topic_path(topic))
    return None if found is None else znodes.TopicAssignment.decode(topic, found[0])


def read_topic_config(zk: ZkClient, topic: str) -> dict[str, str]:
    found = zk.get(znodes.topic_config_path(topic))
    if found is None:
        return {}
    return dict(znodes.TopicConfigOverrides.decode(topic, found[0]).config)


def mark_topic_for_deletion(zk: ZkClient, topic: str) -> None:
    # A request already there is fine: deletion is idempotent.
    with (
        translate_errors(f"requesting deletion of topic {topic}"),
        contextlib.suppress(NodeExistsError),
    ):
        zk.kazoo.create(znodes.delete_topic_path(topic), b"", makepath=True)


def read_partition_state(
    zk: ZkClient, topic: str, partition: int
) -> znodes.Versioned[znodes.PartitionState] | None:
    found = zk.get(znodes.partition_state_path(topic, partition))
    if found is None:
        return None
    data, stat = found
    return znodes.Versioned(znodes.PartitionState.decode(topic, partition, data), stat.version)


def create_partition_states(
    zk: ZkClient,
    epoch: ControllerEpoch,
    states: Mapping[TopicPartition, znodes.PartitionState],
) -> dict[TopicPartition, int | Exception]:
    """The controller's NewPartition -> OnlinePartition write: create each state znode.
    Returns per partition the new znode version (0) or the failure (NodeExistsError)."""
    with translate_errors("creating partition znodes"):
        for topic, partition in states:
            # The parents are not cluster state (they hold nothing), so they are made
            # without the epoch check, as Kafka does.
            zk.kazoo.ensure_path(znodes.partition_path(topic, partition))

    def create(tp: TopicPartition, state: znodes.PartitionState) -> _AddOps:
        def add(txn: TransactionRequest) -> None:
            txn.create(znodes.partition_state_path(*tp), state.encode())

        return add

    items = list(states.items())
    results = checked_commit_many(
        zk, epoch, [create(tp, state) for tp, state in items], "creating partition states"
    )
    return {
        tp: r[0] if isinstance(r[0], Exception) else 0
        for (tp, _), r in zip(items, results, strict=True)
    }


def update_partition_states(
    zk: ZkClient,
    epoch: ControllerEpoch,
    updates: Mapping[TopicPartition, znodes.Versioned[znodes.PartitionState]],
) -> dict[TopicPartition, int | Exception]:
    """Compare-and-set each partition's state at the version given with it. Returns per
    partition the new version (the new partition epoch) or the failure (BadVersionError:
    re-read and decide again)."""

    def update(tp: TopicPartition, new: znodes.Versioned[znodes.PartitionState]) -> _AddOps:
        def add(txn: TransactionRequest) -> None:
            txn.set_data(znodes.partition_state_path(*tp), new.value.encode(), new.version)

        return add

    items = list(updates.items())
    results = checked_commit_many(
        zk, epoch, [update(tp, new) for tp, new in items], "updating partition states"
    )
    return {
        tp: r[0] if isinstance(r[0], Exception) else int(r[0].version)
        for (tp, _), r in zip(items, results, strict=True)
    }
