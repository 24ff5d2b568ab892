"""OpenTokenListener (1015): open the embedded broker's TCP listener for Spark executors.

Only the Unix socket's peers may ask (the directory owner's processes: the socket is mode
0600, and ``SO_PEERCRED`` names them): a TCP client, authenticated or not, is refused with
CLUSTER_AUTHORIZATION_FAILED, as is anyone on a cluster broker, whose listeners are its
configuration's. The listener and its token: :meth:`~spark_mq.broker.server.BrokerServer.
open_token_listener` and :mod:`spark_mq.broker.embedded_token`.
"""

from __future__ import annotations

import logging

from spark_mq.broker.connection_quotas import UNIX_PEER
from spark_mq.broker.context import RequestContext, Response
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.token_listener import (
    OpenTokenListenerRequest,
    OpenTokenListenerResponse,
    is_wildcard,
)

logger = logging.getLogger(__name__)


async def handle_open_token_listener(
    ctx: RequestContext, request: OpenTokenListenerRequest, _: memoryview
) -> Response:
    opener = ctx.core.open_token_listener
    if opener is None:
        return _refused(
            request,
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "a cluster broker opens no token listener: its listeners are its configuration's "
            "(give Spark bootstrap.servers and the cluster's security settings instead)",
        )
    if ctx.session.host != UNIX_PEER:
        return _refused(
            request,
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"OpenTokenListener is served on the broker's Unix socket only (the directory "
            f"owner's processes); {ctx.peer} came over TCP",
        )
    host = request.host.strip()
    if not host:
        return _refused(request, ErrorCode.INVALID_REQUEST, "give the host to listen on")
    if is_wildcard(host):
        # The address is also the one executors dial; a wildcard reaches no broker from
        # another host (Kafka refuses it in advertised.listeners for the same reason).
        return _refused(
            request,
            ErrorCode.INVALID_REQUEST,
            f"{host!r} is a wildcard address, which executors cannot dial: give an address "
            "of this host that they reach (spark.driver.host)",
        )
    try:
        address = await opener(host)
    except OSError as exc:
        return _refused(
            request,
            ErrorCode.INVALID_REQUEST,
            f"cannot listen on {host!r}: {exc.strerror or exc}; give an address of this host "
            "that the executors reach (spark.driver.host)",
        )
    return Response(OpenTokenListenerResponse(0, None, address.host, address.port))


def _refused(request: OpenTokenListenerRequest, code: ErrorCode, why: str) -> Response:
    logger.warning("OpenTokenListener for host %r refused: %s", request.host, why)
    return Response(OpenTokenListenerResponse(int(code), why, request.host, 0))
