"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455.

Served by the broker that is the active controller: each request becomes an event of its
controller (:mod:`spark_mq.broker.controller.reassignment`) and the answer is the event's.
Any other cluster broker answers NOT_CONTROLLER (41) for the whole request; the admin client
then looks the controller up again and retries within ``default.api.timeout.ms``. A
single-node broker has one replica of each partition and nowhere to move it: it lists no
reassignment and refuses to start one with INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.controller_events import active_controller, event_answer
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.reassignment import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

if TYPE_CHECKING:
    # Only for types: a single-node broker never loads the controller (nor kazoo).
    from spark_mq.broker.controller.controller import Controller

#: What to do when the controller did not answer in time.
_THEN = "list the reassignments to see whether it was started"


def _reassigning_controller(ctx: RequestContext, api: str) -> Controller:
    if ctx.core.membership is None:
        raise InvalidRequestError(
            f"{api}: a single-node broker holds the only replica of each partition, so there "
            "is nowhere to move one; partition reassignment needs a cluster"
        )
    return active_controller(ctx, api)


async def handle_alter_partition_reassignments(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest, _: memoryview
) -> Response:
    api = "AlterPartitionReassignments"
    controller = _reassigning_controller(ctx, api)
    answer = await event_answer(controller.alter_partition_reassignments(request), api, then=_THEN)
    return Response(answer)


async def handle_list_partition_reassignments(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest, _: memoryview
) -> Response:
    api = "ListPartitionReassignments"
    if ctx.core.membership is None:
        return Response(ListPartitionReassignmentsResponse(ErrorCode.NONE, []))
    controller = _reassigning_controller(ctx, api)
    answer = await event_answer(controller.list_partition_reassignments(request), api, then=_THEN)
    return Response(answer)
