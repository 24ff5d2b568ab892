"""A broker's side of AuthenticateBroker: make a connection to another broker a broker's
connection (see :mod:`spark_mq.protocol.controller`). Used by the controller's channel to
each broker and, with replication, by followers' fetchers."""

from __future__ import annotations

from spark_mq.client.connection import BrokerConnection
from spark_mq.errors import BrokerAuthenticationError
from spark_mq.protocol.controller import AuthenticateBrokerRequest, AuthenticateBrokerResponse


def authenticate_as_broker(
    conn: BrokerConnection,
    *,
    broker_id: int,
    broker_epoch: int,
    secret: str,
    timeout_s: float | None = None,
) -> None:
    """Connect if needed and authenticate ``conn`` as broker ``broker_id``; raise
    :class:`BrokerAuthenticationError` if the other broker refuses (the connection is closed
    then), or the connection's NetworkError if it fails."""
    conn.connect()
    response: AuthenticateBrokerResponse = conn.request(
        AuthenticateBrokerRequest(broker_id, broker_epoch, secret), timeout_s=timeout_s
    )
    if response.error_code != 0:
        conn.close()
        raise BrokerAuthenticationError(
            response.error_message
            or f"broker {conn.address} refused broker {broker_id}'s authentication"
        )
