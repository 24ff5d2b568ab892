"""What the handlers of requests only the active controller serves share (AlterPartition,
ControlledShutdown, ElectLeaders, the reassignment APIs): find this broker's controller or
answer NOT_CONTROLLER, and await the answer of the event the request became.

The request becomes an event on the controller's thread; the handler awaits its future on the
event loop, at most a timeout (the controller's queue may hold a Startup that reads all of
ZooKeeper), and answers REQUEST_TIMED_OUT with what the caller should do then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Final, TypeVar

from spark_mq.broker.context import RequestContext
from spark_mq.errors import ControllerMovedError, RequestTimedOutError

if TYPE_CHECKING:
    # Only for types: a single-node broker never loads the controller (nor kazoo).
    from spark_mq.broker.controller.controller import Controller

#: How long a handler waits for the controller's event unless the request says.
EVENT_TIMEOUT_S: Final = 30.0

T = TypeVar("T")


def active_controller(ctx: RequestContext, api: str) -> Controller:
    """This broker's controller if it is the active one; NOT_CONTROLLER (41) otherwise."""
    core = ctx.core
    membership = core.membership
    controller = None if membership is None else membership.controller
    if controller is None or not controller.active:
        raise ControllerMovedError(
            f"broker {core.node_id} is not the controller (the controller is "
            f"{core.controller_id}); send {api} to the controller"
        )
    return controller


async def event_answer(
    future: concurrent.futures.Future[T],
    api: str,
    *,
    then: str,
    timeout_s: float = EVENT_TIMEOUT_S,
) -> T:
    """The event's answer; REQUEST_TIMED_OUT after ``timeout_s``, saying ``then``."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError:
        raise RequestTimedOutError(
            f"the controller did not process {api} within {timeout_s:g} s; {then}"
        ) from None
