"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455.

Served by the broker that is the active controller: each request becomes an event of its
controller (:mod:`spark_mq.broker.controller.reassignment`) and the answer is the event's.
Any other cluster broker answers NOT_CONTROLLER (41) for the whole request; the admin client
then looks the controller up again and retries within ``default.api.timeout.ms``. A
single-node broker has one replica of each partition and nowhere to move it: it lists no
reassignment and refuses to start one with INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Final, TypeVar

from spark_mq.broker.context import RequestContext, Response
from spark_mq.errors import ControllerMovedError, InvalidRequestError, RequestTimedOutError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.reassignment import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

if TYPE_CHECKING:
    # Only for types: a single-node broker never loads the controller (nor kazoo).
    from spark_mq.broker.controller.controller import Controller

#: How long a handler waits for the controller's event (its queue may hold a Startup).
EVENT_TIMEOUT_S: Final = 30.0

_T = TypeVar("_T")


def _active_controller(ctx: RequestContext, api: str) -> Controller:
    core = ctx.core
    membership = core.membership
    controller = None if membership is None else membership.controller
    if membership is None:
        raise InvalidRequestError(
            f"{api}: a single-node broker holds the only replica of each partition, so there "
            "is nowhere to move one; partition reassignment needs a cluster"
        )
    if controller is None or not controller.active:
        raise ControllerMovedError(
            f"broker {core.node_id} is not the controller (the controller is "
            f"{core.controller_id}); send {api} to the controller"
        )
    return controller


async def _answer(future: concurrent.futures.Future[_T], api: str) -> _T:
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), EVENT_TIMEOUT_S)
    except TimeoutError:
        raise RequestTimedOutError(
            f"the controller did not process {api} within {EVENT_TIMEOUT_S:.0f} s; list the "
            "reassignments to see whether it was started"
        ) from None


async def handle_alter_partition_reassignments(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest, _: memoryview
) -> Response:
    api = "AlterPartitionReassignments"
    controller = _active_controller(ctx, api)
    answer = await _answer(controller.alter_partition_reassignments(request), api)
    return Response(answer)


async def handle_list_partition_reassignments(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest, _: memoryview
) -> Response:
    api = "ListPartitionReassignments"
    if ctx.core.membership is None:
        return Response(ListPartitionReassignmentsResponse(ErrorCode.NONE, []))
    controller = _active_controller(ctx, api)
    answer = await _answer(controller.list_partition_reassignments(request), api)
    return Response(answer)
