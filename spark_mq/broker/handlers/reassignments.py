"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455.

Served by the broker that is the active controller: each request becomes an event of its
controller (:mod:`spark_mq.broker.controller.reassignment`) and the answer is the event's.
Any other broker, and a single-node broker (it has no replicas to move), answers
NOT_CONTROLLER (41) for the whole request; the admin client then looks the controller up
again and retries within ``default.api.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Final, TypeVar

from spark_mq.broker.context import RequestContext, Response
from spark_mq.errors import ControllerMovedError, RequestTimedOutError
from spark_mq.protocol.reassignment import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
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
    if controller is None or not controller.active:
        where = "a single-node broker" if membership is None else f"broker {core.node_id}"
        raise ControllerMovedError(
            f"{where} is not the controller (the controller is {core.controller_id}); send "
            f"{api} to the controller of a cluster"
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
    controller = _active_controller(ctx, api)
    answer = await _answer(controller.list_partition_reassignments(request), api)
    return Response(answer)
