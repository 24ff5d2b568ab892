"""ControlledShutdown (7): a stopping broker asks the controller to move its leaderships.

Served by the broker that is the active controller: the request becomes an event of its
controller (:meth:`~spark_mq.broker.controller.controller.Controller.controlled_shutdown`,
rules in :mod:`spark_mq.broker.controller.controlled_shutdown`) and the answer is the
event's. Any other broker answers NOT_CONTROLLER (41); the stopping broker looks the
controller up again and retries. Only brokers may send it (the dispatch table's guard
refuses clients with CLUSTER_AUTHORIZATION_FAILED), and only for themselves: ``broker_id``
must be the id the connection authenticated as.
"""

from __future__ import annotations

import asyncio
from typing import Final

from spark_mq.broker.context import RequestContext, Response
from spark_mq.errors import (
    ClusterAuthorizationError,
    ControllerMovedError,
    RequestTimedOutError,
)
from spark_mq.protocol.controller import ControlledShutdownRequest

#: How long the handler waits for the controller's event (its queue may hold a Startup).
EVENT_TIMEOUT_S: Final = 30.0
#: What a client refused this API is told to do instead.
REFUSAL_HINT: Final = "A broker shuts down in a controlled way on SIGTERM; clients do not ask."


async def handle_controlled_shutdown(
    ctx: RequestContext, request: ControlledShutdownRequest, _: memoryview
) -> Response:
    core = ctx.core
    if ctx.session.broker_id != request.broker_id:
        raise ClusterAuthorizationError(
            f"ControlledShutdown for broker {request.broker_id} on a connection authenticated "
            f"as broker {ctx.session.broker_id}: a broker asks only for its own shutdown"
        )
    membership = core.membership
    controller = None if membership is None else membership.controller
    if controller is None or not controller.active:
        raise ControllerMovedError(
            f"broker {core.node_id} is not the controller (the controller is "
            f"{core.controller_id}); send ControlledShutdown to the controller"
        )
    future = controller.controlled_shutdown(request)
    try:
        response = await asyncio.wait_for(asyncio.wrap_future(future), EVENT_TIMEOUT_S)
    except TimeoutError:
        raise RequestTimedOutError(
            f"the controller did not process ControlledShutdown within {EVENT_TIMEOUT_S:.0f} "
            "s; ask again"
        ) from None
    return Response(response)
