"""Requests to a group coordinator on one connection, pipelined and answered in order.

A :class:`CoordinatorChannel` owns one :class:`~spark_mq.client.connection.BrokerConnection`
to the coordinator. :meth:`~CoordinatorChannel.send` writes a request and remembers a handler
``handler(body, error)``; :meth:`~CoordinatorChannel.poll` reads the responses that arrive and
calls each handler, in request order, in the calling thread. Handlers may send further
requests (a JoinGroup answer sends SyncGroup). :meth:`~CoordinatorChannel.call` is the
synchronous form.

Every request has its own timeout (a JoinGroup may legitimately wait for the whole rebalance
timeout, an OffsetCommit should not): when the oldest unanswered request passes its deadline
the connection is closed and every pending handler gets a
:class:`~spark_mq.errors.RequestTimedOutError`; a failed connection gives them the
:class:`~spark_mq.errors.NetworkError`. Either way ``on_failure`` is told once, so the owner can
look the coordinator up again. The broker handles one request per connection at a time, which
is why the consumer keeps join/sync and offset requests on two channels: a commit never
waits behind a JoinGroup that the coordinator holds until the group has rejoined.

Threads: one thread at a time (the consumer's); no lock.
"""

from __future__ import annotations

import collections
import logging
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from spark_mq.client.cluster import Cluster
from spark_mq.client.connection import BrokerConnection, Response
from spark_mq.client.group.coordinator_lookup import CoordinatorInfo, connect_to_coordinator
from spark_mq.errors import NetworkError, RequestTimedOutError, SparkMQError

log = logging.getLogger(__name__)

Handler = Callable[[Any, SparkMQError | None], None]


@dataclass(slots=True, eq=False)
class _Pending:
    name: str
    handler: Handler
    deadline: float


class CoordinatorChannel:
    """One connection to the coordinator with in-order handlers (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        *,
        on_failure: Callable[[SparkMQError], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cluster = cluster
        self.name = name
        self._on_failure = on_failure
        self._clock = clock
        self._conn: BrokerConnection | None = None
        self._target: CoordinatorInfo | None = None
        self._pending: list[_Pending] = []
        self._ready: collections.deque[Response] = collections.deque()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def send(
        self,
        request: msgspec.Struct,
        handler: Handler,
        *,
        coordinator: CoordinatorInfo,
        timeout_ms: int,
    ) -> None:
        """Write ``request`` to ``coordinator`` and remember ``handler``. A connection that
        cannot be opened or written fails the handler (and those before it) at once."""
        if self._target != coordinator:
            self.close(NetworkError(f"the coordinator moved to node {coordinator.node_id}"))
            self._target = coordinator
        pending = _Pending(type(request).__name__, handler, self._clock() + timeout_ms / 1000)
        try:
            if self._conn is None:
                self._conn = self._cluster.new_connection(coordinator.node_id)
            connect_to_coordinator(self._cluster, self._conn, coordinator)
            self._pending.append(pending)
            self._conn.send(request, context=pending)
        except SparkMQError as exc:
            if pending not in self._pending:
                self._pending.append(pending)
            self._fail(exc)

    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a response, then run the handlers of every response
        that has arrived; returns whether any handler ran. Returns at once when nothing is
        in flight; ``timeout_s`` 0 only takes what is already there."""
        handled = False
        deadline = self._clock() + max(timeout_s, 0.0)
        while self._pending and self._conn is not None:
            now = self._clock()
            oldest = self._pending[0]
            if not self._ready and now >= oldest.deadline:
                self._fail(
                    RequestTimedOutError(
                        f"{oldest.name} to the group coordinator got no answer in time; "
                        "the connection was closed and the request will be retried"
                    )
                )
                return True
            wait_s = 0.0 if handled else min(deadline, oldest.deadline) - now
            try:
                response = self._next_response(wait_s)
            except NetworkError as exc:
                self._fail(exc)
                return True
            if response is None:
                if handled or self._clock() >= deadline:
                    break
                continue
            entry: _Pending = response.context
            self._pending.remove(entry)
            entry.handler(response.body, response.error)
            handled = True
        return handled

    def _next_response(self, timeout_s: float) -> Response | None:
        if self._ready:
            return self._ready.popleft()
        conn = self._conn
        assert conn is not None
        if not conn.connected:
            raise NetworkError("the connection to the group coordinator is closed")
        try:
            readable, _, _ = select.select([conn], [], [], max(timeout_s, 0.0))
        except (OSError, ValueError) as exc:
            raise NetworkError(f"waiting for the group coordinator failed: {exc}") from exc
        if readable:
            self._ready.extend(conn.read_available())
        return self._ready.popleft() if self._ready else None

    def call(
        self, request: msgspec.Struct, *, coordinator: CoordinatorInfo, timeout_ms: int
    ) -> Any:
        """Send ``request`` and wait for its response body (earlier requests' handlers run
        first); raises what the handler would have received."""
        result: list[Any] = []

        def handler(body: Any, error: SparkMQError | None) -> None:
            result.append((body, error))

        self.send(request, handler, coordinator=coordinator, timeout_ms=timeout_ms)
        while not result:
            assert self._pending, "a request without an answer is no longer pending"
            self.poll(max(self._pending[-1].deadline - self._clock(), 0.0))
        body, error = result[0]
        if error is not None:
            raise error
        return body

    def _fail(self, error: SparkMQError, *, notify: bool = True) -> None:
        pending, self._pending = self._pending, []
        self._ready.clear()
        if self._conn is not None:
            self._conn.close()
        if notify and pending:
            log.info("%s channel to the group coordinator failed: %s", self.name, error)
        for entry in pending:
            entry.handler(None, error)
        if notify and pending:
            self._on_failure(error)

    def close(self, error: SparkMQError | None = None) -> None:
        """Close the connection; pending handlers get ``error`` (a NetworkError by default)."""
        self._fail(
            error or NetworkError("the channel to the group coordinator was closed"), notify=False
        )
        self._conn = None
        self._target = None
