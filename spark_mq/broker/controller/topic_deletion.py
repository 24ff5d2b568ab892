"""Carrying out topic deletion requests (the controller's part of Kafka's
TopicDeletionManager).

An admin asks for deletion by creating ``/admin/delete_topics/<t>``. The controller then, for
each such topic it knows:

1. tells every live broker to drop the topic's partitions from its metadata (UpdateMetadata
   with leader -2) and every live replica to stop and delete its log (StopReplica with
   ``delete_partition``);
2. deletes, behind the controller-epoch check, every partition state znode, the topic's
   assignment ``/brokers/topics/<t>``, its overrides ``/config/topics/<t>`` and the request
   ``/admin/delete_topics/<t>``.

Unlike Kafka's ZooKeeper controller, it does not wait for every replica to acknowledge before
step 2: a broker that missed its StopReplica (dead, or unreachable) gets a FULL LeaderAndIsr
when it comes back, which no longer lists the partition, and drops it then (KIP-516's stray
partitions). A request for a topic that does not exist is deleted, as Kafka does.

Runs on the controller's event thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kazoo.client import TransactionRequest

from spark_mq.errors import StateChangeFailedError

from ..zk import znodes
from ..zk.client import ZkClient
from ..zk.controller_election import checked_commit
from .context import ControllerContext
from .request_batch import RequestBatch
from .state_machines import PartitionState as Phase
from .state_machines import ReplicaState

log = logging.getLogger(__name__)

#: Deletes per multi-op: ZooKeeper refuses a request above jute.maxbuffer (1 MiB).
OPS_PER_MULTI = 500


def _delete_paths(zk: ZkClient, ctx: ControllerContext, paths: list[str], what: str) -> None:
    """Delete ``paths`` (children before parents) in epoch-checked multi-ops."""
    for start in range(0, len(paths), OPS_PER_MULTI):
        chunk = paths[start : start + OPS_PER_MULTI]

        def add(txn: TransactionRequest, chunk: list[str] = chunk) -> None:
            for path in chunk:
                txn.delete(path)

        results = checked_commit(zk, ctx.epoch, add, what)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise StateChangeFailedError(f"{what} failed: {failed[0]!r}; it is retried")


def _topic_tree(zk: ZkClient, topic: str) -> list[str]:
    """Every znode of ``topic`` under /brokers/topics, children first."""
    paths = []
    for partition in zk.children(znodes.partitions_path(topic)):
        base = f"{znodes.partitions_path(topic)}/{partition}"
        paths += [f"{base}/{child}" for child in zk.children(base)]
        paths.append(base)
    if zk.get(znodes.partitions_path(topic)) is not None:
        paths.append(znodes.partitions_path(topic))
    if zk.get(znodes.topic_path(topic)) is not None:
        paths.append(znodes.topic_path(topic))
    return paths


def delete_unknown_requests(zk: ZkClient, ctx: ControllerContext, topics: Iterable[str]) -> None:
    """Remove deletion requests of topics that do not exist."""
    paths = [znodes.delete_topic_path(t) for t in sorted(topics)]
    if paths:
        log.info("deleting requests to delete topics that do not exist: %s", sorted(topics))
        _delete_paths(zk, ctx, paths, "removing deletion requests of unknown topics")


def delete_topics(
    zk: ZkClient, ctx: ControllerContext, topics: Iterable[str], batch: RequestBatch
) -> list[str]:
    """Delete ``topics`` (known to the context, already in ``ctx.topics_to_delete``); the
    batch is sent between the requests to the brokers and the znode deletions. Returns the
    topics deleted."""
    topics = sorted(topics)
    for topic in topics:
        partitions = ctx.partitions_of(topic)
        batch.add_update_metadata(ctx.live_ids, partitions)
        for tp in partitions:
            replicas = ctx.replicas(tp)
            for broker in replicas:
                key = (tp[0], tp[1], broker)
                for phase in (ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED):
                    if ctx.replica_states.state(key) is ReplicaState.NON_EXISTENT:
                        ctx.replica_states.move(key, ReplicaState.NEW)
                    ctx.replica_states.move_all([key], phase)
            batch.add_stop_replica(
                [b for b in replicas if b in ctx.live_brokers], tp, delete_partition=True
            )
            ctx.partition_states.move_all([tp], Phase.OFFLINE)
    batch.send()
    deleted = []
    for topic in topics:
        paths = [
            *_topic_tree(zk, topic),
            *(
                [znodes.topic_config_path(topic)]
                if zk.get(znodes.topic_config_path(topic)) is not None
                else []
            ),
            *(
                [znodes.delete_topic_path(topic)]
                if zk.get(znodes.delete_topic_path(topic)) is not None
                else []
            ),
        ]
        _delete_paths(zk, ctx, paths, f"deleting topic {topic}")
        ctx.remove_topic(topic)
        deleted.append(topic)
        log.info("deleted topic %s", topic)
    return deleted
