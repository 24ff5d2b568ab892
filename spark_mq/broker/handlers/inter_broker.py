"""Refusing the inter-broker APIs to clients.

The APIs of :data:`~spark_mq.protocol.api.INTER_BROKER_APIS` are for the brokers of a cluster
(in Kafka they need the ClusterAction permission). A client that could send WriteTxnMarkers
could commit another producer's open transaction, making it visible to read_committed readers
even after that producer aborted. So a request for one of them that does not come from a
broker (``RequestContext.inter_broker``; today no request over the wire does) is answered
with CLUSTER_AUTHORIZATION_FAILED (31) in every result of its response, and nothing is done;
the refusal is logged at WARNING with the peer (repeats counted, not logged one by one).

:func:`guard` wraps the handler of each such API in the dispatch table. Every inter-broker
API the broker serves needs a :data:`Refusal`, which builds its response with that error in
each entry (Kafka's ``getErrorResponse``); one missing is a programming error caught when
the table is built, at import.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from spark_mq.broker.context import Handler, RequestContext, Response
from spark_mq.broker.handlers.errors import REPEATED
from spark_mq.protocol.api import INTER_BROKER_APIS, ApiKey
from spark_mq.protocol.error_codes import ErrorCode

#: ``refusal(request, error_code, error_message)``: the API's response with that error in
#: each of its entries.
Refusal = Callable[[Any, int, str], msgspec.Struct]


def refusal_message(api: ApiKey, peer: str, hint: str) -> str:
    return (
        f"{api.name} is an inter-broker API: only the brokers of the cluster may send it, and "
        f"this request came from a client ({peer}); nothing was changed. {hint}"
    )


def guard(
    handlers: Mapping[ApiKey, Handler], refusals: Mapping[ApiKey, tuple[Refusal, str]]
) -> dict[ApiKey, Handler]:
    """``handlers`` with each inter-broker API's handler refusing clients. ``refusals``
    gives, for each, the function that builds its error response and a hint for the client
    (what to do instead)."""
    out = dict(handlers)
    for api in sorted(INTER_BROKER_APIS & handlers.keys()):
        if api not in refusals:
            raise RuntimeError(
                f"{api.name} is an inter-broker API but has no refusal: add one, or a client "
                "could call it"
            )
        refusal, hint = refusals[api]
        out[api] = _guarded(api, handlers[api], refusal, hint)
    return out


def _guarded(api: ApiKey, handler: Handler, refusal: Refusal, hint: str) -> Handler:
    async def guarded(ctx: RequestContext, request: Any, records: memoryview) -> Response | None:
        if ctx.inter_broker:
            return await handler(ctx, request, records)
        REPEATED.log(
            ("inter-broker API from a client", api),
            logging.WARNING,
            "refused %s from client %s (client id %r): inter-broker API",
            api.name,
            ctx.peer,
            ctx.header.client_id,
        )
        message = refusal_message(api, ctx.peer, hint)
        return Response(refusal(request, int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), message))

    guarded.__name__ = getattr(handler, "__name__", "handler")
    guarded.__doc__ = handler.__doc__
    return guarded
