"""The broker's state shared by every request handler and background job.

:class:`BrokerCore` is the broker without its network: configuration, the LogManager of the
owned directory, the partitions (:class:`~spark_mq.broker.replica_manager.ReplicaManager`),
the producer id allocator, the group and transaction coordinators, the identity (node id,
cluster id, epoch) and the executor that runs blocking storage work off the event loop.
Tests drive handlers against a core built on a LogManager in a temporary directory, with no
sockets.

Which work runs where: appends of small produce requests and the locating phase of reads
run on the event loop (they touch the page cache only and cost microseconds, less than a hop
to a thread); large appends, topic administration (fsyncs), retention, checkpoints and
compaction run in executor threads so the loop keeps serving other connections.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from spark_mq.broker.acl.authorizer import AclAuthorizer
from spark_mq.broker.acl.checks import authorized_handler
from spark_mq.broker.acl.store import AclStore, FileAclStore
from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import Handler
from spark_mq.broker.controller_fence import ControllerFence
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.group.service import GroupService, wall_clock_ms
from spark_mq.broker.half.cluster_service import ClusterHalfMessageService
from spark_mq.broker.half.service import HalfMessageService
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.metadata_cache import MetadataCache
from spark_mq.broker.metrics.broker_metrics import BrokerMetrics
from spark_mq.broker.producer_ids import ProducerIdManager
from spark_mq.broker.quotas.manager import ClientQuotaManager
from spark_mq.broker.quotas.rate import QuotaWindow
from spark_mq.broker.quotas.store import FileQuotaBackend, QuotaStore
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.sasl.credential_store import CredentialStore, FileCredentialBackend
from spark_mq.broker.txn.service import TransactionService
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import ApiKey
from spark_mq.storage.log_manager import LogManager

if TYPE_CHECKING:
    from spark_mq.broker.alter_partition_manager import AlterPartitionManager
    from spark_mq.broker.zk.membership import ClusterMembership

T = TypeVar("T")

#: Threads for blocking storage work (produce of large requests, admin, background jobs).
IO_THREADS = 4


class ClusterTopicAdmin(Protocol):
    """Topic administration of a cluster broker, through ZooKeeper and the controller
    (Kafka's AdminZkClient): any broker writes the request, the controller carries it out.
    Blocking: call from an executor thread."""

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int | None,
        config: Mapping[str, str],
        *,
        validate_only: bool = False,
        replication_factor_setting: str | None = None,
    ) -> dict[int, tuple[int, ...]]:
        """Assign replicas over the live brokers and write the topic (None:
        ``default.replication.factor``); the assignment. Raises TopicExistsError,
        InvalidReplicationFactorError (more replicas than live brokers, saying how many are
        missing and ``replication_factor_setting`` when the factor came from a broker key),
        InvalidPartitionsError, InvalidTopicError, ConfigError."""
        ...

    def delete_topic(self, name: str) -> None:
        """Ask the controller to delete the topic (UnknownTopicOrPartitionError if none)."""
        ...

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        """Grow the topic to ``total`` partitions (InvalidPartitionsError unless it grows)."""
        ...

    def topic_exists(self, name: str) -> bool: ...

    def leaders_elected(self, name: str, partitions: range | None = None) -> bool:
        """Whether the controller has elected a leader for every partition of the topic (or
        those of ``partitions``)."""
        ...

    def topic_gone(self, name: str) -> bool:
        """Whether the controller has deleted the topic (its assignment znode is gone)."""
        ...


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class BrokerCore:
    """Everything a handler needs: config, logs, partitions, ids, identity, executor."""

    def __init__(
        self,
        config: ServerConfig,
        logs: LogManager,
        meta: BrokerMeta,
        *,
        monotonic_ms: Callable[[], int] = _monotonic_ms,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.logs = logs
        self.node_id = config.broker.node_id
        self.epoch = meta.epoch
        #: The directory's cluster id; a cluster broker adopts ZooKeeper's ``/cluster/id``.
        self.cluster_id = meta.cluster_id
        #: A cluster broker's session with its cluster (None: a single-node broker).
        self.membership: ClusterMembership | None = None
        #: A cluster broker's topic administration (None: a single-node broker, whose
        #: topics are its LogManager's).
        self.cluster_admin: ClusterTopicAdmin | None = None
        #: A cluster broker's proposer of ISR changes to the controller (None: one node).
        self.isr_changes: AlterPartitionManager | None = None
        #: Opens (or finds) a token listener for Spark executors on a host and returns its
        #: address (OpenTokenListener); set by the server's start on a single node only.
        self.open_token_listener: Callable[[str], Awaitable[BrokerAddress]] | None = None
        #: The newest controller epoch accepted; refuses requests of older controllers.
        self.controller_fence = ControllerFence()
        #: The SCRAM users SASL listeners authenticate (the log directory's file; a cluster
        #: broker switches it to ZooKeeper when it joins).
        self.credentials = CredentialStore(FileCredentialBackend(logs.root))
        #: The broker's Prometheus metrics (served by the server when metrics.port is set).
        self.metrics = BrokerMetrics()
        #: Client quotas (Kafka's): the rates and throttles, and the configs kept in the log
        #: directory (a cluster broker switches the store to ZooKeeper when it joins).
        super_users = config.authorizer.super_principals
        self.quotas = ClientQuotaManager(
            QuotaWindow(
                config.broker.quota_window_num, config.broker.quota_window_size_seconds * 1000
            ),
            exempt=lambda principal: principal in super_users,
            monotonic_ms=monotonic_ms,
            on_throttle=lambda kind, ms: self.metrics.throttled(kind.value, ms),
        )
        self.quota_store = QuotaStore(FileQuotaBackend(logs.root), self.quotas)
        #: A cluster broker's view of the cluster, from the controller's UpdateMetadata
        #: (empty, and unused, on a single node).
        self.metadata_cache = MetadataCache()
        self.replicas = ReplicaManager(
            logs,
            node_id=self.node_id,
            # One node: every takeover of the directory is a leader election, so the broker
            # epoch is the leader epoch of every partition.
            leader_epoch=meta.epoch,
            num_partitions=config.broker.num_partitions,
            auto_create_topics=config.broker.auto_create_topics_enable,
            # In a cluster the controller decides each replica's role and creates topics.
            cluster=config.broker.in_cluster,
        )
        # A cluster broker's ids come from ZooKeeper's blocks (attached by the server once
        # its session is up), never from the local file.
        self.producer_ids = ProducerIdManager(logs.root, cluster=config.broker.in_cluster)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=IO_THREADS, thread_name_prefix="mq-io"
        )
        self._monotonic_ms = monotonic_ms
        self.last_activity_ms = monotonic_ms()
        #: The APIs this broker serves, advertised by ApiVersions.
        self.served_apis: frozenset[int] = frozenset(HANDLERS)
        #: ACL authorization (off unless authorizer.class.name is set). The ACLs of a single
        #: node are a file in its log directory; a cluster broker's store is ZooKeeper's,
        #: attached by ``main`` once its session is up.
        self.authorizer = AclAuthorizer(config.authorizer)
        self.acl_store: AclStore = FileAclStore(logs.root, self.authorizer)
        if self.authorizer.enabled and not config.broker.in_cluster:
            self.acl_store.load()
        #: The dispatch table: every handler behind its API's ACL check when the authorizer
        #: is on (``acl.checks``), the bare table otherwise (no cost when off).
        self.handlers: Mapping[ApiKey, Handler] = (
            {key: authorized_handler(key, h) for key, h in HANDLERS.items()}
            if self.authorizer.enabled
            else HANDLERS
        )
        #: The group coordinator (started by the server, driven from the event loop).
        #: Each service gets what it uses: its config, the partitions, the executor and
        #: the wall clock (``clock``: start times and expiry survive restarts).
        self.groups = GroupService(
            config.groups,
            self.replicas,
            self.run_blocking,
            clock=clock,
            metadata_cache=self.metadata_cache,
        )
        #: The transaction coordinator (started by the server, after the groups).
        self.transactions = TransactionService(
            config.transactions,
            self.replicas,
            self.run_blocking,
            self.groups,
            coordinator_epoch=meta.epoch,
            new_producer_id=self.producer_ids.next_id,
            clock=clock,
            partition_count=self._transaction_state_partitions,
        )
        #: Half messages with check-back (started by the server, after the transactions);
        #: a cluster broker serves the partitions of __half_messages it leads.
        self.half_messages: HalfMessageService
        if config.broker.in_cluster:
            self.half_messages = ClusterHalfMessageService(
                config.half_messages,
                self.replicas,
                self.run_blocking,
                new_producer_id=self.producer_ids.next_id,
                clock=clock,
                metadata=lambda: self.metadata_cache.snapshot,
            )
        else:
            self.half_messages = HalfMessageService(
                config.half_messages,
                self.replicas,
                self.run_blocking,
                new_producer_id=self.producer_ids.next_id,
                clock=clock,
            )

    def _transaction_state_partitions(self) -> int | None:
        """A cluster's partition count of __transaction_state (None: not known yet)."""
        return len(self.metadata_cache.snapshot.partitions(TRANSACTION_STATE_TOPIC)) or None

    @property
    def controller_id(self) -> int:
        """The controller's id for Metadata: this broker when it is alone, the elected one in
        a cluster, -1 while none is known (Kafka's answer then)."""
        if self.membership is None:
            return self.node_id
        known = self.membership.controller_id
        return -1 if known is None else known

    @property
    def broker_epoch(self) -> int | None:
        """A cluster broker's epoch (the czxid of its registration); None on a single node
        or while unregistered."""
        return None if self.membership is None else self.membership.broker_epoch

    def touch(self) -> None:
        """Record activity (a request or a connection): idle exit counts from here."""
        self.last_activity_ms = self._monotonic_ms()

    def idle_for_ms(self) -> int:
        return self._monotonic_ms() - self.last_activity_ms

    async def run_blocking(self, fn: Callable[..., T], /, *args: object) -> T:
        """Run ``fn(*args)`` on the executor and await its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    def close(self) -> None:
        """Stop the executor (waiting for running work). The LogManager is the owner's."""
        self.executor.shutdown(wait=True)
