"""``python -m spark_mq.broker``: run a broker for one log directory.

    python -m spark_mq.broker --log-dir DIR                       # foreground, logs to stderr
    python -m spark_mq.broker --config conf/broker.properties --override log.retention.ms=60000
    python -m spark_mq.broker --log-dir DIR --local               # what ensure_broker starts

Startup, in order: read the configuration (the settings kept in the directory,
``DIR/server.properties``, then the file, then ``--override`` flags, then ``--log-dir``;
see :mod:`spark_mq.broker.persisted_config`); raise the soft open file limit
(``RLIMIT_NOFILE``) to the hard one; open the directory with the storage's LogManager, which
takes its exclusive lock and recovers the log; increment the broker epoch
(``broker.meta.json``); bind the listeners; with ``zookeeper.connect`` set, join the cluster
(connect to ZooKeeper, adopt ``/cluster/id``, register ``/brokers/ids/<id>``, join controller
election: :mod:`spark_mq.broker.zk.membership`; apply ``/config/topics`` to the replicas it
hosts and watch for changes: :mod:`spark_mq.broker.zk.config_changes`); write
``broker.json`` so clients can find the broker; start the background jobs.
Shutdown (SIGTERM, SIGINT, or ``broker.idle.exit.ms`` of idleness) runs it backwards: a
cluster broker first shuts down in a controlled way (``controlled.shutdown.enable``: its
fetchers stop and the controller moves its leaderships, :mod:`spark_mq.broker.controlled_shutdown`);
then remove ``broker.json``, stop accepting, let requests in flight finish, stop the jobs, close
the LogManager (flush, checkpoints, clean-shutdown marker, lock released). A broker whose log
directory was deleted, moved or replaced while it ran (checked every second by the server)
stops the same way but *abandons* the LogManager instead of closing it, writing nothing to
the path, and exits with status 1. A cluster broker closes its ZooKeeper session once its
requests in flight are done, so its registration vanishes at once.

``--local`` is the embedded broker's mode: logs go to ``DIR/broker.log``, the defaults are
a Unix socket only (no TCP unless ``listeners`` asks) and ``broker.idle.exit.ms=60000``, and a
broker that finds the directory already served by another exits quietly with status 0 (it
lost a start race). If the owner is still starting or shutting down it waits for the lock.

Every broker runs with umask 077: what it creates in the log directory is its owner's only
(docs/broker.md, "Files in DIR").

Exit status: 0 after a clean stop or a lost race, 1 if the broker could not start or lost its
log directory, 2 for a configuration error. A broker that cannot start writes the cause as
the last line of its stderr, ``spark_mq broker: <cause>`` (with ``--local`` also to its
log), which :func:`~spark_mq.broker.local.ensure_broker` reports.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from spark_mq import gc_freeze
from spark_mq.broker.config import LOCAL_DEFAULTS, ServerConfig
from spark_mq.broker.connection_quotas import open_file_limit, raise_open_file_limit
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import (
    PRIVATE_UMASK,
    BrokerMeta,
    Endpoint,
    exposure_warning,
    pid_alive,
    socket_path_for,
)
from spark_mq.broker.half.cluster_service import ClusterHalfMessageService
from spark_mq.broker.handlers.errors import report_repeated
from spark_mq.broker.inter_broker import inter_broker_transport
from spark_mq.broker.log_dir import require_log_dir
from spark_mq.broker.log_setup import FAILURE_PREFIX, setup_logging
from spark_mq.broker.persisted_config import load_persisted
from spark_mq.broker.properties_file import parse_override, read_properties_file
from spark_mq.broker.scheduler import Scheduler
from spark_mq.broker.server import BrokerServer
from spark_mq.errors import (
    ClusterError,
    ConfigError,
    LogDirectoryLockedError,
    LogDirectoryNotFoundError,
    SparkMQError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.storage.dir_lock import read_owner
from spark_mq.storage.log_manager import LogManager

if TYPE_CHECKING:
    from spark_mq.broker.acl.zk_store import ZkAclSync
    from spark_mq.broker.half.replicated_writes import ReplicatedWriter
    from spark_mq.broker.metrics.broker_metrics import BrokerMetrics
    from spark_mq.broker.replica_fetcher import ReplicaFetcherManager
    from spark_mq.broker.txn.marker_channel import TransactionMarkerChannel
    from spark_mq.broker.txn.participants import TxnPeers
    from spark_mq.broker.zk.config_changes import TopicConfigSync
    from spark_mq.broker.zk.membership import ClusterMembership

logger = logging.getLogger("spark_mq.broker")

#: How long a ``--local`` broker waits for the lock of a directory whose owner is starting
#: up (recovering) or shutting down.
LOCK_WAIT_S: Final = 60.0

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_CONFIG: Final = 2


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m spark_mq.broker",
        description="Run a spark_mq broker that owns one log directory.",
    )
    parser.add_argument("--log-dir", help="the log directory to own (sets log.dirs)")
    parser.add_argument("--config", help="a broker.properties file (Kafka's key names)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one property, after the file (repeatable)",
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="embedded local broker: log to DIR/broker.log, idle exit, quiet exit if another "
        "broker already serves DIR",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    return parser.parse_args(argv)


def load_config(args: argparse.Namespace) -> ServerConfig:
    """The configuration of this start: the ``--local`` defaults, then the settings kept in
    the directory (``DIR/server.properties``), then ``--config``, ``--override`` and
    ``--log-dir``."""
    given: dict[str, object] = {}
    if args.config:
        given.update(read_properties_file(args.config))
    for item in args.override:
        key, value = parse_override(item)
        given[key] = value
    if args.log_dir:
        given.pop("log.dir", None)
        given["log.dirs"] = args.log_dir
    props: dict[str, object] = dict(LOCAL_DEFAULTS) if args.local else {}
    log_dir = given.get("log.dirs", given.get("log.dir"))
    if isinstance(log_dir, str) and log_dir and "," not in log_dir:
        props.update(load_persisted(log_dir))
    props.update(given)
    return ServerConfig.from_properties(props)


def _report_failure(message: str, *, local: bool) -> None:
    """Log why the broker cannot go on; a ``--local`` broker also writes it as the last line
    of its stderr (``DIR/broker.out``), where the client that started it reads the cause."""
    logger.error("%s", message)
    if local:
        print(f"{FAILURE_PREFIX}{' '.join(message.split())}", file=sys.stderr, flush=True)


def _served_by_another(root: Path) -> bool:
    """Whether a live broker that holds the lock has published its endpoint."""
    endpoint = Endpoint.read(root)
    owner = read_owner(root)
    return (
        endpoint is not None
        and owner is not None
        and owner.pid == endpoint.pid
        and pid_alive(endpoint.pid)
    )


def open_directory(
    root: Path,
    config: ServerConfig,
    *,
    local: bool,
    flush_executor: concurrent.futures.Executor,
) -> LogManager | None:
    """Take the directory (recovering it); None if another broker serves it (``--local``)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return LogManager(
                root,
                config.log_defaults,
                owner=f"spark_mq broker (pid {os.getpid()})",
                flush_executor=flush_executor,
                # A cluster broker's high watermark is the ISR's (a leader's) or the
                # leader's (a follower's), never simply its own log end; it survives
                # restarts in replication-offset-checkpoint.
                high_watermark_follows_log_end=not config.broker.in_cluster,
            )
        except LogDirectoryLockedError:
            if not local:
                raise
            if _served_by_another(root):
                logger.info("another broker already serves %s; exiting", root)
                return None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _start_kind(logs: LogManager) -> str:
    """How the log directory was found: new, closed cleanly, or recovered after a crash."""
    if logs.new_directory:
        return "new log directory"
    if logs.had_clean_shutdown:
        return "clean start"
    return "recovered after an unclean shutdown"


async def serve(config: ServerConfig, logs: LogManager, meta: BrokerMeta) -> str:
    """Serve until asked to stop; returns the reason. Closes everything but ``logs``."""
    root = logs.root
    broker = config.broker
    core = BrokerCore(config, logs, meta)
    server = BrokerServer(core, broker.parsed_listeners(), default_unix_path=socket_path_for(root))
    scheduler = Scheduler(config.broker, logs, core.executor)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, server.request_stop, signal.Signals(signum).name)
    pid = os.getpid()
    timeout_s = broker.shutdown_timeout_ms / 1000
    repeats = asyncio.create_task(report_repeated(), name="repeated-failures")
    membership: ClusterMembership | None = None
    config_sync: TopicConfigSync | None = None
    acl_sync: ZkAclSync | None = None
    marker_channel: TransactionMarkerChannel | None = None
    try:
        addresses = await server.start()
        if broker.in_cluster:
            # Imported here: a single-node broker (the embedded default) never loads kazoo.
            from spark_mq.broker.zk.config_changes import TopicConfigSync  # noqa: PLC0415
            from spark_mq.broker.zk.membership import ClusterMembership  # noqa: PLC0415
            from spark_mq.broker.zk.topic_admin import ZkTopicAdmin  # noqa: PLC0415

            # After binding, so the registration carries the real ports of port-0 listeners.
            membership = ClusterMembership(
                broker,
                addresses,
                inter_broker=inter_broker_transport(config),
                unclean_leader_election_enable=config.log_defaults.unclean_leader_election_enable,
                on_leader_elected=core.metrics.leader_elected,
                leadership=config.leadership,
            )
            from spark_mq.broker.zk.user_credentials import UserCredentialSync  # noqa: PLC0415

            users = UserCredentialSync(membership.zk, core.credentials)
            from spark_mq.broker.zk.client_quotas import ClientQuotaSync  # noqa: PLC0415
            from spark_mq.broker.zk.znodes import USER_ENTITY  # noqa: PLC0415

            user_quotas = ClientQuotaSync(membership.zk, core.quota_store, USER_ENTITY)

            def before_registering(cluster_id: str) -> None:
                meta.join_cluster(root, cluster_id, broker.node_id)
                # The users' SCRAM credentials before the registration: the controller and
                # the other brokers connect as soon as they see it, and on a SASL
                # inter-broker listener they log in as a user this broker must know.
                users.apply_all()
                # Client quotas are ZooKeeper's from the first request on (never the log
                # directory's file, which is a single node's).
                user_quotas.apply_all()

            await asyncio.to_thread(membership.start, before_registering)
            assert membership.cluster_id is not None
            core.membership = membership
            from spark_mq.broker.zk.producer_id_blocks import ZkProducerIdBlocks  # noqa: PLC0415

            # Producer ids unique across the cluster's brokers.
            core.producer_ids.use_blocks(ZkProducerIdBlocks(membership.zk, broker.node_id))
            core.cluster_id = membership.cluster_id
            core.cluster_admin = ZkTopicAdmin(
                membership.zk,
                default_replication_factor=broker.default_replication_factor,
                log_defaults=config.log_defaults,
            )
            await asyncio.to_thread(
                core.replicas.attach_fetchers, _fetchers(config, membership, core.metrics)
            )
            from spark_mq.broker.alter_partition_manager import (  # noqa: PLC0415
                AlterPartitionManager,
            )

            core.isr_changes = AlterPartitionManager(
                core.replicas,
                membership,
                node_id=broker.node_id,
                lag_time_max_ms=config.replication.replica_lag_time_max_ms,
                run_blocking=core.run_blocking,
                on_isr_change=core.metrics.isr_changed,
            )
            core.isr_changes.start()
            marker_channel = _marker_channel(core, membership)
            core.transactions.markers.attach_channel(marker_channel)
            marker_channel.start()
            core.transactions.peers = _txn_peers(core, membership)
            if isinstance(core.half_messages, ClusterHalfMessageService):
                core.half_messages.writer = _half_writer(core, membership)
            # Applies /config/topics/<t> to the replicas here: now (catching up on changes
            # made while this broker was down) and on every change notification.
            # The same notifications carry users' SCRAM credentials (users/<name>, read
            # first before registering): the store follows ZooKeeper's users from now on.
            # Client quotas too (users/..., clients/...), loaded before registering.
            from spark_mq.broker.zk.client_quotas import CLIENT_ENTITY, UserEntitySync  # noqa: PLC0415

            config_sync = TopicConfigSync(
                membership.zk,
                logs,
                entity_handlers={
                    USER_ENTITY: UserEntitySync(users, user_quotas),
                    CLIENT_ENTITY: ClientQuotaSync(membership.zk, core.quota_store, CLIENT_ENTITY),
                },
            )
            config_sync.start()
            if core.authorizer.enabled:
                # A cluster's ACLs are ZooKeeper's (/kafka-acl): read them before serving
                # and follow every change any broker makes.
                from spark_mq.broker.acl.zk_store import ZkAclStore, ZkAclSync  # noqa: PLC0415

                core.acl_store = ZkAclStore(membership.zk, core.authorizer)
                await asyncio.to_thread(core.acl_store.load)
                acl_sync = ZkAclSync(membership.zk, core.authorizer)
                await asyncio.to_thread(acl_sync.start)
        # broker.json's TCP address is for clients given path=DIR, which speak PLAINTEXT.
        tcp = next(
            (
                address
                for listener, address in server.bound
                if address.unix_path is None and listener.security_protocol == "PLAINTEXT"
            ),
            None,
        )
        logger.info(
            "broker %d serving %s on %s (epoch %d, cluster %s, %s)",
            broker.node_id,
            root,
            ", ".join(map(str, addresses)),
            meta.epoch,
            core.cluster_id,
            _start_kind(logs),
        )
        endpoint = Endpoint(
            pid=pid,
            epoch=meta.epoch,
            node_id=broker.node_id,
            unix_path=server.unix_path,
            host=tcp.host if tcp else None,
            port=tcp.port if tcp else None,
            started_ms=time.time_ns() // 1_000_000,
            metrics_port=server.metrics_port,
        )
        endpoint.write(root)
        if not broker.in_cluster:
            # A single node may open token listeners for Spark executors (OpenTokenListener);
            # broker.json lists them too, for `spark-mq broker status`.

            async def open_for_executors(host: str) -> BrokerAddress:
                # ``endpoint`` is the file as last written: a listener already open (every
                # micro-batch asks again) rewrites nothing.
                nonlocal endpoint
                address = await server.open_token_listener(host, root)
                listed = tuple(str(a) for a in server.token_listeners.values())
                if listed != endpoint.token_listeners:
                    endpoint = dataclasses.replace(endpoint, token_listeners=listed)
                    await asyncio.to_thread(endpoint.write, root)
                return address

            core.open_token_listener = open_for_executors
        scheduler.start()
        core.groups.start()
        core.transactions.start()
        core.half_messages.start()
        # Everything the broker keeps for its life exists now: later full collections skip it.
        frozen = gc_freeze.freeze_long_lived()
        logger.debug("froze %d long-lived objects (gc_freeze)", frozen)
        return await server.wait_stop_requested()
    finally:
        if core.membership is not None and config.leadership.controlled_shutdown_enable:
            # First, while every listener still serves: followers stop fetching, then the
            # controller moves this broker's leaderships (spark_mq.broker.controlled_shutdown).
            from spark_mq.broker.controlled_shutdown import (  # noqa: PLC0415
                request_controlled_shutdown,
            )

            await asyncio.to_thread(core.replicas.close_fetchers)
            await asyncio.to_thread(request_controlled_shutdown, core.membership, config.leadership)
        Endpoint.remove_if_ours(root, pid, meta.epoch)
        # Members waiting in JoinGroup / SyncGroup are answered now, so that their
        # connections are not among the busy ones the server waits for.
        core.groups.close()
        core.transactions.close()
        core.half_messages.close()
        if core.isr_changes is not None:
            await core.isr_changes.close()
            core.isr_changes = None
        if marker_channel is not None:
            core.transactions.markers.attach_channel(None)
            await marker_channel.close()
        if core.transactions.peers is not None:
            await core.transactions.peers.close()
        half = core.half_messages
        if isinstance(half, ClusterHalfMessageService) and half.writer is not None:
            await asyncio.to_thread(half.writer.close)
            half.writer = None
        # Followers stop fetching before the logs they append to close.
        await asyncio.to_thread(core.replicas.close_fetchers)
        await server.close(timeout_s)
        if acl_sync is not None:
            await asyncio.to_thread(acl_sync.close)
        if config_sync is not None:
            # Before the LogManager closes: a change being applied is finished first.
            await asyncio.to_thread(config_sync.close)
        if membership is not None:
            # Ends the session: the registration (and /controller, if ours) goes now, not
            # after zookeeper.session.timeout.ms.
            core.membership = None
            core.cluster_admin = None
            await asyncio.to_thread(membership.close)
        await scheduler.stop(timeout_s)
        repeats.cancel()  # which writes the last counts of repeated failures
        await asyncio.gather(repeats, return_exceptions=True)
        core.close()


def _half_writer(core: BrokerCore, membership: ClusterMembership) -> ReplicatedWriter:
    """The half-message service's acks=all writes to partitions other brokers lead (its
    real records and discards), authenticated as this broker as the markers are."""
    from spark_mq.broker.half.replicated_writes import ReplicatedWriter  # noqa: PLC0415
    from spark_mq.broker.txn.broker_links import BrokerCredentials  # noqa: PLC0415

    secret = membership.inter_broker_secret
    assert secret is not None, "read by membership.start()"
    return ReplicatedWriter(
        core.replicas,
        node_id=core.node_id,
        metadata=lambda: core.metadata_cache.snapshot,
        credentials=BrokerCredentials(
            core.node_id, lambda: membership.broker_epoch, secret, membership.inter_broker
        ),
    )


def _marker_channel(core: BrokerCore, membership: ClusterMembership) -> TransactionMarkerChannel:
    """The transaction coordinator's channel to the leaders of the partitions it does not
    lead; a transaction whose last marker is acknowledged is completed at once."""
    # Imported here: a single-node broker writes every marker itself.
    from spark_mq.broker.txn.broker_links import BrokerCredentials  # noqa: PLC0415
    from spark_mq.broker.txn.marker_channel import TransactionMarkerChannel  # noqa: PLC0415

    secret = membership.inter_broker_secret
    assert secret is not None, "read by membership.start()"
    txns = core.transactions

    def complete_acknowledged() -> None:
        txns.coordinator.retry_pending(txns.now_ms())

    return TransactionMarkerChannel(
        node_id=core.node_id,
        metadata=lambda: core.metadata_cache.snapshot,
        credentials=BrokerCredentials(
            core.node_id, lambda: membership.broker_epoch, secret, membership.inter_broker
        ),
        on_acknowledged=complete_acknowledged,
    )


def _txn_peers(core: BrokerCore, membership: ClusterMembership) -> TxnPeers:
    """The transaction coordinator's two-phase requests to the other coordinators."""
    # Imported here: a single-node broker coordinates every transaction itself.
    from spark_mq.broker.txn.broker_links import BrokerCredentials  # noqa: PLC0415
    from spark_mq.broker.txn.participants import TxnPeers  # noqa: PLC0415

    secret = membership.inter_broker_secret
    assert secret is not None, "read by membership.start()"
    return TxnPeers(
        core.transactions,
        node_id=core.node_id,
        metadata=lambda: core.metadata_cache.snapshot,
        credentials=BrokerCredentials(
            core.node_id, lambda: membership.broker_epoch, secret, membership.inter_broker
        ),
    )


def _fetchers(
    config: ServerConfig, membership: ClusterMembership, metrics: BrokerMetrics
) -> ReplicaFetcherManager:
    """The replica fetchers of a cluster broker, authenticating with the secret its
    session read from ZooKeeper."""
    # Imported here: a single-node broker never follows.
    from spark_mq.broker.replica_fetcher import (  # noqa: PLC0415
        BrokerIdentity,
        ReplicaFetcherManager,
    )

    secret = membership.inter_broker_secret
    assert secret is not None, "read by membership.start()"

    def broker_epoch() -> int:
        epoch = membership.broker_epoch
        return -1 if epoch is None else epoch

    identity = BrokerIdentity(config.broker.node_id, broker_epoch, secret, membership.inter_broker)
    return ReplicaFetcherManager(
        identity, config.replication.fetcher_config(), on_replicated=metrics.replicated
    )


def run(config: ServerConfig, *, local: bool) -> int:
    """Open the directory, serve, shut down; the process exit status."""
    root = Path(config.broker.log_dir).resolve()
    # Connections and log files draw on one RLIMIT_NOFILE: take all the system allows, so
    # that the share kept for the logs (broker.fd.headroom) is as large as it can be.
    soft = open_file_limit()
    raised = raise_open_file_limit()
    if raised != soft:
        logger.info("raised the open file limit (RLIMIT_NOFILE) from %s to %s", soft, raised)
    flush_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mq-flush")
    try:
        try:
            logs = open_directory(root, config, local=local, flush_executor=flush_executor)
        except SparkMQError as exc:
            _report_failure(f"cannot open log directory {root}: {exc}", local=local)
            return EXIT_FAILED
        if logs is None:
            return EXIT_OK
        exposed = exposure_warning(root)
        if exposed is not None:
            logger.warning("%s", exposed)
        lost: str | None = None
        try:
            meta = BrokerMeta.take_over(root)
            reason = asyncio.run(serve(config, logs, meta))
            logger.info("broker stopped: %s", reason)
        except OSError as exc:
            listeners = ",".join(config.broker.listeners)
            _report_failure(f"cannot serve {root}: {exc} (listeners={listeners})", local=local)
            return EXIT_FAILED
        except ClusterError as exc:  # ZooKeeper unreachable, broker.id taken, ...
            _report_failure(f"broker of {root} cannot join its cluster: {exc}", local=local)
            return EXIT_FAILED
        except SparkMQError as exc:  # a damaged broker file of the directory, say
            _report_failure(f"the broker of {root} failed: {exc}", local=local)
            return EXIT_FAILED
        finally:
            lost = logs.directory_lost()
            if lost is None:
                logs.close()
                logger.info("log directory %s closed cleanly", root)
            else:
                logs.abandon()
                logger.error("log directory %s abandoned, nothing written to it: %s", root, lost)
        return EXIT_OK if lost is None else EXIT_FAILED
    finally:
        flush_executor.shutdown(wait=True)


def main(argv: Sequence[str] | None = None) -> int:
    # Everything the broker creates (the directory, segments, checkpoints, broker.json, its
    # log) is its owner's only, as a database's files are.
    os.umask(PRIVATE_UMASK)
    args = parse_args(argv)
    try:
        config = load_config(args)
        root = Path(config.broker.log_dir)
    except ConfigError as exc:
        print(f"{FAILURE_PREFIX}{' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    try:
        require_log_dir(root, create=True)
    except LogDirectoryNotFoundError as exc:
        print(f"{FAILURE_PREFIX}{exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    setup_logging(log_dir=root if args.local else None, level=args.log_level)
    return run(config, local=args.local)
