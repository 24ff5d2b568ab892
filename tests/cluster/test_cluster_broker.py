"""A real broker process with ``zookeeper.connect`` against a real ZooKeeper: it registers with
its real port, adopts ``/cluster/id``, answers Metadata with the elected controller, leaves
ZooKeeper at once on a clean stop, and fails fast and clearly when ZooKeeper is unreachable.
The embedded default (no zookeeper.connect) is untouched."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq.broker.dir_files import BrokerMeta, Endpoint
from spark_mq.broker.local import ensure_broker
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.zookeeper_server import ZooKeeperServer, free_loopback_port
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse


def _broker(log_dir: Path, *overrides: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "spark_mq.broker", "--log-dir", str(log_dir)]
    for item in overrides:
        args += ["--override", item]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture
def zk_root(zk_connect: str) -> Iterator[KazooClient]:
    """A kazoo session inside this test's chroot, to look at what the brokers wrote."""
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def _metadata(port: int) -> MetadataResponse:
    conn = BrokerConnection(BrokerAddress(host="127.0.0.1", port=port))
    conn.connect()
    try:
        response: MetadataResponse = conn.request(MetadataRequest(topics=[]), timeout_s=10)
        return response
    finally:
        conn.close()


def test_a_cluster_broker_registers_its_real_port_and_leaves_on_a_clean_stop(
    tmp_path: Path, zk_connect: str, zk_root: KazooClient
) -> None:
    # A long session timeout: the znode can only vanish this fast because the broker closed
    # its session, not because ZooKeeper expired it.
    process = _broker(
        tmp_path / "b7",
        f"zookeeper.connect={zk_connect}",
        "zookeeper.session.timeout.ms=30000",
        "broker.id=7",
        "broker.rack=rack-a",
        "listeners=PLAINTEXT://127.0.0.1:0",
    )
    try:
        wait_for(lambda: zk_root.exists("/brokers/ids/7") and zk_root.exists("/controller"))
        wait_for(lambda: Endpoint.read(tmp_path / "b7") is not None)
        endpoint = Endpoint.read(tmp_path / "b7")
        assert endpoint is not None and endpoint.port
        registration = json.loads(zk_root.get("/brokers/ids/7")[0])
        assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{endpoint.port}"]
        assert (registration["port"], registration["rack"]) == (endpoint.port, "rack-a")
        assert json.loads(zk_root.get("/controller")[0])["brokerid"] == 7
        cluster = json.loads(zk_root.get("/cluster/id")[0])
        assert cluster["version"] == "1"
        # The /controller znode is written before the broker's own metadata cache hears of
        # it (its watch), so the broker may answer -1 for a moment.
        wait_for(lambda: _metadata(endpoint.port).controller_id == 7)
        metadata = _metadata(endpoint.port)
        assert metadata.controller_id == 7
        # The cluster's id, not the one the directory made for itself.
        assert metadata.cluster_id == cluster["id"]
        meta = BrokerMeta.read(tmp_path / "b7")
        assert meta is not None and metadata.cluster_id != meta.cluster_id
        assert metadata.brokers[0].rack == "rack-a"

        stopped_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert zk_root.exists("/brokers/ids/7") is None
        assert zk_root.exists("/controller") is None
        assert time.monotonic() - stopped_at < 20
    finally:
        process.kill()
        process.wait()


def test_a_second_broker_adopts_the_cluster_id_and_knows_the_controller(
    tmp_path: Path, zk_connect: str, zk_root: KazooClient
) -> None:
    common = [f"zookeeper.connect={zk_connect}", "listeners=PLAINTEXT://127.0.0.1:0"]
    first = _broker(tmp_path / "b1", *common, "broker.id=1")
    second = None
    try:
        wait_for(lambda: zk_root.exists("/controller"))
        second = _broker(tmp_path / "b2", *common, "broker.id=2")
        wait_for(lambda: Endpoint.read(tmp_path / "b2") is not None)
        endpoint = Endpoint.read(tmp_path / "b2")
        assert endpoint is not None and endpoint.port
        metadata = _metadata(endpoint.port)
        assert metadata.controller_id == 1
        assert metadata.cluster_id == json.loads(zk_root.get("/cluster/id")[0])["id"]
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
                process.wait()


def test_an_unreachable_zookeeper_fails_the_start_with_one_clear_line(tmp_path: Path) -> None:
    port = free_loopback_port()  # nothing listens there
    started = time.monotonic()
    process = _broker(
        tmp_path / "b1",
        f"zookeeper.connect=127.0.0.1:{port}",
        "zookeeper.connection.timeout.ms=1500",
        "listeners=PLAINTEXT://127.0.0.1:0",
    )
    _, stderr = process.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert process.returncode == 1
    errors = [
        entry
        for entry in map(json.loads, stderr.decode().strip().splitlines())
        if entry["level"] == "ERROR"
    ]
    assert len(errors) == 1, errors
    last = errors[0]
    assert f"could not connect to ZooKeeper at 127.0.0.1:{port} within 1.5 s" in last["msg"]
    assert "zookeeper.connection.timeout.ms" in last["msg"]
    assert elapsed >= 1.5
    # The directory was closed cleanly: nothing half-registered or locked is left behind.
    assert Endpoint.read(tmp_path / "b1") is None


def test_the_embedded_default_joins_no_cluster(tmp_path: Path) -> None:
    # (tests/conftest.py stops the broker afterwards.)
    address = ensure_broker(tmp_path / "local")
    conn = BrokerConnection(address)
    conn.connect()
    try:
        metadata: MetadataResponse = conn.request(MetadataRequest(topics=[]), timeout_s=10)
    finally:
        conn.close()
    endpoint = Endpoint.read(tmp_path / "local")
    assert endpoint is not None
    # Its own controller, with the id its directory made: the single-node path.
    assert metadata.controller_id == endpoint.node_id
    meta = BrokerMeta.read(tmp_path / "local")
    assert meta is not None and metadata.cluster_id == meta.cluster_id
    log = (tmp_path / "local" / "broker.log").read_text()
    assert "ZooKeeper" not in log and "kazoo" not in log


def test_a_missing_chroot_is_created_as_kafka_does(zk_connect: str, zk_root: KazooClient) -> None:
    zk = ZkClient(ZkClientConfig(f"{zk_connect}/spark_mq/prod", session_timeout_ms=4000))
    zk.start()
    try:
        assert zk_root.exists("/spark_mq/prod/brokers/ids") is not None
    finally:
        zk.close()


def test_a_log_directory_serves_one_cluster_under_one_broker_id(
    tmp_path: Path, zookeeper: ZooKeeperServer, zk_connect: str, zk_root: KazooClient
) -> None:
    log_dir = tmp_path / "b1"
    common = ["listeners=PLAINTEXT://127.0.0.1:0", "zookeeper.connection.timeout.ms=10000"]
    first = _broker(log_dir, f"zookeeper.connect={zk_connect}", "broker.id=1", *common)
    try:
        wait_for(lambda: zk_root.exists("/brokers/ids/1"))
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 0
    meta = BrokerMeta.read(log_dir)
    assert meta is not None
    assert meta.joined_cluster_id == json.loads(zk_root.get("/cluster/id")[0])["id"]

    # Another cluster (another chroot has another /cluster/id): refused before registering.
    other = f"{zookeeper.connect_string}/other-{uuid.uuid4().hex[:12]}"
    refused = _broker(log_dir, f"zookeeper.connect={other}", "broker.id=1", *common)
    _, stderr = refused.communicate(timeout=60)
    assert refused.returncode == 1
    assert f"belongs to cluster {meta.joined_cluster_id}" in stderr.decode()
    # Its own cluster under another id: refused too, and never registered.
    renamed = _broker(log_dir, f"zookeeper.connect={zk_connect}", "broker.id=2", *common)
    _, stderr = renamed.communicate(timeout=60)
    assert renamed.returncode == 1
    assert "holds the logs of broker 1, but broker.id is 2" in stderr.decode()
    assert zk_root.get_children("/brokers/ids") == []
