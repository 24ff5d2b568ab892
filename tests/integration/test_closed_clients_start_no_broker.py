"""Once its clients are closed and its broker stopped, a directory stays without a broker.

A CI run's teardown timed out because a new local broker took the directory over 46 ms after
``stop_broker`` had stopped it cleanly. That broker had been spawned earlier, while the test
held the old one paused (SIGSTOP): a client's ``ensure_broker`` took the silent broker for a
dead one and started another, which waited for the lock and took the directory the moment
its owner stopped, however it was stopped. ``ensure_broker`` now waits for a live owner
until its timeout and spawns nothing (``spark_mq/broker/local.py``), and a closed client's
``Cluster`` connects to nothing any more, so nothing left of a closed client can start one
(``spark_mq/client/cluster.py``).

Broker processes are found by their command line (``/proc``), which ``ensure_broker``
gives as ``python -m spark_mq.broker --log-dir DIR --local``: a spawned broker is visible
from the moment it is spawned, before it has written anything.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq.broker.dir_files import Endpoint
from spark_mq.broker.local import broker_status, ensure_broker, stop_broker
from spark_mq.client import Admin, Consumer, Producer, TopicPartition
from spark_mq.client.cluster import ANY_NODE, Cluster
from spark_mq.client.config import ConsumerConfig
from spark_mq.errors import BrokerNotAvailableError, RequestTimedOutError, UsageError
from spark_mq.storage.dir_lock import LOCK_FILE_NAME, LockOwner

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="finds broker processes through /proc"
)

#: How long a stopped directory is watched for a broker coming back: a spawned broker is
#: seen at once by its command line; this also gives one that was already starting (Python
#: starts in well under a second) time to take the lock and publish its endpoint.
WATCH_S = 3.0
#: A poll's timeout while the broker is paused, and what the poll may take beyond it.
POLL_MS = 500
SLACK_S = 1.5


def broker_processes(directory: Path) -> set[int]:
    """Pids of the live broker processes started for ``directory``."""
    wanted = str(directory.resolve()).encode()
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # it exited meanwhile
        if b"spark_mq.broker" in argv and wanted in argv:
            pids.add(int(entry.name))
    return pids


def assert_stays_without_broker(directory: Path, stopped: int) -> None:
    """No broker process but ``stopped`` (which may still be exiting after it released the
    directory) runs for ``directory``, and none owns it, for ``WATCH_S``."""
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        others = broker_processes(directory) - {stopped}
        assert others == set(), "a new broker process runs for the directory"
        assert broker_status(directory) is None, "a broker owns the directory again"
        time.sleep(0.05)


@pytest.fixture
def mq(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "mq"
    with Admin(path=directory) as admin:
        admin.create_topic("t", 2)
        admin.create_topic("u", 1)
    with Producer(path=directory) as producer:
        for i in range(200):
            producer.send("t", b"%d" % i)
    yield directory
    # Whatever a failed test left running: SIGCONT first, a paused broker ignores SIGTERM.
    for pid in broker_processes(directory):
        os.kill(pid, signal.SIGCONT)
    stop_broker(directory)


def test_a_paused_broker_is_waited_for_not_replaced(mq: Path) -> None:
    """``ensure_broker`` against a broker that owns the directory but does not answer:
    BrokerNotAvailableError naming it after the timeout, and no second broker spawned."""
    owner = broker_status(mq)
    assert owner is not None and owner.state == "serving"
    os.kill(owner.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(BrokerNotAvailableError, match=rf"pid {owner.pid}\).*did not answer"):
            ensure_broker(mq, timeout_ms=POLL_MS, create=False)
        assert time.monotonic() - start <= POLL_MS / 1000 + SLACK_S
        with (
            Admin(path=mq, request_timeout_ms=POLL_MS) as admin,
            pytest.raises((BrokerNotAvailableError, RequestTimedOutError)),
        ):
            admin.list_topics()
        assert broker_processes(mq) == {owner.pid}
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    # The owner answers again: the same broker, found, not replaced.
    assert broker_status(mq) == owner


def test_a_stale_endpoint_naming_a_live_stranger_is_replaced(mq: Path) -> None:
    """A broker killed with -9 leaves ``broker.json`` and the lock file naming it; if its pid
    now belongs to another process, nothing holds the lock and a new broker is started (the
    waiting above is only for a broker that really owns the directory)."""
    old = broker_status(mq)
    assert old is not None
    assert stop_broker(mq)
    with subprocess.Popen(["sleep", "60"]) as stranger:
        try:
            Endpoint(stranger.pid, old.epoch or 1, 0, str(mq / "broker.sock"), None, None, 1).write(
                mq
            )
            owner = LockOwner(stranger.pid, socket.gethostname(), 1, "a killed broker")
            (mq / LOCK_FILE_NAME).write_bytes(owner.to_json())
            ensure_broker(mq, timeout_ms=30_000, create=False)
            new = broker_status(mq)
            assert new is not None and new.state == "serving"
            assert new.pid not in (old.pid, stranger.pid)
        finally:
            stranger.kill()


def test_clients_closed_after_a_pause_leave_no_broker_behind(mq: Path) -> None:
    """The CI failure: a group member polls through a rebalance against a paused broker
    (its commit before the rebalance pending), is closed mid-rebalance once the broker
    answers again, as are a plain consumer, a producer and an admin; the broker is then
    stopped, and no broker may take the directory over."""
    grouped = Consumer(
        path=mq, group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=60_000
    )
    plain = Consumer(path=mq, auto_offset_reset="earliest")
    producer = Producer(path=mq)
    admin = Admin(path=mq)
    try:
        grouped.subscribe(["t"])
        plain.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        deadline = time.monotonic() + 60
        while not grouped.poll(timeout_ms=POLL_MS):
            assert time.monotonic() < deadline, "the group member never joined or read"
        while not plain.poll(timeout_ms=POLL_MS):
            assert time.monotonic() < deadline, "the plain consumer never read"
        producer.send("t", b"more").result(timeout=30)
        assert "t" in admin.list_topics()
        owner = broker_status(mq)
        assert owner is not None
        os.kill(owner.pid, signal.SIGSTOP)
        try:
            # A new subscription is a rebalance; auto-commit commits before it, to a broker
            # that does not answer, and the polls return without waiting for the commit.
            grouped.subscribe(["t", "u"])
            for _ in range(2):
                start = time.monotonic()
                grouped.poll(timeout_ms=POLL_MS)
                assert time.monotonic() - start <= POLL_MS / 1000 + SLACK_S
            assert broker_processes(mq) == {owner.pid}, "a second broker was spawned"
        finally:
            os.kill(owner.pid, signal.SIGCONT)
        assert TopicPartition("u", 0) not in grouped.assignment(), "not mid-rebalance"
    finally:
        for client in (grouped, plain, producer, admin):
            client.close()
    left = {t.name for t in threading.enumerate() if t.name.startswith("spark-mq-")}
    assert left == set(), f"threads of closed clients still run: {left}"
    assert stop_broker(mq)
    assert_stays_without_broker(mq, owner.pid)


def test_a_closed_cluster_refuses_to_connect_and_starts_no_broker(mq: Path) -> None:
    """What a thread or handler of a closed client would call: every way to a broker raises
    UsageError, and none starts the directory's broker again."""
    cluster = Cluster(ConsumerConfig.from_properties({"path": str(mq)}))
    conn = cluster.new_connection(ANY_NODE)
    cluster.connect(conn)
    conn.close()
    cluster.close()
    owner = broker_status(mq)
    assert owner is not None
    assert stop_broker(mq)
    with pytest.raises(UsageError, match="closed: it connects to no broker"):
        cluster.connect(conn)
    with pytest.raises(UsageError, match="closed"):
        cluster.new_connection(ANY_NODE)
    with pytest.raises(UsageError, match="closed"):
        cluster.address_for(ANY_NODE)
    with pytest.raises(UsageError, match="closed"):
        cluster.refresh()
    assert_stays_without_broker(mq, owner.pid)
