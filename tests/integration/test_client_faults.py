"""Clients under faults, with real broker processes: several producer processes at once,
an idempotent producer across a broker kill -9, and reconnection after the local broker
exits because it was idle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.local import broker_status, ensure_broker, stop_broker
from spark_mq.client import Consumer, Producer, TopicPartition

REPO_ROOT = Path(__file__).resolve().parents[2]

PRODUCER_SCRIPT = textwrap.dedent(
    """
    import sys
    from spark_mq.client import Producer
    directory, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with Producer(path=directory, linger_ms=1) as producer:
        futures = [producer.send("shared", f"{name}-{i}".encode(), key=name.encode())
                   for i in range(count)]
        producer.flush()
        for future in futures:
            future.get()
    """
)


def _wait_until(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    """Wait for a condition of the outside world (a process exiting), bounded."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _read_everything(directory: Path, topic: str, partitions: int, count: int) -> list[Any]:
    out: list[Any] = []
    with Consumer(path=directory, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500, max_records=10_000).values():
                out.extend(records)
        # Nothing beyond the expected count either.
        assert consumer.poll(timeout_ms=200) == {}
    return out


@pytest.fixture
def local_dir(tmp_path: Path) -> Any:
    directory = tmp_path / "mq"
    directory.mkdir()
    yield directory
    stop_broker(directory)


@pytest.mark.slow
def test_many_producer_processes_then_one_consumer_sees_every_record_once(
    local_dir: Path,
) -> None:
    ensure_broker(local_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    names = [f"p{i}" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER_SCRIPT, str(local_dir), name, "3000"], env=env
        )
        for name in names
    ]
    assert [p.wait(120) for p in procs] == [0] * len(procs)
    records = _read_everything(local_dir, "shared", 1, 4 * 3000)
    counts = Counter(r.value for r in records)
    assert len(counts) == 4 * 3000 and set(counts.values()) == {1}
    for name in names:  # each producer's records in the order it sent them
        mine = [int(r.value.split(b"-")[1]) for r in records if r.key == name.encode()]
        assert mine == list(range(3000))


@pytest.mark.slow
def test_idempotent_producer_survives_a_broker_kill(local_dir: Path) -> None:
    ensure_broker(local_dir)
    old = broker_status(local_dir)
    assert old is not None
    total = 30_000
    halfway = threading.Event()
    with Producer(path=local_dir, retry_backoff_ms=20, linger_ms=2) as producer:
        futures = []
        for i in range(total):
            callback = (lambda md, exc: halfway.set()) if i == total // 3 else None
            futures.append(producer.send("kill", f"{i}".encode(), callback=callback))
            if i == total // 2:
                # Kill -9 once a third is acknowledged while the rest is queued or in flight.
                assert halfway.wait(60)
                os.kill(old.pid, signal.SIGKILL)
        producer.flush()
        offsets = [f.get(60).offset for f in futures]
    new = broker_status(local_dir)
    assert new is not None and new.pid != old.pid
    assert offsets == list(range(total))  # every record acknowledged, once, in order
    records = _read_everything(local_dir, "kill", 1, total)
    assert [int(r.value) for r in records] == list(range(total))


@pytest.mark.slow
def test_clients_reconnect_after_the_local_broker_idles_out(local_dir: Path) -> None:
    ensure_broker(
        local_dir, config={"broker.idle.exit.ms": "300", "connections.max.idle.ms": "200"}
    )
    first = broker_status(local_dir)
    assert first is not None
    tp = TopicPartition("idle", 0)
    with (
        Producer(path=local_dir) as producer,
        Consumer(path=local_dir, auto_offset_reset="earliest") as consumer,
    ):
        consumer.assign([tp])
        producer.send("idle", b"before").get(30)
        assert [r.value for r in consumer.poll(timeout_ms=5000)[tp]] == [b"before"]
        # The broker closes the idle connections, then exits on its own.
        _wait_until(lambda: not _pid_alive(first.pid), "the idle broker to exit")
        producer.send("idle", b"after").get(30)
        got = consumer.poll(timeout_ms=10_000)
        assert [r.value for r in got[tp]] == [b"after"]
    second = broker_status(local_dir)
    assert second is not None and second.pid != first.pid
