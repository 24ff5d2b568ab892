"""Followers' replica fetchers (Kafka's ReplicaFetcherThread and AbstractFetcherThread).

A broker that follows partitions runs fetcher threads, each with one connection to one
leader, authenticated as a broker (AuthenticateBroker). A partition handed to a fetcher goes
through two states:

- **Truncating**: before its first fetch, the follower asks the leader (OffsetForLeaderEpoch)
  where its latest leader epoch ends and cuts off what the leader does not have, by the
  leader-epoch rules of :mod:`spark_mq.storage.epoch_truncation` (KIP-101, KIP-279), never
  simply at its own high watermark.
- **Fetching**: Fetch requests with ``replica_id`` set to this broker, from the follower's
  log end, carrying the leader epoch it follows (the leader fences an older one). The
  leader's batches are appended as they are (:meth:`PartitionLog.append_as_follower`:
  offsets, leader epochs, producer ids, sequences and markers kept), and the follower's high
  watermark follows the leader's, never past its own log end.

A partition whose leader answers FENCED_LEADER_EPOCH is parked (the follower's epoch is
stale: the controller's next LeaderAndIsr hands it to the right fetcher). NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION (the leader has not applied its own LeaderAndIsr yet: the
controller tells the followers and the leader at once), UNKNOWN_LEADER_EPOCH (the leader has
not seen that epoch yet) and timeouts delay that partition alone by
``replica.fetch.backoff.ms``, as Kafka's ``delayPartitions``; connection failures delay the
whole fetcher as long.
OFFSET_OUT_OF_RANGE on a follower whose log end is below the leader's log start (the leader
deleted what the follower still needs) restarts the follower's log at the leader's log
start, as Kafka's ``handleOutOfRange`` does.

Threads: each :class:`ReplicaFetcher` is a thread of its own; :meth:`add_partitions`,
:meth:`remove_partitions` and :meth:`shutdown` may be called from any thread. The
:class:`ReplicaFetcherManager` spreads partitions over ``num.replica.fetchers`` fetchers per
leader.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
import zlib
from collections.abc import Callable, Collection, Mapping

from spark_mq.broker.inter_broker import PLAINTEXT_TRANSPORT, InterBrokerTransport
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.errors import FencedLeaderEpochError, NetworkError, SparkMQError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.fetch import (
    READ_UNCOMMITTED,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from spark_mq.protocol.framing import split_records
from spark_mq.protocol.replication import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from spark_mq.storage.epoch_truncation import truncate_as_follower
from spark_mq.storage.leader_epoch_cache import EpochEndOffset
from spark_mq.storage.log import PartitionLog

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaFetcherConfig:
    """Kafka's replica fetcher settings (same names and defaults)."""

    #: ``replica.fetch.max.bytes``: bytes asked per partition per fetch.
    fetch_max_bytes: int = 1024 * 1024
    #: ``replica.fetch.response.max.bytes``: bytes asked per fetch in all.
    fetch_response_max_bytes: int = 10 * 1024 * 1024
    #: ``replica.fetch.wait.max.ms``: how long the leader may hold a fetch with no new data.
    fetch_wait_max_ms: int = 500
    #: ``replica.fetch.min.bytes``.
    fetch_min_bytes: int = 1
    #: ``replica.fetch.backoff.ms``: the pause after a failed fetch.
    fetch_backoff_ms: int = 1000
    #: ``replica.socket.timeout.ms``: connect and request timeout to the leader.
    socket_timeout_ms: int = 30_000
    #: ``num.replica.fetchers``: fetcher threads per leader.
    num_fetchers: int = 1


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    #: The leader refused the partition for good (its leader moved): wait for the controller.
    PARKED = "parked"


@dataclasses.dataclass(slots=True)
class PartitionFetchState:
    """One followed partition: the log it appends to and the leader epoch it follows."""

    log: PartitionLog
    leader_epoch: int
    state: FetchState = FetchState.TRUNCATING
    #: Why it is parked (for logs and tests).
    reason: str | None = None
    #: ``time.monotonic()`` before which it is not fetched (a retriable error's backoff).
    delayed_until_s: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """What a fetcher authenticates with: this broker's id, a way to read its current broker
    epoch, and the cluster's inter-broker secret."""

    broker_id: int
    broker_epoch: Callable[[], int]
    secret: str
    #: How to reach the leaders (the inter-broker listener's TLS).
    inter_broker: InterBrokerTransport = PLAINTEXT_TRANSPORT


class ReplicaFetcher(threading.Thread):
    """A thread fetching a set of partitions from one leader (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        leader_id: int,
        leader: BrokerAddress,
        identity: BrokerIdentity,
        config: ReplicaFetcherConfig,
        on_replicated: Callable[[int], None] = lambda _size: None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        #: Told the size of every fetched chunk appended (the broker's replication metric).
        self._on_replicated = on_replicated
        self.leader_id = leader_id
        self.leader = leader
        self._identity = identity
        self._config = config
        self._partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._conn: BrokerConnection | None = None
        #: Fetch rounds that returned (for tests and metrics).
        self.rounds = 0

    # -- partitions (any thread) --------------------------------------------------------------

    def add_partitions(self, partitions: Mapping[TopicPartition, tuple[PartitionLog, int]]) -> None:
        """Follow each partition (its log, the leader epoch to follow) from its truncation
        on; a partition already followed starts over (a new leader epoch)."""
        with self._lock:
            for tp, (replica, epoch) in partitions.items():
                self._partitions[tp] = PartitionFetchState(replica, epoch)
        self._wake.set()

    def remove_partitions(self, partitions: Collection[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._partitions.pop(tp, None)

    def partition_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        with self._lock:
            return self._partitions.get(tp)

    @property
    def partition_count(self) -> int:
        with self._lock:
            return len(self._partitions)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop the thread and close the connection; the partitions' logs are left as is."""
        self._stopping = True
        self._wake.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self._stopping:
                try:
                    did_work = self._do_work()
                except (SparkMQError, OSError) as exc:
                    log.warning(
                        "replica fetcher %s to broker %d (%s) failed: %s; retrying in %d ms",
                        self.name,
                        self.leader_id,
                        self.leader,
                        exc,
                        self._config.fetch_backoff_ms,
                    )
                    self._close_connection()
                    self._backoff()
                    continue
                if not did_work:
                    self._wake.wait(self._config.fetch_backoff_ms / 1000)
                    self._wake.clear()
        finally:
            self._close_connection()

    def _backoff(self) -> None:
        self._wake.wait(self._config.fetch_backoff_ms / 1000)
        self._wake.clear()

    def _connection(self) -> BrokerConnection:
        if self._conn is None or not self._conn.connected:
            timeout_ms = self._config.socket_timeout_ms
            conn = self._identity.inter_broker.connection(
                self.leader,
                node_id=self.leader_id,
                client_id=f"replica-fetcher-{self._identity.broker_id}",
                connect_timeout_ms=timeout_ms,
                request_timeout_ms=timeout_ms,
            )
            authenticate_as_broker(
                conn,
                broker_id=self._identity.broker_id,
                broker_epoch=self._identity.broker_epoch(),
                secret=self._identity.secret,
                timeout_s=timeout_ms / 1000,
            )
            self._conn = conn
        return self._conn

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _snapshot(self) -> dict[TopicPartition, PartitionFetchState]:
        with self._lock:
            return dict(self._partitions)

    def _still_current(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """Whether ``state`` is still the partition's (not removed or re-added meanwhile)."""
        with self._lock:
            return self._partitions.get(tp) is state

    def _do_work(self) -> bool:
        """One round: truncate the partitions that need it, then fetch the others once.
        Returns whether there was anything to do."""
        now_s = time.monotonic()
        partitions = {tp: s for tp, s in self._snapshot().items() if s.delayed_until_s <= now_s}
        truncating = {tp: s for tp, s in partitions.items() if s.state is FetchState.TRUNCATING}
        if truncating:
            self._truncate(truncating)
        fetching = {tp: s for tp, s in partitions.items() if s.state is FetchState.FETCHING}
        if not fetching:
            return bool(truncating)
        self._fetch(fetching)
        return True

    # -- truncation -----------------------------------------------------------------------

    def _ask_leader(self, tp: TopicPartition, current_epoch: int, epoch: int) -> EpochEndOffset:
        request = OffsetForLeaderEpochRequest(
            [OffsetForLeaderTopic(tp[0], [OffsetForLeaderPartition(tp[1], epoch, current_epoch)])],
            replica_id=self._identity.broker_id,
        )
        response: OffsetForLeaderEpochResponse = self._connection().request(request)
        answer = response.topics[0].partitions[0]
        if answer.error_code != ErrorCode.NONE:
            raise _PartitionRefusedError(answer.error_code, answer.error_message or "")
        return EpochEndOffset(answer.leader_epoch, answer.end_offset)

    def _truncate(self, partitions: Mapping[TopicPartition, PartitionFetchState]) -> None:
        for tp, state in partitions.items():

            def ask(
                epoch: int, tp: TopicPartition = tp, s: PartitionFetchState = state
            ) -> EpochEndOffset:
                return self._ask_leader(tp, s.leader_epoch, epoch)

            try:
                decided = truncate_as_follower(state.log, ask)
            except _PartitionRefusedError as exc:
                self._on_partition_error(tp, state, exc.code, exc.message)
                continue
            with self._lock:
                if self._partitions.get(tp) is state:
                    state.state = FetchState.FETCHING
            log.debug(
                "%s-%d: truncated to %d, fetching from broker %d",
                *tp,
                decided.offset,
                self.leader_id,
            )

    # -- fetching -------------------------------------------------------------------------

    def _fetch(self, partitions: Mapping[TopicPartition, PartitionFetchState]) -> None:
        by_topic: dict[str, list[FetchPartition]] = {}
        for (topic, index), state in partitions.items():
            by_topic.setdefault(topic, []).append(
                FetchPartition(
                    index,
                    state.log.log_end_offset,
                    self._config.fetch_max_bytes,
                    current_leader_epoch=state.leader_epoch,
                    log_start_offset=state.log.log_start_offset,
                )
            )
        request = FetchRequest(
            max_wait_ms=self._config.fetch_wait_max_ms,
            min_bytes=self._config.fetch_min_bytes,
            max_bytes=self._config.fetch_response_max_bytes,
            topics=[FetchTopic(t, ps) for t, ps in by_topic.items()],
            isolation_level=READ_UNCOMMITTED,
            replica_id=self._identity.broker_id,
        )
        conn = self._connection()
        conn.send(request)
        wait_s = (self._config.fetch_wait_max_ms + self._config.socket_timeout_ms) / 1000
        received = conn.receive(wait_s)
        if received is None:
            raise NetworkError(f"no Fetch response from broker {self.leader_id} in {wait_s} s")
        body: FetchResponse = received.result()
        if body.error_code != ErrorCode.NONE:
            raise error_from_code(
                body.error_code, f"Fetch refused whole by broker {self.leader_id}"
            )
        sizes = [p.records_size for t in body.topics for p in t.partitions]
        views = iter(split_records(received.records, sizes))
        for t in body.topics:
            for answer in t.partitions:
                records = next(views)
                tp = (t.name, answer.partition)
                found = partitions.get(tp)
                if found is None or not self._still_current(tp, found):
                    continue
                state = found
                if answer.error_code != ErrorCode.NONE:
                    self._on_partition_error(
                        tp,
                        state,
                        answer.error_code,
                        answer.error_message or "",
                        answer.log_start_offset,
                    )
                    continue
                try:
                    append_fetched(state.log, records, answer.high_watermark)
                    self._on_replicated(len(records))
                except FencedLeaderEpochError as exc:
                    # The leader sent batches of an older epoch than this log has: its
                    # leadership is stale. Wait for the controller.
                    self._park(tp, state, str(exc))
                    continue
        self.rounds += 1

    # -- errors ---------------------------------------------------------------------------

    def _on_partition_error(
        self,
        tp: TopicPartition,
        state: PartitionFetchState,
        code: int,
        message: str,
        leader_log_start: int = -1,
    ) -> None:
        if (
            code == ErrorCode.OFFSET_OUT_OF_RANGE
            and 0 <= state.log.log_end_offset < leader_log_start
        ):
            log.warning(
                "%s-%d: log end %d is below the leader's log start %d: restarting the "
                "follower's log there",
                *tp,
                state.log.log_end_offset,
                leader_log_start,
            )
            state.log.truncate_to(leader_log_start)
            return
        if code in _RETRIED:
            log.debug(
                "%s-%d: %s from broker %d; retrying", *tp, ErrorCode(code).name, self.leader_id
            )
            state.delayed_until_s = time.monotonic() + self._config.fetch_backoff_ms / 1000
            return
        self._park(tp, state, f"{ErrorCode(code).name}: {message}")

    def _park(self, tp: TopicPartition, state: PartitionFetchState, reason: str) -> None:
        log.info(
            "%s-%d: stopped fetching from broker %d (%s); waiting for the controller",
            *tp,
            self.leader_id,
            reason,
        )
        with self._lock:
            if self._partitions.get(tp) is state:
                state.state = FetchState.PARKED
                state.reason = reason


def append_fetched(log: PartitionLog, records: memoryview | bytes, high_watermark: int) -> None:
    """What a follower does with one partition of a leader's Fetch response: append the
    leader's batches as they are, then follow the leader's high watermark, never past its
    own log end. Raises FencedLeaderEpochError (nothing appended) if the batches are of an
    older leader epoch than the log has. Pure storage work, apart from the sockets so that
    the replication model (tests/broker) runs the fetchers' own follower path in-process.

    ``records`` is appended as it is, a view into the response's pooled buffer: the append
    writes it before returning, and the pool reuses a buffer only when nothing else refers
    to it (client/connection.py, FrameBufferPool), so a reference kept by the log could not
    see its bytes change. A copy first cost about 100 us per 600 KB batch on this project's
    2-core test machine."""
    if len(records):
        log.append_as_follower(records)
    log.update_high_watermark(min(high_watermark, log.log_end_offset))


#: Partition errors retried after ``replica.fetch.backoff.ms`` (the rest park the partition).
_RETRIED = frozenset(
    {
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


class _PartitionRefusedError(Exception):
    """The leader refused OffsetForLeaderEpoch for one partition."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ReplicaFetcherManager:
    """The fetcher threads of one broker: ``num.replica.fetchers`` per leader, a partition
    always on the same one (by a hash of its name and index, as Kafka's)."""

    def __init__(
        self,
        identity: BrokerIdentity,
        config: ReplicaFetcherConfig,
        *,
        on_replicated: Callable[[int], None] = lambda _size: None,
    ) -> None:
        self._identity = identity
        self._config = config
        self._on_replicated = on_replicated
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def _fetcher_id(self, tp: TopicPartition) -> int:
        return zlib.crc32(f"{tp[0]}-{tp[1]}".encode()) % self._config.num_fetchers

    def add_partitions(
        self, partitions: Mapping[TopicPartition, tuple[int, BrokerAddress, PartitionLog, int]]
    ) -> None:
        """Follow each partition: (leader id, leader address, log, leader epoch)."""
        with self._lock:
            self._remove_locked(partitions.keys())
            grouped: dict[tuple[int, int], dict[TopicPartition, tuple[PartitionLog, int]]] = {}
            for tp, (leader_id, address, replica, epoch) in partitions.items():
                key = (leader_id, self._fetcher_id(tp))
                fetcher = self._fetchers.get(key)
                if fetcher is not None and fetcher.leader != address:
                    # The leader came back on another address: a new connection.
                    fetcher.shutdown()
                    del self._fetchers[key]
                    fetcher = None
                if fetcher is None:
                    fetcher = ReplicaFetcher(
                        name=f"replica-fetcher-{key[1]}-leader-{leader_id}",
                        leader_id=leader_id,
                        leader=address,
                        identity=self._identity,
                        config=self._config,
                        on_replicated=self._on_replicated,
                    )
                    self._fetchers[key] = fetcher
                    fetcher.start()
                grouped.setdefault(key, {})[tp] = (replica, epoch)
                self._where[tp] = key
            for key, items in grouped.items():
                self._fetchers[key].add_partitions(items)

    def remove_partitions(self, partitions: Collection[TopicPartition]) -> None:
        with self._lock:
            self._remove_locked(partitions)

    def _remove_locked(self, partitions: Collection[TopicPartition]) -> None:
        for tp in list(partitions):
            key = self._where.pop(tp, None)
            if key is not None and key in self._fetchers:
                self._fetchers[key].remove_partitions([tp])

    def shutdown_idle(self) -> None:
        """Stop fetchers left with no partitions (Kafka's shutdownIdleFetcherThreads)."""
        with self._lock:
            for key, fetcher in list(self._fetchers.items()):
                if fetcher.partition_count == 0:
                    fetcher.shutdown()
                    del self._fetchers[key]

    def fetcher_for(self, tp: TopicPartition) -> ReplicaFetcher | None:
        with self._lock:
            key = self._where.get(tp)
            return None if key is None else self._fetchers.get(key)

    def close(self) -> None:
        with self._lock:
            fetchers, self._fetchers = list(self._fetchers.values()), {}
            self._where.clear()
        for fetcher in fetchers:
            fetcher.shutdown()
