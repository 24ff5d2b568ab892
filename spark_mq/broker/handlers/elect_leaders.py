"""ElectLeaders (43): an operator asks for preferred (or unclean) leader elections.

Served by the broker that is the active controller: the request becomes an event of its
controller (:meth:`~spark_mq.broker.controller.controller.Controller.elect_leaders`, rules in
:mod:`spark_mq.broker.controller.preferred_election`) and the answer is the event's. Any
other broker answers NOT_CONTROLLER (41) at the top and in every partition: the client (as
Kafka's admin client in a ZooKeeper cluster) sends it to the controller of its metadata and
asks again after a refresh.
"""

from __future__ import annotations

import asyncio

from spark_mq.broker.context import RequestContext, Response
from spark_mq.errors import ControllerMovedError, InvalidRequestError, RequestTimedOutError
from spark_mq.protocol.elect_leaders import ElectLeadersRequest


async def handle_elect_leaders(
    ctx: RequestContext, request: ElectLeadersRequest, _: memoryview
) -> Response:
    core = ctx.core
    if not core.config.broker.in_cluster:
        raise InvalidRequestError(
            "ElectLeaders needs a cluster (zookeeper.connect): a single-node broker leads "
            "every partition it has"
        )
    membership = core.membership
    controller = None if membership is None else membership.controller
    if controller is None or not controller.active:
        raise ControllerMovedError(
            f"broker {core.node_id} is not the controller (the controller is "
            f"{core.controller_id}); send ElectLeaders to the controller"
        )
    timeout_s = max(request.timeout_ms, 1) / 1000
    future = controller.elect_leaders(request)
    try:
        response = await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError:
        raise RequestTimedOutError(
            f"the controller did not run the election within timeout_ms={request.timeout_ms}; "
            "it may still run: describe the partitions, then elect again if needed"
        ) from None
    return Response(response)
