"""The one way the cluster tests start a LocalCluster, and the broker settings they share.

Two fixtures of tests/cluster/conftest.py hand out a :class:`ClusterFactory`:

- ``start_module_cluster(brokers, ...)``: a cluster the tests of one module share, in a
  directory and a ZooKeeper chroot of the module's own, killed after its last test. Modules
  whose tests each use topics of their own take this one: a start per module, not per test.
- ``start_cluster(brokers, ...)``: a cluster of one test (its ``tmp_path`` and chroot), for
  tests that leave brokers killed, paused or moved in a way the next test must not inherit.

A module still names its cluster in a fixture of its own, so that a reader sees its size
and settings beside the tests, and so that it can add what only it needs (a topic created
up front, an environment variable its brokers inherit)::

    @pytest.fixture(scope="module")
    def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
        return start_module_cluster(3, broker_properties=replica_properties())

Tests of what a broker does without LocalCluster around it (the controller, the replica
fetcher, inter-broker authentication) start broker processes by hand, as an operator would,
with the conftest fixture ``spawn_broker(broker_id, *overrides)`` (a :class:`BrokerProcesses`).

Tests that speak the protocol to one broker of a cluster (a request a client would not send,
or a client's request to a broker it would not pick) reach it with :func:`broker_address`,
:func:`connect_to` and :func:`request_to`.

Nothing here stands in for a broker: every cluster is real processes against the session's
real ZooKeeper server.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec
from tls_certs import Issued, TestCa
from waiting import wait_for

from spark_mq.broker.dir_files import Endpoint
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.local_cluster import DEFAULT_SESSION_TIMEOUT_MS, LocalCluster
from spark_mq.errors import LocalClusterError
from spark_mq.protocol.address import BrokerAddress

#: A ZooKeeper session short enough that a killed or paused broker loses its registration
#: (and a controller its office) within seconds, long enough that a broker busy on a loaded
#: two-core CI machine keeps it.
SHORT_SESSION_MS: Final = 4000


def replica_properties(
    *,
    lag_time_max_ms: int | None = 2000,
    fetch_wait_max_ms: int = 200,
    fetch_backoff_ms: int = 200,
    socket_timeout_ms: int | None = None,
) -> dict[str, str]:
    """Follower settings, by Kafka's keys, for tests that wait on replication.

    Kafka's defaults suit a data centre, not a test: a follower waits up to 500 ms
    (``replica.fetch.wait.max.ms``) in a fetch and 1 s (``replica.fetch.backoff.ms``) after
    a failed one, and leaves the ISR after 30 s behind (``replica.lag.time.max.ms``). A test
    that stops a follower wants it out of the ISR in seconds, and one that writes with
    acks=all wants the followers' answers soon. ``replica.socket.timeout.ms`` is set only
    where given (a paused leader must time out a follower's fetch); ``lag_time_max_ms=None``
    keeps the broker's default."""
    properties = {
        "replica.fetch.wait.max.ms": str(fetch_wait_max_ms),
        "replica.fetch.backoff.ms": str(fetch_backoff_ms),
    }
    if lag_time_max_ms is not None:
        properties["replica.lag.time.max.ms"] = str(lag_time_max_ms)
    if socket_timeout_ms is not None:
        properties["replica.socket.timeout.ms"] = str(socket_timeout_ms)
    return properties


@dataclasses.dataclass(frozen=True)
class ClusterPki:
    """A test CA, the certificate the brokers serve (for 127.0.0.1 and localhost) and a
    client certificate (subject ``CN=app,O=spark_mq``), as PEM files."""

    ca: Path
    broker: Issued
    client: Issued

    @classmethod
    def issue(cls, root: Path) -> ClusterPki:
        ca = TestCa.create(root / "ca")
        broker = ca.issue(root, "broker", hosts=("127.0.0.1", "localhost"))
        client = ca.issue(root, "app", subject_extra=(("O", "spark_mq"),), hosts=())
        return cls(ca=ca.cert, broker=broker, client=client)

    def broker_properties(self) -> dict[str, str]:
        """The ``ssl.*`` settings of a broker that serves ``broker`` and trusts ``ca``."""
        return {
            "ssl.certificate.location": str(self.broker.cert),
            "ssl.key.location": str(self.broker.key),
            "ssl.ca.location": str(self.ca),
        }


class ClusterFactory:
    """Starts one LocalCluster in ``root / "c"`` against ZooKeeper ``zookeeper`` (a connect
    string with a chroot of its own) when called, and kills its brokers at :meth:`stop`.

    One cluster per factory: a second one would register the same broker ids in the same
    chroot, which ZooKeeper refuses.
    """

    def __init__(self, root: Path, zookeeper: str) -> None:
        self._root = root
        self._zookeeper = zookeeper
        self._cluster: LocalCluster | None = None

    def __call__(
        self,
        brokers: int,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        broker_properties: Mapping[str, str] | None = None,
        listener_name: str = "PLAINTEXT",
    ) -> LocalCluster:
        """A started cluster of ``brokers`` brokers (ids 1..N) with these settings
        (LocalCluster's own arguments); it has elected a controller."""
        if self._cluster is not None:
            raise LocalClusterError(
                f"this fixture already started the cluster in {self._cluster.directory}; "
                "a test (or module) gets one cluster: ask for start_cluster in one fixture"
            )
        self._cluster = LocalCluster(
            self._root / "c",
            brokers,
            zookeeper=self._zookeeper,
            session_timeout_ms=session_timeout_ms,
            broker_properties=broker_properties,
            listener_name=listener_name,
        )
        # Kept before it starts, so that stop() also ends the brokers of a failed start.
        return self._cluster.start()

    def stop(self) -> None:
        """Kill the cluster's brokers, if a cluster was started (paused ones too)."""
        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return
        # Its directory and ZooKeeper chroot are thrown away after the test, so nothing needs
        # the clean, controlled shutdown of LocalCluster.stop(): that asks the controller to
        # move leaderships first (up to broker.shutdown.timeout.ms when it is gone or paused)
        # and took a second or more a module, against a few milliseconds for SIGKILL.
        for broker_id in cluster.broker_ids:
            cluster.kill(broker_id)
        # With no broker left to stop, this only closes its ZooKeeper session and records in
        # cluster.json that nothing runs.
        cluster.stop()


def broker_address(cluster: LocalCluster, broker_id: int) -> BrokerAddress:
    """Where broker ``broker_id`` listens (its ``cluster.json`` entry: the same port after
    every restart, unless ``start_broker(new_port=True)`` moved it)."""
    entry = cluster.state["brokers"][str(broker_id)]
    return BrokerAddress(entry["host"], int(entry["port"]))


def connect_to(cluster: LocalCluster, broker_id: int) -> BrokerConnection:
    """A new, connected PLAINTEXT connection to broker ``broker_id``; the caller closes it."""
    conn = BrokerConnection(broker_address(cluster, broker_id))
    conn.connect()
    return conn


def request_to(
    cluster: LocalCluster, broker_id: int, body: msgspec.Struct, *, timeout_s: float = 60
) -> Any:
    """The answer of broker ``broker_id`` to ``body``, sent on a connection of its own."""
    conn = connect_to(cluster, broker_id)
    try:
        return conn.request(body, timeout_s=timeout_s)
    finally:
        conn.close()


class BrokerProcesses:
    """Broker processes of one test's cluster, each started as an operator would start one:
    ``python -m spark_mq.broker --log-dir ROOT/b<id>`` with ``zookeeper.connect``,
    ``broker.id``, a listener on an ephemeral port and the test's own ``--override``s. Each
    one's output goes to ``ROOT/b<id>.out``. :meth:`stop` kills them (SIGKILL): the test's
    directory and ZooKeeper chroot are thrown away after it, so a clean shutdown would only
    cost time.
    """

    def __init__(self, root: Path, zookeeper: str, *, session_timeout_ms: int = 6000) -> None:
        self._root = root
        self._zookeeper = zookeeper
        self._session_timeout_ms = session_timeout_ms
        self._started: list[subprocess.Popen[bytes]] = []

    def __call__(self, broker_id: int, *overrides: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Start broker ``broker_id``; the process and its log directory (its port, once it
        listens: :func:`listening_port`)."""
        log_dir = self._root / f"b{broker_id}"
        args = [sys.executable, "-m", "spark_mq.broker", "--log-dir", str(log_dir)]
        for item in (
            f"zookeeper.connect={self._zookeeper}",
            f"zookeeper.session.timeout.ms={self._session_timeout_ms}",
            f"broker.id={broker_id}",
            "listeners=PLAINTEXT://127.0.0.1:0",
            *overrides,
        ):
            args += ["--override", item]
        with (self._root / f"b{broker_id}.out").open("wb") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        self._started.append(process)
        return process, log_dir

    def stop(self) -> None:
        for process in self._started:
            process.kill()
        for process in self._started:
            process.wait()
        self._started.clear()


def listening_port(log_dir: Path, timeout_s: float = 60) -> int:
    """The port of the broker serving ``log_dir``, once it listens (its ``broker.json``)."""
    wait_for(lambda: Endpoint.read(log_dir) is not None, timeout_s=timeout_s)
    endpoint = Endpoint.read(log_dir)
    assert endpoint is not None and endpoint.port, f"{log_dir}: broker.json names no port"
    return endpoint.port
