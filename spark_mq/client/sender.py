"""The producer's sender thread: drains ready batches, sends them, completes their futures.

One loop, one thread per producer:

1. with idempotence, get a producer id (InitProducerId) before anything is sent, and a new
   epoch after a sequenced batch failed for good (its sequence left a hole);
2. fail batches that waited longer than ``delivery.timeout.ms``;
3. :meth:`~spark_mq.client.accumulator.RecordAccumulator.drain` ready batches and send one
   Produce request per broker (the partition's leader); an idempotent producer sends at most
   one batch per partition per request, numbers batches with per-partition sequences when
   they are first sent, and keeps a partition to one request in flight until its first batch
   of the epoch is acknowledged (a broker that knows nothing of the producer accepts any
   first sequence, so a second batch must not overtake a first that is being retried);
4. wait on the sockets with requests in flight (and a wake-up socket the accumulator pokes
   when a batch becomes ready) until a response arrives or the next batch is due, and handle
   every response: success completes the batch's shared result and runs its callbacks and
   interceptors; a retriable error re-queues it in sequence order after ``retry.backoff.ms``
   (doubling up to ``retry.backoff.max.ms``) while ``retries`` and ``delivery.timeout.ms``
   allow; anything else fails it.

A lost connection (the broker was killed, restarted or went idle) re-queues every batch that
was in flight on it; they are sent again, with the same sequence numbers, on a new connection
(for ``path=DIR`` through ``ensure_broker``, which starts a new broker if none runs). The
broker recognises a batch it already appended as a duplicate and answers with the original
offset, so an idempotent producer never writes a record twice and never reorders one.

A transactional producer (``txn`` given) gets its producer id from ``init_transactions()``
instead of step 1, marks every batch transactional, and registers each partition with the
transaction coordinator (AddPartitionsToTxn, one request for all new partitions, one attempt
per loop) before its first batch to it: a partition not yet registered is never drained.
While the transaction is being aborted, or cannot commit (AbortableError), or the producer
is fenced (FatalError), batches not yet sent are failed instead of sent.

Threads: only this thread touches the data connections and the sequence state; the user
threads meet it in the accumulator (locked) and in the futures. :meth:`Sender.set_producer`
is called by a user thread only while nothing is queued or in flight.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from spark_mq.client.accumulator import ProducerBatch, RecordAccumulator
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ProducerConfig
from spark_mq.client.connection import BrokerConnection, Response
from spark_mq.client.errors import DeliveryTimeoutError
from spark_mq.client.futures import run_callback
from spark_mq.client.interceptors import ProducerInterceptors
from spark_mq.client.metrics import ProducerMetrics
from spark_mq.client.records import RecordMetadata
from spark_mq.client.transactions import fenced_error
from spark_mq.client.txn_manager import TransactionManager
from spark_mq.errors import (
    AuthenticationError,
    ClusterAuthorizationError,
    InvalidProducerEpochError,
    NetworkError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RecordTooLargeError,
    SparkMQError,
    SslAuthenticationError,
    TransactionalIdAuthorizationError,
    UnknownProducerIdError,
    UsageError,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    answers_by_entry,
)
from spark_mq.protocol.producer_id import InitProducerIdRequest

log = logging.getLogger(__name__)

TP = tuple[str, int]
_NO_LIMIT = 1 << 30
#: Errors that mean the partition's leader moved: refresh metadata before the retry.
_STALE_METADATA = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)


def request_entries(batches: list[ProducerBatch]) -> list[ProduceTopic]:
    """The topic entries of the Produce request that carries ``batches`` (grouped by topic),
    one partition entry per batch, in their order: how the request is built and how its
    response is matched back to the batches."""
    topics: list[ProduceTopic] = []
    for batch in batches:
        if not topics or topics[-1].name != batch.topic:
            topics.append(ProduceTopic(batch.topic, []))
        topics[-1].partitions.append(ProducePartition(batch.partition, batch.wire_size))
    return topics


#: The errors by which a broker refuses who the producer is (SASL, TLS) or what it may be (an
#: InitProducerId refused by the ACLs: no IdempotentWrite, or no Write on the transactional
#: id). They stop the sender, as Kafka's producer treats them as fatal: the pending records
#: fail with the error and the producer raises it from then on.
REFUSALS: tuple[type[SparkMQError], ...] = (
    AuthenticationError,
    SslAuthenticationError,
    ClusterAuthorizationError,
    TransactionalIdAuthorizationError,
)


class Sender(threading.Thread):
    """The background thread of one producer (see the module docstring)."""

    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        cluster: Cluster,
        interceptors: ProducerInterceptors,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_fatal: Callable[[BaseException], None] | None = None,
        txn: TransactionManager | None = None,
        metrics: ProducerMetrics | None = None,
    ) -> None:
        super().__init__(name=f"spark-mq-sender-{config.client_id or id(self)}", daemon=True)
        self._config = config
        self._acc = accumulator
        self._cluster = cluster
        self._interceptors = interceptors
        self._clock = clock
        #: What Producer.metrics() reports (this thread records, the caller's reads).
        self.metrics = metrics if metrics is not None else ProducerMetrics(clock)
        self._idempotent = config.enable_idempotence
        self._acks = config.acks
        self._max_in_flight = config.max_in_flight_requests_per_connection
        self._delivery_timeout_s = config.delivery_timeout_ms / 1000
        self._conns: dict[int, BrokerConnection] = {}
        self._reconnect_at: dict[int, float] = {}
        self._registered: dict[BrokerConnection, int] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._fine_timer = True  # select() for timed waits, while descriptors allow it
        self._sleeping = False
        # Idempotence: producer id and epoch, next sequence and in-flight batches per partition.
        self.producer_id = -1
        self.producer_epoch = -1
        self._need_new_epoch = False
        self._pid_retry_at = 0.0
        self._next_sequence: dict[TP, int] = {}
        self._in_flight: dict[TP, collections.deque[ProducerBatch]] = {}
        self._acked_in_epoch: set[TP] = set()
        self._metadata_retry_at = 0.0
        self._force_close = False
        self._txn = txn
        self._transactional = txn is not None
        self.fatal_error: BaseException | None = None
        self._on_fatal = on_fatal
        accumulator.wakeup = self.wakeup

    # -- control from other threads -------------------------------------------------------

    def wakeup(self) -> None:
        """Interrupt the wait for responses (called when a batch becomes ready)."""
        if self._sleeping:
            self._sleeping = False
            with contextlib.suppress(BlockingIOError, OSError):
                self._wake_w.send(b"\0")

    def force_close(self) -> None:
        """Stop now: fail whatever is unsent or unanswered."""
        self._force_close = True
        self.wakeup()

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while self._run_once():
                pass
        except REFUSALS as exc:
            # The broker refused who this producer is (a wrong password, an untrusted
            # certificate) or a producer id (the ACLs): every retry would be refused the same
            # way. As Kafka's producer does, the records fail with that error and the
            # producer's next send() or flush() raises it; a traceback from this thread would
            # only hide the reason.
            log.error("producer stopped: %s", exc)
            self.fatal_error = exc
            if self._on_fatal is not None:
                self._on_fatal(exc)
            self._fail_everything(exc)
        except BaseException as exc:
            log.exception("producer sender thread failed; failing every pending record")
            self.fatal_error = exc
            if self._on_fatal is not None:
                self._on_fatal(exc)
            error = exc if isinstance(exc, SparkMQError) else UsageError(f"sender failed: {exc}")
            self._fail_everything(error)
        finally:
            for conn in self._conns.values():
                conn.close()
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _run_once(self) -> bool:
        if self._force_close:
            self._fail_everything(
                UsageError("the producer was closed before these records were acknowledged")
            )
            return False
        if self._acc.closing and not self._acc.has_unsent() and not self._any_in_flight():
            return False
        self._maybe_init_producer_id()
        self._expire()
        self._maybe_refresh_metadata()
        self._connect_leaders()
        if self._txn is not None:
            self._txn.before_send(self._acc, self._fail, have_producer_id=self.producer_id >= 0)
        self._send_ready()
        # Sleeping is announced before the wait is computed: a batch that becomes ready, or a
        # flush or close that starts, after this line pokes the wake socket; anything earlier
        # is already visible to _poll_timeout.
        self._sleeping = True
        timeout = self._poll_timeout()
        if self._force_close or (self._acc.closing and not self._any_in_flight()):
            timeout = 0.0
        self._poll(timeout)
        return True

    def _any_in_flight(self) -> bool:
        return any(conn.in_flight_count for conn in self._conns.values())

    # -- producer id ----------------------------------------------------------------------

    def _maybe_init_producer_id(self) -> None:
        if self._transactional:
            return  # init_transactions() and abort_transaction() do it (set_producer)
        if not self._idempotent or (self.producer_id >= 0 and not self._need_new_epoch):
            return
        if self._any_in_flight() or self._clock() < self._pid_retry_at:
            return
        request = InitProducerIdRequest(
            producer_id=self.producer_id if self._need_new_epoch else -1,
            producer_epoch=self.producer_epoch if self._need_new_epoch else -1,
        )
        try:
            response = self._cluster.request(request)
            if response.error_code != ErrorCode.NONE:
                raise error_from_code(response.error_code, response.error_message)
        except SparkMQError as exc:
            if not exc.retriable and not isinstance(exc, UnknownProducerIdError):
                raise
            log.warning("InitProducerId failed (%s); retrying", exc)
            self._pid_retry_at = self._clock() + self._config.retry_backoff_ms / 1000
            return
        self.producer_id = response.producer_id
        self.producer_epoch = response.producer_epoch
        if self._need_new_epoch:
            # A new epoch starts every partition's sequences at 0, queued retries included.
            self._next_sequence.clear()
            self._acked_in_epoch.clear()
            self._acc.reset_sequences()
            self._need_new_epoch = False

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """A transactional producer's new id and epoch (user thread; nothing may be queued
        or in flight): sequences start again at 0."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next_sequence.clear()
        self._acked_in_epoch.clear()
        self._acc.reset_sequences()
        self._need_new_epoch = False

    @property
    def needs_new_epoch(self) -> bool:
        """Whether a sequenced batch failed for good (a hole only a new epoch repairs)."""
        return self._need_new_epoch

    def _ready_to_send(self) -> bool:
        return not self._idempotent or (self.producer_id >= 0 and not self._need_new_epoch)

    # -- metadata and connections ---------------------------------------------------------

    def _maybe_refresh_metadata(self) -> None:
        now = self._clock()
        if now < self._metadata_retry_at:
            return
        missing = [
            tp for tp in self._acc.partitions_with_data() if self._cluster.leader(*tp) is None
        ]
        known = self._cluster.known_topics()
        wanted = self._cluster.update_requested or self._cluster.metadata_is_stale()
        if not missing and (not known or not wanted):
            return
        topics = sorted({tp[0] for tp in missing} | set(known))
        try:
            self._cluster.refresh(topics or None)
        except REFUSALS:
            raise  # not retried: see run()
        except SparkMQError as exc:
            log.warning("metadata refresh failed: %s", exc)
        self._metadata_retry_at = now + self._config.retry_backoff_ms / 1000

    def _connect_leaders(self) -> None:
        nodes = {self._cluster.leader(*tp) for tp in self._acc.partitions_with_data()}
        now = self._clock()
        for node in nodes:
            if node is None:
                continue
            conn = self._conns.get(node)
            if conn is None:
                conn = self._conns[node] = self._cluster.new_connection(node)
            if conn.connected or now < self._reconnect_at.get(node, 0.0):
                continue
            try:
                self._cluster.connect(conn)
            except REFUSALS:
                raise  # not retried: see run()
            except SparkMQError as exc:
                # Cluster.connect asked for a metadata update: the leader may have moved.
                log.warning("cannot connect to broker %s: %s", conn.address, exc)
                self._reconnect_at[node] = now + self._config.retry_backoff_max_ms / 1000
                continue
            fd = conn.fileno()
            self._selector.register(fd, selectors.EVENT_READ, conn)
            self._registered[conn] = fd

    def _usable(self, node: int | None) -> BrokerConnection | None:
        if node is None:
            return None
        conn = self._conns.get(node)
        if conn is None or not conn.connected or conn.in_flight_count >= self._max_in_flight:
            return None
        if conn.in_flight_count and conn.reauthentication_due:
            # Its SASL session is re-authenticated before the next request, once the
            # responses in flight are in (client/connection.py).
            return None
        if conn.throttled_until and conn.throttle_delay_s() > 0:
            return None  # the broker throttles this client (a quota): send it nothing yet
        return conn

    # -- sending --------------------------------------------------------------------------

    def _can_send(self, tp: TP) -> int:
        """How many batches of ``tp`` may go into the request being built."""
        if self._usable(self._cluster.leader(*tp)) is None:
            return 0
        if not self._idempotent:
            return _NO_LIMIT
        txn = self._txn
        if txn is not None and tp not in txn.partitions:
            return 0
        in_flight = self._in_flight.get(tp)
        if in_flight and tp not in self._acked_in_epoch:
            return 0
        if in_flight and len(in_flight) >= self._max_in_flight:
            return 0
        return 1

    def _send_ready(self) -> None:
        if not self._ready_to_send():
            return
        while True:
            batches = self._acc.drain(self._can_send, self._config.max_request_size)
            if not batches:
                return
            if self._txn is not None and self._txn.drops_unsent():
                # abort_transaction() began after before_send() looked, and its flush made
                # these ready: they must not go out (they have no sequence yet, so failing
                # them leaves no gap).
                self._txn.fail_unsent(batches, self._fail)
                return
            by_node: dict[int, list[ProducerBatch]] = {}
            for batch in batches:
                node = self._cluster.leader(batch.topic, batch.partition)
                assert node is not None, "drained a batch without a leader"
                by_node.setdefault(node, []).append(batch)
            for node, node_batches in by_node.items():
                self._send_produce(self._conns[node], node_batches)

    def _send_produce(self, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        by_topic: dict[str, list[ProducerBatch]] = {}
        for batch in batches:
            if not self._encode(batch):
                continue
            by_topic.setdefault(batch.topic, []).append(batch)
        ordered = [b for topic_batches in by_topic.values() for b in topic_batches]
        if not ordered:
            return
        request = ProduceRequest(
            acks=self._acks,
            timeout_ms=self._config.request_timeout_ms,
            topics=request_entries(ordered),
        )
        records = [buf for b in ordered for buf in b.wire]
        now = self._clock()
        metrics = self.metrics
        metrics.records_per_request.record(sum(b.record_count for b in ordered))
        for batch in ordered:
            batch.attempts += 1
            batch.sent_at = now
            metrics.batch_size.record(batch.wire_size)
            if self._idempotent:
                self._in_flight.setdefault(batch.tp, collections.deque()).append(batch)
        try:
            conn.send(request, records=records, context=ordered, expect_response=self._acks != 0)
        except NetworkError as exc:
            self._connection_lost(conn, exc, extra=ordered)
            return
        except REFUSALS as exc:
            # A SASL re-authentication before this request was refused (a user removed, or
            # whose password changed; client/connection.py): the producer stops (run()), and
            # these batches, in no queue any more, fail with the error first.
            for batch in ordered:
                self._fail(batch, exc)
            raise
        if self._acks == 0:
            for batch in ordered:
                self._complete(batch, -1, -1)

    def _encode(self, batch: ProducerBatch) -> bool:
        """Give the batch its sequence (first send) and its bytes; False if it failed."""
        sequence = -1
        if self._idempotent:
            if batch.base_sequence is None:
                start = self._next_sequence.get(batch.tp, 0)
                batch.base_sequence = start
                self._next_sequence[batch.tp] = (start + batch.record_count) % (2**31)
            sequence = batch.base_sequence
        try:
            batch.encode(
                self._config.compression_type,
                self.producer_id if self._idempotent else -1,
                self.producer_epoch if self._idempotent else -1,
                sequence,
                self._transactional,
            )
        except SparkMQError as exc:
            self._fail(batch, exc)
            return False
        return True

    # -- waiting and responses ------------------------------------------------------------

    def _poll_timeout(self) -> float | None:
        waits: list[float] = []
        ready_in = self._acc.next_ready_in(self._can_send)
        if ready_in is not None:
            waits.append(ready_in)
        now = self._clock()
        request_timeout_s = self._config.request_timeout_ms / 1000
        for conn in self._conns.values():
            if conn.in_flight_count:
                waits.append(max(request_timeout_s - conn.oldest_request_age_s(), 0.0))
            if conn.throttled_until and (delay_s := conn.throttle_delay_s()) > 0:
                waits.append(delay_s)
        if self._acc.has_unsent():
            # Batches waiting for a leader, a connection or a producer id: look again soon.
            waits.append(self._config.retry_backoff_ms / 1000)
        add_retry_at = 0.0 if self._txn is None else self._txn.add_retry_at
        for at in (self._pid_retry_at, self._metadata_retry_at, add_retry_at):
            if at > now:
                waits.append(at - now)
        return min(waits) if waits else None

    def _poll(self, timeout: float | None) -> None:
        try:
            ready = self._wait(timeout)
        finally:
            self._sleeping = False
        for conn in ready:
            if conn is None:
                # One read empties it: wakeup() writes a byte only to a sleeping sender, so
                # a few bytes at most wait here (a byte left over costs one spare turn).
                with contextlib.suppress(BlockingIOError):
                    self._wake_r.recv(4096)
                continue
            try:
                responses = conn.read_available()
            except NetworkError as exc:
                self._connection_lost(conn, exc)
                continue
            for response in responses:
                self._handle_response(response)
        request_timeout_s = self._config.request_timeout_ms / 1000
        for conn in list(self._conns.values()):
            if conn.in_flight_count and conn.oldest_request_age_s() >= request_timeout_s:
                self._connection_lost(
                    conn,
                    NetworkError(
                        f"no response from broker {conn.address} within request.timeout.ms="
                        f"{self._config.request_timeout_ms}"
                    ),
                )

    def _wait(self, timeout: float | None) -> list[BrokerConnection | None]:
        """Wait up to ``timeout`` seconds (None: until something happens); returns the
        readable connections, None standing for the wake-up socket."""
        if timeout is not None and timeout > 0 and self._fine_timer:
            # epoll_wait counts whole milliseconds, rounded up, so a batch's linger.ms would
            # end up to 1 ms late (0.5 ms on average, straight into the latency of every
            # record). select() takes microseconds; it serves only descriptors below
            # FD_SETSIZE, so a process with more open files falls back to epoll for good.
            fds = [self._wake_r.fileno(), *self._registered.values()]
            try:
                readable, _, _ = select.select(fds, [], [], timeout)
            except ValueError:
                self._fine_timer = False
            except OSError:
                pass  # a descriptor closed under us: epoll below reports it
            else:
                by_fd = {fd: conn for conn, fd in self._registered.items()}
                return [by_fd.get(fd) for fd in readable]
        return [key.data for key, _ in self._selector.select(timeout)]

    def _connection_lost(
        self, conn: BrokerConnection, exc: SparkMQError, extra: list[ProducerBatch] | None = None
    ) -> None:
        fd = self._registered.pop(conn, None)
        if fd is not None:
            # By the descriptor it was registered with: a failed connection is closed already.
            self._selector.unregister(fd)
        log.warning("connection to broker %s lost: %s; retrying its requests", conn.address, exc)
        pending: list[Any] = self._cluster.connection_failed(conn)
        # The broker may be gone, and its partitions led elsewhere: look before resending.
        self._cluster.request_update()
        if extra:
            pending.append(extra)
        self._reconnect_at[conn.node_id] = self._clock() + self._config.retry_backoff_ms / 1000
        for batches in pending:
            for batch in batches:
                self._retry_or_fail(batch, exc)

    def _handle_response(self, response: Response) -> None:
        batches: list[ProducerBatch] = response.context
        if batches:
            self.metrics.request_latency.record((self._clock() - batches[0].sent_at) * 1000)
        if response.error is not None:
            for batch in batches:
                self._retry_or_fail(batch, response.error)
            return
        self.metrics.throttle_time.record(response.body.throttle_time_ms)
        # One answer per batch, by position: a request may carry several batches of one
        # partition, and each must get its own answer (see protocol.produce).
        answers = answers_by_entry(request_entries(batches), response.body)
        for batch, answer in zip(batches, answers, strict=True):
            if answer is None:
                self._retry_or_fail(
                    batch,
                    NetworkError(
                        f"the produce response has no answer for the batch to "
                        f"{batch.topic}-{batch.partition} at its place in the request"
                    ),
                )
            elif answer.error_code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
                self._complete(batch, answer.base_offset, answer.log_append_time_ms)
            else:
                error = error_from_code(
                    answer.error_code,
                    answer.error_message,
                    topic=batch.topic,
                    partition=batch.partition,
                )
                self._retry_or_fail(batch, error)

    # -- outcomes -------------------------------------------------------------------------

    def _forget_in_flight(self, batch: ProducerBatch) -> None:
        in_flight = self._in_flight.get(batch.tp)
        if in_flight:
            with contextlib.suppress(ValueError):
                in_flight.remove(batch)

    def _earlier_unanswered(self, tp: TP, sequence: int) -> bool:
        """Whether a batch of ``tp`` with a sequence below ``sequence`` is queued for a
        retry or in flight."""
        in_flight = self._in_flight.get(tp, ())
        return self._acc.has_earlier_queued(tp, sequence) or any(
            b.base_sequence is not None and b.base_sequence < sequence for b in in_flight
        )

    def _retry_or_fail(self, batch: ProducerBatch, error: SparkMQError) -> None:
        self._forget_in_flight(batch)
        if isinstance(error, RecordTooLargeError) and batch.record_count > 1:
            self._split(batch, error)
            return
        retriable = error.retriable
        if (
            self._idempotent
            and isinstance(error, OutOfOrderSequenceError)
            and batch.base_sequence is not None
            and (
                self._earlier_unanswered(batch.tp, batch.base_sequence)
                or (self._need_new_epoch and not self._transactional)
            )
        ):
            # Refused only because of a batch before it: one that waits to be resent or is
            # being resent (a retry, or the parts of a batch split for size), or one that
            # failed for good (a record too large, say) and left a hole in the sequence that
            # the next epoch renumbers away. Either way the broker did not write this batch,
            # so sending it again cannot write it twice.
            retriable = True
        now = self._clock()
        if (
            retriable
            and batch.attempts <= self._config.retries
            and now - batch.created < self._delivery_timeout_s
            and not self._force_close
        ):
            if error.error_code in _STALE_METADATA:
                # The leader moved (or is being elected): refresh before the retry.
                self._cluster.request_update()
                self._metadata_retry_at = 0.0
            backoff_ms = min(
                self._config.retry_backoff_ms * 2 ** max(batch.attempts - 1, 0),
                max(self._config.retry_backoff_max_ms, self._config.retry_backoff_ms),
            )
            batch.last_error = error
            self.metrics.retries.record(batch.record_count)
            self._acc.reenqueue(batch, now + backoff_ms / 1000)
            return
        self._fail(batch, error)

    def _split(self, batch: ProducerBatch, error: RecordTooLargeError) -> None:
        """Send a batch the topic refused as too large again as smaller batches (see the
        accumulator's docstring), unless the producer is closing or the batch timed out."""
        if self._force_close or self._clock() - batch.created >= self._delivery_timeout_s:
            self._fail(batch, error)
            return
        first = not self._acc.is_capped(batch.topic)
        try:
            parts = self._acc.split_and_reenqueue(batch)
        except SparkMQError as exc:
            log.error("cannot split a refused batch of %s: %s", batch.tp, exc)
            self._fail(batch, error)
            return
        # Said once per topic: a batch.size above the topic's limit splits every batch.
        log.log(
            logging.INFO if first else logging.DEBUG,
            "%s-%s refused a batch of %d records (%d bytes) as too large (%s); sending it "
            "again as %d batches, and the topic's batches no longer grow past batch.size",
            batch.topic,
            batch.partition,
            batch.record_count,
            batch.wire_size,
            error,
            len(parts),
        )

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        self._forget_in_flight(batch)
        self._acked_in_epoch.add(batch.tp)
        self.metrics.sent.record(batch.record_count)
        hooks = batch.result.complete(base_offset, log_append_time_ms)
        self._notify(batch, None, hooks)
        self._acc.complete(batch)

    def _fail(self, batch: ProducerBatch, error: SparkMQError) -> None:
        self._forget_in_flight(batch)
        if self._idempotent and batch.base_sequence is not None:
            # Its sequence numbers are a hole the broker will never see filled: later batches
            # of the partition would be refused. A new epoch renumbers from 0.
            self._need_new_epoch = True
        if self._txn is not None:
            if isinstance(error, ProducerFencedError | InvalidProducerEpochError):
                self._txn.machine.fatal(fenced_error(self._txn.transactional_id, error))
            else:
                self._txn.machine.abortable(error)
        self.metrics.errors.record(batch.record_count)
        hooks = batch.result.complete(-1, -1, error)
        self._notify(batch, error, hooks)
        self._acc.complete(batch)

    def _notify(
        self, batch: ProducerBatch, error: SparkMQError | None, hooks: list[Callable[[], None]]
    ) -> None:
        """Run the batch's callbacks (``send()``'s, then those attached to its futures, each
        kind in record order; see spark_mq.client.futures) and the interceptors'
        on_acknowledgement."""
        if batch.callbacks is None and not self._interceptors.has_on_acknowledgement:
            for hook in hooks:
                run_callback(hook)
            return
        result = batch.result
        base = result.base_offset

        def metadata(index: int) -> RecordMetadata:
            offset = base + index if base >= 0 else -1
            stamp = result.log_append_time_ms
            if stamp < 0:
                stamp = batch.record_timestamp(index)
            return RecordMetadata(batch.topic, batch.partition, offset, stamp)

        for index, callback in batch.callbacks or ():
            try:
                callback(metadata(index), error)
            except Exception:
                log.exception("send() callback failed")
        for hook in hooks:
            run_callback(hook)
        if self._interceptors.has_on_acknowledgement:
            for index in range(batch.record_count):
                self._interceptors.on_acknowledgement(metadata(index), error)

    def _expire(self) -> None:
        for batch in self._acc.expired(self._delivery_timeout_s):
            last = batch.last_error
            if last is None:
                why = "is the broker reachable?"
            else:
                # The broker answered, with a retriable error, until time ran out: say which.
                why = (
                    f"the last of {batch.attempts} attempts failed with "
                    f"{type(last).__name__}: {last}"
                )
            error = DeliveryTimeoutError(
                f"{batch.record_count} record(s) for {batch.topic}-{batch.partition} were "
                f"not acknowledged within delivery.timeout.ms="
                f"{self._config.delivery_timeout_ms}; {why}",
                topic=batch.topic,
                partition=batch.partition,
                record_count=batch.record_count,
            )
            error.__cause__ = last
            self._fail(batch, error)

    def _fail_everything(self, error: SparkMQError) -> None:
        for conn in self._conns.values():
            for batches in conn.close():
                for batch in batches:
                    self._fail(batch, error)
        for batch in self._acc.shut(error):
            self._fail(batch, error)
