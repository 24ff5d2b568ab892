"""A real ZooKeeper server for the cluster tests, one per session, from Debian's zookeeper
package (scripts/test.sh installs it). Without Java or the package the tests that need the
server are skipped and say how to install it; nothing stands in for it.

Each test gets its own chroot (``127.0.0.1:PORT/t-<hex>``), so tests share the server but
never see each other's znodes.

``start_cluster`` / ``start_module_cluster`` start a LocalCluster of a test or of a module,
``spawn_broker`` broker processes by hand, and ``cluster_pki`` issues the certificates of a
TLS cluster (cluster_fixtures.py).
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_fixtures import BrokerProcesses, ClusterFactory, ClusterPki
from kazoo.client import KazooClient

from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.cluster.zookeeper_server import ZooKeeperServer, ZooKeeperServerConfig
from spark_mq.errors import ZooKeeperNotInstalledError


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(ZooKeeperServerConfig(data_dir=tmp_path_factory.mktemp("zk")))
    try:
        server.start()
    except ZooKeeperNotInstalledError as exc:
        pytest.skip(f"no real ZooKeeper to test against: {exc}")
    yield server
    server.stop()


def new_chroot(zookeeper: ZooKeeperServer) -> str:
    """A connect string of ``zookeeper`` with a new, empty chroot."""
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    root = KazooClient(hosts=zookeeper.connect_string)
    root.start(timeout=10)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
        root.close()
    return zookeeper.connect_string + chroot


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A connect string with a chroot of this test's own."""
    return new_chroot(zookeeper)


@pytest.fixture(scope="module")
def zk_module_connect(zookeeper: ZooKeeperServer) -> str:
    """A connect string with a chroot of this module's own (for a cluster its tests share)."""
    return new_chroot(zookeeper)


@pytest.fixture
def start_cluster(tmp_path: Path, zk_connect: str) -> Iterator[ClusterFactory]:
    """``start_cluster(brokers, ...)``: a started LocalCluster of this test, killed after it."""
    factory = ClusterFactory(tmp_path, zk_connect)
    yield factory
    factory.stop()


@pytest.fixture(scope="module")
def start_module_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, zk_module_connect: str
) -> Iterator[ClusterFactory]:
    """``start_module_cluster(brokers, ...)``: a started LocalCluster the module's tests share,
    killed after the last of them."""
    factory = ClusterFactory(tmp_path_factory.mktemp(request.module.__name__), zk_module_connect)
    yield factory
    factory.stop()


@pytest.fixture
def spawn_broker(tmp_path: Path, zk_connect: str) -> Iterator[BrokerProcesses]:
    """``spawn_broker(broker_id, *overrides)``: a broker process of this test's cluster and
    its log directory; killed after the test."""
    processes = BrokerProcesses(tmp_path, zk_connect)
    yield processes
    processes.stop()


@pytest.fixture(scope="module")
def cluster_pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPki:
    """A CA with a broker and a client certificate, for a module's TLS cluster."""
    return ClusterPki.issue(tmp_path_factory.mktemp("pki"))


def _expire_session(connect: str, session: tuple[int, bytes]) -> None:
    # A second client joins the session with its id and password and closes it: ZooKeeper
    # then ends the session, as ZooKeeper's own tests expire sessions.
    other = KazooClient(hosts=connect, client_id=session)
    other.start(timeout=10)
    other.stop()
    other.close()


@pytest.fixture
def expire_session() -> Callable[[str, tuple[int, bytes]], None]:
    """``expire_session(connect, kazoo_client.client_id)`` makes ZooKeeper expire it now."""
    return _expire_session


@pytest.fixture
def clients(zk_connect: str) -> Iterator[Callable[[], ZkClient]]:
    """``make()``: a started ZkClient of this test's chroot (4 s sessions), closed after."""
    made: list[ZkClient] = []

    def make() -> ZkClient:
        client = ZkClient(ZkClientConfig(zk_connect, session_timeout_ms=4000))
        client.start()
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def zk(cluster: Any) -> Iterator[ZkClient]:
    """A ZooKeeper session on the module's ``cluster`` (a LocalCluster fixture each module
    defines with the settings it needs), for reading partition states and the controller."""
    client = ZkClient(ZkClientConfig(cluster.zookeeper_connect, session_timeout_ms=10_000))
    client.start()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def rng() -> random.Random:
    """The fault schedule's randomness: ``FAULT_SEED=<n>`` replays a printed schedule."""
    seed = int(os.environ.get("FAULT_SEED", random.randrange(1 << 32)))
    print(f"FAULT_SEED={seed}")
    return random.Random(seed)
