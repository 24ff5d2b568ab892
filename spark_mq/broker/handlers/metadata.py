"""Metadata (key 3) and ApiVersions (key 18): what this broker is and what it hosts.

A single-node broker answers Metadata from its own log directory: itself as the only broker,
leader of every partition. A cluster broker answers from its metadata cache
(:class:`~spark_mq.broker.metadata_cache.MetadataCache`, filled by the controller's
UpdateMetadata), as Kafka's ZooKeeper-era brokers do: every live broker, the controller, and
per partition the leader, leader epoch, replicas, ISR and offline replicas, whichever broker
hosts them. A partition whose leader is none or not live is answered with leader -1 and
LEADER_NOT_AVAILABLE (retriable: clients refresh and retry). An unknown topic is created when
the request allows it and ``auto.create.topics.enable`` is on (never an internal topic: its
coordinator creates it), through the cluster's topic administration on an executor thread,
and answered LEADER_NOT_AVAILABLE: the controller has not elected its leaders yet.
"""

from __future__ import annotations

import asyncio
import logging

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.internal_topics import INTERNAL_TOPICS
from spark_mq.broker.listeners import UNIX
from spark_mq.broker.metadata_cache import (
    NO_LEADER,
    BrokerEndpoint,
    CachedPartition,
    LiveBroker,
    MetadataSnapshot,
)
from spark_mq.errors import PartitionOfflineError, TopicExistsError
from spark_mq.protocol.api import APIS
from spark_mq.protocol.api_versions import (
    ApiVersionRange,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.metadata import (
    BrokerMetadata,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)
from spark_mq.version import __version__

log = logging.getLogger(__name__)

#: The listener whose endpoints a cluster broker's Metadata gives to a client that came
#: through the local socket (which no broker registers).
CLIENT_LISTENER = "PLAINTEXT"


def client_endpoint(broker: LiveBroker, listener_name: str) -> BrokerEndpoint | None:
    """The endpoint of ``broker`` a client that connected through ``listener_name`` should
    use: the same listener's, as Kafka answers (a client on SSL gets SSL endpoints); None if
    the broker has no such listener (Kafka leaves it out). A client on the Unix socket gets
    the PLAINTEXT endpoint, or the first."""
    endpoint = broker.endpoint(listener_name)
    if endpoint is None and listener_name == UNIX:
        endpoint = broker.endpoint(CLIENT_LISTENER) or (
            broker.endpoints[0] if broker.endpoints else None
        )
    return endpoint


async def handle_api_versions(
    ctx: RequestContext, request: ApiVersionsRequest, _: memoryview
) -> Response:
    core = ctx.core
    served = core.served_apis
    return Response(
        ApiVersionsResponse(
            error_code=0,
            api_keys=[
                ApiVersionRange(int(spec.key), spec.min_version, spec.max_version)
                for spec in APIS.values()
                if spec.key in served
            ],
            broker_id=core.node_id,
            broker_epoch=core.epoch,
            cluster_id=core.cluster_id,
            software_version=__version__,
        )
    )


def _partition_metadata(ctx: RequestContext, name: str, index: int) -> PartitionMetadata:
    """One partition; an offline one (its log could not be opened) as Kafka shows a partition
    whose only replica is offline: no leader, KAFKA_STORAGE_ERROR, the replica listed in
    ``offline_replicas``, and here also the reason."""
    core = ctx.core
    try:
        part = core.replicas.partition(name, index)
    except PartitionOfflineError as exc:
        code, message = error_of(exc, f"metadata of {name}-{index}")
        return PartitionMetadata(
            error_code=code,
            partition=index,
            leader_id=-1,
            leader_epoch=-1,
            replicas=[core.node_id],
            isr=[],
            offline_replicas=[core.node_id],
            error_message=message,
        )
    return PartitionMetadata(
        error_code=0,
        partition=part.index,
        leader_id=core.node_id,
        leader_epoch=part.leader_epoch,
        replicas=part.replicas,
        isr=part.isr,
    )


def _topic_metadata(ctx: RequestContext, name: str, allow_create: bool) -> TopicMetadata:
    core = ctx.core
    try:
        # Internal topics are created by their coordinator, with its settings, never here.
        core.replicas.require_topic(name, allow_create=allow_create and name not in INTERNAL_TOPICS)
        info = core.replicas.describe(name)
        partitions = [
            _partition_metadata(ctx, name, index) for index in range(info.partition_count)
        ]
    except TYPED_ERRORS as exc:
        code, message = error_of(exc, f"metadata of topic {name!r}")
        return TopicMetadata(code, name, [], error_message=message)
    return TopicMetadata(
        0, name, partitions, is_internal=name in INTERNAL_TOPICS, topic_id=info.topic_id
    )


def _metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    core = ctx.core
    names = core.logs.list_topics() if request.topics is None else request.topics
    listener = ctx.listener
    host = str(listener) if listener.unix_path is not None else listener.host
    broker = BrokerMetadata(
        core.node_id, host, listener.port, core.config.broker.broker_rack or None
    )
    return MetadataResponse(
        brokers=[broker],
        cluster_id=core.cluster_id,
        controller_id=core.controller_id,
        topics=[_topic_metadata(ctx, n, request.allow_auto_topic_creation) for n in names],
    )


# -- a cluster broker: answers from the metadata cache ----------------------------------------


def _cluster_brokers(ctx: RequestContext, snapshot: MetadataSnapshot) -> list[BrokerMetadata]:
    """Every live broker with its client endpoint. Before the first UpdateMetadata the cache
    knows no broker; this one, which is answering, is live, so it lists itself."""
    core = ctx.core
    out = []
    for broker in sorted(snapshot.brokers.values(), key=lambda b: b.broker_id):
        endpoint = client_endpoint(broker, ctx.listener_name)
        if endpoint is not None:
            out.append(BrokerMetadata(broker.broker_id, endpoint.host, endpoint.port, broker.rack))
    if not any(b.node_id == core.node_id for b in out) and core.membership is not None:
        endpoints = core.membership.endpoints
        own = next((e for e in endpoints if e.listener_name == ctx.listener_name), endpoints[0])
        out.append(
            BrokerMetadata(core.node_id, own.host, own.port, core.config.broker.broker_rack or None)
        )
        out.sort(key=lambda b: b.node_id)
    return out


def _cached_partition(snapshot: MetadataSnapshot, part: CachedPartition) -> PartitionMetadata:
    """One partition as Kafka's ZooKeeper-era brokers describe it (replicas and ISR as the
    controller gave them, live or not)."""
    live_leader = part.leader != NO_LEADER and snapshot.is_live(part.leader)
    error: int = ErrorCode.NONE
    message = None
    if not live_leader:
        error = ErrorCode.LEADER_NOT_AVAILABLE
        message = (
            f"{part.topic}-{part.partition} has no leader"
            if part.leader == NO_LEADER
            else f"{part.topic}-{part.partition}: its leader, broker {part.leader}, is not live"
        ) + "; the controller elects one when a replica in the ISR is live: retry"
    return PartitionMetadata(
        error_code=int(error),
        partition=part.partition,
        leader_id=part.leader if live_leader else NO_LEADER,
        leader_epoch=part.leader_epoch,
        replicas=list(part.replicas),
        isr=list(part.isr),
        offline_replicas=list(part.offline_replicas),
        error_message=message,
    )


def _cached_topic(snapshot: MetadataSnapshot, name: str) -> TopicMetadata:
    parts = snapshot.partitions(name)
    return TopicMetadata(
        0,
        name,
        [_cached_partition(snapshot, parts[i]) for i in sorted(parts)],
        is_internal=name in INTERNAL_TOPICS,
    )


async def _auto_create(ctx: RequestContext, name: str) -> TopicMetadata:
    """Create ``name`` through the cluster (as Kafka's auto-creation does) and answer that
    it has no leader yet; a topic created by someone else meanwhile is answered the same."""
    core = ctx.core
    admin = core.cluster_admin
    assert admin is not None, "only called when the cluster's topic administration exists"
    try:
        await core.run_blocking(
            admin.create_topic, name, core.config.broker.num_partitions, None, {}
        )
        log.info("created topic %r on a client's Metadata (auto.create.topics.enable)", name)
    except TopicExistsError:
        pass
    except TYPED_ERRORS as exc:
        code, message = error_of(exc, f"auto-creation of topic {name!r}")
        return TopicMetadata(code, name, [], error_message=message)
    return TopicMetadata(
        int(ErrorCode.LEADER_NOT_AVAILABLE),
        name,
        [],
        error_message=(
            f"topic {name!r} was just created (auto.create.topics.enable) and its partitions "
            "have no leader yet; retry"
        ),
    )


def _unknown_topic(name: str, why: str) -> TopicMetadata:
    return TopicMetadata(
        int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        name,
        [],
        error_message=f"topic {name!r} does not exist in this cluster ({why})",
    )


async def _cluster_metadata(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    core = ctx.core
    # One snapshot for the whole answer: never half of one UpdateMetadata and half of the next.
    snapshot = core.metadata_cache.snapshot
    names = snapshot.topic_names() if request.topics is None else request.topics
    may_create = (
        request.allow_auto_topic_creation
        and core.config.broker.auto_create_topics_enable
        and core.cluster_admin is not None
    )
    answers: list[TopicMetadata | None] = []
    creating: dict[int, asyncio.Future[TopicMetadata]] = {}
    for name in names:
        if snapshot.has_topic(name):
            answers.append(_cached_topic(snapshot, name))
        elif name in INTERNAL_TOPICS:
            answers.append(_unknown_topic(name, "its coordinator creates it when first used"))
        elif may_create:
            creating[len(answers)] = asyncio.ensure_future(_auto_create(ctx, name))
            answers.append(None)
        else:
            answers.append(
                _unknown_topic(name, "create it with Admin.create_topic, or allow auto-creation")
            )
    for index, task in creating.items():
        answers[index] = await task
    controller = snapshot.controller_id if snapshot.controller_id >= 0 else core.controller_id
    return MetadataResponse(
        brokers=_cluster_brokers(ctx, snapshot),
        cluster_id=core.cluster_id,
        controller_id=controller,
        topics=[a for a in answers if a is not None],
    )


async def handle_metadata(ctx: RequestContext, request: MetadataRequest, _: memoryview) -> Response:
    core = ctx.core
    if core.membership is not None:
        return Response(await _cluster_metadata(ctx, request))
    needs_create = request.allow_auto_topic_creation and any(
        not core.logs.topic_exists(n) for n in request.topics or ()
    )
    if needs_create:
        # Creating topics fsyncs: keep it off the event loop.
        return Response(await core.run_blocking(_metadata, ctx, request))
    return Response(_metadata(ctx, request))
