"""UpdateMetadata (6): the controller tells this broker what the cluster looks like.

Fenced first (:mod:`~spark_mq.broker.controller_fence`): a request of an older controller
epoch, or meant for an earlier life of this broker, is refused whole with
STALE_CONTROLLER_EPOCH / STALE_BROKER_EPOCH and the metadata cache is left as it was (the
dispatcher answers the typed error). An accepted request replaces the cache's snapshot in one
step (:class:`~spark_mq.broker.metadata_cache.MetadataCache`), so a Metadata answer never
mixes two updates. Only brokers of the cluster may send it: the dispatch table refuses clients
with CLUSTER_AUTHORIZATION_FAILED (:mod:`~spark_mq.broker.handlers.inter_broker`).
"""

from __future__ import annotations

import logging

from spark_mq.broker.context import RequestContext, Response
from spark_mq.protocol.controller import UpdateMetadataRequest, UpdateMetadataResponse

log = logging.getLogger(__name__)

#: What a client that sent UpdateMetadata is told to do instead.
CLIENT_HINT = "Clients learn the cluster's metadata with a Metadata request."


async def handle_update_metadata(
    ctx: RequestContext, request: UpdateMetadataRequest, _: memoryview
) -> Response:
    core = ctx.core
    core.controller_fence.check(
        request.controller_id, request.controller_epoch, request.broker_epoch, core.broker_epoch
    )
    deleted = core.metadata_cache.update(request)
    log.debug(
        "metadata from controller %d (epoch %d): %d live brokers, %d partition states%s",
        request.controller_id,
        request.controller_epoch,
        len(request.live_brokers),
        len(request.partition_states),
        f"; topics deleted: {', '.join(deleted)}" if deleted else "",
    )
    return Response(UpdateMetadataResponse(0))
