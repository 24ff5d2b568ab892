"""Metadata (key 3) and ApiVersions (key 18): what this broker is and what it hosts."""

from __future__ import annotations

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.internal_topics import INTERNAL_TOPICS
from spark_mq.errors import PartitionOfflineError
from spark_mq.protocol.api import APIS
from spark_mq.protocol.api_versions import (
    ApiVersionRange,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from spark_mq.protocol.metadata import (
    BrokerMetadata,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
)
from spark_mq.version import __version__


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
        count = core.replicas.describe(name).partition_count
        partitions = [_partition_metadata(ctx, name, index) for index in range(count)]
    except TYPED_ERRORS as exc:
        code, message = error_of(exc, f"metadata of topic {name!r}")
        return TopicMetadata(code, name, [], error_message=message)
    return TopicMetadata(0, name, partitions, is_internal=name in INTERNAL_TOPICS)


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


async def handle_metadata(ctx: RequestContext, request: MetadataRequest, _: memoryview) -> Response:
    core = ctx.core
    needs_create = request.allow_auto_topic_creation and any(
        not core.logs.topic_exists(n) for n in request.topics or ()
    )
    if needs_create:
        # Creating topics fsyncs: keep it off the event loop.
        return Response(await core.run_blocking(_metadata, ctx, request))
    return Response(_metadata(ctx, request))
