"""OpenTokenListener (1015, spark_mq's own): the driver of a Spark query asks the embedded
broker of its log directory to listen on TCP for the query's executors.

Sent over the broker's Unix socket only (the owner's processes: the socket is mode 0600 and
the broker checks the peer), by :func:`spark_mq.broker.local.open_token_listener`. The
broker opens, or finds already open, a ``SASL_PLAINTEXT`` listener on ``host`` (the address
executors reach the driver's host by) with an ephemeral port, on which only the directory's
token authenticates (SCRAM with ``tokenauth=true``, :mod:`spark_mq.broker.embedded_token`),
makes the token if the directory has none or it expired, renews it otherwise, and answers
with the address bound. The token
itself is not in the answer: the driver reads it from ``DIR/embedded-token.json``.

Errors: ``CLUSTER_AUTHORIZATION_FAILED`` (31) from any peer but the Unix socket's, or from a
broker that is not an embedded one (a cluster broker's listeners are its configuration's);
``INVALID_REQUEST`` (42) for a host that cannot be bound or is a wildcard address
(``0.0.0.0``, ``::``: executors dial the host they are given), with the reason.
"""

from __future__ import annotations

import ipaddress

import msgspec


class OpenTokenListenerRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The host (name or address) the listener binds and advertises."""

    host: str


class OpenTokenListenerResponse(msgspec.Struct, array_like=True):
    """The listener's host and bound port (0 on error)."""

    error_code: int
    error_message: str | None = None
    host: str = ""
    port: int = 0


def open_token_listener_error(
    request: OpenTokenListenerRequest, code: int, message: str
) -> OpenTokenListenerResponse:
    return OpenTokenListenerResponse(code, message, request.host, 0)


def is_wildcard(host: str) -> bool:
    """Whether ``host`` is the unspecified address (``0.0.0.0``, ``::``), which binds every
    interface but which no executor can dial."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False  # a host name
