"""AuthenticateBroker (1009): a connection proves it is a broker of the cluster.

The sender shows the cluster's inter-broker secret (``/spark_mq/inter_broker_secret`` in
ZooKeeper, read by every broker when it joins). When it matches, the connection's session
records the broker id and every later request on it may use the inter-broker APIs
(``protocol.api.INTER_BROKER_APIS``). A wrong secret, or any attempt on a broker that is not
in a cluster, is answered with SASL_AUTHENTICATION_FAILED and the connection is closed, as
Kafka closes a connection whose authentication failed; the refusal is logged with the peer
(repeats counted). The comparison takes the same time whatever the secret shown.
"""

from __future__ import annotations

import hmac
import logging

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import REPEATED
from spark_mq.protocol.controller import AuthenticateBrokerRequest, AuthenticateBrokerResponse
from spark_mq.protocol.error_codes import ErrorCode


def _refuse(ctx: RequestContext, request: AuthenticateBrokerRequest, reason: str) -> Response:
    REPEATED.log(
        ("broker authentication failed", reason),
        logging.WARNING,
        "refused AuthenticateBroker from %s (claims broker %d): %s",
        ctx.peer,
        request.broker_id,
        reason,
    )
    message = (
        f"authentication as broker {request.broker_id} failed: {reason}; the connection is "
        "closed. Only brokers of this cluster (they read the secret from its ZooKeeper) may "
        "authenticate"
    )
    return Response(
        AuthenticateBrokerResponse(int(ErrorCode.SASL_AUTHENTICATION_FAILED), message),
        close_connection=True,
    )


async def handle_authenticate_broker(
    ctx: RequestContext, request: AuthenticateBrokerRequest, _: memoryview
) -> Response:
    membership = ctx.core.membership
    secret = None if membership is None else membership.inter_broker_secret
    if secret is None:
        return _refuse(ctx, request, "this broker is not in a cluster")
    if not hmac.compare_digest(request.secret.encode(), secret.encode()):
        return _refuse(ctx, request, "wrong inter-broker secret")
    ctx.session.broker_id = request.broker_id
    return Response(AuthenticateBrokerResponse(0))
