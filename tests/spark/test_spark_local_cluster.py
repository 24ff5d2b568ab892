"""The source and the sink on a Spark cluster: ``local-cluster[2,1,1024]`` runs each task in
one of two executor JVMs with Python workers of their own, as a standalone cluster does, where
``local[N]`` runs every task inside the driver's JVM.

One Spark application (``local_cluster_driver.py``, a subprocess: a test process holds one
SparkSession, the session fixture's ``local[2]``) copies a 4-partition topic into another with
a streaming query and writes a DataFrame with a batch write, first on the embedded broker of a
log directory (``path``), then on a 3-broker cluster (``bootstrap.servers``, replication
factor 3, ``min.insync.replicas`` 2), which this module starts while the application starts.
Each endpoint's outputs, read back read_committed, hold every record exactly once.

The embedded case runs with ``executor.endpoint=tcp``: executors reach the driver's broker as
from another host, through its token listener (SCRAM with the directory's token), which the
broker's log shows them logging in to.

On the embedded endpoint, exactly one broker process serves the directory during the whole
application, the one its driver started: executors use the driver's broker and never start
their own (on another host that would split the data silently). The check watches
``/proc`` for processes whose arguments name the directory, and reads the pids in the
broker's own log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sink_helpers import driver_env

from spark_mq import Admin, Consumer, TopicPartition
from spark_mq.broker.local import stop_broker
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import ZooKeeperNotInstalledError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DRIVER = Path(__file__).with_name("local_cluster_driver.py")
RECORDS = 300
ROWS = 400
#: Two micro-batches of the 300 input records.
MAX_OFFSETS_PER_TRIGGER = 150
#: The whole application, both endpoints; Spark alone takes 20-120 s to start its executors
#: on a loaded two-core machine.
RUN_LIMIT_S = 420
POLL_S = 0.05
#: The main class of a Spark executor JVM.
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


@dataclass(frozen=True)
class Ancestor:
    """A process above a broker when the broker was first seen."""

    pid: int
    #: Whether it is an executor JVM (a Spark executor's main class is in its arguments).
    executor: bool


def _ancestors(pid: int) -> list[Ancestor]:
    """The processes above ``pid``, its parent first, up to the first that is gone (a
    spawner that exited leaves its child to init)."""
    chain = []
    parent = _parent(pid)
    while parent is not None and parent > 1:
        args = _cmdline(parent)
        if not args:
            break
        chain.append(Ancestor(parent, EXECUTOR_MAIN in args))
        parent = _parent(parent)
    return chain


@dataclass
class BrokerWatch:
    """Every broker process whose arguments name ``directory``, by pid, with the processes
    above it when first seen, polled from a thread until :meth:`stop`."""

    directory: Path
    seen: dict[int, list[Ancestor]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _names_directory(self, args: list[str]) -> bool:
        root = str(self.directory)
        return any(
            arg == root or arg.startswith(root + os.sep) or arg.endswith("=" + root) for arg in args
        )

    def scan(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in self.seen:
                continue
            args = _cmdline(int(entry))
            if "spark_mq.broker" in args and self._names_directory(args):
                self.seen[int(entry)] = _ancestors(int(entry))

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.scan()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="broker-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.scan()


@dataclass
class Application:
    """What the local-cluster application left: its results file, its driver's pid, the
    brokers seen serving the embedded directory and the pids its broker log names (both
    taken when the application ended), and the cluster (None without ZooKeeper)."""

    results: dict[str, Any]
    driver_pid: int
    mq_dir: Path
    brokers: dict[int, list[Ancestor]]
    logged_pids: set[int]
    cluster: LocalCluster | None


def _logged_pids(directory: Path) -> set[int]:
    """The pids in the embedded broker's log (every line carries its process's pid)."""
    return {
        json.loads(line)["pid"]
        for path in sorted(directory.glob("broker.log*"))
        for line in path.read_text().splitlines()
        if line.startswith("{")
    }


def _start_cluster(directory: Path) -> LocalCluster | None:
    cluster = LocalCluster(
        directory, 3, session_timeout_ms=6000, broker_properties={"min.insync.replicas": "2"}
    )
    try:
        return cluster.start()
    except ZooKeeperNotInstalledError:
        return None


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Application]:
    work = tmp_path_factory.mktemp("local-cluster")
    mq_dir = (work / "mq").resolve()
    cluster_file = work / "bootstrap.servers"
    results = work / "results.json"
    log = work / "driver.log"
    watch = BrokerWatch(mq_dir)
    watch.start()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                *("--results", str(results), "--work", str(work), "--path", str(mq_dir)),
                *("--cluster-file", str(cluster_file), "--records", str(RECORDS)),
                *("--rows", str(ROWS), "--max-offsets-per-trigger", str(MAX_OFFSETS_PER_TRIGGER)),
            ],
            env=driver_env(),
            start_new_session=True,
            stdout=out,
            stderr=out,
        )
    cluster = None
    try:
        # The cluster starts while Spark does; the application waits for this file, and
        # skips the cluster case when it is empty (no ZooKeeper to run a cluster with).
        cluster = _start_cluster(work / "cluster")
        tmp = cluster_file.with_suffix(".tmp")
        tmp.write_text(cluster.bootstrap_servers if cluster is not None else "")
        tmp.rename(cluster_file)
        try:
            proc.wait(timeout=RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the application did not finish in {RUN_LIMIT_S} s; see {log}")
        # Watched up to here only: reading the outputs back may start a broker of this test's
        # own once the application's has gone idle.
        watch.stop()
        assert proc.returncode == 0, f"the application failed ({proc.returncode}); see {log}"
        yield Application(
            json.loads(results.read_text()),
            proc.pid,
            mq_dir,
            dict(watch.seen),
            _logged_pids(mq_dir),
            cluster,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        watch.stop()
        stop_broker(mq_dir)
        if cluster is not None:
            cluster.stop()


def _committed(endpoint: dict[str, str], topic: str) -> list[bytes]:
    """Every value of ``topic`` a read_committed consumer sees, sorted."""
    with Admin(**endpoint) as admin:
        count = admin.describe_topic(topic).partition_count
    parts = [TopicPartition(topic, p) for p in range(count)]
    got: list[bytes] = []
    with Consumer(
        **endpoint, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign(parts)
        ends = consumer.end_offsets(parts)
        deadline = time.monotonic() + 60
        while not all(consumer.position(tp) >= ends[tp] for tp in parts):
            assert time.monotonic() < deadline, f"could not read {topic} to its end {ends}"
            got += consumer.poll_batch(timeout_ms=200).column("value").to_pylist()
    return sorted(got)


def _check_exactly_once(app: Application, case: str, endpoint: dict[str, str]) -> None:
    inputs = _committed(endpoint, "in")
    assert inputs == sorted(f"event-{i}".encode() for i in range(RECORDS))
    assert _committed(endpoint, "out") == sorted(b"copied-" + value.upper() for value in inputs), (
        f"{case}: the copier's output is not its input, each record once"
    )
    assert _committed(endpoint, "batch") == sorted(f"row-{i}".encode() for i in range(ROWS)), (
        f"{case}: the batch write's output is not its rows, each once"
    )
    # Several micro-batches, each committed.
    commits = Path(app.results[case]["checkpoint"]) / "commits"
    assert len([p for p in commits.iterdir() if p.name.isdigit()]) >= 2
    with Admin(**endpoint) as admin:
        hanging = admin.list_transactions(states=["Ongoing", "Prepared"])
    assert not hanging, f"{case}: transactions left open: {hanging}"


def test_application_ran_on_two_executors(app: Application) -> None:
    assert app.results["master"] == "local-cluster[2,1,1024]"
    # A small job's tasks ran in two executor processes, none in the driver.
    jvms = app.results["executor_jvms"]
    assert len(jvms) == 2 and "driver" not in jvms, f"tasks ran in {jvms}"


def test_embedded_source_and_sink_write_each_record_once(app: Application) -> None:
    _check_exactly_once(app, "embedded", {"path": str(app.mq_dir)})


def test_executors_reach_the_embedded_broker_with_its_token(app: Application) -> None:
    logins = [
        line
        for path in sorted(app.mq_dir.glob("broker.log*"))
        for line in path.read_text().splitlines()
        if "authenticated as User:" in line and "SASL SCRAM" in line
    ]
    # At least one connection per executor JVM (their producers and consumers).
    assert len(logins) >= 2, f"token logins in the broker log of {app.mq_dir}: {logins}"


def test_executors_never_start_a_broker_of_the_directory(app: Application) -> None:
    # One broker process served the directory, started on the driver's side: the driver
    # process is above it, and no executor JVM is (in local-cluster mode the executors are
    # children of the driver's JVM, which runs the workers).
    assert len(app.brokers) == 1, f"brokers of {app.mq_dir}: {app.brokers}"
    ((pid, above),) = app.brokers.items()
    assert app.driver_pid in [a.pid for a in above], (
        f"broker {pid} of {app.mq_dir} was not started by the driver {app.driver_pid}: {above}"
    )
    assert not any(a.executor for a in above), (
        f"broker {pid} of {app.mq_dir} was started by an executor: {above}"
    )
    # Its log names no other process: a broker that ran between two polls shows there too.
    assert app.logged_pids == {pid}, (
        f"processes that logged as the broker of {app.mq_dir}: {app.logged_pids}"
    )


def test_cluster_source_and_sink_write_each_record_once(app: Application) -> None:
    if app.cluster is None:
        pytest.skip("no real ZooKeeper for a cluster: install Debian's zookeeper package")
    _check_exactly_once(app, "cluster", {"bootstrap_servers": app.cluster.bootstrap_servers})
