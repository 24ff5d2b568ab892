"""FindCoordinator (10) of groups and transactional ids, JoinGroup (11), Heartbeat (12),
LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42).

Thin: each handler waits for the coordinator to be ready (``__consumer_offsets`` loaded and
created), calls it through ``GroupService.call`` (which supplies the time and re-arms its
timer) and wraps the answer. What they raise is answered by the dispatcher
(:func:`~spark_mq.broker.handlers.errors.answer`) with the API's error response. JoinGroup
and SyncGroup may wait: the coordinator completes a future when the rebalance round (or the
leader's assignment) is there. If the connection
closes meanwhile the future is cancelled and the later answer is dropped, as Kafka drops it.

In a cluster, the coordinator of a key is the leader of its partition of the internal topic
(``__consumer_offsets`` or ``__transaction_state``) as the broker's metadata cache knows it;
COORDINATOR_NOT_AVAILABLE while that partition has no live leader. Group requests for a
group whose partition this broker does not lead answer NOT_COORDINATOR (the coordinator's
check, ownership.py), and a SyncGroup whose assignment was stored is answered once the
record is on every in-sync replica (replication.py).

FindCoordinator in a cluster first makes sure the coordinator's internal topic exists in
ZooKeeper (``core.cluster_admin``), created with ``offsets.topic.replication.factor`` /
``transaction.state.log.replication.factor`` (key type 2, spark_mq's own, finds the
half-message service of a producer group: ``__half_messages`` and ``__half_discarded`` with
``half.messages.topic.replication.factor``). With fewer live brokers than that, Kafka
refuses to create it and answers COORDINATOR_NOT_AVAILABLE; so do we, and the broker log
(WARNING) and the client's error say which setting and how many brokers are missing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.coordinator_topic import coordinator_partition
from spark_mq.broker.group.rebalance import sync_error, validate_group_id
from spark_mq.broker.half.half_log import DISCARD_TOPIC
from spark_mq.broker.handlers.errors import REPEATED
from spark_mq.broker.handlers.metadata import client_endpoint
from spark_mq.broker.internal_topics import (
    HALF_MESSAGES_TOPIC,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from spark_mq.broker.metadata_cache import NO_LEADER
from spark_mq.broker.txn.coordinator import validate_transactional_id
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    SparkMQError,
    TopicExistsError,
)
from spark_mq.protocol.groups import (
    COORDINATOR_GROUP,
    COORDINATOR_HALF_MESSAGES,
    COORDINATOR_TRANSACTION,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListGroupsRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore

R = TypeVar("R")
log = logging.getLogger(__name__)


def client_host(peer: str) -> str:
    """Kafka's ``client_host``: ``/`` and the peer's address without its port; a Unix
    socket peer as it is."""
    if peer.startswith("unix:"):
        return peer
    host, sep, _ = peer.rpartition(":")
    return f"/{host}" if sep else peer


def _completer(future: asyncio.Future[R]) -> Callable[[R], None]:
    def complete(response: R) -> None:
        if not future.done():  # a closed connection cancelled it
            future.set_result(response)

    return complete


def ensure_internal_topic_in_cluster(core: BrokerCore, topic: str) -> None:
    """Create a coordinator's internal topic in the cluster if it does not exist (blocking);
    CoordinatorNotAvailableError naming the setting when too few brokers are live."""
    admin = core.cluster_admin
    assert admin is not None, "only a cluster broker creates internal topics in ZooKeeper"
    if topic == HALF_MESSAGES_TOPIC:
        # Both of the service's topics, each checked: a discard needs __half_discarded.
        _ensure_half_message_topics(core)
        return
    if admin.topic_exists(topic):
        return
    if topic == OFFSETS_TOPIC:
        groups = core.config.groups
        partitions, factor = (
            groups.offsets_topic_num_partitions,
            groups.offsets_topic_replication_factor,
        )
        setting, segment_bytes = (
            "offsets.topic.replication.factor",
            groups.offsets_topic_segment_bytes,
        )
    else:
        txns = core.config.transactions
        partitions = txns.transaction_state_log_num_partitions
        factor = txns.transaction_state_log_replication_factor
        setting = "transaction.state.log.replication.factor"
        segment_bytes = txns.transaction_state_log_segment_bytes
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": str(segment_bytes),
        "compression.type": "producer",
    }
    try:
        admin.create_topic(topic, partitions, factor, configs, replication_factor_setting=setting)
    except TopicExistsError:
        return  # another broker's FindCoordinator created it first
    except InvalidReplicationFactorError as exc:
        message = (
            f"the coordinator is not available: internal topic {topic} cannot be created: {exc}"
        )
        REPEATED.log(("internal topic not created", topic), logging.WARNING, "%s", message)
        raise CoordinatorNotAvailableError(message) from exc
    log.info(
        "created internal topic %s (%d partitions, replication factor %d)",
        topic,
        partitions,
        factor,
    )


def _ensure_half_message_topics(core: BrokerCore) -> None:
    """Create ``__half_messages`` (compacted, partitioned by producer group) and the discard
    topic ``__half_discarded`` in the cluster, both with
    ``half.messages.topic.replication.factor`` and ``half.messages.topic.min.isr``."""
    admin = core.cluster_admin
    assert admin is not None, "only a cluster broker creates internal topics in ZooKeeper"
    half = core.config.half_messages
    factor = half.half_messages_topic_replication_factor
    min_isr = str(min(half.half_messages_topic_min_isr, factor))
    topics = (
        (
            HALF_MESSAGES_TOPIC,
            half.half_messages_topic_num_partitions,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(half.transaction_half_log_segment_bytes),
                "compression.type": "producer",
                "min.insync.replicas": min_isr,
            },
        ),
        (
            DISCARD_TOPIC,
            1,
            {"retention.ms": "-1", "retention.bytes": "-1", "min.insync.replicas": min_isr},
        ),
    )
    for topic, partitions, configs in topics:
        if admin.topic_exists(topic):
            continue
        try:
            admin.create_topic(
                topic,
                partitions,
                factor,
                configs,
                replication_factor_setting="half.messages.topic.replication.factor",
            )
        except TopicExistsError:
            continue  # another broker's FindCoordinator created it first
        except InvalidReplicationFactorError as exc:
            message = (
                f"the half-message service is not available: internal topic {topic} cannot "
                f"be created: {exc}"
            )
            REPEATED.log(("internal topic not created", topic), logging.WARNING, "%s", message)
            raise CoordinatorNotAvailableError(message) from exc
        log.info(
            "created internal topic %s (%d partitions, replication factor %d)",
            topic,
            partitions,
            factor,
        )


def cluster_coordinator(ctx: RequestContext, topic: str, key: str) -> tuple[int, str, int]:
    """A cluster's coordinator of ``key``: the leader of its partition of ``topic`` as this
    broker's metadata knows it, as (node id, host, port); COORDINATOR_NOT_AVAILABLE
    (retriable) while the partition has no live leader or the topic is not known yet."""
    core = ctx.core
    snapshot = core.metadata_cache.snapshot
    partitions = snapshot.partitions(topic)
    if not partitions:
        raise CoordinatorNotAvailableError(
            f"{topic} was just created and this broker does not know its partitions yet; retry"
        )
    index = coordinator_partition(key, max(partitions) + 1)
    cached = partitions.get(index)
    leader = NO_LEADER if cached is None else cached.leader
    if leader == core.node_id:
        # This broker: the listener the request came in on, as a single node answers.
        listener = ctx.listener
        host = str(listener) if listener.unix_path is not None else listener.host
        return core.node_id, host, listener.port
    broker = snapshot.brokers.get(leader) if leader >= 0 else None
    endpoint = None
    if broker is not None:
        endpoint = client_endpoint(broker, ctx.listener_name)
    if endpoint is None:
        raise CoordinatorNotAvailableError(
            f"{topic}-{index}, which holds {key!r}, has no live leader now (it is being "
            "elected, or its replicas are offline); retry"
        )
    return leader, endpoint.host, endpoint.port


async def handle_find_coordinator(
    ctx: RequestContext, request: FindCoordinatorRequest, _: memoryview
) -> Response:
    core = ctx.core
    if request.key_type == COORDINATOR_TRANSACTION:
        validate_transactional_id(request.key)
        topic = TRANSACTION_STATE_TOPIC
    elif request.key_type == COORDINATOR_GROUP:
        validate_group_id(request.key)
        topic = OFFSETS_TOPIC
    elif request.key_type == COORDINATOR_HALF_MESSAGES:
        if not request.key:
            raise InvalidRequestError("FindCoordinator key_type 2 needs the producer group")
        topic = HALF_MESSAGES_TOPIC
    else:
        raise InvalidRequestError(
            f"FindCoordinator key_type {request.key_type} is not known: use 0 (a consumer "
            "group), 1 (a transactional id) or 2 (a producer group of half messages)"
        )
    if core.cluster_admin is not None:
        # A cluster: the coordinator is the leader of the key's partition, wherever it is.
        await core.run_blocking(ensure_internal_topic_in_cluster, core, topic)
        node_id, host, port = cluster_coordinator(ctx, topic, request.key)
        return Response(FindCoordinatorResponse(0, node_id, host, port))
    if topic == HALF_MESSAGES_TOPIC:
        await ctx.core.half_messages.ready()  # one node: this broker serves every group
    elif topic == TRANSACTION_STATE_TOPIC:
        txns = ctx.core.transactions
        await txns.ready()
        # On one node this broker leads every partition of __transaction_state, so it
        # coordinates every transactional id.
        txns.partition_for(request.key)
    else:
        groups = ctx.core.groups
        await groups.ready()
        # On one node this broker leads every partition, so it coordinates every group.
        groups.partition_for(request.key)
    listener = ctx.listener
    host = str(listener) if listener.unix_path is not None else listener.host
    return Response(FindCoordinatorResponse(0, ctx.core.node_id, host, listener.port))


async def handle_join_group(
    ctx: RequestContext, request: JoinGroupRequest, _: memoryview
) -> Response:
    groups = ctx.core.groups
    await groups.ready()
    future: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()
    groups.call(
        lambda c, now: c.join(
            request,
            client_id=ctx.header.client_id or "",
            client_host=client_host(ctx.peer),
            now_ms=now,
            respond=_completer(future),
        )
    )
    return Response(await future)


async def handle_sync_group(
    ctx: RequestContext, request: SyncGroupRequest, _: memoryview
) -> Response:
    groups = ctx.core.groups
    await groups.ready()
    future: asyncio.Future[SyncGroupResponse] = asyncio.get_running_loop().create_future()
    groups.call(lambda c, now: c.sync(request, now_ms=now, respond=_completer(future)))
    response = await future
    if response.error_code == 0 and groups.cluster:
        # The assignment the leader gave was stored: answer once it is replicated.
        try:
            await groups.replicated(
                request.group_id, f"group {request.group_id!r}", sync_group=True
            )
        except SparkMQError as exc:
            return Response(sync_error(exc))
    return Response(response)


async def handle_heartbeat(
    ctx: RequestContext, request: HeartbeatRequest, _: memoryview
) -> Response:
    groups = ctx.core.groups
    await groups.ready()
    groups.call(lambda c, now: c.heartbeat(request, now_ms=now))
    return Response(HeartbeatResponse(0))


async def handle_leave_group(
    ctx: RequestContext, request: LeaveGroupRequest, _: memoryview
) -> Response:
    groups = ctx.core.groups
    await groups.ready()
    return Response(groups.call(lambda c, now: c.leave(request, now_ms=now)))


async def handle_describe_groups(
    ctx: RequestContext, request: DescribeGroupsRequest, _: memoryview
) -> Response:
    coordinator = await ctx.core.groups.ready()
    return Response(coordinator.describe_groups(request.groups))


async def handle_list_groups(
    ctx: RequestContext, request: ListGroupsRequest, _: memoryview
) -> Response:
    coordinator = await ctx.core.groups.ready()
    return Response(coordinator.list_groups(request.states_filter))


async def handle_delete_groups(
    ctx: RequestContext, request: DeleteGroupsRequest, _: memoryview
) -> Response:
    groups = ctx.core.groups
    await groups.ready()
    results = groups.call(lambda c, now: c.delete_groups(request.groups_names, now_ms=now))
    return Response(DeleteGroupsResponse(results))
