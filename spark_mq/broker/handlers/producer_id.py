"""InitProducerId (22): ids and epochs for idempotent and transactional producers.

Without ``transactional_id``: ``producer_id`` and ``producer_epoch`` both -1 ask for a new id
(epoch 0). An existing pair asks for the epoch to be bumped, which a producer does to reset
its sequence numbers after an error while keeping its id; an epoch that cannot grow any more
gets a new id. A pair this directory never issued is refused with UNKNOWN_PRODUCER_ID.

With ``transactional_id``: the transaction coordinator answers (a new id on the id's first
use, otherwise its epoch bumped, fencing older incarnations and aborting what they left
open; see ``TransactionCoordinator.init_producer_id`` and docs/transactions.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.producer_ids import MAX_PRODUCER_EPOCH
from spark_mq.errors import InvalidRequestError, UnknownProducerIdError
from spark_mq.protocol.producer_id import InitProducerIdRequest, InitProducerIdResponse

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore


def _init(core: BrokerCore, request: InitProducerIdRequest) -> InitProducerIdResponse:
    pid, epoch = request.producer_id, request.producer_epoch
    if pid == -1 and epoch == -1:
        return InitProducerIdResponse(0, core.producer_ids.next_id(), 0)
    if pid < 0 or epoch < 0:
        raise InvalidRequestError(
            f"producer_id {pid} with producer_epoch {epoch}: give both (to bump the epoch) or "
            "neither (-1, -1, for a new producer id)"
        )
    if not core.producer_ids.issued(pid):
        raise UnknownProducerIdError(
            f"producer id {pid} was never issued by this broker's log directory; ask for a new "
            "one with producer_id=-1, producer_epoch=-1"
        )
    if epoch >= MAX_PRODUCER_EPOCH:
        return InitProducerIdResponse(0, core.producer_ids.next_id(), 0)
    return InitProducerIdResponse(0, pid, epoch + 1)


async def _init_transactional(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    txns = ctx.core.transactions
    tid = request.transactional_id or ""
    # In a cluster: NOT_COORDINATOR unless this broker coordinates the id, and answered once
    # the new epoch is on every in-sync replica (as the transaction handlers).
    coordinator = await txns.coordinator_for(tid)
    try:
        pid, epoch = coordinator.init_producer_id(
            tid,
            request.transaction_timeout_ms,
            request.producer_id,
            request.producer_epoch,
            txns.now_ms(),
        )
    finally:
        await txns.settle([tid])
    return InitProducerIdResponse(0, pid, epoch)


async def handle_init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest, _: memoryview
) -> Response:
    if request.transactional_id is not None:
        return Response(await _init_transactional(ctx, request))
    # A new block of ids is reserved with an fsync: off the event loop.
    return Response(await ctx.core.run_blocking(_init, ctx.core, request))
