"""``spark-mq cluster`` in subprocesses, as a user runs it: start (with its own ZooKeeper),
status, stop-broker, start-broker and stop, each a separate process reading cluster.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from spark_mq.cluster.local_cluster import process_is
from spark_mq.cluster.zookeeper_server import ZooKeeperServer


def _cli(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_mq.cli", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _ok(*args: str) -> str:
    done = _cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status(directory: Path) -> dict[str, object]:
    document: dict[str, object] = json.loads(_ok("status", "--dir", str(directory), "--json"))
    return document


@pytest.mark.slow
def test_the_cluster_commands_start_watch_restart_and_stop_a_cluster(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    # `zookeeper` is only asked for so that the test is skipped where there is none; the
    # cluster starts a ZooKeeper of its own in DIR/zookeeper.
    directory = tmp_path / "cluster"
    started = _ok("start", "--dir", str(directory), "--brokers", "2")
    state = json.loads((directory / "cluster.json").read_text())
    zk_pid = state["zookeeper_pid"]
    assert process_is(zk_pid, str(directory / "zookeeper" / "zoo.cfg"))
    assert f"bootstrap.servers={state['bootstrap_servers']}" in started
    try:
        status = _status(directory)
        brokers = {b["id"]: b for b in status["brokers"]}  # type: ignore[attr-defined]
        assert [brokers[i]["state"] for i in (1, 2)] == ["running", "running"]
        assert brokers[1]["port"] == state["brokers"]["1"]["port"]
        assert status["controller"] in (1, 2)
        assert status["zookeeper"] == state["zookeeper"]
        text = _ok("status", "--dir", str(directory))
        assert f"controller:        {status['controller']}" in text

        _ok("stop-broker", "--dir", str(directory), "--id", "1")
        brokers = {b["id"]: b for b in _status(directory)["brokers"]}  # type: ignore[attr-defined]
        assert (brokers[1]["state"], brokers[1]["pid"]) == ("stopped", None)
        assert not process_is(
            state["brokers"]["1"]["pid"], str(directory / "broker-1" / "broker.properties")
        )
        zk = KazooClient(hosts=state["zookeeper"])
        zk.start(timeout=10)
        try:
            assert sorted(zk.get_children("/brokers/ids")) == ["2"]
        finally:
            zk.stop()
            zk.close()

        out = _ok("start-broker", "--dir", str(directory), "--id", "1")
        new = json.loads((directory / "cluster.json").read_text())["brokers"]["1"]
        assert f"pid {new['pid']}" in out and new["pid"] != state["brokers"]["1"]["pid"]
        brokers = {b["id"]: b for b in _status(directory)["brokers"]}  # type: ignore[attr-defined]
        assert brokers[1]["state"] == "running"

        failed = _cli("stop-broker", "--dir", str(directory), "--id", "9")
        assert failed.returncode == 1
        assert "has no broker 9 (its brokers: 1, 2)" in failed.stderr
    finally:
        done = _cli("stop", "--dir", str(directory))
    assert done.returncode == 0, done.stderr
    state = json.loads((directory / "cluster.json").read_text())
    assert state["zookeeper_pid"] is None and state["bootstrap_servers"] == ""
    assert not process_is(zk_pid, str(directory / "zookeeper" / "zoo.cfg"))
    for key in ("1", "2"):
        assert state["brokers"][key]["pid"] is None
    status = _status(directory)
    assert status["zookeeper"] is None and status["controller"] is None
