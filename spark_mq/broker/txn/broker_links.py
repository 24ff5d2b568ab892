"""Authenticated connections from this broker to the other brokers of the cluster, for the
transaction coordinator's inter-broker requests (WriteTxnMarkers from the marker channel,
CheckPreparedTxns and DecideTxns from the two-phase participants) and the half-message
service's acks=all Produce of records to partitions other brokers lead.

One connection per destination, opened on first use at the destination's first
(inter-broker) endpoint, authenticated with the cluster's inter-broker secret
(AuthenticateBroker) as the replica fetchers are, and dropped when the destination's
address changes (a restart on another port) or a request on it fails, so that the next
request opens a fresh one. Requests block: callers run them on executor threads, and a lock
per destination keeps one request on a connection at a time.

Threads: any (the locks make it safe); never the event loop (every call blocks).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from spark_mq.broker.inter_broker import PLAINTEXT_TRANSPORT, InterBrokerTransport
from spark_mq.errors import NetworkError, SparkMQError
from spark_mq.protocol.address import BrokerAddress

if TYPE_CHECKING:
    from spark_mq.client.connection import BrokerConnection


@dataclasses.dataclass(frozen=True)
class BrokerCredentials:
    """What a link authenticates with: this broker's id, a way to read its current
    broker epoch (None while unregistered) and the cluster's inter-broker secret."""

    broker_id: int
    broker_epoch: Callable[[], int | None]
    secret: str
    #: How to reach the other brokers (the inter-broker listener and its TLS).
    inter_broker: InterBrokerTransport = PLAINTEXT_TRANSPORT


class BrokerLinks:
    """Connections to other brokers, by destination id (module docstring)."""

    def __init__(self, credentials: BrokerCredentials, *, client_id: str) -> None:
        self._credentials = credentials
        self._client_id = client_id
        self._guard = threading.Lock()
        self._locks: dict[int, threading.Lock] = {}
        self._connections: dict[int, tuple[BrokerAddress, BrokerConnection]] = {}

    def _lock(self, destination: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(destination, threading.Lock())

    def request(
        self,
        destination: int,
        address: BrokerAddress,
        request: msgspec.Struct,
        timeout_ms: int,
        *,
        records: Sequence[bytes] = (),
    ) -> Any:
        """Send ``request`` (followed by ``records``, a Produce's batches) to broker
        ``destination`` at ``address`` and return its answer; raises what the connection
        raises (SparkMQError, OSError), after dropping it."""
        with self._lock(destination):
            held = self._connections.get(destination)
            if held is not None and (held[0] != address or not held[1].connected):
                held[1].close()
                del self._connections[destination]
                held = None
            if held is None:
                held = self._connections[destination] = (
                    address,
                    self._open(destination, address, timeout_ms),
                )
            try:
                if not records:
                    return held[1].request(request, timeout_s=timeout_ms / 1000)
                held[1].send(request, records=records)
                response = held[1].receive(timeout_ms / 1000)
                if response is None:
                    raise NetworkError(
                        f"no answer from broker {destination} at {address} within "
                        f"{timeout_ms} ms to a {type(request).__name__}"
                    )
                return response.result()
            except (SparkMQError, OSError):
                held[1].close()
                self._connections.pop(destination, None)
                raise

    def _open(self, destination: int, address: BrokerAddress, timeout_ms: int) -> BrokerConnection:
        # Imported here: a single-node broker imports this module (its two-phase peers) but
        # never connects to another broker, and loads no client module.
        from spark_mq.client.broker_auth import authenticate_as_broker  # noqa: PLC0415

        creds = self._credentials
        epoch = creds.broker_epoch()
        if epoch is None:
            raise SparkMQError("this broker is not registered yet; the request waits")
        conn = creds.inter_broker.connection(
            address,
            node_id=destination,
            client_id=self._client_id,
            connect_timeout_ms=timeout_ms,
            request_timeout_ms=timeout_ms,
        )
        try:
            authenticate_as_broker(
                conn,
                broker_id=creds.broker_id,
                broker_epoch=epoch,
                secret=creds.secret,
                timeout_s=timeout_ms / 1000,
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._guard:
            held = list(self._connections.values())
            self._connections.clear()
        for _, conn in held:
            conn.close()
