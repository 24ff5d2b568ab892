"""The controller's connections to the brokers (Kafka's ControllerChannelManager and
RequestSendThread).

One sender thread per live broker, each with its own queue and one
:class:`~spark_mq.client.connection.BrokerConnection` to the broker's registered endpoint,
so a slow or dead broker never holds up the requests to the others. A connection first
authenticates as the controller's broker (AuthenticateBroker with the cluster's
inter-broker secret) and then sends the queued requests one at a time, in order, waiting
for each answer.

A request whose connection fails (refused, reset, timed out, or an authentication the
broker refused) is sent again on a new connection after a backoff (100 ms doubling to 1 s),
until it is answered or the broker is removed (it left the cluster, or this broker stopped
being controller): Kafka's RequestSendThread does the same. A request the broker *answered*
is done, whatever the answer: the answer, or the error the broker gave for the whole frame
(UNSUPPORTED_VERSION from a broker that does not serve the API yet), goes to ``on_response``,
and the controller decides what it means (it logs errors; STALE_CONTROLLER_EPOCH makes it
resign).

Threads: :meth:`ControllerChannelManager.send`, :meth:`add_broker`, :meth:`remove_broker` and
:meth:`shutdown` are called from the controller's event thread (shutdown also from the
ZooKeeper event thread, and it never blocks); ``on_response`` runs on a sender thread and
must only hand the answer over.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections.abc import Callable
from typing import Final

import msgspec

from spark_mq.broker.inter_broker import PLAINTEXT_TRANSPORT, InterBrokerTransport
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.errors import (
    AuthenticationError,
    BrokerAuthenticationError,
    NetworkError,
    SparkMQError,
    SslAuthenticationError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.rate_limited_log import RateLimitedLog

log = logging.getLogger(__name__)

#: First and largest wait before a request is sent again on a new connection.
RECONNECT_BACKOFF_MS = 100
RECONNECT_BACKOFF_MAX_MS = 1_000
#: How long a broker has to answer one controller request (Kafka's request.timeout.ms).
REQUEST_TIMEOUT_MS = 30_000


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerResponse:
    """What became of one request: the broker's answer, or the error it gave for the whole
    frame (then ``response`` is None)."""

    broker_id: int
    request: msgspec.Struct
    response: msgspec.Struct | None
    error: SparkMQError | None = None

    @property
    def api(self) -> str:
        return type(self.request).__name__.removesuffix("Request")


#: ``on_response(answer)``, called on the sender thread.
ResponseCallback = Callable[[BrokerResponse], None]


@dataclasses.dataclass(frozen=True, slots=True)
class ChannelConfig:
    """Who the controller is to the brokers, and how patiently it sends."""

    controller_id: int
    #: The cluster's inter-broker secret (``/spark_mq/inter_broker_secret``).
    secret: str
    #: The controller's own broker epoch for AuthenticateBroker (-1: not registered).
    own_broker_epoch: Callable[[], int | None] = lambda: None
    request_timeout_ms: int = REQUEST_TIMEOUT_MS
    reconnect_backoff_ms: int = RECONNECT_BACKOFF_MS
    reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS
    #: How the controller connects to brokers (the inter-broker listener, its TLS).
    inter_broker: InterBrokerTransport = PLAINTEXT_TRANSPORT


_FAILURES = RateLimitedLog(log)


#: What makes a request's connection fail, so that it is sent again on a new one: the
#: network, or a refused login (the inter-broker secret, SASL on a SASL inter-broker listener,
#: a TLS handshake), which a broker that has just learnt the users or certificates may accept
#: on the next try.
_CONNECTION_FAILURES: Final = (
    NetworkError,
    BrokerAuthenticationError,
    AuthenticationError,
    SslAuthenticationError,
)


class RequestSendThread(threading.Thread):
    """Sends one broker's requests in order (see the module docstring)."""

    def __init__(
        self,
        config: ChannelConfig,
        broker_id: int,
        address: BrokerAddress,
        on_response: ResponseCallback,
    ) -> None:
        super().__init__(
            name=f"controller-{config.controller_id}-to-broker-{broker_id}-send-thread",
            daemon=True,
        )
        self._config = config
        self.broker_id = broker_id
        self.address = address
        self._on_response = on_response
        self.queue: queue.Queue[msgspec.Struct | None] = queue.Queue()
        self._stopped = threading.Event()
        self._conn: BrokerConnection | None = None
        #: Requests sent and answered (any answer), for tests and status.
        self.answered = 0

    def stop(self) -> None:
        """Stop after the request in hand (pending requests are dropped); never blocks."""
        self._stopped.set()
        self.queue.put(None)

    def run(self) -> None:
        try:
            while not self._stopped.is_set():
                request = self.queue.get()
                if request is None or self._stopped.is_set():
                    break
                self._send_until_answered(request)
        finally:
            if self._conn is not None:
                self._conn.close()

    def _connection(self) -> BrokerConnection:
        if self._conn is None or not self._conn.connected:
            timeout_ms = self._config.request_timeout_ms
            conn = self._config.inter_broker.connection(
                self.address,
                node_id=self.broker_id,
                client_id=f"controller-{self._config.controller_id}",
                connect_timeout_ms=timeout_ms,
                request_timeout_ms=timeout_ms,
            )
            epoch = self._config.own_broker_epoch()
            authenticate_as_broker(
                conn,
                broker_id=self._config.controller_id,
                broker_epoch=-1 if epoch is None else epoch,
                secret=self._config.secret,
                timeout_s=timeout_ms / 1000,
            )
            self._conn = conn
        return self._conn

    def _send_until_answered(self, request: msgspec.Struct) -> None:
        backoff_ms = self._config.reconnect_backoff_ms
        while not self._stopped.is_set():
            try:
                conn = self._connection()
                body = conn.request(request, timeout_s=self._config.request_timeout_ms / 1000)
            except _CONNECTION_FAILURES as exc:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                _FAILURES.log(
                    ("controller send failed", self.broker_id),
                    logging.WARNING,
                    "controller %d could not send %s to broker %d at %s (will retry in %d ms): %s",
                    self._config.controller_id,
                    type(request).__name__,
                    self.broker_id,
                    self.address,
                    backoff_ms,
                    exc,
                )
                self._stopped.wait(backoff_ms / 1000)
                backoff_ms = min(2 * backoff_ms, self._config.reconnect_backoff_max_ms)
                continue
            except SparkMQError as exc:
                # The broker answered the frame with an error (it does not serve the API).
                self.answered += 1
                self._on_response(BrokerResponse(self.broker_id, request, None, exc))
                return
            self.answered += 1
            self._on_response(BrokerResponse(self.broker_id, request, body))
            return


class ControllerChannelManager:
    """One :class:`RequestSendThread` per live broker (see the module docstring)."""

    def __init__(self, config: ChannelConfig, on_response: ResponseCallback) -> None:
        self._config = config
        self._on_response = on_response
        self._lock = threading.Lock()
        self._threads: dict[int, RequestSendThread] = {}
        self._closed = False
        self._stopping: list[RequestSendThread] = []

    def add_broker(self, broker_id: int, address: BrokerAddress) -> None:
        """Start a sender to ``broker_id`` (a new one if its address changed)."""
        with self._lock:
            if self._closed:
                return
            current = self._threads.get(broker_id)
            if current is not None and current.address == address:
                return
            if current is not None:
                current.stop()
            thread = RequestSendThread(self._config, broker_id, address, self._on_response)
            self._threads[broker_id] = thread
            thread.start()

    def remove_broker(self, broker_id: int) -> None:
        """Stop the sender to ``broker_id``; its queued requests are dropped."""
        with self._lock:
            thread = self._threads.pop(broker_id, None)
        if thread is not None:
            thread.stop()

    @property
    def brokers(self) -> list[int]:
        with self._lock:
            return sorted(self._threads)

    def send(self, broker_id: int, request: msgspec.Struct) -> bool:
        """Queue ``request`` for ``broker_id``; False if there is no sender to it (the
        broker is not live), as Kafka drops a request to a broker it does not know."""
        with self._lock:
            thread = self._threads.get(broker_id)
        if thread is None:
            log.debug("dropped %s to broker %d: not live", type(request).__name__, broker_id)
            return False
        thread.queue.put(request)
        return True

    def queue_size(self, broker_id: int) -> int:
        with self._lock:
            thread = self._threads.get(broker_id)
        return 0 if thread is None else thread.queue.qsize()

    def shutdown(self) -> None:
        """Stop every sender at once, dropping what they have queued; never blocks."""
        with self._lock:
            self._closed = True
            threads, self._threads = list(self._threads.values()), {}
        for thread in threads:
            thread.stop()
        self._stopping = threads

    def join(self, timeout_s: float) -> None:
        """Wait for the senders stopped by :meth:`shutdown` to end."""
        for thread in self._stopping:
            thread.join(timeout_s)
