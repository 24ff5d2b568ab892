"""The broker's ZooKeeper client: kazoo, with connection states handled as Kafka's
ZooKeeperClient handles them.

kazoo reports three states, which mean for a broker:

    CONNECTED   the session is usable.
    SUSPENDED   the connection dropped; the session (and our ephemeral znodes) may survive.
                Anything that needs agreement pauses: :meth:`ZkClient.require_connected`
                refuses, and callers wait with :meth:`ZkClient.wait_connected`.
    LOST        the session expired (or we closed it): our ephemeral znodes are gone, so a
                controller stops acting at once and a broker re-registers when kazoo, which
                reconnects by itself, reports CONNECTED again on a new session.

kazoo calls state listeners on its connection thread and they must not block it (a blocked
listener stalls pings and so expires the session it is trying to save). The listener here
only puts the state on a queue; one event thread (``zk-events-<connect>``) runs the handlers
and the watch callbacks in order, as Kafka's controller runs its events on one thread. So
every :class:`SessionHandler` method and every watch callback runs on that thread, and may
block on ZooKeeper calls.

Errors from kazoo are mapped to :mod:`spark_mq.errors` by :func:`translate_errors`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import queue
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Final, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from spark_mq.errors import ConfigError, ZooKeeperConnectionError

from . import znodes

log = logging.getLogger(__name__)

#: kazoo errors that mean "no usable session right now".
_CONNECTION_ERRORS: Final = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
)


@dataclasses.dataclass(frozen=True, slots=True)
class ZkClientConfig:
    """A broker's ZooKeeper settings, Kafka's names and defaults."""

    #: ``zookeeper.connect``: ``host:port[,host:port...][/chroot]``.
    connect: str
    #: ``zookeeper.session.timeout.ms``: how long ZooKeeper keeps a silent session (and its
    #: ephemeral znodes). Kafka's default since 2.5.
    session_timeout_ms: int = 18_000
    #: ``zookeeper.connection.timeout.ms``: how long to wait for the first connection; None
    #: means the session timeout, as in Kafka.
    connection_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if not self.connect.strip():
            raise ConfigError(
                "zookeeper.connect must name at least one host:port",
                key="zookeeper.connect",
                value=self.connect,
            )
        if self.session_timeout_ms <= 0:
            raise ConfigError(
                f"zookeeper.session.timeout.ms must be positive, got {self.session_timeout_ms}",
                key="zookeeper.session.timeout.ms",
                value=self.session_timeout_ms,
            )

    @property
    def effective_connection_timeout_ms(self) -> int:
        return self.connection_timeout_ms or self.session_timeout_ms


class SessionEvent(enum.Enum):
    """What a change of kazoo state means to a broker (see the module docstring)."""

    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"  # same session: ephemeral znodes and watches kept
    EXPIRED = "expired"  # ephemeral znodes gone
    NEW_SESSION = "new_session"  # connected again after EXPIRED: re-register


class SessionHandler(Protocol):
    def on_session_event(self, event: SessionEvent) -> None: ...


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Map kazoo's connection errors to :class:`ZooKeeperConnectionError` saying ``what``
    failed; other kazoo errors (NodeExists, BadVersion, ...) pass through for the caller,
    which knows what they mean there."""
    try:
        yield
    except _CONNECTION_ERRORS as exc:
        raise ZooKeeperConnectionError(
            f"{what} failed: no usable ZooKeeper session ({type(exc).__name__}); the client "
            "reconnects by itself, retry once it has"
        ) from exc


class ZkClient:
    """One ZooKeeper session (kazoo) plus the event thread that runs handlers and watches."""

    def __init__(self, config: ZkClientConfig) -> None:
        self.config = config
        self.kazoo = KazooClient(
            hosts=config.connect,
            timeout=config.session_timeout_ms / 1000,
            # Keep reconnecting forever: a broker outlives ZooKeeper restarts.
            connection_retry={"max_tries": -1, "max_delay": 1.0},
            command_retry=None,
        )
        self._handlers: list[SessionHandler] = []
        self._events: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._connected = threading.Event()
        self._expired = False
        self._closing = False
        self._thread = threading.Thread(
            target=self._run_events, name=f"zk-events-{config.connect}", daemon=True
        )

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def start(self) -> None:
        """Connect (waiting up to ``zookeeper.connection.timeout.ms``) and make sure Kafka's
        persistent parent znodes exist."""
        self._thread.start()
        self.kazoo.add_listener(self._on_kazoo_state)
        timeout_s = self.config.effective_connection_timeout_ms / 1000
        try:
            with warnings.catch_warnings():
                # kazoo warns when the chroot is missing; _ensure_chroot creates it below.
                warnings.filterwarnings("ignore", message="No chroot path exists")
                self.kazoo.start(timeout=timeout_s)
        except KazooTimeoutError as exc:
            self.close()
            raise ZooKeeperConnectionError(
                f"could not connect to ZooKeeper at {self.config.connect} within "
                f"{timeout_s:g} s (zookeeper.connection.timeout.ms): is it running?"
            ) from exc
        self._connected.set()
        with translate_errors("creating Kafka's persistent znodes"):
            self._ensure_chroot(timeout_s)
            for path in znodes.PERSISTENT_PATHS:
                self.kazoo.ensure_path(path)

    def _ensure_chroot(self, timeout_s: float) -> None:
        """Create the chroot of ``zookeeper.connect`` if missing, as Kafka's broker does: a
        chrooted session cannot create its own root, so a short session without it does."""
        hosts, slash, chroot = self.config.connect.partition("/")
        # Through the chroot, "/" is the chroot's own znode: None when it is missing.
        if not slash or self.kazoo.exists("/") is not None:
            return
        root = KazooClient(hosts=hosts, timeout=self.config.session_timeout_ms / 1000)
        root.start(timeout=timeout_s)
        try:
            root.ensure_path("/" + chroot)
        finally:
            root.stop()
            root.close()

    def close(self) -> None:
        """Close the session: ZooKeeper deletes our ephemeral znodes at once."""
        self._closing = True
        self._connected.clear()
        try:
            self.kazoo.stop()
            self.kazoo.close()
        finally:
            self._events.put(None)
            if self._thread.is_alive() and threading.current_thread() is not self._thread:
                self._thread.join(timeout=10)

    def __enter__(self) -> ZkClient:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -----------------------------------------------------------------------------------------
    # Session state

    @property
    def session_id(self) -> int:
        """The current session's id (changes after an expiry)."""
        session_id, _password = self.kazoo.client_id or (0, b"")
        return int(session_id)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def require_connected(self, what: str) -> None:
        """Refuse to start ``what`` while the connection is suspended or the session lost."""
        if not self._connected.is_set():
            raise ZooKeeperConnectionError(
                f"{what} needs ZooKeeper's agreement and the session is {self.kazoo.state}; "
                "retry once it is connected"
            )

    def wait_connected(self, timeout_ms: int) -> bool:
        return self._connected.wait(timeout_ms / 1000)

    def add_handler(self, handler: SessionHandler) -> None:
        self._handlers.append(handler)

    def submit(self, event: Callable[[], None]) -> None:
        """Run ``event`` on the event thread, after the events already queued."""
        self._events.put(event)

    def _on_kazoo_state(self, state: str) -> None:
        # On kazoo's connection thread: never block here (see the module docstring). The
        # connected flag is set here, not on the event thread, so that require_connected()
        # refuses as soon as kazoo knows.
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        if not self._closing:
            self._events.put(lambda: self._dispatch_state(state))

    def _dispatch_state(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            event = SessionEvent.SUSPENDED
        elif state == KazooState.LOST:
            self._expired = True
            event = SessionEvent.EXPIRED
        elif self._expired:
            self._expired = False
            event = SessionEvent.NEW_SESSION
        else:
            event = SessionEvent.RECONNECTED
        log.info("ZooKeeper session %#x: %s", self.session_id, event.value)
        for handler in list(self._handlers):
            handler.on_session_event(event)

    def _run_events(self) -> None:
        while (event := self._events.get()) is not None:
            if self._closing:
                continue
            try:
                event()
            except Exception:
                # An event's failure must not stop the thread that runs every later event
                # (the next one may be the session expiry that fences a controller).
                log.exception("ZooKeeper event failed")

    # -----------------------------------------------------------------------------------------
    # Reads and watches

    def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """The znode's data and stat, or None if it does not exist."""
        with translate_errors(f"reading {path}"):
            try:
                data, stat = self.kazoo.get(path)
            except NoNodeError:
                return None
        return data, stat

    def children(self, path: str) -> list[str]:
        with translate_errors(f"listing {path}"):
            try:
                return sorted(self.kazoo.get_children(path))
            except NoNodeError:
                return []

    def watch_data(
        self, path: str, callback: Callable[[bytes | None, ZnodeStat | None], None]
    ) -> None:
        """Call ``callback(data, stat)`` on the event thread now and on every change of
        ``path`` (data None: it does not exist). The watch is re-armed after reconnects."""

        def on_change(data: bytes | None, stat: ZnodeStat | None, _event: object = None) -> None:
            self.submit(lambda: callback(data, stat))

        self.kazoo.DataWatch(path, on_change)

    def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> None:
        """Call ``callback(children)`` on the event thread now and on every change."""

        def on_change(children: list[str]) -> None:
            snapshot = sorted(children)
            self.submit(lambda: callback(snapshot))

        self.kazoo.ChildrenWatch(path, on_change)
