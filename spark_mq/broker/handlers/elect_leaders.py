"""ElectLeaders (43): an operator asks for preferred (or unclean) leader elections.

Served by the broker that is the active controller: the request becomes an event of its
controller (:meth:`~spark_mq.broker.controller.controller.Controller.elect_leaders`, rules in
:mod:`spark_mq.broker.controller.preferred_election`) and the answer is the event's. Any
other broker answers NOT_CONTROLLER (41) at the top and in every partition: the client (as
Kafka's admin client in a ZooKeeper cluster) sends it to the controller of its metadata and
asks again after a refresh.
"""

from __future__ import annotations

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.controller_events import active_controller, event_answer
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.elect_leaders import ElectLeadersRequest


async def handle_elect_leaders(
    ctx: RequestContext, request: ElectLeadersRequest, _: memoryview
) -> Response:
    if not ctx.core.config.broker.in_cluster:
        raise InvalidRequestError(
            "ElectLeaders needs a cluster (zookeeper.connect): a single-node broker leads "
            "every partition it has"
        )
    controller = active_controller(ctx, "ElectLeaders")
    answer = await event_answer(
        controller.elect_leaders(request),
        "ElectLeaders",
        then="the election may still run: describe the partitions, then elect again if needed",
        timeout_s=max(request.timeout_ms, 1) / 1000,
    )
    return Response(answer)
