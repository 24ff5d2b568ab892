"""The controller's side of a controlled shutdown (Kafka's ``KafkaController.
doControlledShutdown``): a stopping broker asks the controller to move its leaderships
before it goes, so clients move to the new leaders at once instead of waiting for the
broker's ZooKeeper session to end.

For a ControlledShutdown from broker B, in this order:

1. B's broker epoch must not be older than its current registration's, else the request
   is refused whole with ``STALE_BROKER_EPOCH`` (77): it comes from an earlier life of B. A
   broker the controller does not know as live is refused with ``BROKER_NOT_AVAILABLE`` (8).
2. B joins the context's ``shutting_down_brokers``: from now on no election picks it
   (:attr:`~.context.ControllerContext.eligible_ids`), until it leaves the cluster.
3. Every partition B leads with more than one replica (and not being deleted) gets a new
   leader by Kafka's ControlledShutdownPartitionLeaderElection
   (:func:`~.leader_election.controlled_shutdown_leader`: the first replica in assignment
   order that is alive, in the ISR and not shutting down), in leader epoch + 1, with B out of
   the ISR. A partition with no such replica keeps B as leader.
4. B leaves the ISR of every partition it follows (where the ISR keeps at least one
   member), in leader epoch + 1: its fetchers have stopped, and the leader must not wait
   for it for acks=all.
5. LeaderAndIsr goes to the live replicas of each changed partition, B included (Kafka
   leaves B out; told, B stops taking produce requests for the partitions it led at once,
   answering NOT_LEADER_OR_FOLLOWER, instead of holding them until it stops), and every
   live broker gets UpdateMetadata.

The answer lists the partitions B still leads that another live replica, not shutting down,
could take once it is back in the ISR: B asks again after
``controlled.shutdown.retry.backoff.ms``. A partition with one replica cannot move, and is
not listed, as in Kafka: asking again would not help. Nor, unlike Kafka, is one whose other
replicas are all dead or shutting down: Kafka lists it, and the last broker of a cluster
(or every broker of a cluster stopped at once) waits through all its retries for nothing.

Runs on the controller's event thread only.
"""

from __future__ import annotations

import logging

from spark_mq.protocol.controller import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    TopicPartitionRef,
)
from spark_mq.protocol.error_codes import ErrorCode

from ..zk.client import ZkClient
from ..zk.znodes import PartitionState
from .context import ControllerContext, TopicPartition
from .leader_election import controlled_shutdown_leader
from .partition_leadership import remove_replicas_from_isr, write_partition_states
from .request_batch import RequestBatch

log = logging.getLogger(__name__)


def _refusal(code: ErrorCode, message: str) -> ControlledShutdownResponse:
    return ControlledShutdownResponse(int(code), [], message)


def remaining_leaderships(ctx: ControllerContext, broker_id: int) -> list[TopicPartition]:
    """Partitions ``broker_id`` still leads that another live replica, not shutting down,
    could take once in sync: those worth asking again for."""
    return sorted(
        tp
        for tp in ctx.partitions_led_by([broker_id])
        if not ctx.is_being_deleted(tp)
        and any(b != broker_id and b in ctx.eligible_ids for b in ctx.replicas(tp))
    )


def controlled_shutdown(
    zk: ZkClient,
    ctx: ControllerContext,
    request: ControlledShutdownRequest,
    batch: RequestBatch,
) -> ControlledShutdownResponse:
    """Move ``request.broker_id``'s leaderships and ISR memberships away (module docstring)."""
    broker = request.broker_id
    known_epoch = ctx.broker_epochs.get(broker)
    if known_epoch is None:
        return _refusal(
            ErrorCode.BROKER_NOT_AVAILABLE,
            f"broker {broker} is not a live broker of the cluster as the controller sees it; "
            "a broker must be registered to shut down in a controlled way",
        )
    # Kafka's test: only an older epoch is stale (a newer one is a registration the
    # controller has not read yet, and it is that broker asking).
    if request.broker_epoch < known_epoch:
        return _refusal(
            ErrorCode.STALE_BROKER_EPOCH,
            f"ControlledShutdown from broker {broker} with broker epoch {request.broker_epoch}, "
            f"but its current registration has broker epoch {known_epoch}",
        )
    ctx.shutting_down_brokers.add(broker)
    hosted = [
        tp
        for tp in ctx.partitions_on([broker])
        if len(ctx.replicas(tp)) > 1 and tp in ctx.leadership and not ctx.is_being_deleted(tp)
    ]
    led = [tp for tp in hosted if ctx.leadership[tp].value.leader == broker]
    followed = [tp for tp in hosted if ctx.leadership[tp].value.leader != broker]
    log.info(
        "controlled shutdown of broker %d: moving the leadership of %d partitions and leaving "
        "the ISR of %d",
        broker,
        len(led),
        len(followed),
    )

    def decide(tp: TopicPartition, current: PartitionState) -> PartitionState | None:
        if current.leader != broker:
            return None  # moved meanwhile (a re-read after a lost race)
        leader = controlled_shutdown_leader(
            ctx.replicas(tp), current.isr, ctx.live_ids, ctx.shutting_down_brokers
        )
        if leader is None:
            return None
        isr = tuple(b for b in current.isr if b not in ctx.shutting_down_brokers)
        return PartitionState(leader, current.leader_epoch + 1, isr, ctx.epoch.epoch)

    for tp in write_partition_states(zk, ctx, led, decide, "controlled shutdown election"):
        ctx.on_leader_elected(False)
        batch.add_leader_and_isr([b for b in ctx.replicas(tp) if b in ctx.live_brokers], tp)
    remove_replicas_from_isr(zk, ctx, [broker], followed, batch)
    batch.add_update_metadata(ctx.live_ids)
    batch.send()
    remaining = remaining_leaderships(ctx, broker)
    if remaining:
        log.warning(
            "controlled shutdown of broker %d: %d partitions keep it as leader (no other "
            "live replica is in their ISR): %s",
            broker,
            len(remaining),
            remaining[:10],
        )
    return ControlledShutdownResponse(
        0, [TopicPartitionRef(topic, partition) for topic, partition in remaining]
    )
