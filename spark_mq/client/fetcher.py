"""The consumer's fetcher: Fetch requests to partition leaders, responses turned into Arrow.

One Fetch is in flight per broker at a time (a long-polling fetch holds up its connection).
As soon as a response arrives its partitions' batch headers are scanned for where the next
fetch starts (``lastOffset + 1`` of the last whole batch), and the next Fetch goes out at once,
before anything is decoded: the broker reads and sends the next data while this client
decodes and the application processes the current data. At most :data:`MAX_BUFFERED_FETCHES`
responses per partition wait here, which bounds memory.

Decoding is lazy and columnar: a buffered partition response becomes one Arrow table with
:func:`~spark_mq.storage.batch_decoder.decode_records` (records below the fetch offset cut
off, control batches and, for ``read_committed``, the batches of aborted transactions dropped)
only when ``poll_batch`` takes records from it. ``poll``, which returns Python records, takes
a response of uncompressed varint batches straight as records instead
(:mod:`~spark_mq.client.fetched_records`), and any other through the table. The consumer's
position then moves to the offset of the next record not yet returned, or, once a response
is used up, to the end of its last batch from the batch header, never to the last record's
offset + 1: compaction leaves batches whose last records, or all of them, are gone.

A buffered response is valid only while the partition's position is where the response
starts; a ``seek``, a ``pause`` or a reset makes it stale and it is dropped when met. Errors:
an out-of-range offset resets the position through ``auto.offset.reset`` (or raises with
``none``); retriable errors (unknown leader, a broker restarting, an unknown topic) refresh
metadata and retry after ``retry.backoff.ms``; a lost connection is reopened (for
``path=DIR`` through ``ensure_broker``). Anything else is raised from the next ``poll``.

Corrupt data is found here, not on the broker: the broker sends the stored bytes as they are
(``sendfile``) and the consumer checks every batch's CRC (``check.crcs``) and body as it
decodes, as Kafka's does. The records of the intact batches before a corrupt one are handed
out, the position stops at the corrupt batch, and the next ``poll`` raises
:class:`~spark_mq.errors.CorruptRecordError` naming the topic, partition and the batch's
offset, and saying where to ``seek`` to skip it; every ``poll`` raises it again until the
application seeks past it.

Threads: used by the consumer's thread only.
"""

from __future__ import annotations

import collections
import logging
import select
from collections.abc import Callable
from typing import Final, TypeVar

import pyarrow as pa

from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ConsumerConfig
from spark_mq.client.connection import BrokerConnection, Response
from spark_mq.client.fetched_records import records_from_table, records_of_fetch
from spark_mq.client.metrics import ConsumerMetrics
from spark_mq.client.records import ConsumerRecord, TopicPartition
from spark_mq.client.subscription_state import SubscriptionState
from spark_mq.errors import (
    AuthenticationError,
    CorruptRecordError,
    NetworkError,
    OffsetOutOfRangeError,
    SparkMQError,
    SslAuthenticationError,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.fetch import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedTransaction,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from spark_mq.protocol.framing import split_records
from spark_mq.storage.batch_decoder import decode_records_until_corrupt
from spark_mq.storage.batch_walk import walk_batches

log = logging.getLogger(__name__)

#: Responses buffered per partition before no more are fetched for it.
MAX_BUFFERED_FETCHES: Final = 2
#: What a collect hands out per partition: a table, or the records poll() returns.
_Taken = TypeVar("_Taken")


def end_of_last_batch(data: memoryview) -> int | None:
    """``lastOffset + 1`` of the last whole batch in ``data`` (None if there is none): where
    the next fetch of the partition starts. Reads only the headers' fixed fields, in one pass
    (:func:`~spark_mq.storage.batch_walk.walk_batches`); the CRC and bodies are checked when
    the data is decoded."""
    return walk_batches(data, 0, len(data)).next_offset


def corrupt_batch_error(
    tp: TopicPartition, fetch_offset: int, cause: CorruptRecordError
) -> CorruptRecordError:
    """The error a consumer raises for a corrupt batch of ``tp``: what was wrong, where, and
    how to get past it."""
    base = cause.offset
    at = fetch_offset if base is None else base
    skip = cause.next_offset
    if skip is not None and skip > fetch_offset:
        how = (
            f"To skip it (losing offsets {max(at, fetch_offset)} to {skip - 1}), seek past it: "
            f"consumer.seek(TopicPartition({tp.topic!r}, {tp.partition}), {skip})"
        )
    else:
        skip = None
        how = (
            "Its header is unreadable too, so where it ends is unknown: find the next intact "
            "batch with spark-mq log verify --dir DIR, then consumer.seek() there"
        )
    error = CorruptRecordError(
        f"record batch of {tp} at offset {at} is corrupt ({cause}); the records before it "
        f"were returned and every poll raises this until the position moves past it. {how}",
        topic=tp.topic,
        partition=tp.partition,
        offset=at,
        next_offset=skip,
    )
    error.__cause__ = cause
    return error


class CompletedFetch:
    """One partition's data from one Fetch response, decoded on first use.

    Decoding stops at a corrupt batch: the records before it are handed out first, and
    :attr:`error` (set once they are) says what is wrong with it.
    """

    __slots__ = (
        "_aborted",
        "_consumed",
        "_corrupt",
        "_data",
        "_records",
        "_table",
        "error",
        "fetch_offset",
        "next_offset",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        data: memoryview,
        next_offset: int,
        aborted: list[AbortedTransaction] | None,
    ) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.next_offset = next_offset
        self._data = data
        self._aborted = aborted
        self._table: pa.Table | None = None
        #: The records decoded straight from varint batches for poll() (fetched_records),
        #: when it took them before a table was decoded; ``_consumed`` counts in either.
        self._records: list[ConsumerRecord] | None = None
        self._consumed = 0
        self._corrupt: CorruptRecordError | None = None
        #: The corrupt batch the data ends at, once every record before it was taken.
        self.error: CorruptRecordError | None = None

    def expected_position(self) -> int:
        """The partition position at which this data is next in line."""
        if self._consumed == 0:
            return self.fetch_offset
        return self._position_after()

    def _position_after(self) -> int:
        if self._table is None:
            records = self._records
            assert records is not None
            if self._consumed < len(records):
                return records[self._consumed].offset
            return self.next_offset
        if self._consumed < self._table.num_rows:
            return int(self._table.column(0)[self._consumed].as_py())
        if self._corrupt is not None:
            # Stop at the corrupt batch (or at the fetch offset, if that lies inside it).
            base = self._corrupt.offset
            return self.fetch_offset if base is None else max(base, self.fetch_offset)
        return self.next_offset

    def take_records(
        self, max_records: int | None, *, verify_crc: bool
    ) -> tuple[list[ConsumerRecord], int, bool]:
        """:meth:`take` as the records ``poll()`` returns: decoded straight from the data
        when it is all uncompressed varint batches (and no aborted transaction is to be left
        out), else through the table."""
        if self._table is None and self._records is None and not self._aborted:
            self._records = records_of_fetch(
                self.tp, self._data, self.fetch_offset, verify_crc=verify_crc
            )
        records = self._records
        if self._table is not None or records is None:
            table, position, used_up = self.take(max_records, verify_crc=verify_crc)
            return records_from_table(self.tp, table), position, used_up
        start = self._consumed
        count = len(records) - start
        if max_records is not None:
            count = min(count, max_records)
        part = records if start == 0 and count == len(records) else records[start : start + count]
        self._consumed = start + count
        return part, self._position_after(), self._consumed >= len(records)

    def take(self, max_records: int | None, *, verify_crc: bool) -> tuple[pa.Table, int, bool]:
        """Up to ``max_records`` records: (table, position after them, used up). After
        :meth:`take_records`, the table decoded from the same data holds the same records
        in the same order, so the count taken carries over."""
        if self._table is None:
            self._table, corrupt = decode_records_until_corrupt(
                self._data,
                start_offset=self.fetch_offset,
                verify_crc=verify_crc,
                aborted_transactions=self._aborted or None,
            )
            if corrupt is not None:
                self._corrupt = corrupt_batch_error(self.tp, self.fetch_offset, corrupt)
            self._data = memoryview(b"")
        self._records = None
        table = self._table
        start = self._consumed
        count = table.num_rows - start
        if max_records is not None:
            count = min(count, max_records)
        part = table if start == 0 and count == table.num_rows else table.slice(start, count)
        self._consumed = start + count
        used_up = self._consumed >= table.num_rows
        if used_up:
            self.error = self._corrupt
        return part, self._position_after(), used_up


class Fetcher:
    """Fetch requests and buffered responses of one consumer (see the module docstring)."""

    def __init__(
        self, config: ConsumerConfig, cluster: Cluster, subscriptions: SubscriptionState
    ) -> None:
        self._config = config
        self._cluster = cluster
        self._subs = subscriptions
        self._isolation = READ_COMMITTED if config.read_committed else READ_UNCOMMITTED
        self._conns: dict[int, BrokerConnection] = {}
        self._in_flight: dict[int, dict[TopicPartition, int]] = {}
        self._buffered: dict[TopicPartition, collections.deque[CompletedFetch]] = {}
        self._retry_at: dict[TopicPartition, float] = {}
        self._reconnect_at: dict[int, float] = {}
        self._metadata_at = 0.0
        self._turn = 0
        # Errors for the next collect(), each with the partition and fetch offset it is about
        # (None for a whole response): a partition's error is stale once its position moved.
        self._errors: list[tuple[SparkMQError, TopicPartition | None, int]] = []
        #: What Consumer.metrics() reports.
        self.metrics = ConsumerMetrics(cluster.clock)
        self._sent_at: dict[int, float] = {}

    # -- requests -------------------------------------------------------------------------

    def _next_fetch_offset(self, tp: TopicPartition) -> int | None:
        buffered = self._buffered.get(tp)
        if buffered:
            return buffered[-1].next_offset
        return self._subs.position(tp)

    def send_fetches(self) -> None:
        """Send a Fetch to every leader with no fetch in flight, for its partitions that
        have a position and room in the buffer."""
        fetching = {tp for requested in self._in_flight.values() for tp in requested}
        if self._subs.all_in(fetching) and not self._cluster.update_requested:
            # Every assigned partition is being fetched already: the common case, as poll()
            # calls this around each collect and after each response.
            return
        now = self._cluster.clock()
        candidates = self._subs.fetchable()
        if candidates:
            # Rotate the order so that every partition gets to be first, which the broker
            # serves whole even when its first batch is over the size limits.
            self._turn = (self._turn + 1) % len(candidates)
            candidates = candidates[self._turn :] + candidates[: self._turn]
        by_node: dict[int, list[tuple[TopicPartition, int]]] = {}
        missing_leader: set[str] = set()
        for tp in candidates:
            if tp in fetching or self._retry_at.get(tp, 0.0) > now:
                continue
            if len(self._buffered.get(tp, ())) >= MAX_BUFFERED_FETCHES:
                continue
            node = self._cluster.leader(tp.topic, tp.partition)
            if node is None:
                missing_leader.add(tp.topic)
                continue
            offset = self._next_fetch_offset(tp)
            if offset is not None:
                by_node.setdefault(node, []).append((tp, offset))
        for node, items in by_node.items():
            if node not in self._in_flight:
                self._send_fetch(node, items, now)
        if missing_leader or self._cluster.update_requested:
            self._refresh_metadata(missing_leader, now)

    def _send_fetch(self, node: int, items: list[tuple[TopicPartition, int]], now: float) -> None:
        conn = self._connection(node, now)
        if conn is None or (conn.throttled_until and conn.throttle_delay_s() > 0):
            return  # no connection, or the broker throttles this client (a quota) for now
        cfg = self._config
        topics: dict[str, list[FetchPartition]] = {}
        for tp, offset in items:
            # The leader epoch this client knows: a broker that is no longer leader, or one
            # that is ahead of this client's metadata, says so instead of answering.
            epoch = self._cluster.leader_epoch(tp.topic, tp.partition)
            topics.setdefault(tp.topic, []).append(
                FetchPartition(tp.partition, offset, cfg.max_partition_fetch_bytes, epoch)
            )
        request = FetchRequest(
            max_wait_ms=cfg.fetch_max_wait_ms,
            min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_max_bytes,
            topics=[FetchTopic(name, parts) for name, parts in topics.items()],
            isolation_level=self._isolation,
        )
        try:
            conn.send(request)
        except NetworkError as exc:
            self._connection_lost(node, conn, exc)
            return
        self._in_flight[node] = dict(items)
        self._sent_at[node] = self._cluster.clock()

    def _connection(self, node: int, now: float) -> BrokerConnection | None:
        conn = self._conns.get(node)
        if conn is None:
            conn = self._conns[node] = self._cluster.new_connection(node)
        if not conn.connected:
            if self._reconnect_at.get(node, 0.0) > now:
                return None
            try:
                self._cluster.connect(conn)
            except (AuthenticationError, SslAuthenticationError):
                # The broker refused who this consumer is (a wrong password, a user removed
                # since; an untrusted certificate): every retry would be refused the same
                # way, so poll() raises it, as the consumer's first connection does.
                raise
            except SparkMQError as exc:
                log.warning("cannot connect to broker %s: %s", conn.address, exc)
                self._reconnect_at[node] = now + self._config.retry_backoff_max_ms / 1000
                return None
        return conn

    def _connection_lost(self, node: int, conn: BrokerConnection, exc: SparkMQError) -> None:
        log.warning("connection to broker %s lost: %s; fetching again", conn.address, exc)
        self._in_flight.pop(node, None)
        self._cluster.connection_failed(conn)
        # The broker may be gone, and its partitions led elsewhere: look before fetching.
        self._cluster.request_update()
        self._reconnect_at[node] = self._cluster.clock() + self._config.retry_backoff_ms / 1000

    def _refresh_metadata(self, topics: set[str], now: float) -> None:
        if now < self._metadata_at:
            return
        self._metadata_at = now + self._config.retry_backoff_ms / 1000
        try:
            response = self._cluster.refresh(sorted(topics | set(self._cluster.known_topics())))
        except SparkMQError as exc:
            log.warning("metadata refresh failed: %s", exc)
            return
        for topic in response.topics:
            if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                log.warning("topic %r does not exist (yet); polling it returns nothing", topic.name)

    # -- responses ------------------------------------------------------------------------

    @property
    def has_in_flight(self) -> bool:
        return bool(self._in_flight)

    def poll_network(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for fetch responses; handle those that arrive. Returns
        whether any response was handled."""
        deadline = self._cluster.clock() + timeout_s
        handled = False
        while self._in_flight and not handled:
            conns = {self._conns[node]: node for node in self._in_flight}
            remaining = max(deadline - self._cluster.clock(), 0.0)
            try:
                readable, _, _ = select.select(list(conns), [], [], remaining)
            except (OSError, ValueError):
                readable = list(conns)  # a closed socket: reading it reports the failure
            for conn in readable:
                node = conns[conn]
                try:
                    responses = conn.read_available()
                except NetworkError as exc:
                    self._connection_lost(node, conn, exc)
                    continue
                for response in responses:
                    self._handle(node, response)
                    handled = True
            if not readable and self._cluster.clock() >= deadline:
                break
        return handled

    def _handle(self, node: int, response: Response) -> None:
        requested = self._in_flight.pop(node, {})
        sent_at = self._sent_at.pop(node, None)
        if sent_at is not None:
            self.metrics.fetch_latency.record((self._cluster.clock() - sent_at) * 1000)
        if response.error is not None:
            self._errors.append((response.error, None, -1))
            return
        body: FetchResponse = response.body
        self.metrics.throttle_time.record(body.throttle_time_ms)
        if body.error_code != ErrorCode.NONE:
            error = error_from_code(body.error_code)
            if not error.retriable:
                self._errors.append((error, None, -1))
            return
        sizes = [p.records_size for t in body.topics for p in t.partitions]
        self.metrics.fetch_size.record(sum(sizes))
        views = iter(split_records(response.records, sizes))
        for topic in body.topics:
            for part in topic.partitions:
                data = next(views)
                tp = TopicPartition(topic.name, part.partition)
                offset = requested.get(tp)
                if offset is None or not self._subs.is_assigned(tp):
                    continue
                if self._next_fetch_offset(tp) != offset:
                    continue  # the position moved (seek) while the fetch was in flight
                if part.error_code != ErrorCode.NONE:
                    self._partition_error(tp, offset, part.error_code, part.error_message)
                    continue
                state = self._subs.state(tp)
                state.high_watermark = part.high_watermark
                state.last_stable_offset = part.last_stable_offset
                state.log_start_offset = part.log_start_offset
                next_offset = end_of_last_batch(data) if part.records_size else None
                # Kafka's records-lag: what is readable beyond what this response brings.
                readable_end = (
                    part.last_stable_offset
                    if self._isolation == READ_COMMITTED and part.last_stable_offset >= 0
                    else part.high_watermark
                )
                position = offset if next_offset is None else max(next_offset, offset)
                self.metrics.record_lag(tp.topic, tp.partition, max(0, readable_end - position))
                if not part.records_size:
                    continue
                if next_offset is None or next_offset <= offset:
                    continue  # only part of a batch: the next fetch puts this partition first
                aborted = part.aborted_transactions if self._isolation == READ_COMMITTED else None
                self._buffered.setdefault(tp, collections.deque()).append(
                    CompletedFetch(tp, offset, data, next_offset, aborted)
                )

    def _partition_error(
        self, tp: TopicPartition, offset: int, code: int, message: str | None
    ) -> None:
        error = error_from_code(code, message, topic=tp.topic, partition=tp.partition)
        if isinstance(error, CorruptRecordError):
            # The broker found damage it cannot even walk over (a batch's length field): it
            # says where in its message; here the fetch offset is all the client knows.
            error.offset = offset
        if isinstance(error, OffsetOutOfRangeError):
            if self._config.auto_offset_reset == "none":
                error.offset = offset
                self._errors.append((error, tp, offset))
            else:
                log.info(
                    "offset %d of %s is out of range; resetting to %s",
                    offset,
                    tp,
                    self._config.auto_offset_reset,
                )
                self._buffered.pop(tp, None)
                self._subs.reset(tp)
            return
        if error.retriable:
            self._retry_at[tp] = self._cluster.clock() + self._config.retry_backoff_ms / 1000
            self._cluster.request_update()
            self._metadata_at = 0.0
            self._refresh_metadata({tp.topic}, self._cluster.clock())
            return
        self._errors.append((error, tp, offset))

    # -- handing records out --------------------------------------------------------------

    def collect(self, max_records: int | None) -> list[tuple[TopicPartition, pa.Table]]:
        """Take up to ``max_records`` buffered records (None: all), advancing positions.
        Raises the first error a fetch reported since the last call, unless it is about a
        partition whose position is not where that fetch read: the application moved it (a
        seek after the response came in, say while another request of the consumer waited for
        its answer), or records fetched before it are still to be returned. Such an error is
        dropped; a fetch from the position, when the partition gets there, reports it again.
        A corrupt batch met while taking records is reported the same way: raised now if no
        records were taken, else by the next call."""
        verify_crc = self._config.check_crcs
        return self._collect(
            max_records,
            lambda completed, n: completed.take(n, verify_crc=verify_crc),
            lambda table: table.num_rows,
        )

    def collect_records(
        self, max_records: int | None
    ) -> list[tuple[TopicPartition, list[ConsumerRecord]]]:
        """:meth:`collect` as the records ``poll()`` returns
        (:meth:`CompletedFetch.take_records`)."""
        verify_crc = self._config.check_crcs
        return self._collect(
            max_records,
            lambda completed, n: completed.take_records(n, verify_crc=verify_crc),
            len,
        )

    def _collect(
        self,
        max_records: int | None,
        take: Callable[[CompletedFetch, int | None], tuple[_Taken, int, bool]],
        count: Callable[[_Taken], int],
    ) -> list[tuple[TopicPartition, _Taken]]:
        self._raise_pending_error()
        out: list[tuple[TopicPartition, _Taken]] = []
        remaining = max_records
        for tp in list(self._buffered):
            queue = self._buffered[tp]
            while queue and (remaining is None or remaining > 0):
                if not self._subs.is_fetchable(tp):
                    queue.clear()  # paused or unassigned: fetched again on resume
                    break
                completed = queue[0]
                if self._subs.position(tp) != completed.expected_position():
                    queue.clear()  # stale: the application moved the position
                    break
                taken, position, used_up = take(completed, remaining)
                self._subs.seek(tp, position)
                if used_up:
                    queue.popleft()
                n = count(taken)
                if n:
                    self.metrics.records.record(n)
                    out.append((tp, taken))
                    if remaining is not None:
                        remaining -= n
                if completed.error is not None:
                    # Later responses start past the corrupt batch: stale now.
                    queue.clear()
                    self._errors.append((completed.error, tp, position))
            if not queue:
                del self._buffered[tp]
        if not out:
            self._raise_pending_error()
        return out

    def _raise_pending_error(self) -> None:
        while self._errors:
            error, tp, offset = self._errors.pop(0)
            if tp is None or (self._subs.is_assigned(tp) and self._subs.position(tp) == offset):
                raise error

    def has_buffered(self) -> bool:
        return bool(self._buffered)

    def drop(self, tp: TopicPartition) -> None:
        """Forget buffered data of ``tp`` (after a seek or an assignment change)."""
        self._buffered.pop(tp, None)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._in_flight.clear()
        self._buffered.clear()
