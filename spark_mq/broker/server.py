"""The network side of a broker: listeners, connections, idle exit and orderly close.

:class:`BrokerServer` binds every listener (TCP and the local Unix socket), runs one
:class:`~spark_mq.broker.connection.Connection` task per accepted socket that the
:class:`~spark_mq.broker.connection_quotas.ConnectionQuotas` admit (``max.connections``,
``max.connections.per.ip``, the descriptors kept for the logs), and holds what the
connections share: the ``queued.max.request.bytes`` pool, the buffers of large frames, the
scratch receive buffer. A sweep (every second at most) closes connections idle for
``connections.max.idle.ms``, those whose request frame stalled for
``socket.request.read.timeout.ms``, and the longest-idle ones when the logs have taken part
of ``broker.fd.headroom``. The server asks the broker to stop after ``broker.idle.exit.ms``
with no connection and no request. :meth:`BrokerServer.close` stops accepting, wakes
long-polling fetches (they answer with what they have), lets requests in flight finish
within a timeout and cuts what is left.

Every :data:`LOG_DIR_CHECK_INTERVAL_S` it checks that the log directory is still the one the
broker opened (:meth:`~spark_mq.storage.log_manager.LogManager.directory_lost`). A directory
deleted, moved or replaced under a running broker would otherwise keep taking appends into
files nobody can reach, acknowledged and then lost, and hold their disk space until the
broker exits. Kafka stops a broker whose every log directory failed; so does this one: it
logs why and asks to stop, and ``main`` then abandons the directory instead of closing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from spark_mq.broker.config import advertised
from spark_mq.broker.connection import RECEIVE_BUFFER_BYTES, Connection
from spark_mq.broker.connection_quotas import ConnectionQuotas, open_file_limit
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.embedded_token import TOKEN_FILE, EmbeddedToken, TokenKeeper
from spark_mq.broker.listeners import Listener
from spark_mq.broker.request_memory import FrameBufferPool, RequestMemoryPool
from spark_mq.errors import CorruptCheckpointError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.rate_limited_log import RateLimitedLog
from spark_mq.tls import server_context

logger = logging.getLogger("spark_mq.broker.server")

#: How often the broker checks that its log directory is still there (two ``stat`` calls).
LOG_DIR_CHECK_INTERVAL_S: Final = 1.0
#: The connection sweep (idle, stalled frames, quota housekeeping) runs at least this often.
SWEEP_MAX_INTERVAL_S: Final = 1.0
#: Connections named in one log line about closing several.
LOGGED_PEERS: Final = 3
#: The name of the embedded broker's token listeners (for logs and Metadata).
TOKEN_LISTENER: Final = "TOKEN"


def _bind_tcp(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class BrokerServer:
    """Listeners and connections of one broker process."""

    def __init__(self, core: BrokerCore, listeners: list[Listener], *, default_unix_path: str):
        self.core = core
        self._listeners = listeners
        self._default_unix_path = default_unix_path
        self.stopping = False
        self.stop_reason: str | None = None
        self.connections: set[Connection] = set()
        #: The metrics endpoint's bound port (None: not served; see metrics.port).
        self.metrics_port: int | None = None
        broker = core.config.broker
        self.quotas = ConnectionQuotas(
            max_connections=broker.max_connections,
            max_per_ip=broker.max_connections_per_ip,
            per_ip_overrides=broker.per_ip_overrides,
            fd_limit=open_file_limit(),
            fd_headroom=broker.broker_fd_headroom,
        )
        #: The bytes of request frames in the broker (queued.max.request.bytes).
        self.memory = RequestMemoryPool(broker.request_memory_bytes, schedule=_call_soon)
        #: Buffers of large request frames, shared by the connections.
        self.frame_buffers = FrameBufferPool()
        #: The receive buffer every read goes through, and the connection that last asked
        #: for it (its bytes are moved out in the same event loop callback).
        self.scratch = memoryview(bytearray(RECEIVE_BUFFER_BYTES))
        self.scratch_user: Connection | None = None
        self.addresses: list[BrokerAddress] = []
        #: Each bound listener with its address (the real port of a port-0 listener).
        self.bound: list[tuple[Listener, BrokerAddress]] = []
        #: Failed TLS handshakes (plaintext on a TLS listener, refused certificates), logged
        #: once per kind and counted after: a port scanner must not flood the log.
        self.tls_failures = RateLimitedLog(logger)
        self.unix_path: str | None = None
        # (st_dev, st_ino) of the socket file this broker bound: close() removes only that
        # file, never one a successor bound at the same path.
        self._unix_file: tuple[int, int] | None = None
        self._servers: list[asyncio.Server] = []
        #: The token listeners opened for Spark executors, by host (OpenTokenListener).
        self.token_listeners: dict[str, BrokerAddress] = {}
        #: The directory token's credentials those listeners check (made with the first).
        self._token_keeper: TokenKeeper | None = None
        self._token_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # -----------------------------------------------------------------------------------------
    # Start

    async def start(self) -> list[BrokerAddress]:
        """Bind every listener; returns the advertised addresses (real ports filled in)."""
        loop = asyncio.get_running_loop()
        config = self.core.config
        # Every TLS listener's context is built before anything binds, so a bad certificate
        # or key file stops the start with a ConfigError naming it.
        contexts = {
            listener.scheme: server_context(
                config.tls_for(listener.scheme).tls_settings(_listener_prefix(listener, config)),
                listener.scheme,
            )
            for listener in self._listeners
            if listener.tls
        }
        for listener in self._listeners:
            if listener.scheme == "UNIX":
                path = listener.unix_path or self._default_unix_path
                # The socket file of a dead broker of this directory: ours to replace (we hold
                # the directory lock, and the default path is derived from the directory).
                with contextlib.suppress(FileNotFoundError):
                    if Path(path).is_socket():
                        os.unlink(path)
                address = BrokerAddress(unix_path=path)
                server = await loop.create_unix_server(
                    functools.partial(Connection, self, address), path=path
                )
                os.chmod(path, 0o600)  # only the owner's processes may talk to the broker
                self.unix_path = path
                bound = os.stat(path)
                self._unix_file = (bound.st_dev, bound.st_ino)
            else:
                # Bound first, so the advertised address (with the real port of port 0) is
                # known before the first connection is accepted.
                sock = _bind_tcp(listener.host, listener.port)
                address = advertised(
                    listener, BrokerAddress(host=listener.host, port=sock.getsockname()[1])
                )
                server = await loop.create_server(
                    functools.partial(
                        Connection,
                        self,
                        address,
                        listener.sasl_required,
                        listener_name=listener.scheme,
                        tls=contexts.get(listener.scheme),
                    ),
                    sock=sock,
                )
            self._servers.append(server)
            self.addresses.append(address)
            self.bound.append((listener, address))
            if listener.sasl_required:
                logger.info(
                    "listener %s on %s: clients authenticate with SASL (%s)",
                    listener.scheme,
                    address,
                    ", ".join(self.core.config.sasl.sasl_enabled_mechanisms),
                )
        logger.info(
            "connection limits: %s; queued.max.request.bytes %s",
            self.quotas.describe(),
            self.memory.capacity_bytes if self.memory.capacity_bytes is not None else "unbounded",
        )
        metrics = self.core.metrics
        metrics.state.attach(loop, self.core, lambda: len(self.connections))
        endpoint = self.core.config.metrics
        if endpoint.metrics_port != -1:
            self.metrics_port = metrics.serve(endpoint.metrics_host, endpoint.metrics_port)
        self._tasks.append(asyncio.create_task(self._sweep_connections()))
        self._tasks.append(asyncio.create_task(self._watch_log_directory()))
        idle_exit_ms = self.core.config.broker.idle_exit_ms
        if idle_exit_ms is not None:
            self._tasks.append(asyncio.create_task(self._exit_when_idle(idle_exit_ms)))
        return self.addresses

    async def open_token_listener(self, host: str, root: Path) -> BrokerAddress:
        """The token listener on ``host`` (opened now if it is not yet): SASL_PLAINTEXT on an
        ephemeral port, where only the token of ``root`` authenticates (OpenTokenListener,
        docs/security.md "The embedded broker's token"). Its connections count against the
        connection limits as any other."""
        # One at a time: two drivers asking for a new host at once would otherwise both
        # bind it, and one listener would be left open and unlisted.
        async with self._token_lock:
            return await self._open_token_listener(host, root)

    async def _open_token_listener(self, host: str, root: Path) -> BrokerAddress:
        # Renewed (this request is the owner's), or made again if it was deleted (revoked)
        # or expired: the driver reads it back from the file, and the keeper gives the
        # listeners the new one from their next accept.
        keeper = self._token_keeper
        if keeper is None:
            keeper = self._token_keeper = TokenKeeper(root)
        try:
            await asyncio.to_thread(
                EmbeddedToken.issue_or_renew,
                root,
                self.core.config.sasl.delegation_token_expiry_time_ms,
                time.time_ns() // 1_000_000,
            )
            # Derived here, off the event loop (PBKDF2, some 15 ms), rather than at an accept.
            await asyncio.to_thread(keeper.current)
        except OSError as exc:
            # The token file, not the address: the handler answers an OSError from binding
            # as a host the executors cannot reach, which this is not.
            path = root / TOKEN_FILE
            raise CorruptCheckpointError(
                f"{path} cannot be read or written ({exc.strerror or exc}); delete it and "
                "the broker makes a new one when a Spark query next needs its TCP listener",
                path=str(path),
            ) from exc
        if host in self.token_listeners:
            return self.token_listeners[host]
        sock = _bind_tcp(host, 0)
        address = BrokerAddress(host=host, port=sock.getsockname()[1])

        def accept() -> Connection:
            return Connection(
                self, address, True, listener_name=TOKEN_LISTENER, token=keeper.current()
            )

        server = await asyncio.get_running_loop().create_server(accept, sock=sock)
        self._servers.append(server)
        self.token_listeners[host] = address
        logger.info(
            "listener %s on %s for Spark executors: only the token of %s authenticates "
            "(SASL SCRAM, tokenauth)",
            TOKEN_LISTENER,
            address,
            root,
        )
        return address

    # -----------------------------------------------------------------------------------------
    # Housekeeping

    def forget(self, conn: Connection) -> None:
        """A connection's task ended: it no longer counts against the limits."""
        self.connections.discard(conn)
        if conn.admitted:
            conn.admitted = False
            self.quotas.release(conn.host)

    async def _sweep_connections(self) -> None:
        broker = self.core.config.broker
        idle_s = broker.connections_max_idle_ms / 1000
        stall_s = broker.socket_request_read_timeout_ms / 1000
        period_s = min(max(min(idle_s / 2, stall_s / 4), 0.05), SWEEP_MAX_INTERVAL_S)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period_s)
            now = loop.time()
            idle: list[Connection] = []
            stalled: list[Connection] = []
            for conn in self.connections:
                if conn.task is None:
                    continue
                if not conn.busy and now - conn.last_activity > idle_s:
                    idle.append(conn)
                elif conn.stalled_for(now) > stall_s:
                    # Bytes waiting in the kernel mean the broker is behind, not the client.
                    if conn.unread_bytes():
                        conn.last_read = now
                    else:
                        stalled.append(conn)
            if idle:
                logger.info(
                    "closing %d connections idle longer than connections.max.idle.ms (%d ms): %s",
                    len(idle),
                    broker.connections_max_idle_ms,
                    _peers(idle),
                )
            if stalled:
                logger.warning(
                    "closing %d connections whose request frame got no byte for "
                    "socket.request.read.timeout.ms (%d ms): %s",
                    len(stalled),
                    broker.socket_request_read_timeout_ms,
                    ", ".join(
                        f"{c.peer} (had {c.describe_partial()})" for c in stalled[:LOGGED_PEERS]
                    )
                    + (", ..." if len(stalled) > LOGGED_PEERS else ""),
                )
            for conn in idle + stalled:
                assert conn.task is not None
                conn.task.cancel()
            self.quotas.refresh()
            self._give_descriptors_back(set(idle + stalled))

    def _give_descriptors_back(self, closing: set[Connection]) -> None:
        """Close the longest-idle connections whose descriptors the logs need (see
        ``connection_quotas.py``)."""
        excess = self.quotas.fd_excess() - len(closing)
        if excess <= 0:
            return
        victims = sorted(
            (c for c in self.connections if not c.busy and c.task is not None and c not in closing),
            key=lambda c: c.last_activity,
        )[:excess]
        if not victims:
            return
        quotas = self.quotas
        logger.warning(
            "closing %d connections, the longest idle first (%s): the logs have taken %d of the "
            "%d file descriptors kept for them (broker.fd.headroom; %d open, RLIMIT_NOFILE %s)",
            len(victims),
            _peers(victims),
            excess + len(closing),
            quotas.fd_headroom,
            quotas.open_fds_estimate,
            quotas.fd_limit,
        )
        for conn in victims:
            assert conn.task is not None
            conn.task.cancel()

    async def _watch_log_directory(self) -> None:
        logs = self.core.logs
        while True:
            await asyncio.sleep(LOG_DIR_CHECK_INTERVAL_S)
            reason = logs.directory_lost()
            if reason is not None:
                logger.error(
                    "log directory %s lost: %s. Stopping without writing to it; records "
                    "appended since it went are lost with it. Restore the directory or start "
                    "a broker on a new one.",
                    logs.root,
                    reason,
                )
                self.request_stop(f"log directory lost: {reason}")
                return

    async def _exit_when_idle(self, idle_exit_ms: int) -> None:
        check_s = min(max(idle_exit_ms / 4000, 0.02), 1.0)
        waiting_logged = False
        while True:
            await asyncio.sleep(check_s)
            if not self.connections and self.core.idle_for_ms() >= idle_exit_ms:
                # Prepared transactions of a two-phase owner end when the owner has been
                # quiet for their timeout, which only a running coordinator can tell (a
                # restart counts as activity): stay up until they are decided or aborted, or
                # a dead Spark driver's batch would hold back readers for days.
                waiting = self.core.transactions.coordinator.waits_on_owners()
                if not waiting:
                    self.request_stop(f"idle for {idle_exit_ms} ms (broker.idle.exit.ms)")
                    return
                if not waiting_logged:
                    logger.info(
                        "idle for broker.idle.exit.ms, but staying up: %d prepared "
                        "transactions wait for their owner's decision or timeout",
                        waiting,
                    )
                    waiting_logged = True

    # -----------------------------------------------------------------------------------------
    # Stop

    def request_stop(self, reason: str) -> None:
        """Ask :meth:`wait_stop_requested` to return (from a signal handler or idle exit)."""
        if not self._stop.is_set():
            self.stop_reason = reason
            logger.info("broker stopping: %s", reason)
            self._stop.set()

    async def wait_stop_requested(self) -> str:
        await self._stop.wait()
        return self.stop_reason or "stopped"

    async def close(self, timeout_s: float) -> None:
        """Stop accepting, finish requests in flight (at most ``timeout_s``), cut the rest."""
        self.stopping = True
        self.core.metrics.close()
        for task in self._tasks:
            task.cancel()
        for server in self._servers:
            server.close()
        self.core.replicas.wake_all()
        # Connections waiting for their next request are closed now; busy ones finish the
        # request they are serving (their loop checks ``stopping`` after each response).
        for conn in list(self.connections):
            if not conn.busy and conn.task is not None:
                conn.task.cancel()
        pending = [c.task for c in self.connections if c.task is not None]
        if pending:
            _, still = await asyncio.wait(pending, timeout=timeout_s)
            for task in still:
                task.cancel()
            if still:
                logger.warning("cut %d connections still busy after %.1f s", len(still), timeout_s)
                await asyncio.wait(still, timeout=1.0)
        self._remove_socket_file()

    def _remove_socket_file(self) -> None:
        """Remove the Unix socket file if it is still the one this broker bound: after its
        directory was replaced, the file at the path may be another broker's."""
        if self.unix_path is None or self._unix_file is None:
            return
        try:
            current = os.stat(self.unix_path)
        except FileNotFoundError:
            return
        if (current.st_dev, current.st_ino) == self._unix_file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)


def _listener_prefix(listener: Listener, config: object) -> str:
    """The key prefix errors about ``listener``'s TLS files name: its per-listener keys if
    it has overrides, else plain ``ssl.*``."""
    overrides = getattr(config, "listener_tls", {})
    return f"listener.name.{listener.scheme.lower()}." if listener.scheme in overrides else ""


def _call_soon(callback: Callable[..., object], *args: object) -> None:
    asyncio.get_running_loop().call_soon(callback, *args)


def _peers(conns: list[Connection]) -> str:
    """The first few peers of ``conns``, for a log line."""
    names = ", ".join(conn.peer for conn in conns[:LOGGED_PEERS])
    return names + (", ..." if len(conns) > LOGGED_PEERS else "")
