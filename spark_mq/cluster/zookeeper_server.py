"""A standalone ZooKeeper server run from Debian's ``zookeeper`` package, for local clusters and
tests.

The server is the real one: ``java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar
org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg``. ``zookeeper.jar``'s manifest names
every library it needs, so that classpath is complete; ``/etc/zookeeper/conf`` supplies the
logging configuration. We do not use the package's init script or its ``QuorumPeerMain``,
because a local cluster needs its own data directory and a free port, not ``/var/lib`` and 2181.

Files under ``data_dir`` (the server is the only writer of everything but ``zoo.cfg``):

    zoo.cfg            written by :meth:`ZooKeeperServer.start`, rewritten on every start
    zookeeper.log      the JVM's stdout and stderr, appended to across restarts
    version-2/         ZooKeeper's snapshots and transaction log (its own format)

Readiness is ZooKeeper's own four-letter words, whitelisted in ``zoo.cfg``: ``ruok`` answers
``imok`` once the server is up, and ``srvr`` answers ``Mode: standalone`` once it serves
clients. The AdminServer (an HTTP server on port 8080) is turned off so two local clusters
never fight over a port.

Threads: one :class:`ZooKeeperServer` is driven from one thread.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from spark_mq.errors import ConfigError, ZooKeeperNotInstalledError, ZooKeeperStartError

#: Where Debian's zookeeper package puts the server jar and its logging configuration.
DEBIAN_ZOOKEEPER_JAR: Final = Path("/usr/share/java/zookeeper.jar")
DEBIAN_ZOOKEEPER_CONF_DIR: Final = Path("/etc/zookeeper/conf")
SLF4J_SIMPLE_JAR: Final = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS: Final = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT: Final = (
    "install Debian's zookeeper package, which pulls in Java: `sudo apt-get install -y "
    "zookeeper` (scripts/test.sh does this when run as root)"
)

#: Tries at a fresh free port when the one picked was taken before the server bound it.
_BIND_ATTEMPTS: Final = 3


@dataclasses.dataclass(frozen=True, slots=True)
class ZooKeeperServerConfig:
    """How to run one standalone server. Validated at construction."""

    #: ZooKeeper's ``dataDir``; created if missing. Keeps znodes across restarts.
    data_dir: Path
    #: ``clientPort``; 0 picks a free loopback port at each start.
    client_port: int = 0
    #: ``clientPortAddress``: loopback by default, so a local cluster is not reachable from
    #: other hosts.
    host: str = "127.0.0.1"
    #: ``tickTime``: ZooKeeper's time unit. Sessions may last 2 to 20 ticks unless
    #: min/max_session_timeout_ms say otherwise.
    tick_time_ms: int = 500
    #: ``minSessionTimeout``: low, so tests can expire sessions quickly.
    min_session_timeout_ms: int = 1000
    #: ``maxSessionTimeout``: above Kafka's default zookeeper.session.timeout.ms (18 s).
    max_session_timeout_ms: int = 60_000
    #: How long :meth:`ZooKeeperServer.start` waits for ``ruok`` and ``srvr`` to answer.
    start_timeout_ms: int = 60_000
    #: How long :meth:`ZooKeeperServer.stop` waits after SIGTERM before SIGKILL.
    stop_timeout_ms: int = 10_000
    #: The JVM's maximum heap; ZooKeeper for a local cluster needs little.
    heap_mb: int = 256
    java_executable: str = "java"
    zookeeper_jar: Path = DEBIAN_ZOOKEEPER_JAR
    conf_dir: Path = DEBIAN_ZOOKEEPER_CONF_DIR

    def __post_init__(self) -> None:
        if not 0 <= self.client_port <= 65535:
            raise ConfigError(
                f"clientPort must be 0 (pick a free port) or 1-65535, got {self.client_port}",
                key="clientPort",
                value=self.client_port,
            )
        if self.tick_time_ms <= 0:
            raise ConfigError(
                f"tickTime must be positive, got {self.tick_time_ms}",
                key="tickTime",
                value=self.tick_time_ms,
            )
        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ConfigError(
                "minSessionTimeout must be positive and at most maxSessionTimeout, got "
                f"{self.min_session_timeout_ms} and {self.max_session_timeout_ms}",
                key="minSessionTimeout",
                value=self.min_session_timeout_ms,
            )

    def zoo_cfg(self, port: int) -> str:
        """The ``zoo.cfg`` text for a server listening on ``port``."""
        return "".join(
            f"{key}={value}\n"
            for key, value in (
                ("tickTime", self.tick_time_ms),
                ("dataDir", self.data_dir.resolve()),
                ("clientPort", port),
                ("clientPortAddress", self.host),
                ("minSessionTimeout", self.min_session_timeout_ms),
                ("maxSessionTimeout", self.max_session_timeout_ms),
                ("maxClientCnxns", 0),
                ("admin.enableServer", "false"),
                ("4lw.commands.whitelist", "ruok,srvr"),
                # Purging old snapshots keeps a long-lived local cluster's directory small.
                ("autopurge.snapRetainCount", 3),
                ("autopurge.purgeInterval", 1),
            )
        )


def check_installed(config: ZooKeeperServerConfig) -> str:
    """The Java executable's path; raises :class:`ZooKeeperNotInstalledError` naming what is
    missing (Java or the package) and how to install it."""
    java = shutil.which(config.java_executable)
    if java is None:
        raise ZooKeeperNotInstalledError(
            f"Java ({config.java_executable!r}) is not on PATH, and ZooKeeper runs on it: "
            f"{INSTALL_HINT}",
            missing="java",
        )
    if not config.zookeeper_jar.is_file():
        raise ZooKeeperNotInstalledError(
            f"the ZooKeeper server jar {config.zookeeper_jar} does not exist: {INSTALL_HINT}",
            missing="zookeeper",
        )
    return java


def four_letter_word(host: str, port: int, word: str, *, timeout_s: float = 2.0) -> str:
    """Send one of ZooKeeper's four-letter words and return the whole answer ('' if the
    server closed the connection without one). Raises ``OSError`` if nothing listens."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _is_listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def free_loopback_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now. Another process may take it before we bind it, so
    callers retry on 'address in use'."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class ZooKeeperServer:
    """One standalone ZooKeeper server process.

    Example (needs Debian's zookeeper package)::

        with ZooKeeperServer(ZooKeeperServerConfig(data_dir=Path("/tmp/zk"))) as zk:
            print(zk.connect_string)   # 127.0.0.1:PORT, for zookeeper.connect
    """

    def __init__(
        self,
        config: ZooKeeperServerConfig,
        *,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._monotonic_s = monotonic_s
        self._process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def log_path(self) -> Path:
        return self.config.data_dir / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        """``host:port`` for ``zookeeper.connect``; only while running."""
        if self.port is None:
            raise ZooKeeperStartError(
                "the ZooKeeper server is not running: call start() first",
                log_path=str(self.log_path),
            )
        return f"{self.config.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server and return once it serves clients.

        Raises :class:`ZooKeeperNotInstalledError` without Java or the package, and
        :class:`ZooKeeperStartError` (with the log's tail) if the server exits or does not
        answer within ``start_timeout_ms``.
        """
        if self.is_running():
            return
        java = check_installed(self.config)
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        attempts = 1 if self.config.client_port else _BIND_ATTEMPTS
        for attempt in range(attempts):
            port = self.config.client_port or free_loopback_port(self.config.host)
            # Another server already on the port would answer our readiness checks in our
            # server's place, so a port in use is refused up front.
            if _is_listening(self.config.host, port):
                raise ZooKeeperStartError(
                    f"clientPort {self.config.host}:{port} is already in use (another "
                    "ZooKeeper?); stop it or choose another port (0 picks a free one)",
                    log_path=str(self.log_path),
                )
            self._spawn(java, port)
            try:
                self._wait_until_serving(port)
            except ZooKeeperStartError:
                bind_failed = "Address already in use" in self._log_tail()
                self.stop()
                if bind_failed and attempt + 1 < attempts:
                    continue
                raise
            self.port = port
            return

    def _spawn(self, java: str, port: int) -> None:
        cfg_path = self.config.data_dir / "zoo.cfg"
        cfg_path.write_text(self.config.zoo_cfg(port), encoding="utf-8")
        classpath = f"{self.config.conf_dir}:{self.config.zookeeper_jar}"
        # zookeeper.jar logs through SLF4J, which discards everything without a binding;
        # Debian's libslf4j-java (a dependency of the package) ships the simple one, which
        # writes INFO and above to stderr, hence to zookeeper.log.
        if SLF4J_SIMPLE_JAR.is_file():
            classpath += f":{SLF4J_SIMPLE_JAR}"
        command = [
            java,
            f"-Xmx{self.config.heap_mb}m",
            # ZooKeeper's JMX beans are of no use to a local cluster and cost start-up time.
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(cfg_path),
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"\n== starting ZooKeeper on {self.config.host}:{port}\n".encode())
            log.flush()
            # A new session: a Ctrl-C meant for the caller's terminal must not kill the
            # server out of order, and a local cluster outlives the command that started it.
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.config.data_dir,
                start_new_session=True,
            )

    def _wait_until_serving(self, port: int) -> None:
        assert self._process is not None
        deadline = self._monotonic_s() + self.config.start_timeout_ms / 1000
        last_answer = "no answer yet"
        while self._monotonic_s() < deadline:
            if self._process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with status {self._process.returncode} while starting "
                    f"on {self.config.host}:{port}; its log {self.log_path} ends with:\n"
                    f"{self._log_tail()}",
                    log_path=str(self.log_path),
                )
            try:
                if four_letter_word(self.config.host, port, "ruok").strip() == "imok":
                    last_answer = four_letter_word(self.config.host, port, "srvr")
                    if "Mode: standalone" in last_answer:
                        return
            except OSError as exc:
                last_answer = str(exc)
            time.sleep(0.1)
        raise ZooKeeperStartError(
            f"ZooKeeper on {self.config.host}:{port} did not serve clients within "
            f"{self.config.start_timeout_ms} ms (last answer: {last_answer.strip()!r}); its log "
            f"{self.log_path} ends with:\n{self._log_tail()}",
            log_path=str(self.log_path),
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return f"(could not read the log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``stop_timeout_ms``. Idempotent."""
        process, self._process, self.port = self._process, None, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=self.config.stop_timeout_ms / 1000)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
