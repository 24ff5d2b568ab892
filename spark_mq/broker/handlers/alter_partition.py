"""AlterPartition (56): a leader proposes a new ISR to the controller (KIP-497).

Served by the broker that is the active controller: the request becomes an event of its
controller (:meth:`~spark_mq.broker.controller.controller.Controller.alter_partition`, rules
in :mod:`spark_mq.broker.controller.alter_partition`) and the answer is the event's. Any
other broker answers NOT_CONTROLLER (41) in every partition, and the leader asks again at
its next check, having looked up the controller anew. Only brokers may send it (the dispatch
table's guard refuses clients with CLUSTER_AUTHORIZATION_FAILED), and a broker may speak only
for itself: ``broker_id`` must be the id its connection authenticated as.
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
from spark_mq.protocol.controller import AlterPartitionRequest

#: How long the handler waits for the controller's event (its queue may hold a Startup).
EVENT_TIMEOUT_S: Final = 30.0
#: What a client refused this API is told to do instead.
REFUSAL_HINT: Final = "The ISR is the partition leaders' and the controller's to change."


async def handle_alter_partition(
    ctx: RequestContext, request: AlterPartitionRequest, _: memoryview
) -> Response:
    core = ctx.core
    if ctx.session.broker_id != request.broker_id:
        raise ClusterAuthorizationError(
            f"AlterPartition for broker {request.broker_id} on a connection authenticated as "
            f"broker {ctx.session.broker_id}: a leader proposes only its own ISR changes"
        )
    membership = core.membership
    controller = None if membership is None else membership.controller
    if controller is None or not controller.active:
        raise ControllerMovedError(
            f"broker {core.node_id} is not the controller (the controller is "
            f"{core.controller_id}); send AlterPartition to the controller"
        )
    future = controller.alter_partition(request)
    try:
        response = await asyncio.wait_for(asyncio.wrap_future(future), EVENT_TIMEOUT_S)
    except TimeoutError:
        raise RequestTimedOutError(
            f"the controller did not process AlterPartition within {EVENT_TIMEOUT_S:.0f} s; "
            "nothing may have been changed: propose again"
        ) from None
    return Response(response)
