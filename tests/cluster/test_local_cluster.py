"""LocalCluster against a real ZooKeeper with real broker processes: cluster.json, clean stops
and restarts, SIGKILL and session expiry, controller failover, pause/resume, and the
reused-pid guard."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from cluster_fixtures import ClusterFactory
from waiting import wait_for

from spark_mq.cli.cluster import _status as cluster_status_of
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.local_cluster import LocalCluster, process_is
from spark_mq.errors import LocalClusterError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse

SESSION_TIMEOUT_MS = 4000


def _metadata(port: int) -> MetadataResponse:
    conn = BrokerConnection(BrokerAddress(host="127.0.0.1", port=port))
    conn.connect()
    try:
        response: MetadataResponse = conn.request(MetadataRequest(topics=[]), timeout_s=10)
        return response
    finally:
        conn.close()


def _process_state(pid: int) -> str:
    # The field after "(comm)" in /proc/<pid>/stat: R, S, T (stopped), ...
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_cluster_json_names_every_running_broker_and_follows_stops_and_starts(
    zk_connect: str, start_cluster: ClusterFactory
) -> None:
    cluster = start_cluster(2, session_timeout_ms=SESSION_TIMEOUT_MS)
    state = json.loads((cluster.directory / "cluster.json").read_text())
    assert set(state) == {"zookeeper", "zookeeper_pid", "bootstrap_servers", "brokers"}
    assert state["zookeeper"] == zk_connect
    assert state["zookeeper_pid"] is None  # a ZooKeeper it did not start
    registered = cluster.registered_brokers()
    assert sorted(registered) == [1, 2]
    assert set(state["brokers"]) == {"1", "2"}
    for key, entry in state["brokers"].items():
        broker_id = int(key)
        assert set(entry) == {"pid", "host", "port", "log_dir", "listen_port"}
        # The port it got is kept for its restarts.
        assert entry["listen_port"] == entry["port"]
        assert process_is(entry["pid"], str(cluster.properties_path(broker_id)))
        assert (entry["host"], entry["port"]) == (
            "127.0.0.1",
            registered[broker_id].endpoint().port,
        )
        assert entry["log_dir"] == str(cluster.directory / f"broker-{key}" / "logs")
        assert (Path(entry["log_dir"]) / "broker.meta.json").exists()
    ports = [state["brokers"][k]["port"] for k in ("1", "2")]
    assert state["bootstrap_servers"] == f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    assert cluster.bootstrap_servers == state["bootstrap_servers"]
    # Every broker names the same, elected controller.
    controller = cluster.controller_id()
    assert controller in (1, 2)
    assert {_metadata(port).controller_id for port in ports} == {controller}

    # A paused broker is stopped by the kernel, and runs again when resumed.
    pid2 = state["brokers"]["2"]["pid"]
    cluster.pause(2)
    wait_for(lambda: _process_state(pid2) == "T", timeout_s=5)
    cluster.resume(2)
    wait_for(lambda: _process_state(pid2) != "T", timeout_s=5)

    # A clean stop: the registration goes at once (the session is closed, not expired).
    cluster.stop_broker(2)
    assert 2 not in cluster.registered_brokers()
    state = json.loads((cluster.directory / "cluster.json").read_text())
    assert state["brokers"]["2"]["pid"] is None and state["brokers"]["2"]["port"] is None
    assert state["bootstrap_servers"] == f"127.0.0.1:{ports[0]}"
    assert not process_is(pid2, str(cluster.properties_path(2)))

    cluster.start_broker(2)
    state = json.loads((cluster.directory / "cluster.json").read_text())
    assert state["brokers"]["2"]["pid"] not in (None, pid2)
    assert state["brokers"]["2"]["port"] == cluster.registered_brokers()[2].endpoint().port
    # Back where it listened before: the bootstrap servers printed at start stay valid.
    assert state["brokers"]["2"]["port"] == ports[1]

    cluster.stop()
    assert cluster.registered_brokers() == {}
    state = json.loads((cluster.directory / "cluster.json").read_text())
    assert all(entry["pid"] is None for entry in state["brokers"].values())
    assert state["bootstrap_servers"] == ""


@pytest.mark.slow
def test_killing_the_controller_elects_another_after_its_session_expires(
    start_cluster: ClusterFactory,
) -> None:
    cluster = start_cluster(3, session_timeout_ms=SESSION_TIMEOUT_MS)
    old = cluster.controller_id()
    epoch = cluster.controller_epoch()
    assert old is not None and epoch is not None
    killed_at = time.monotonic()
    cluster.kill(old)
    # SIGKILL closes nothing: the registration and /controller stay until ZooKeeper expires
    # the session.
    assert old in cluster.registered_brokers() and cluster.controller_id() == old
    states = {b["id"]: b["state"] for b in cluster_status_of(cluster)["brokers"]}
    assert states[old] == "dead, still registered"
    wait_for(lambda: cluster.controller_id() not in (None, old), timeout_s=30)
    # ZooKeeper counts the timeout from the last packet it heard, and the client pings every
    # third of it: the session may end up to a third of the timeout after the kill, not less.
    assert time.monotonic() - killed_at >= SESSION_TIMEOUT_MS / 1000 * 2 / 3 - 0.1
    assert cluster.controller_epoch() == epoch + 1
    assert old not in cluster.registered_brokers()
    new = cluster.controller_id()
    ports = [cluster.state["brokers"][str(b)]["port"] for b in (1, 2, 3) if b != old]
    wait_for(lambda: {_metadata(port).controller_id for port in ports} == {new})

    # It comes back with its old settings, as a follower of the new controller.
    cluster.start_broker(old)
    assert sorted(cluster.registered_brokers()) == [1, 2, 3]
    assert cluster.controller_id() == new


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    # cluster.json names, as broker 1, a pid that is now some other process.
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        directory = tmp_path / "cluster"
        directory.mkdir()
        (directory / "cluster.json").write_text(
            json.dumps(
                {
                    "zookeeper": None,
                    "zookeeper_pid": stranger.pid,
                    "bootstrap_servers": "127.0.0.1:1",
                    "brokers": {
                        "1": {"pid": stranger.pid, "host": "127.0.0.1", "port": 1, "log_dir": "x"}
                    },
                }
            )
        )
        cluster = LocalCluster.open(directory)
        assert not cluster.broker_running(1)
        cluster.kill(1)
        cluster.stop_broker(1)
        cluster.stop()
        time.sleep(0.2)
        assert stranger.poll() is None, "a process that is not the cluster's was signalled"
        state = json.loads((directory / "cluster.json").read_text())
        assert state["brokers"]["1"]["pid"] is None
    finally:
        stranger.kill()
        stranger.wait()


def test_an_unknown_broker_or_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LocalClusterError, match="holds no local cluster"):
        LocalCluster.open(tmp_path)
    (tmp_path / "cluster.json").write_text(
        json.dumps(
            {
                "zookeeper": None,
                "zookeeper_pid": None,
                "bootstrap_servers": "",
                "brokers": {"1": {"pid": None, "host": "127.0.0.1", "port": None, "log_dir": "x"}},
            }
        )
    )
    with pytest.raises(LocalClusterError, match=r"has no broker 5 \(its brokers: 1\)"):
        LocalCluster.open(tmp_path).stop_broker(5)


def _processes_naming(marker: str) -> list[int]:
    return [
        int(proc.name)
        for proc in Path("/proc").iterdir()
        if proc.name.isdigit() and process_is(int(proc.name), marker)
    ]


def test_a_broker_that_cannot_start_is_reported_and_nothing_is_left_running(
    tmp_path: Path, zk_connect: str
) -> None:
    directory = tmp_path / "cluster"
    cluster = LocalCluster(
        directory, 2, zookeeper=zk_connect, broker_properties={"log.retention.mss": "1"}
    )
    with pytest.raises(LocalClusterError) as exc, cluster:
        pass
    message = str(exc.value)
    assert "broker 1 exited with status 2 while starting" in message
    assert "unknown broker setting 'log.retention.mss'" in message  # its last line
    assert exc.value.log_path == str(directory / "broker-1" / "broker.out")
    # A failed `with LocalCluster(...)` stops what it started.
    for broker_id in (1, 2):
        assert _processes_naming(str(cluster.properties_path(broker_id))) == []
    state = json.loads((directory / "cluster.json").read_text())
    assert [b["pid"] for b in state["brokers"].values()] == [None, None]
    assert state["bootstrap_servers"] == ""
