"""A cluster on one machine: a ZooKeeper server and N broker processes under one directory,
for trying a cluster and for every cluster test (``spark-mq cluster``, :class:`LocalCluster`).

Files under the cluster directory ``DIR`` (each written only by the process named)::

    DIR/cluster.json              LocalCluster, atomically (write to .tmp, fsync, rename)
    DIR/zookeeper/                ZooKeeperServer: zoo.cfg, zookeeper.log, ZooKeeper's data
    DIR/broker-<id>/broker.properties   LocalCluster, at cluster start: the broker's settings
    DIR/broker-<id>/logs/         the broker: its log directory
    DIR/broker-<id>/broker.out    the broker's stdout and stderr (its JSON log), appended

``cluster.json`` says what runs, and is rewritten as brokers come and go::

    {"zookeeper": "127.0.0.1:P", "zookeeper_pid": N, "bootstrap_servers": "127.0.0.1:P1,...",
     "brokers": {"1": {"pid": N, "host": "127.0.0.1", "port": P, "log_dir": "...",
                       "listen_port": P}, ...}}

A stopped or killed broker keeps its entry with ``pid`` and ``port`` null (``listen_port``,
the port it listens on again when started, stays);
``bootstrap_servers`` lists the running ones. ``zookeeper_pid`` is null when the cluster
uses a ZooKeeper it did not start (``zookeeper=HOST:PORT[/chroot]``), which it never stops.

Every process is a real, detached one (its own session, so a Ctrl-C in the terminal that
started the cluster does not kill it out of order): brokers run
``python -m spark_mq.broker --config DIR/broker-<id>/broker.properties`` with a listener on
port 0 the first time; the port it gets (read from its ``/brokers/ids/<id>`` znode) is then
written into its properties, so it listens there again after every restart, as a real
broker's configured port (``start_broker(new_port=True)`` moves it). A pid is
signalled only while ``/proc/<pid>/cmdline`` still names that broker's properties file (or,
for ZooKeeper, this cluster's ``zoo.cfg``), so a pid the system reused for another process
is never killed.

A broker killed with SIGKILL leaves its registration behind until ZooKeeper expires its
session (``zookeeper.session.timeout.ms``); a new process with the same ``broker.id`` would
be refused meanwhile (Kafka refuses it too), so :meth:`LocalCluster.start_broker` waits for
the old registration to go first.

Threads: one LocalCluster is used from one thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.dir_files import Endpoint
from spark_mq.broker.inter_broker import InterBrokerTransport, inter_broker_transport
from spark_mq.broker.properties_file import read_properties_file
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.cluster import zk_view
from spark_mq.cluster.inter_broker_user import (
    broker_user_properties,
    needs_broker_user,
    new_password,
    password_in,
    register_broker_user,
)
from spark_mq.cluster.processes import POLL_S, cmdline, process_is, tail, wait_gone
from spark_mq.cluster.zk_view import PartitionView
from spark_mq.cluster.zookeeper_server import MAIN_CLASS, ZooKeeperServer, ZooKeeperServerConfig
from spark_mq.errors import LocalClusterError, SparkMQError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse
from spark_mq.storage.checkpoint_file import atomic_write_bytes

# Re-exported: callers import these from here.
__all__ = [
    "CLUSTER_FILE",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "DEFAULT_START_TIMEOUT_MS",
    "STOP_TIMEOUT_S",
    "LocalCluster",
    "PartitionView",
    "process_is",
]

CLUSTER_FILE: Final = "cluster.json"
#: Kafka's default zookeeper.session.timeout.ms; tests pass a few seconds.
DEFAULT_SESSION_TIMEOUT_MS: Final = 18_000
#: How long a broker may take to start and register, or a controller to be elected.
DEFAULT_START_TIMEOUT_MS: Final = 60_000
#: How long a broker may take to stop after SIGTERM before it is killed. Its own
#: broker.shutdown.timeout.ms is 10 s by default.
STOP_TIMEOUT_S: Final = 30.0


class LocalCluster:
    """ZooKeeper and N brokers on this machine, under ``directory``.

    ``zookeeper``: ``HOST:PORT[/chroot]`` of a running ZooKeeper to use instead of starting
    one in ``DIR/zookeeper``. ``broker_properties``: more settings for every broker (Kafka's
    keys). Broker ids are 1..N. ``listener_name``: the name of each broker's one TCP listener
    (``listeners=<name>://127.0.0.1:<port>``), also its ``inter.broker.listener.name``:
    ``SSL`` runs the cluster over TLS with the ``ssl.*`` files of ``broker_properties``, and
    this object then connects to the brokers as they connect to each other. ``SASL_SSL`` (or
    ``SASL_PLAINTEXT``) adds SASL/SCRAM-SHA-512 between brokers: the brokers log in as user
    ``broker`` with a random password kept in their properties files (mode 0600), whose
    salted credential is written to ZooKeeper before they start
    (:mod:`~spark_mq.cluster.inter_broker_user`).

    Example (needs Debian's zookeeper package)::

        with LocalCluster("/tmp/mq-cluster", brokers=3) as cluster:
            print(cluster.bootstrap_servers, cluster.controller_id())
            cluster.kill(cluster.controller_id())   # another broker becomes controller
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        brokers: int = 3,
        *,
        zookeeper: str | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        broker_properties: Mapping[str, str] | None = None,
        start_timeout_ms: int = DEFAULT_START_TIMEOUT_MS,
        listener_name: str = "PLAINTEXT",
    ) -> None:
        if brokers < 1:
            raise LocalClusterError(f"a local cluster needs at least 1 broker, got {brokers}")
        self.directory = Path(directory).resolve()
        self.broker_ids = list(range(1, brokers + 1))
        self.session_timeout_ms = session_timeout_ms
        self.start_timeout_ms = start_timeout_ms
        self._external_zookeeper = zookeeper
        self._broker_properties = dict(broker_properties or {})
        #: The name of the brokers' one TCP listener, also their inter-broker listener: SSL
        #: runs the cluster over TLS (the ssl.* settings come in broker_properties).
        self.listener_name = listener_name.upper()
        #: The password of user ``broker`` on a SASL listener (chosen at start).
        self._broker_password: str | None = None
        self._zookeeper: ZooKeeperServer | None = None
        self._zk: ZkClient | None = None
        # Broker processes this object started, by id, so they are reaped when they end.
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self.state: dict[str, Any] = {
            "zookeeper": zookeeper,
            "zookeeper_pid": None,
            "bootstrap_servers": "",
            "brokers": {},
        }

    # -----------------------------------------------------------------------------------------
    # Opening an existing cluster (the CLI's later commands)

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> LocalCluster:
        """The cluster that ``DIR/cluster.json`` describes (started earlier, maybe by
        another process); its settings are those in the brokers' properties files."""
        root = Path(directory).resolve()
        path = root / CLUSTER_FILE
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise LocalClusterError(
                f"{root} holds no local cluster ({CLUSTER_FILE} is missing): start one with "
                f"`spark-mq cluster start --dir {root} --brokers N`"
            ) from None
        except (OSError, ValueError) as exc:
            raise LocalClusterError(f"{path} cannot be read: {exc}", log_path=str(path)) from exc
        if not isinstance(state, dict) or not isinstance(state.get("brokers"), dict):
            raise LocalClusterError(f"{path} is not a cluster file: no 'brokers' object")
        ids = sorted(int(b) for b in state["brokers"])
        # A ZooKeeper with a pid is the cluster's own (restarted by start() if it died);
        # without one it was given by address.
        external = None if state.get("zookeeper_pid") is not None else state.get("zookeeper")
        cluster = cls(root, len(ids) or 1, zookeeper=external)
        cluster.broker_ids = ids
        props = cluster._read_properties(ids[0]) if ids else {}
        cluster.listener_name = props.get("inter.broker.listener.name") or "PLAINTEXT"
        cluster.state = state
        timeout = (
            cluster._read_properties(ids[0]).get("zookeeper.session.timeout.ms") if ids else None
        )
        if timeout:
            cluster.session_timeout_ms = int(timeout)
        return cluster

    # -----------------------------------------------------------------------------------------
    # Paths and state

    @property
    def cluster_file(self) -> Path:
        return self.directory / CLUSTER_FILE

    def broker_dir(self, broker_id: int) -> Path:
        return self.directory / f"broker-{broker_id}"

    def properties_path(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "broker.properties"

    def log_dir(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "logs"

    def output_path(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "broker.out"

    @property
    def zookeeper_dir(self) -> Path:
        return self.directory / "zookeeper"

    @property
    def zookeeper_connect(self) -> str:
        connect = self.state.get("zookeeper")
        if not connect:
            raise LocalClusterError(f"the cluster in {self.directory} has no ZooKeeper running")
        return str(connect)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,...`` of the running brokers, for clients' ``bootstrap.servers``."""
        return str(self.state["bootstrap_servers"])

    def broker_server(self, broker_id: int) -> str:
        """``host:port`` of one broker as it last started (a client bootstrapped with it
        alone reaches the whole cluster)."""
        self._require_known(broker_id)
        entry = self.state["brokers"][str(broker_id)]
        return f"{entry['host']}:{entry['port']}"

    def metrics_url(self, broker_id: int) -> str | None:
        """The Prometheus endpoint of a running broker (from its ``broker.json``), or None
        while it has none (not running, still starting, or ``metrics.port=-1``)."""
        self._require_known(broker_id)
        if not self.broker_running(broker_id):
            return None
        endpoint = Endpoint.read(self.log_dir(broker_id))
        if endpoint is None or endpoint.metrics_port is None:
            return None
        return f"http://127.0.0.1:{endpoint.metrics_port}/metrics"

    def _entry(self, broker_id: int) -> dict[str, Any]:
        entry: dict[str, Any] = self.state["brokers"].setdefault(
            str(broker_id),
            {
                "pid": None,
                "host": "127.0.0.1",
                "port": None,
                "log_dir": str(self.log_dir(broker_id)),
            },
        )
        return entry

    def _save(self) -> None:
        running = [
            f"{entry['host']}:{entry['port']}"
            for _, entry in sorted(self.state["brokers"].items(), key=lambda kv: int(kv[0]))
            if entry["pid"] is not None and entry["port"] is not None
        ]
        self.state["bootstrap_servers"] = ",".join(running)
        text = json.dumps(self.state, indent=2, sort_keys=False) + "\n"
        atomic_write_bytes(self.cluster_file, text.encode("utf-8"))

    def _read_properties(self, broker_id: int) -> dict[str, str]:
        props = {}
        with contextlib.suppress(FileNotFoundError):
            for line in self.properties_path(broker_id).read_text(encoding="utf-8").splitlines():
                key, sep, value = line.partition("=")
                if sep and not key.startswith("#"):
                    props[key.strip()] = value.strip()
        return props

    def broker_running(self, broker_id: int) -> bool:
        """Whether broker ``broker_id``'s process runs (and is ours; see the module doc)."""
        pid = self._entry(broker_id)["pid"]
        child = self._children.get(broker_id)
        if child is not None and child.pid == pid:
            # Our own child's pid cannot be reused before we reap it. (Its command line is
            # briefly empty while it execs, so it is not the test for a fresh child.)
            return child.poll() is None
        return process_is(pid, str(self.properties_path(broker_id)))

    def zookeeper_running(self) -> bool:
        if self._zookeeper is not None:
            return self._zookeeper.is_running()
        return process_is(self.state.get("zookeeper_pid"), str(self.zookeeper_dir / "zoo.cfg"))

    # -----------------------------------------------------------------------------------------
    # ZooKeeper

    def _zk_session(self) -> ZkClient:
        """A session of our own, to see registrations and the controller."""
        if self._zk is None:
            zk = ZkClient(ZkClientConfig(self.zookeeper_connect, session_timeout_ms=10_000))
            zk.start()
            self._zk = zk
        return self._zk

    def _start_zookeeper(self) -> None:
        if self._external_zookeeper is not None:
            self.state["zookeeper"], self.state["zookeeper_pid"] = self._external_zookeeper, None
            return
        if self.zookeeper_running():
            return  # started by an earlier `cluster start`, still serving
        server = ZooKeeperServer(
            ZooKeeperServerConfig(
                data_dir=self.zookeeper_dir,
                # Let the brokers' session timeout through ZooKeeper's bounds.
                min_session_timeout_ms=min(1000, self.session_timeout_ms),
                max_session_timeout_ms=max(60_000, self.session_timeout_ms),
            )
        )
        server.start()
        self._zookeeper = server
        self.state["zookeeper"], self.state["zookeeper_pid"] = server.connect_string, server.pid

    def controller_id(self) -> int | None:
        """The broker id ``/controller`` names now; None while there is no controller."""
        return zk_view.controller_id(self._zk_session())

    def controller_epoch(self) -> int | None:
        return zk_view.controller_epoch(self._zk_session())

    def registered_brokers(self) -> dict[int, znodes.BrokerRegistration]:
        """The brokers registered under ``/brokers/ids`` now."""
        return zk_view.registered_brokers(self._zk_session())

    def partitions(self) -> list[PartitionView]:
        """Every partition of every topic as ZooKeeper holds it now
        (:func:`~spark_mq.cluster.zk_view.partitions`)."""
        return zk_view.partitions(self._zk_session())

    # -----------------------------------------------------------------------------------------
    # Start

    def start(self) -> LocalCluster:
        """Start ZooKeeper (unless given) and every broker that does not run; return once all
        are registered and a controller is elected, with ``cluster.json`` written."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.cluster_file.exists():
            # A restart of a stopped cluster keeps ZooKeeper's data and the brokers' logs.
            previous = LocalCluster.open(self.directory)
            self.state["zookeeper_pid"] = previous.state.get("zookeeper_pid")
            if self._external_zookeeper is None and previous.zookeeper_running():
                self.state["zookeeper"] = previous.state.get("zookeeper")
            for key, entry in previous.state["brokers"].items():
                self.state["brokers"][key] = entry
            self.broker_ids = sorted(set(self.broker_ids) | set(previous.broker_ids))
        try:
            self._start_zookeeper()
            self._register_broker_user()
            for broker_id in self.broker_ids:
                if not self.broker_running(broker_id):
                    self._write_properties(broker_id)
            self._save()
            for broker_id in self.broker_ids:
                if not self.broker_running(broker_id):
                    self._spawn(broker_id)
            for broker_id in self.broker_ids:
                self._wait_registered(broker_id)
            self._wait_for(
                lambda: self.controller_id() in self.registered_brokers(),
                "a controller to be elected",
            )
            for broker_id in self.broker_ids:
                self._wait_serving(broker_id)
        except BaseException:
            self._save()
            raise
        self._save()
        return self

    def _register_broker_user(self) -> None:
        """On a SASL listener: choose the brokers' password (the one their properties
        already hold on a restart) and write its salted credential to ZooKeeper."""
        if not needs_broker_user(self.listener_name):
            return
        if self._broker_password is None:
            for broker_id in self.broker_ids:
                held = password_in(self.listener_name, self._read_properties(broker_id))
                if held:
                    self._broker_password = held
                    break
            else:
                self._broker_password = new_password()
        register_broker_user(self._zk_session(), self._broker_password)

    def _write_properties(self, broker_id: int) -> None:
        props = {
            "broker.id": str(broker_id),
            "log.dirs": str(self.log_dir(broker_id)),
            # A free port the first time; then the port it got, kept across restarts as a
            # real broker's configured port is (see _pin_port).
            "listeners": self._listeners(self._entry(broker_id).get("listen_port") or 0),
            **(
                {"inter.broker.listener.name": self.listener_name}
                if self.listener_name != "PLAINTEXT"
                else {}
            ),
            "zookeeper.connect": self.zookeeper_connect,
            "zookeeper.session.timeout.ms": str(self.session_timeout_ms),
            # Kafka's default of 3 would leave a 1- or 2-broker cluster without group and
            # transaction coordinators (Kafka's quickstart lowers them the same way).
            "offsets.topic.replication.factor": str(min(3, len(self.broker_ids))),
            "transaction.state.log.replication.factor": str(min(3, len(self.broker_ids))),
            "half.messages.topic.replication.factor": str(min(3, len(self.broker_ids))),
            "half.messages.topic.min.isr": str(min(2, len(self.broker_ids))),
            # Prometheus metrics on a free port, recorded in the broker's broker.json
            # (metrics_url(id); `spark-mq cluster status` lists them).
            "metrics.port": "0",
            **(
                broker_user_properties(self.listener_name, self._broker_password)
                if self._broker_password is not None
                else {}
            ),
            **self._broker_properties,
        }
        self.broker_dir(broker_id).mkdir(parents=True, exist_ok=True)
        text = "# Written by spark-mq cluster start; start-broker reuses it.\n" + "".join(
            f"{key}={value}\n" for key, value in props.items()
        )
        # 0600: with a SASL listener the file holds the brokers' password.
        atomic_write_bytes(self.properties_path(broker_id), text.encode("utf-8"), mode=0o600)

    def _spawn(self, broker_id: int) -> None:
        path = self.properties_path(broker_id)
        if not path.exists():
            raise LocalClusterError(
                f"broker {broker_id} has no settings ({path} is missing): is it a broker of "
                f"this cluster? (ids: {', '.join(map(str, self.broker_ids))})"
            )
        # A killed predecessor's registration lives until its session expires, and a new
        # broker with its id would be refused until then (see the module docstring).
        zk = self._zk_session()
        self._wait_for(
            lambda: zk.get(znodes.broker_path(broker_id)) is None,
            f"the registration of broker {broker_id}'s previous process to expire",
            timeout_s=self.session_timeout_ms / 1000 + self.start_timeout_ms / 1000,
        )
        with open(self.output_path(broker_id), "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "spark_mq.broker", "--config", str(path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.broker_dir(broker_id),
                start_new_session=True,
            )
        self._children[broker_id] = process
        entry = self._entry(broker_id)
        entry.update(pid=process.pid, port=None)

    def _wait_registered(self, broker_id: int) -> None:
        zk = self._zk_session()
        found: list[znodes.BrokerRegistration] = []

        def registered() -> bool:
            if not self.broker_running(broker_id):
                self._entry(broker_id).update(pid=None, port=None)
                child = self._children.get(broker_id)
                status = "" if child is None else f" with status {child.returncode}"
                raise LocalClusterError(
                    f"broker {broker_id} exited{status} while starting; "
                    f"{self.output_path(broker_id)} ends with:\n"
                    f"{tail(self.output_path(broker_id))}",
                    log_path=str(self.output_path(broker_id)),
                )
            data = zk.get(znodes.broker_path(broker_id))
            if data is not None:
                found.append(znodes.BrokerRegistration.decode(broker_id, data[0]))
            return bool(found)

        self._wait_for(registered, f"broker {broker_id} to register")
        endpoint = found[0].endpoint()
        self._entry(broker_id).update(host=endpoint.host, port=endpoint.port)
        self._pin_port(broker_id, endpoint.port)

    def _wait_serving(self, broker_id: int) -> None:
        """Wait until the broker has the controller's view of the cluster: its Metadata
        answer names a controller and lists every registered broker. Until the controller's
        first UpdateMetadata reaches it, a broker knows only itself, and a client that
        bootstraps from it would see a one-broker cluster."""
        entry = self._entry(broker_id)
        address = BrokerAddress(str(entry["host"]), int(entry["port"]))

        transport = self._transport(broker_id)

        def serving() -> bool:
            conn = transport.connection(address)
            try:
                conn.connect()
                answer: MetadataResponse = conn.request(MetadataRequest([]), timeout_s=5)
            except (SparkMQError, OSError):
                return False
            finally:
                conn.close()
            listed = {b.node_id for b in answer.brokers}
            return answer.controller_id >= 0 and listed == set(self.registered_brokers())

        self._wait_for(serving, f"broker {broker_id} to learn the cluster from the controller")

    def _listeners(self, port: int) -> str:
        """The ``listeners`` value of a broker on ``port`` (0: a free one)."""
        return f"{self.listener_name}://127.0.0.1:{port}"

    def _transport(self, broker_id: int) -> InterBrokerTransport:
        """How this object connects to broker ``broker_id`` (to see it serve): as the
        brokers connect to each other, with the TLS of its properties file if its listener
        is SSL."""
        props = read_properties_file(self.properties_path(broker_id))
        return inter_broker_transport(ServerConfig.from_properties(props))

    def _pin_port(self, broker_id: int, port: int | None) -> None:
        """Keep the port a broker got from ``PLAINTEXT://127.0.0.1:0`` for its restarts, so
        the ``bootstrap.servers`` printed by ``cluster start`` stay valid, as a real
        cluster's configured ports do (a listener set by the caller is left alone)."""
        path = self.properties_path(broker_id)
        text = path.read_text(encoding="utf-8")
        free = f"listeners={self._listeners(0)}\n"
        if port is None or free not in text:
            return
        self._entry(broker_id)["listen_port"] = port
        pinned = text.replace(free, f"listeners={self._listeners(port)}\n")
        atomic_write_bytes(path, pinned.encode("utf-8"), mode=0o600)

    def _wait_for(
        self, condition: Callable[[], bool], what: str, *, timeout_s: float | None = None
    ) -> None:
        limit_s = self.start_timeout_ms / 1000 if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        while not condition():
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"timed out after {limit_s:g} s waiting for {what} (cluster in "
                    f"{self.directory}; each broker's output is in broker-<id>/broker.out)"
                )
            time.sleep(POLL_S)

    def start_broker(self, broker_id: int, *, new_port: bool = False) -> None:
        """Start broker ``broker_id`` again with the same settings (after a stop or kill),
        on the port it had, or with ``new_port`` on a free one (as a broker moved to another
        address would be)."""
        self._require_known(broker_id)
        if self.broker_running(broker_id):
            return
        if new_port:
            entry = self._entry(broker_id)
            if entry.get("listen_port"):
                path = self.properties_path(broker_id)
                text = path.read_text(encoding="utf-8").replace(
                    f"listeners={self._listeners(entry['listen_port'])}\n",
                    f"listeners={self._listeners(0)}\n",
                )
                atomic_write_bytes(path, text.encode("utf-8"))
                entry["listen_port"] = None
        try:
            self._spawn(broker_id)
            self._wait_registered(broker_id)
            self._wait_serving(broker_id)
        finally:
            self._save()

    # -----------------------------------------------------------------------------------------
    # Faults and stops

    def _require_known(self, broker_id: int) -> None:
        if broker_id not in self.broker_ids:
            raise LocalClusterError(
                f"the cluster in {self.directory} has no broker {broker_id} (its brokers: "
                f"{', '.join(map(str, self.broker_ids))})"
            )

    def _signal(self, broker_id: int, signum: signal.Signals) -> int | None:
        """Send ``signum`` to the broker if it runs; its pid, or None if it did not run."""
        self._require_known(broker_id)
        if not self.broker_running(broker_id):
            return None
        pid = int(self._entry(broker_id)["pid"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        return pid

    def _reap(self, broker_id: int, pid: int, timeout_s: float) -> bool:
        child = self._children.get(broker_id)
        if child is not None:
            try:
                child.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return False
            del self._children[broker_id]
            return True
        return wait_gone(pid, str(self.properties_path(broker_id)), timeout_s)

    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker: no clean shutdown; its registration lasts until its session
        expires."""
        pid = self._signal(broker_id, signal.SIGKILL)
        if pid is not None:
            self._reap(broker_id, pid, STOP_TIMEOUT_S)
        self._entry(broker_id).update(pid=None, port=None)
        self._save()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP the broker: it answers nothing and its ZooKeeper session times out."""
        self._signal(broker_id, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        """SIGCONT a paused broker."""
        self._signal(broker_id, signal.SIGCONT)

    def stop_broker(self, broker_id: int) -> None:
        """Stop the broker cleanly (SIGTERM; SIGKILL if it has not exited in 30 s)."""
        pid = self._signal(broker_id, signal.SIGTERM)
        if pid is not None:
            # A paused broker cannot act on SIGTERM.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            if not self._reap(broker_id, pid, STOP_TIMEOUT_S):
                self._signal(broker_id, signal.SIGKILL)
                self._reap(broker_id, pid, STOP_TIMEOUT_S)
        self._entry(broker_id).update(pid=None, port=None)
        self._save()

    def stop(self) -> None:
        """Stop every broker cleanly, then ZooKeeper if this cluster started it.
        ``cluster.json`` stays, saying nothing runs.

        The brokers that are not controller stop together first, the controller after them:
        each stopping broker's controlled shutdown asks the controller, which must still be
        there to answer (otherwise the broker waits ``controlled.shutdown.retry.backoff.ms``
        and asks the next controller)."""
        controller = None
        if self._external_zookeeper is not None or self.zookeeper_running():
            with contextlib.suppress(SparkMQError):  # no controller known: all at once
                controller = self.controller_id()
        others = [b for b in self.broker_ids if b != controller]
        for group in (others, [b for b in self.broker_ids if b == controller]):
            stopping = {}
            for broker_id in group:
                pid = self._signal(broker_id, signal.SIGTERM)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
                    stopping[broker_id] = pid
            for broker_id, pid in stopping.items():
                if not self._reap(broker_id, pid, STOP_TIMEOUT_S):
                    self._signal(broker_id, signal.SIGKILL)
                    self._reap(broker_id, pid, STOP_TIMEOUT_S)
        for broker_id in self.broker_ids:
            self._entry(broker_id).update(pid=None, port=None)
        if self._zk is not None:
            self._zk.close()
            self._zk = None
        self._stop_zookeeper()
        self._save()

    def _stop_zookeeper(self) -> None:
        if self._zookeeper is not None:
            self._zookeeper.stop()
            self._zookeeper = None
        else:
            pid = self.state.get("zookeeper_pid")
            marker = str(self.zookeeper_dir / "zoo.cfg")
            if isinstance(pid, int) and process_is(pid, marker) and MAIN_CLASS in cmdline(pid):
                os.kill(pid, signal.SIGTERM)
                if not wait_gone(pid, marker, STOP_TIMEOUT_S):
                    os.kill(pid, signal.SIGKILL)
                    wait_gone(pid, marker, STOP_TIMEOUT_S)
        if self.state.get("zookeeper_pid") is not None:
            self.state["zookeeper"], self.state["zookeeper_pid"] = None, None

    def close(self) -> None:
        """Forget this object's ZooKeeper session; everything keeps running."""
        if self._zk is not None:
            self._zk.close()
            self._zk = None

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            # No ``with`` body runs, so no __exit__ either: stop what did start.
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
