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

from typing import Final

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.controller_events import active_controller, event_answer
from spark_mq.errors import ClusterAuthorizationError
from spark_mq.protocol.controller import ControlledShutdownRequest

#: What a client refused this API is told to do instead.
REFUSAL_HINT: Final = "A broker shuts down in a controlled way on SIGTERM; clients do not ask."


async def handle_controlled_shutdown(
    ctx: RequestContext, request: ControlledShutdownRequest, _: memoryview
) -> Response:
    if ctx.session.broker_id != request.broker_id:
        raise ClusterAuthorizationError(
            f"ControlledShutdown for broker {request.broker_id} on a connection authenticated "
            f"as broker {ctx.session.broker_id}: a broker asks only for its own shutdown"
        )
    controller = active_controller(ctx, "ControlledShutdown")
    answer = await event_answer(
        controller.controlled_shutdown(request), "ControlledShutdown", then="ask again"
    )
    return Response(answer)
