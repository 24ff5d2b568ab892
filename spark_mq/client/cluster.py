"""What a client knows of the cluster: brokers, topics, partition leaders, and how to reach them.

Two ways in. With ``path=DIR`` the cluster is the local broker that owns DIR:
:func:`spark_mq.broker.local.ensure_broker` finds it or starts it, and every node id maps to
its address. When a connection to it fails (the broker idled out, was killed, or restarted),
the next connection calls ``ensure_broker`` again, which starts a new broker if none runs.
Only a cluster with ``create_log`` set (a producer's; an admin's once it creates a topic)
creates DIR when it holds no log yet; the others raise
:class:`~spark_mq.errors.LogDirectoryNotFoundError`, so a mistyped path is not read as an
empty log (docs/broker.md, "Reading and creating entry points").
With ``bootstrap.servers`` the client asks any reachable server for Metadata and then routes
each partition to its leader by node id, with the addresses the brokers advertise.
``bootstrap.servers`` may list any subset of the brokers: a request for any broker tries them
in turn (then every broker the last Metadata listed), skipping a dead one for the next, as
Kafka's clients pick their least loaded node.

Following leaders (Kafka's ``Metadata.requestUpdate``): the producer, the consumer and the
admin client call :meth:`Cluster.request_update` when a partition's broker answers that it is
not (or no longer) the leader (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, an unknown partition) or when the connection to
a broker drops; the next look at the metadata refreshes it (:attr:`update_requested`) before
the request is retried. A Metadata answer lists every live broker, so the node map is
replaced by it: a broker that died is no longer dialled by its id, and its partitions are
leaderless (-1) until the controller elects new leaders.

The cluster also owns *control* connections: one per node, used for synchronous
request/response calls (Metadata, ListOffsets, admin APIs) from any thread, under a lock.
Producers and consumers open their own data connections (:meth:`Cluster.connect`) so that a
long-polling fetch or pipelined produce requests never queue a metadata call behind them.

A closed cluster connects to nothing: ``connect``, ``address_for``, ``new_connection`` and
``request`` raise :class:`~spark_mq.errors.UsageError`, so nothing left of a closed client (a
thread that outlived its join timeout, a handler run late) can start a local broker again
for DIR after the application, or a test, stopped it.

Threads: every method may be called from any thread; state changes happen under one lock.
``partition_count`` reads a dict without the lock (the producer's hot path); the dict is only
ever replaced by a new entry, never mutated in a way a reader could see half done.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from spark_mq.client.config import ClientConfig
from spark_mq.client.connection import BrokerConnection
from spark_mq.client.retry import Clock, Retry, Sleep, remaining_ms
from spark_mq.errors import (
    BrokerNotAvailableError,
    NetworkError,
    SparkMQError,
    UnknownTopicOrPartitionError,
    UsageError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse, PartitionMetadata

log = logging.getLogger(__name__)

EnsureBroker = Callable[..., BrokerAddress]

#: The node id a request goes to when any broker will do.
ANY_NODE = -1

#: Partition errors that mean the request went to a broker that does not (or no longer, or
#: not yet) lead the partition: refresh the metadata and send it to the leader again.
LEADER_MOVED = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as the last Metadata response described it."""

    name: str
    partitions: tuple[PartitionMetadata, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


def _default_ensure_broker() -> EnsureBroker:
    from spark_mq.broker.local import ensure_broker  # noqa: PLC0415 (the broker is optional)

    return ensure_broker


#: Former broker addresses a client keeps as a last resort for any-broker requests.
FORMER_ADDRESSES_KEPT: Final = 32


class Cluster:
    """Brokers and partition leaders as last seen, and connections to them."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        ensure_broker: EnsureBroker | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        create_log: bool = False,
    ) -> None:
        config.check_endpoint()
        self.config = config
        self._path = config.path or None
        #: Whether ``path`` is created (and its broker started) when it holds no log yet.
        self.create_log = create_log
        self._bootstrap = config.bootstrap_addresses()
        #: What every connection authenticates with (security.protocol=SASL_PLAINTEXT).
        self._sasl = config.sasl_credentials()
        self._ensure_broker = ensure_broker
        #: The clock and sleep of every deadline and backoff of this client's calls.
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.RLock()
        self._local_address: BrokerAddress | None = None
        self._nodes: dict[int, BrokerAddress] = {}
        #: Addresses brokers had in earlier metadata, newest first: tried last by requests
        #: that any broker may answer. A broker restarted before the controller told it of
        #: the others answers Metadata with itself alone; without these a client whose
        #: bootstrap servers moved (restarted on new ports) could be left with none alive.
        self._former: list[BrokerAddress] = []
        self._topics: dict[str, TopicInfo] = {}
        #: Topic to partition count; replaced whole on refresh, read without the lock.
        self.partition_counts: dict[str, int] = {}
        self._control: dict[int, BrokerConnection] = {}
        self._refreshed_at = -1e18
        self._bootstrap_turn = 0
        self._update_requested = False
        self.cluster_id = ""
        self.controller_id = ANY_NODE
        self._closed = False
        #: Built once (a bad certificate file is a ConfigError here, not at a connection).
        self._ssl_context = config.ssl_context()

    # -- addresses and connections --------------------------------------------------------

    def _timeout_ms(self, timeout_ms: int | None) -> int:
        """A caller's bound on one step (None: ``request.timeout.ms``), never above it."""
        limit = self.config.request_timeout_ms
        return limit if timeout_ms is None else max(min(timeout_ms, limit), 1)

    def _local(self, *, renew: bool = False, timeout_ms: int | None = None) -> BrokerAddress:
        assert self._path is not None
        with self._lock:
            # Checked under the lock close() takes: once close() returned, no ensure_broker.
            self._check_open()
            if self._local_address is None or renew:
                if self._ensure_broker is None:
                    self._ensure_broker = _default_ensure_broker()
                self._local_address = self._ensure_broker(
                    self._path,
                    timeout_ms=self._timeout_ms(timeout_ms),
                    create=self.create_log,
                )
            return self._local_address

    def address_for(self, node_id: int, *, timeout_ms: int | None = None) -> BrokerAddress:
        """Where node ``node_id`` listens (any reachable broker for ANY_NODE); finding (or
        starting) the local broker waits at most ``timeout_ms``."""
        self._check_open()
        if self._path is not None:
            return self._local(timeout_ms=timeout_ms)
        with self._lock:
            if node_id != ANY_NODE and node_id in self._nodes:
                return self._nodes[node_id]
            if node_id != ANY_NODE and self._nodes:
                # The last Metadata listed every live broker, and not this one.
                self._update_requested = True
                raise BrokerNotAvailableError(
                    f"broker {node_id} is not among the live brokers of the last metadata "
                    f"({sorted(self._nodes)}); it is down or the metadata is stale, which "
                    "the next refresh settles"
                )
            return self._bootstrap[self._bootstrap_turn % len(self._bootstrap)]

    def _any_node_addresses(self) -> list[BrokerAddress]:
        """Where a request for any broker may go, in the order to try: the bootstrap servers
        from the one that last answered, then the other brokers the metadata lists."""
        with self._lock:
            turn = self._bootstrap_turn % len(self._bootstrap)
            out = self._bootstrap[turn:] + self._bootstrap[:turn]
            out += [a for _, a in sorted(self._nodes.items()) if a not in out]
            out += [a for a in self._former if a not in out]
            return out

    def new_connection(self, node_id: int) -> BrokerConnection:
        """A data connection to ``node_id`` for the caller to own; not yet connected (its
        address is looked up again when it connects: :meth:`connect`)."""
        self._check_open()
        if self._path is not None:
            address = self._local()
        else:
            with self._lock:
                address = self._nodes.get(node_id) or self._bootstrap[0]
        return BrokerConnection(
            address,
            node_id=node_id,
            client_id=self.config.client_id or None,
            max_frame_bytes=self.config.receive_message_max_bytes,
            connect_timeout_ms=self.config.socket_connection_setup_timeout_ms,
            request_timeout_ms=self.config.request_timeout_ms,
            send_buffer_bytes=self.config.send_buffer_bytes,
            receive_buffer_bytes=self.config.receive_buffer_bytes,
            clock=self.clock,
            ssl_context=self._ssl_context,
            sasl=self._sasl,
        )

    def connect(self, conn: BrokerConnection, *, timeout_ms: int | None = None) -> None:
        """Open ``conn``, re-resolving the broker when its last known address is dead: the
        local broker is found or restarted with ``ensure_broker`` (waiting at most
        ``timeout_ms``); with bootstrap servers the next one is tried."""
        self._check_open()
        if conn.connected:
            return
        if self._path is not None:
            try:
                conn.address = self.address_for(conn.node_id, timeout_ms=timeout_ms)
                conn.connect()
            except BrokerNotAvailableError:
                conn.address = self._local(renew=True, timeout_ms=timeout_ms)
                conn.connect()
            return
        if conn.node_id != ANY_NODE:
            try:
                conn.address = self.address_for(conn.node_id)
                conn.connect()
            except BrokerNotAvailableError:
                # The broker is down: its partitions have (or will have) other leaders.
                self.request_update()
                raise
            return
        self._connect_any(conn, timeout_ms)

    def _connect_any(self, conn: BrokerConnection, timeout_ms: int | None) -> None:
        """Connect ``conn`` to the first broker that accepts (bootstrap servers first),
        within ``timeout_ms``; remember which, so the next request starts there."""
        deadline = self.clock() + self._timeout_ms(timeout_ms) / 1000
        candidates = self._any_node_addresses()
        failures: list[str] = []
        last: BrokerNotAvailableError | None = None
        for address in candidates:
            conn.address = address
            try:
                conn.connect()
            except BrokerNotAvailableError as exc:
                failures.append(f"{address}: {exc}")
                last = exc
                if self.clock() >= deadline:
                    break
                continue
            with self._lock:
                if address in self._bootstrap:
                    self._bootstrap_turn = self._bootstrap.index(address)
            if failures:
                log.info("skipped unreachable brokers: %s", "; ".join(failures))
            return
        if len(failures) == 1 and last is not None:
            raise last  # the one broker there is to try: its own error says it all
        raise BrokerNotAvailableError(
            f"no broker answered ({'; '.join(failures)}); check bootstrap.servers="
            f"{self.config.bootstrap_servers!r} and that the brokers are running"
        )

    def connection_failed(self, conn: BrokerConnection) -> list[Any]:
        """Close a failed connection; its address is re-resolved when it next connects."""
        with self._lock:
            if self._path is not None:
                self._local_address = None
        return conn.close()

    # -- synchronous requests on control connections ---------------------------------------

    def request(
        self, request: msgspec.Struct, *, node_id: int = ANY_NODE, timeout_ms: int | None = None
    ) -> Any:
        """Send ``request`` to ``node_id`` and return the response body, within
        ``timeout_ms`` in all (None: ``request.timeout.ms``). A connection failure is retried
        once on a fresh connection (the broker may have restarted) before it raises
        NetworkError."""
        self._check_open()
        deadline = self.clock() + self._timeout_ms(timeout_ms) / 1000
        with self._lock:
            for attempt in range(2):
                if node_id != ANY_NODE and self._path is None and self._stale_node(node_id):
                    # Where is it now? (A broker that restarted listens on a new port; one
                    # that the metadata does not list yet may be new.)
                    self.refresh([], timeout_ms=self._remaining_ms(deadline))
                conn = self._control.get(node_id)
                if conn is None:
                    conn = self._control[node_id] = self.new_connection(node_id)
                try:
                    self.connect(conn, timeout_ms=self._remaining_ms(deadline))
                    return conn.request(request, timeout_s=self._remaining_ms(deadline) / 1000)
                except NetworkError:
                    self.connection_failed(conn)
                    if node_id != ANY_NODE:
                        self.request_update()
                    if attempt or self.clock() >= deadline:
                        raise
        raise AssertionError("unreachable")

    def _stale_node(self, node_id: int) -> bool:
        """Whether the address of ``node_id`` should be looked up again before a request:
        the metadata lists other brokers but not it, or a refresh was asked for."""
        return (bool(self._nodes) and node_id not in self._nodes) or self._update_requested

    # -- metadata -------------------------------------------------------------------------

    def _remaining_ms(self, deadline: float) -> int:
        return remaining_ms(deadline, self.clock)

    def refresh(
        self,
        topics: list[str] | None = None,
        *,
        allow_auto_create: bool = False,
        timeout_ms: int | None = None,
    ) -> MetadataResponse:
        """Ask for Metadata of ``topics`` (None: all), within ``timeout_ms`` (None:
        ``request.timeout.ms``), and update the cache."""
        response: MetadataResponse = self.request(
            MetadataRequest(topics=topics, allow_auto_topic_creation=allow_auto_create),
            timeout_ms=timeout_ms,
        )
        with self._lock:
            self.cluster_id = response.cluster_id
            self.controller_id = response.controller_id
            if response.brokers:
                # Every live broker: one that is gone must not be dialled by its id.
                nodes: dict[int, BrokerAddress] = {}
                for broker in response.brokers:
                    if broker.host.startswith("unix:"):
                        nodes[broker.node_id] = BrokerAddress.parse(broker.host)
                    else:
                        nodes[broker.node_id] = BrokerAddress(broker.host, broker.port)
                gone = [a for a in self._nodes.values() if a not in nodes.values()]
                self._former = (gone + [a for a in self._former if a not in gone])[
                    :FORMER_ADDRESSES_KEPT
                ]
                self._nodes = nodes
            if topics is None or set(self._topics) <= set(topics):
                # Every topic this client follows was looked up again: the update asked for
                # is done (a lookup of other topics, or of the brokers only, is not it).
                self._update_requested = False
            counts = dict(self.partition_counts)
            for topic in response.topics:
                if topic.error_code == ErrorCode.NONE and topic.partitions:
                    parts = tuple(sorted(topic.partitions, key=lambda p: p.partition))
                    self._topics[topic.name] = TopicInfo(topic.name, parts)
                    counts[topic.name] = len(parts)
                elif topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self._topics.pop(topic.name, None)
                    counts.pop(topic.name, None)
            if topics is None:
                listed = {t.name for t in response.topics}
                for name in list(self._topics):
                    if name not in listed:
                        del self._topics[name]
                        counts.pop(name, None)
            # Replaced, not mutated: partition_count reads it without the lock.
            self.partition_counts = counts
            self._refreshed_at = self.clock()
        return response

    def metadata_is_stale(self) -> bool:
        return (self.clock() - self._refreshed_at) * 1000 >= self.config.metadata_max_age_ms

    def request_update(self) -> None:
        """Ask for a metadata refresh before the next retry: a leader moved or a broker
        went away (Kafka's ``Metadata.requestUpdate``)."""
        self._update_requested = True

    @property
    def update_requested(self) -> bool:
        """Whether metadata should be refreshed now (asked for since the last refresh)."""
        return self._update_requested

    def nodes(self) -> dict[int, BrokerAddress]:
        """The live brokers of the last Metadata, by id."""
        with self._lock:
            return dict(self._nodes)

    def known_topics(self) -> list[str]:
        with self._lock:
            return list(self._topics)

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` as last seen; None if unknown (lock-free)."""
        return self.partition_counts.get(topic)

    def topic(self, topic: str) -> TopicInfo | None:
        with self._lock:
            return self._topics.get(topic)

    def leader(self, topic: str, partition: int) -> int | None:
        """The leader's node id, or None when unknown or leaderless (lock-free: entries of
        the topic dict are replaced whole, and a TopicInfo never changes)."""
        info = self._topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return None
        leader = info.partitions[partition].leader_id
        return leader if leader >= 0 else None

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The partition's leader epoch as last seen (-1: unknown), for the requests that
        carry ``current_leader_epoch`` so a stale leader or a stale client is told so."""
        info = self._topics.get(topic)
        if info is None or not 0 <= partition < len(info.partitions):
            return -1
        return info.partitions[partition].leader_epoch

    def wait_for_topic(
        self, topic: str, *, timeout_ms: int, allow_auto_create: bool = False
    ) -> int:
        """Refresh metadata until ``topic`` is known; return its partition count. Raises
        UnknownTopicOrPartitionError (or the topic's error) after ``timeout_ms``.

        A storage error for the topic (KAFKA_STORAGE_ERROR: the broker could not create it,
        its disk is full, say) is raised at once, though retriable: the broker has already
        cleaned up the failed creation, and asking again until the timeout would only hide
        its reason behind "not in the broker's metadata"."""
        backoff_s = max(self.config.retry_backoff_ms, 1) / 1000
        retry = Retry.within_ms(
            timeout_ms,
            backoff_s=backoff_s,
            max_backoff_s=self.config.retry_backoff_max_ms / 1000 or backoff_s,
            clock=self.clock,
            sleep=self.sleep,
        )
        while True:
            response = self.refresh([topic], allow_auto_create=allow_auto_create)
            count = self.partition_count(topic)
            if count:
                return count
            error: SparkMQError | None = None
            stop = False
            for t in response.topics:
                if t.name == topic and t.error_code != ErrorCode.NONE:
                    error = error_from_code(t.error_code, t.error_message, topic=topic)
                    stop = t.error_code == ErrorCode.KAFKA_STORAGE_ERROR or not error.retriable
            if error is not None and stop:
                raise error
            if not retry.backoff():
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} is not in the broker's metadata after {timeout_ms} ms "
                    f"({error or 'no partitions'}); create it with Admin.create_topic or "
                    "enable auto.create.topics.enable on the broker",
                    topic=topic,
                )

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(
                f"{self.config.component} is closed: it connects to no broker (and starts "
                "none) any more; create a new client"
            )

    def close(self) -> None:
        """Close the control connections; every later connection attempt raises
        UsageError. Data connections belong to their owners, which close them first."""
        with self._lock:
            self._closed = True
            for conn in self._control.values():
                conn.close()
            self._control.clear()
