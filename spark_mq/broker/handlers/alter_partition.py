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

from typing import Final

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.controller_events import active_controller, event_answer
from spark_mq.errors import ClusterAuthorizationError
from spark_mq.protocol.controller import AlterPartitionRequest

#: What a client refused this API is told to do instead.
REFUSAL_HINT: Final = "The ISR is the partition leaders' and the controller's to change."


async def handle_alter_partition(
    ctx: RequestContext, request: AlterPartitionRequest, _: memoryview
) -> Response:
    if ctx.session.broker_id != request.broker_id:
        raise ClusterAuthorizationError(
            f"AlterPartition for broker {request.broker_id} on a connection authenticated as "
            f"broker {ctx.session.broker_id}: a leader proposes only its own ISR changes"
        )
    controller = active_controller(ctx, "AlterPartition")
    answer = await event_answer(
        controller.alter_partition(request),
        "AlterPartition",
        then="nothing may have been changed: propose again",
    )
    return Response(answer)
