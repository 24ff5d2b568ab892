"""Where a producer group's half messages are served, and requests that follow it there.

On a cluster the half messages of a producer group live in the group's partition of
``__half_messages``, and only that partition's leader serves them (the broker's
``half/placement.py``). A producer finds it with FindCoordinator key type 2
(``COORDINATOR_HALF_MESSAGES``), sends its SendHalfMessage, EndHalfMessage and
ListHalfMessages there, and keeps its CheckHalfMessages long poll there, so that the
broker's check-back reaches it over its own connection. When the leadership moves (the
broker died, or the controller moved it), the old broker answers NOT_COORDINATOR (or the
connection fails); :class:`HalfCoordinator` forgets the node, finds the new one and sends
again. Every half-message request is idempotent (a message id is sent or ended once), so a
request retried after a failure whose outcome is unknown changes nothing twice.

On one node FindCoordinator names that broker, so the same code serves both.

Threads: :class:`HalfCoordinator` is used by the producer's caller thread and its check
thread at once; the known node is guarded by a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import msgspec

from spark_mq.client.cluster import Cluster
from spark_mq.client.group.coordinator_lookup import lookup_coordinator
from spark_mq.client.retry import Again, Retry, sent
from spark_mq.errors import RequestTimedOutError, SparkMQError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.groups import COORDINATOR_HALF_MESSAGES


class HalfCoordinator:
    """The broker serving ``producer_group``'s half messages, looked up and followed."""

    def __init__(self, cluster: Cluster, producer_group: str) -> None:
        self._cluster = cluster
        self.producer_group = producer_group
        self._lock = threading.Lock()
        self._node: int | None = None
        self._nodes_known = False

    def _retry(self, timeout_ms: int) -> Retry:
        config = self._cluster.config
        backoff_s = max(config.retry_backoff_ms, 1) / 1000
        return Retry.within_ms(
            timeout_ms,
            backoff_s=backoff_s,
            max_backoff_s=max(config.retry_backoff_max_ms / 1000, backoff_s),
            clock=self._cluster.clock,
            sleep=self._cluster.sleep,
        )

    def node(self, timeout_ms: int) -> int:
        """The node id of the group's coordinator (looked up when not known)."""
        with self._lock:
            if self._node is not None:
                return self._node
        if not self._nodes_known and not self._cluster.config.path:
            # Routing by node id needs every broker's address (bootstrap servers).
            self._cluster.refresh([])
            self._nodes_known = True
        group = self.producer_group
        found = lookup_coordinator(
            self._cluster,
            group,
            key_type=COORDINATOR_HALF_MESSAGES,
            retry=self._retry(timeout_ms),
            timeout_error=lambda error: RequestTimedOutError(
                f"no half-message coordinator found for producer group {group!r} within "
                f"{timeout_ms} ms (last error: {error}); are the brokers up, and can they "
                "create __half_messages (half.messages.topic.replication.factor)?"
            ),
        )
        with self._lock:
            self._node = int(found.node_id)
            return self._node

    def forget(self, node: int | None = None) -> None:
        """The coordinator moved (or ``node`` failed): look it up again next time."""
        with self._lock:
            if node is None or self._node == node:
                self._node = None

    def call(
        self, request: msgspec.Struct, error_of: Callable[[Any], int], *, timeout_ms: int
    ) -> Any:
        """Send ``request`` to the group's coordinator until it answers with something
        other than a retriable error (the coordinator is followed when it moves), within
        ``timeout_ms``; the response."""

        retry = self._retry(timeout_ms)

        def attempt() -> Any:
            node = self.node(retry.remaining_ms())
            response = sent(lambda: self._cluster.request(request, node_id=node))
            if isinstance(response, Again):
                self.forget(node)
                return response
            code = error_of(response)
            if code == ErrorCode.NONE:
                return response
            error = error_from_code(code, getattr(response, "error_message", None))
            if not error.retriable:
                return response
            self.forget(node)
            return Again(error)

        name = type(request).__name__

        def timeout_error(error: SparkMQError) -> SparkMQError:
            return RequestTimedOutError(
                f"{name} for producer group {self.producer_group!r} did not succeed within "
                f"{timeout_ms} ms (last error: {error}); the half-message coordinator may be "
                "moving: retry"
            )

        return retry.until(attempt, timeout_error, what=name)
