"""RocketMQ-style transactional messages: a half message tied to a local transaction, with
check-back (docs/half_messages.md).

:class:`TransactionalMessageProducer` belongs to a *producer group*. ``send(...)`` stores a
half message on the broker (no consumer sees it), runs the listener's
``execute_local_transaction(message, arg)`` (typically a database transaction that records
``message.message_id`` with its own rows), then commits the message (the broker writes the
real record) or rolls it back, and returns the outcome. When the listener answers UNKNOWN,
raises, or the producer dies before it ends the message, the broker later asks a live
producer of the same group: a background thread keeps a CheckHalfMessages long poll open on
its own connection and answers each message with ``check_local_transaction(message)``
(which looks the message id up in the database).

    >>> import tempfile
    >>> class Listener:
    ...     def execute_local_transaction(self, message, arg):
    ...         return LocalTransactionState.COMMIT
    ...     def check_local_transaction(self, message):
    ...         return LocalTransactionState.COMMIT
    >>> with TransactionalMessageProducer(
    ...     tempfile.mkdtemp(), producer_group="orders", listener=Listener()
    ... ) as producer:
    ...     result = producer.send("payments", b"paid", key=b"order-1")
    >>> result.state, result.offset
    (<LocalTransactionState.COMMIT: 'COMMIT'>, 0)

Threads: ``send`` from one thread at a time; the listener's ``check_local_transaction`` is
called on the producer's check thread, so it must be safe to call alongside ``send``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import random
import threading
import uuid
from collections.abc import Mapping, Sequence
from os import PathLike
from types import TracebackType
from typing import Any, Final, Protocol

from spark_mq.client.cluster import Cluster
from spark_mq.client.config import AdminConfig, client_config_props
from spark_mq.client.half_coordinator import HalfCoordinator
from spark_mq.client.partitioner import murmur2
from spark_mq.errors import NetworkError, RequestTimedOutError, SparkMQError, UsageError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.half_messages import (
    CheckHalfMessagesRequest,
    EndHalfMessageRequest,
    HalfAction,
    HalfHeader,
    HalfMessage,
    ListHalfMessagesRequest,
    SendHalfMessageRequest,
)

logger = logging.getLogger("spark_mq.client.half_messages")

#: How long one CheckHalfMessages poll waits; also how long close() may wait for the thread.
CHECK_POLL_MS: Final = 1_000
#: Pause before the check thread reconnects after its connection failed.
CHECK_RETRY_BACKOFF_S: Final = 0.2


class LocalTransactionState(enum.Enum):
    """What a listener says of its local transaction (RocketMQ's names)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


@dataclasses.dataclass(frozen=True)
class TransactionalMessage:
    """A half message as the listener sees it. ``message_id`` is the id to store with the
    local transaction, so that ``check_local_transaction`` can find it."""

    message_id: str
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: How many times the broker has asked about it (0 in ``execute_local_transaction``).
    check_count: int = 0


@dataclasses.dataclass(frozen=True)
class TransactionSendResult:
    """What ``send`` did: the listener's answer, and the real record's offset once committed
    (-1 when rolled back, left UNKNOWN for the check-back, or when the end request failed
    and the check-back will end it)."""

    message_id: str
    state: LocalTransactionState
    topic: str
    partition: int
    offset: int = -1


class TransactionListener(Protocol):
    """The producer's local transaction."""

    def execute_local_transaction(
        self, message: TransactionalMessage, arg: Any
    ) -> LocalTransactionState:
        """Run the local transaction for ``message``; COMMIT, ROLLBACK or UNKNOWN (an
        exception counts as UNKNOWN: the broker will ask later)."""
        ...

    def check_local_transaction(self, message: TransactionalMessage) -> LocalTransactionState:
        """What became of the local transaction of ``message`` (by its ``message_id``)."""
        ...


def _error_code(response: Any) -> int:
    return int(response.error_code)


def _raise_for(code: int, message: str | None, *, topic: str | None = None) -> None:
    if code != ErrorCode.NONE:
        raise error_from_code(code, message, topic=topic)


class TransactionalMessageProducer:
    """A producer of half messages for ``producer_group`` (see the module docstring).

    ``path`` or ``bootstrap_servers`` as for every client; ``config`` and keyword settings
    are the admin client's (``request.timeout.ms``, ``client.id``, ...).
    ``check_immunity_ms`` overrides the broker's ``transaction.half.timeout.ms`` for this
    producer's messages.
    """

    def __init__(
        self,
        path: str | PathLike[str] | None = None,
        *,
        producer_group: str,
        listener: TransactionListener,
        bootstrap_servers: str | Sequence[str] | None = None,
        check_immunity_ms: int | None = None,
        config: Mapping[str, object] | None = None,
        **configs: object,
    ) -> None:
        if not producer_group:
            raise UsageError("a TransactionalMessageProducer needs a producer_group")
        for method in ("execute_local_transaction", "check_local_transaction"):
            if not callable(getattr(listener, method, None)):
                raise UsageError(
                    f"the listener {listener!r} has no {method}(): give an object with "
                    "execute_local_transaction(message, arg) and check_local_transaction(message)"
                )
        self.config = AdminConfig.from_properties(
            client_config_props(path, bootstrap_servers, config, configs)
        )
        self.config.check_endpoint()
        self.producer_group = producer_group
        self.listener = listener
        self._immunity_ms = -1 if check_immunity_ms is None else check_immunity_ms
        # Writing is how a log starts, as for Producer.
        self._cluster = Cluster(self.config, create_log=True)
        #: The broker serving this group's half messages (on a cluster, the leader of the
        #: group's __half_messages partition), followed when it moves.
        self._coordinator = HalfCoordinator(self._cluster, producer_group)
        self._closed = threading.Event()
        self._checker = threading.Thread(
            target=self._answer_checks, name=f"half-checks-{producer_group}", daemon=True
        )
        self._checker.start()

    # -- sending ------------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        partition: int | None = None,
        arg: Any = None,
    ) -> TransactionSendResult:
        """Send a half message, run the local transaction, end the message; the outcome."""
        if self._closed.is_set():
            raise UsageError("the TransactionalMessageProducer is closed")
        if partition is None:
            count = self._cluster.wait_for_topic(
                topic, timeout_ms=self.config.default_api_timeout_ms, allow_auto_create=True
            )
            partition = self._partition(key, count)
        message = TransactionalMessage(
            uuid.uuid4().hex, topic, partition, key, value, tuple(headers)
        )
        response = self._coordinator.call(
            SendHalfMessageRequest(
                self.producer_group,
                message.message_id,
                topic,
                partition,
                key,
                value,
                [HalfHeader(k, v) for k, v in message.headers],
                self._immunity_ms,
            ),
            _error_code,
            timeout_ms=self.config.default_api_timeout_ms,
        )
        _raise_for(response.error_code, response.error_message, topic=topic)
        try:
            state = self.listener.execute_local_transaction(message, arg)
        except Exception:
            logger.exception(
                "execute_local_transaction failed for half message %s; the broker will ask "
                "check_local_transaction later",
                message.message_id,
            )
            state = LocalTransactionState.UNKNOWN
        state = LocalTransactionState(state)
        offset = -1
        if state is not LocalTransactionState.UNKNOWN:
            try:
                offset = self._end(message.message_id, state, from_check=False)
            except (NetworkError, RequestTimedOutError) as exc:
                logger.warning(
                    "could not end half message %s (%s); the broker's check-back will",
                    message.message_id,
                    exc,
                )
        return TransactionSendResult(message.message_id, state, topic, partition, offset)

    @staticmethod
    def _partition(key: bytes | None, count: int) -> int:
        # Kafka's default partitioner for keyed records (murmur2, positive); a record
        # without a key goes anywhere.
        if key is None:
            return random.randrange(count)
        return (murmur2(key) & 0x7FFFFFFF) % count

    def _end(self, message_id: str, state: LocalTransactionState, *, from_check: bool) -> int:
        action = HalfAction.COMMIT if state is LocalTransactionState.COMMIT else HalfAction.ROLLBACK
        response = self._coordinator.call(
            EndHalfMessageRequest(self.producer_group, message_id, action, from_check),
            _error_code,
            timeout_ms=self.config.default_api_timeout_ms,
        )
        _raise_for(response.error_code, response.error_message)
        return int(response.offset)

    # -- check-back ---------------------------------------------------------------------------

    def _answer_checks(self) -> None:
        """Keep a CheckHalfMessages long poll open on the group's coordinator (so that its
        check-back reaches this producer over this connection), following it when it
        moves: an error, NOT_COORDINATOR included, closes the connection and the next poll
        looks the coordinator up again."""
        conn = None
        request = CheckHalfMessagesRequest(self.producer_group, CHECK_POLL_MS)
        while not self._closed.is_set():
            try:
                if conn is None:
                    node = self._coordinator.node(self.config.request_timeout_ms)
                    conn = self._cluster.new_connection(node)
                    self._cluster.connect(conn)
                timeout_s = (CHECK_POLL_MS + self.config.request_timeout_ms) / 1000
                response = conn.request(request, timeout_s=timeout_s)
                _raise_for(response.error_code, response.error_message)
                for half in response.messages:
                    self._check(half)
            except SparkMQError as exc:
                if conn is not None:
                    self._coordinator.forget(conn.node_id)
                    self._cluster.connection_failed(conn)
                    conn = None
                if not exc.retriable and not isinstance(exc, NetworkError):
                    logger.warning("half-message check poll failed: %s", exc)
                self._closed.wait(CHECK_RETRY_BACKOFF_S)
            except Exception:
                # A bug (ours or the listener's): start over on a fresh connection, so that
                # a half-read response cannot poison the next poll.
                logger.exception("half-message check thread failed; it goes on")
                if conn is not None:
                    self._cluster.connection_failed(conn)
                    conn = None
                self._closed.wait(CHECK_RETRY_BACKOFF_S)
        if conn is not None:
            conn.close()

    def _check(self, half: HalfMessage) -> None:
        message = TransactionalMessage(
            half.message_id,
            half.topic,
            half.partition,
            half.key,
            half.value,
            tuple((h.key, h.value) for h in half.headers),
            half.check_count,
        )
        try:
            state = LocalTransactionState(self.listener.check_local_transaction(message))
        except Exception:
            logger.exception("check_local_transaction failed for %s: UNKNOWN", half.message_id)
            return
        if state is LocalTransactionState.UNKNOWN:
            return
        try:
            self._end(half.message_id, state, from_check=True)
        except SparkMQError as exc:
            # Another producer of the group may have ended it first, or the broker
            # discarded it; the broker keeps the first outcome either way.
            logger.warning("ending half message %s after a check: %s", half.message_id, exc)

    # -- listing and lifecycle ----------------------------------------------------------------

    def list_half_messages(self, *, discarded: bool = False) -> list[HalfMessage]:
        """This group's pending (or discarded) half messages, as the broker has them."""
        response = self._coordinator.call(
            ListHalfMessagesRequest(discarded, self.producer_group),
            _error_code,
            timeout_ms=self.config.default_api_timeout_ms,
        )
        _raise_for(response.error_code, response.error_message)
        return list(response.messages)

    def close(self) -> None:
        """Stop answering checks (another producer of the group takes them) and close."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._checker.join(timeout=(CHECK_POLL_MS + self.config.request_timeout_ms) / 1000)
        with contextlib.suppress(SparkMQError):
            self._cluster.close()

    def __enter__(self) -> TransactionalMessageProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class HalfMessageListing:
    """What ``list_half_messages`` found: the messages, and how many were discarded in all."""

    messages: tuple[HalfMessage, ...]
    discarded_count: int


def list_half_messages(
    path: str | PathLike[str] | None = None,
    *,
    bootstrap_servers: str | Sequence[str] | None = None,
    discarded: bool = False,
    producer_group: str | None = None,
    config: Mapping[str, object] | None = None,
    **configs: object,
) -> HalfMessageListing:
    """The pending half messages (or, with ``discarded``, those moved to the discard topic)
    of ``producer_group``, or of every group: what ``spark-mq half-messages list`` shows.

    On a cluster a group's messages are served by the leader of its partition of
    ``__half_messages``: one group is asked of its coordinator; every group, of every live
    broker (each lists the partitions it leads), and the discarded count is the largest
    any broker reports (the leader of ``__half_discarded`` knows it)."""
    cfg = AdminConfig.from_properties(client_config_props(path, bootstrap_servers, config, configs))
    cfg.check_endpoint()
    cluster = Cluster(cfg)
    request = ListHalfMessagesRequest(discarded, producer_group)
    try:
        if producer_group is not None:
            coordinator = HalfCoordinator(cluster, producer_group)
            response = coordinator.call(request, _error_code, timeout_ms=cfg.default_api_timeout_ms)
            responses = [response]
        elif cfg.path:
            responses = [cluster.request(request)]
        else:
            brokers = cluster.refresh([]).brokers
            responses = [cluster.request(request, node_id=b.node_id) for b in brokers]
    finally:
        cluster.close()
    messages: list[HalfMessage] = []
    for response in responses:
        _raise_for(response.error_code, response.error_message)
        messages += response.messages
    if len(responses) > 1:
        messages.sort(key=lambda m: (m.created_ms, m.message_id))
    return HalfMessageListing(tuple(messages), max(r.discarded_count for r in responses))


__all__ = [
    "HalfMessageListing",
    "LocalTransactionState",
    "TransactionListener",
    "TransactionSendResult",
    "TransactionalMessage",
    "TransactionalMessageProducer",
    "list_half_messages",
]
