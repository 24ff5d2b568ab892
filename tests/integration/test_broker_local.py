"""The embedded local broker: ensure_broker, stop_broker, broker_status, the start race,
idle exit, takeover epochs, and the kill -9 test of acknowledged records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq import Admin, Producer
from spark_mq.broker import broker_status, ensure_broker, stop_broker
from spark_mq.broker.dir_files import ENDPOINT_FILE, BrokerMeta, Endpoint, pid_alive
from spark_mq.storage.batch_decoder import decode_records
from spark_mq.storage.log_manager import CLEAN_SHUTDOWN_FILE
from spark_mq.storage.record_batch import encode_batch

#: Generous: a wait, not a timing assertion (a loaded CI machine may be slow).
WAIT_S = 60.0


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def local_dirs(tmp_path: Path) -> Iterator[list[Path]]:
    """Directories whose local brokers are stopped at the end of the test."""
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        try:
            stop_broker(d, timeout_ms=30_000)
        except Exception:
            status = broker_status(d)
            if status is not None and status.pid > 0:
                os.kill(status.pid, signal.SIGKILL)


@pytest.fixture
def local_dir(tmp_path: Path, local_dirs: list[Path]) -> Path:
    d = tmp_path / "local"
    local_dirs.append(d)
    return d


NEVER_IDLE = {"broker.idle.exit.ms": "-1"}


def values(conn, topic: str) -> list[bytes]:
    _, records = conn.fetch(topic, 0, 0)
    return decode_records(records).column("value").to_pylist()


def test_ensure_broker_starts_once_and_is_found_again(local_dir, raw_connect):
    address = ensure_broker(local_dir, config=NEVER_IDLE)
    assert address.unix_path is not None
    status = broker_status(local_dir)
    assert status is not None and status.state == "serving" and status.epoch == 1
    assert ensure_broker(local_dir) == address
    assert broker_status(local_dir).pid == status.pid
    with raw_connect(address) as conn:
        assert conn.produce("t", 0, encode_batch(pa.array([b"v"]))).error_code == 0
    # Only the Unix socket: TCP is for who asks (test_broker_local_access.py).
    assert status.addresses == (address,)
    with raw_connect(address) as conn:
        assert values(conn, "t") == [b"v"]
    assert stop_broker(local_dir) is True
    assert broker_status(local_dir) is None
    assert (local_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert not (local_dir / ENDPOINT_FILE).exists()
    assert stop_broker(local_dir) is False


def test_stale_endpoint_of_a_dead_broker_is_replaced(local_dir):
    local_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    Endpoint(dead.pid, 5, 0, str(local_dir / "broker.sock"), "127.0.0.1", 1, 0).write(local_dir)
    address = ensure_broker(local_dir, config=NEVER_IDLE)
    endpoint = Endpoint.read(local_dir)
    assert endpoint.pid != dead.pid and endpoint.epoch == 1
    assert address.unix_path == endpoint.unix_path


def test_foreground_broker_is_found_not_replaced(broker, broker_dir):
    address = ensure_broker(broker_dir)
    assert address == broker.unix_address
    assert BrokerMeta.read(broker_dir).epoch == broker.epoch


def test_long_directory_puts_the_socket_in_a_runtime_dir(tmp_path, local_dirs, raw_connect):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    local_dirs.append(deep)
    address = ensure_broker(deep, config=NEVER_IDLE)
    assert not address.unix_path.startswith(str(deep))
    assert len(address.unix_path.encode()) <= 100
    with raw_connect(address) as conn:
        assert conn.metadata().topics == []


@pytest.mark.slow
def test_ten_processes_racing_end_with_one_broker(local_dir, subprocess_env):
    local_dir.mkdir()
    script = (
        "import sys\n"
        "from spark_mq.broker import ensure_broker, broker_status\n"
        "a = ensure_broker(sys.argv[1], timeout_ms=120000, config={'broker.idle.exit.ms': '-1'})\n"
        "print(a, broker_status(sys.argv[1]).pid)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(local_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=subprocess_env,
        )
        for _ in range(10)
    ]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err.decode() for _, err in outputs]
    answers = {out.decode().strip() for out, _ in outputs}
    assert len(answers) == 1, answers
    # Only one process ever took the directory over.
    assert BrokerMeta.read(local_dir).epoch == 1


@pytest.mark.slow
def test_idle_broker_exits_and_the_next_client_starts_another(local_dir, raw_connect):
    address = ensure_broker(local_dir, config={"broker.idle.exit.ms": "300"})
    first = broker_status(local_dir)
    with raw_connect(address) as conn:
        conn.produce("idle", 0, encode_batch(pa.array([b"kept"])))
    wait_until(lambda: not pid_alive(first.pid), "the idle broker to exit")
    assert (local_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert not (local_dir / ENDPOINT_FILE).exists()
    address = ensure_broker(local_dir, config=NEVER_IDLE)
    second = broker_status(local_dir)
    assert second.pid != first.pid and second.epoch == first.epoch + 1 == 2
    with raw_connect(address) as conn:
        assert values(conn, "idle") == [b"kept"]


@pytest.mark.slow
def test_an_idle_broker_stays_up_while_an_owners_prepared_transaction_waits(local_dir):
    """Only a running coordinator can tell that a prepared transaction's owner has gone
    quiet (a restart counts as activity): the idle broker waits until it has ended it."""
    address = ensure_broker(
        local_dir,
        config={
            "broker.idle.exit.ms": "200",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "50",
        },
    )
    first = broker_status(local_dir)
    with Producer(
        bootstrap_servers=str(address), transactional_id="job/0", transaction_timeout_ms=1500
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("waits", b"prepared", partition=0)
        producer.prepare_transaction(owner_prefix="job/")
    time.sleep(1.0)  # five idle exits long, the owner not yet quiet for its timeout
    assert pid_alive(first.pid), "the broker exited while its coordinator had to wait"
    wait_until(lambda: not pid_alive(first.pid), "the broker to exit once the owner timed out")
    again = ensure_broker(local_dir, config=NEVER_IDLE)
    with Admin(bootstrap_servers=str(again)) as admin:
        assert admin.describe_transactions(["job/0"])[0].state == "CompleteAbort"


@pytest.mark.slow
def test_killed_broker_is_replaced_and_every_acknowledged_record_survives(local_dir, raw_connect):
    """kill -9 during heavy acks=1 produce; the next ensure_broker recovers the log, and
    every acknowledged record is there, once, in order."""
    address = ensure_broker(local_dir, config=NEVER_IDLE)
    first = broker_status(local_dir)
    acked: dict[int, list[tuple[int, int]]] = {n: [] for n in range(3)}
    enough = threading.Event()

    def produce(n: int) -> None:
        try:
            with raw_connect(address, timeout_s=10) as conn:
                for i in range(100_000):
                    values = [f"{n}:{i}:{j}".encode() for j in range(20)]
                    part = conn.produce("crash", 0, encode_batch(pa.array(values)))
                    assert part.error_code == 0
                    acked[n].append((i, part.base_offset))
                    if sum(len(v) for v in acked.values()) > 300:
                        enough.set()
        except (ConnectionError, OSError):
            return  # the broker died under us: what was acknowledged must survive

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    assert enough.wait(WAIT_S)
    os.kill(first.pid, signal.SIGKILL)
    for t in threads:
        t.join(WAIT_S)
    wait_until(lambda: not pid_alive(first.pid), "the killed broker to go")

    address = ensure_broker(local_dir, config=NEVER_IDLE)
    second = broker_status(local_dir)
    assert second.epoch == first.epoch + 1
    with raw_connect(address) as conn:
        records = []
        offset = 0
        while True:
            _part, data = conn.fetch("crash", 0, offset)
            if not data:
                break
            table = decode_records(data, start_offset=offset)
            records.extend(
                zip(
                    table.column("offset").to_pylist(),
                    table.column("value").to_pylist(),
                    strict=True,
                )
            )
            offset = records[-1][0] + 1
    by_value = {}
    for off, value in records:
        assert value not in by_value, f"{value!r} appears twice"
        by_value[value] = off
    for n, batches in acked.items():
        for i, base in batches:
            for j in range(20):
                assert by_value[f"{n}:{i}:{j}".encode()] == base + j
    # Per producer, the acknowledged batches are in order.
    for batches in acked.values():
        assert [b for _, b in batches] == sorted(b for _, b in batches)


def test_broker_json_is_valid_json_with_the_documented_fields(local_dir):
    ensure_broker(local_dir, config=NEVER_IDLE)
    data = json.loads((local_dir / ENDPOINT_FILE).read_text())
    assert set(data) == {
        "version",
        "pid",
        "epoch",
        "node_id",
        "unix_path",
        "host",
        "port",
        "started_ms",
        "metrics_port",
        "token_listeners",
    }
    # An embedded broker serves no metrics unless metrics.port asks it to, and opens no
    # listener for Spark executors until a query asks for one.
    assert data["metrics_port"] is None
    assert data["token_listeners"] == []
