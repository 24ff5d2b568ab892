"""The quotas of one request: who asks (principal, user, client id) and what to record.

A request of another broker of the cluster (an AuthenticateBroker connection, follower
fetches among them) is never measured: client quotas are for clients. The throttle time
goes into the response's ``throttle_time_ms`` and into the request's timing, where the
connection reads it to mute itself (KIP-219: the broker answers at once, then reads nothing
more from that connection until the throttle time has passed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .manager import QuotaType

if TYPE_CHECKING:
    from spark_mq.broker.context import RequestContext, Response


def _who(ctx: RequestContext) -> tuple[str, str, str] | None:
    """(principal, user, client id) of a client's request; None for a broker's, or when
    no quota is configured at all."""
    if not ctx.core.quotas.enabled or ctx.inter_broker:
        return None
    principal = ctx.session.principal
    return str(principal), principal.name, ctx.header.client_id or ""


def measured(ctx: RequestContext) -> bool:
    """Whether the request's client is measured against quotas at all (a client's request
    while any quota is configured)."""
    return _who(ctx) is not None


def record(ctx: RequestContext, kind: QuotaType, value: float) -> int:
    """Record ``value`` against the client's ``kind`` quota; its throttle time (ms), also
    noted in the request's timing for the connection."""
    who = _who(ctx)
    if who is None:
        return 0
    throttle = ctx.core.quotas.record(kind, *who, value)
    ctx.timing.throttle_ms = max(ctx.timing.throttle_ms, throttle)
    return throttle


def unrecord(ctx: RequestContext, kind: QuotaType, value: float) -> None:
    who = _who(ctx)
    if who is not None:
        ctx.core.quotas.unrecord(kind, *who, value)


def fetch_size_limit(ctx: RequestContext) -> int:
    """Most bytes a consumer's fetch may return under its quota (-1: no limit)."""
    who = _who(ctx)
    if who is None:
        return -1
    return ctx.core.quotas.max_value_in_window(QuotaType.FETCH, *who)


def throttle_of(ctx: RequestContext, response: Response | None, handling_s: float) -> int:
    """After a client's request was handled: record its time (``handling_s`` less what it
    waited on others) against ``request_percentage``; the throttle the request earned from
    any quota, also written into the response's ``throttle_time_ms`` (KIP-219)."""
    local_s = max(0.0, handling_s - ctx.timing.remote_s)
    # Percent-seconds: a rate of them per second is a percentage of one handler's time.
    record(ctx, QuotaType.REQUEST, local_s * 100)
    throttle = ctx.timing.throttle_ms
    if response is not None and response.before_send is not None:
        response.before_send(throttle)
    if throttle and response is not None and hasattr(response.body, "throttle_time_ms"):
        response.body.throttle_time_ms = max(throttle, response.body.throttle_time_ms)
    return throttle
