"""Finding a group's coordinator: FindCoordinator, retried while the broker is not ready.

Any broker answers FindCoordinator with the node that owns the group's partition of
``__consumer_offsets`` (its leader). COORDINATOR_NOT_AVAILABLE (the internal topic is being
created or loaded, or its partition has no leader) and connection failures are retried
with backoff until the deadline; anything else (INVALID_GROUP_ID, say) is raised at once.

Used by the consumer (one lookup per coordinator change) and by ``Admin`` (one per group
call). Threads: stateless; safe from any thread (the cluster's control connection is locked).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, NamedTuple

import msgspec

from spark_mq.client.cluster import Cluster
from spark_mq.client.connection import BrokerConnection
from spark_mq.client.retry import Again, Clock, Retry, Sleep, sent
from spark_mq.errors import RequestTimedOutError, SparkMQError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.groups import (
    COORDINATOR_GROUP,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)


class CoordinatorInfo(NamedTuple):
    """The coordinator of one group: its node id and where it listens."""

    node_id: int
    address: BrokerAddress


def _address(response: FindCoordinatorResponse) -> BrokerAddress:
    if response.host.startswith("unix:"):
        return BrokerAddress.parse(response.host)
    return BrokerAddress(response.host, response.port)


def find_coordinator(
    cluster: Cluster,
    group_id: str,
    *,
    timeout_ms: int,
    clock: Clock | None = None,
    sleep: Sleep | None = None,
) -> CoordinatorInfo:
    """The coordinator of ``group_id``; retriable errors are retried for ``timeout_ms``
    (on ``clock`` and ``sleep``, the cluster's unless given)."""
    backoff_s = max(cluster.config.retry_backoff_ms, 1) / 1000
    retry = Retry.within_ms(
        timeout_ms,
        backoff_s=backoff_s,
        max_backoff_s=max(cluster.config.retry_backoff_max_ms / 1000, backoff_s),
        clock=clock or cluster.clock,
        sleep=sleep or cluster.sleep,
    )

    return lookup_coordinator(
        cluster,
        group_id,
        key_type=COORDINATOR_GROUP,
        retry=retry,
        timeout_error=lambda error: RequestTimedOutError(
            f"no coordinator found for group {group_id!r} within {timeout_ms} ms (last "
            f"error: {error}); is the broker up, and can it create __consumer_offsets?"
        ),
    )


def lookup_coordinator(
    cluster: Cluster,
    key: str,
    *,
    key_type: int,
    retry: Retry,
    timeout_error: Callable[[SparkMQError], SparkMQError],
) -> CoordinatorInfo:
    """FindCoordinator for ``key`` (a group id, or with ``key_type`` COORDINATOR_TRANSACTION
    a transactional id) until a broker names it, retrying retriable errors on ``retry``."""

    def attempt() -> CoordinatorInfo | Again:
        # Each attempt gets the whole request timeout, even past the deadline: a caller with
        # no time left (poll(timeout_ms=0)) still makes one attempt.
        response: FindCoordinatorResponse | Again = sent(
            lambda: cluster.request(FindCoordinatorRequest(key, key_type=key_type))
        )
        if isinstance(response, Again):
            return response
        if response.error_code == ErrorCode.NONE:
            return CoordinatorInfo(response.node_id, _address(response))
        error = error_from_code(response.error_code, response.error_message)
        if not error.retriable:
            raise error
        return Again(error)

    return retry.until(attempt, timeout_error)


def call_coordinator(
    cluster: Cluster,
    group_id: str,
    request: msgspec.Struct,
    *,
    retry: Retry,
    error_of: Callable[[Any], int],
    retry_codes: Collection[int],
    timeout_error: Callable[[SparkMQError], SparkMQError],
) -> tuple[Any, int]:
    """Send ``request`` to the coordinator of ``group_id`` (looked up before every attempt)
    until its answer's code (``error_of(response)``) is not one of ``retry_codes``; returns
    (response, coordinator node id). Retried on ``retry``; ``timeout_error(last error)`` is
    raised when its deadline passes."""

    def attempt() -> tuple[Any, int] | Again:
        coordinator = find_coordinator(
            cluster,
            group_id,
            timeout_ms=retry.remaining_ms(),
            clock=retry.clock,
            sleep=retry.sleep,
        )
        response = sent(lambda: cluster.request(request, node_id=coordinator.node_id))
        if isinstance(response, Again):
            return response
        code = error_of(response)
        if code in retry_codes:
            return Again(error_from_code(code))
        return response, coordinator.node_id

    return retry.until(attempt, timeout_error)


def connect_to_coordinator(
    cluster: Cluster, conn: BrokerConnection, coordinator: CoordinatorInfo
) -> None:
    """Open ``conn`` to ``coordinator``. With ``path=DIR`` the cluster resolves the local
    broker (starting it again if it died); with bootstrap servers the address the
    FindCoordinator answer advertised is used."""
    if conn.connected:
        return
    if cluster.config.path:
        cluster.connect(conn)
    else:
        conn.address = coordinator.address
        conn.connect()
