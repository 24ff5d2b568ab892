"""What a request handler gets and returns.

A handler is ``async def handle(ctx, request, records) -> Response | None``: ``request`` is
the decoded body (the API's request type), ``records`` the frame's records section (a view
of the frame; copy what must outlive the call), and the result the response body plus the
record bytes that follow it. ``None`` means no response at all (``acks=0``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from spark_mq.principal import ANONYMOUS, KafkaPrincipal
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.framing import RequestHeader
from spark_mq.storage.file_records import FileRange

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore
    from spark_mq.broker.sasl.authenticator import SaslServerSession


@dataclasses.dataclass(slots=True)
class Response:
    """A response body and, after it, each partition's records in body order: file ranges
    (sent from the segment files with sendfile) or bytes. The connection closes the ranges
    once sent; whoever drops a Response unsent calls :meth:`close`."""

    body: msgspec.Struct
    records: list[FileRange | bytes] = dataclasses.field(default_factory=list)
    #: Close the connection after this response.
    close_connection: bool = False
    #: Send nothing (with ``close_connection``: how an acks=0 produce reports a failure).
    silent: bool = False
    #: Called with the throttle time the request earned from its client's quotas (0: none)
    #: once it is known, before anything is written (a consumer's fetch answers with no
    #: records when throttled, as Kafka's: :mod:`spark_mq.broker.handlers.fetch`).
    before_send: Callable[[int], None] | None = None

    @property
    def records_size(self) -> int:
        return sum(r.size if isinstance(r, FileRange) else len(r) for r in self.records)

    def close(self) -> None:
        for item in self.records:
            if isinstance(item, FileRange):
                item.close()
        self.records = []


@dataclasses.dataclass(slots=True)
class ConnectionSession:
    """What a connection has proven about its peer, for every request after it: the broker
    id it authenticated as with AuthenticateBroker (None: a client), and the principal it
    authenticated as (:data:`~spark_mq.principal.ANONYMOUS` until it does). ``sasl`` is
    the SASL exchange of a connection on a SASL listener (None on the others): until it is
    complete the connection may send only the APIs that authenticate."""

    broker_id: int | None = None
    principal: KafkaPrincipal = ANONYMOUS
    sasl: SaslServerSession | None = None

    @property
    def awaiting_sasl(self) -> bool:
        """Whether this connection must still authenticate with SASL."""
        return self.sasl is not None and not self.sasl.complete

    #: The peer's address as ACLs name hosts (its IP; ``unix`` for a Unix-socket peer).
    host: str = ""


@dataclasses.dataclass(slots=True)
class RequestTiming:
    """Seconds a handler spent waiting on others (an acks=all produce waiting for its
    followers, a fetch waiting for data): the ``remote`` phase of the request metrics; and
    the client quota throttle the request earned."""

    remote_s: float = 0.0
    #: Milliseconds the client is throttled for exceeding a client quota: the connection
    #: reads nothing more from it for that long after answering (KIP-219).
    throttle_ms: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asked, through which listener, of which broker."""

    core: BrokerCore
    header: RequestHeader
    #: The advertised address of the listener the request came through.
    listener: BrokerAddress
    peer: str
    #: Whether the request came from another broker of the cluster, which may call the
    #: inter-broker APIs (``protocol.api.INTER_BROKER_APIS``): its connection authenticated
    #: with the cluster's inter-broker secret (AuthenticateBroker).
    inter_broker: bool = False
    #: The connection's session (AuthenticateBroker records the broker there).
    session: ConnectionSession = dataclasses.field(default_factory=ConnectionSession)
    #: Time the handler spent waiting on others (the request metrics' remote phase).
    timing: RequestTiming = dataclasses.field(default_factory=RequestTiming)
    #: The name of the listener the request came through (Metadata answers with every
    #: broker's endpoint of this listener, as Kafka's does).
    listener_name: str = "PLAINTEXT"


Handler = Callable[[RequestContext, Any, memoryview], Awaitable[Response | None]]
