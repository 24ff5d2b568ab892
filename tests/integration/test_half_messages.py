"""Half messages with check-back, with real processes: producer processes
(``half_worker.py``) pair each half message with a SQLite transaction, and are killed with
SIGKILL at the moments that matter; the broker is killed with half messages pending.

At the end the consumer of the real topic sees exactly the messages whose local
transaction committed, once each; the message whose listener never knows is in the discard
topic.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq import (
    Consumer,
    LocalTransactionState,
    TopicPartition,
    TransactionalMessage,
    TransactionalMessageProducer,
)
from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.broker.dir_files import Endpoint
from spark_mq.broker.half.service import DISCARD_TOPIC
from spark_mq.broker.persisted_config import write_persisted
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import AdminConfig
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.half_messages import (
    EndHalfMessageRequest,
    EndHalfMessageResponse,
    HalfAction,
    HalfMessage,
    ListHalfMessagesRequest,
)

WORKER = Path(__file__).with_name("half_worker.py")
REPO = Path(__file__).resolve().parents[2]
#: Short check-back settings, kept in the directory so that a broker a worker restarts has
#: them too.
SETTINGS = {
    "broker.idle.exit.ms": "-1",
    "transaction.check.interval.ms": "300",
    "transaction.half.timeout.ms": "1500",
    "transaction.check.max": "3",
}
TIMEOUT_S = 60


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    return out


class Workers:
    def __init__(self, path: Path, db: Path, logs: Path) -> None:
        self.path, self.db, self.logs = path, db, logs
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, group: str, mode: str, count: int = 1) -> subprocess.Popen[str]:
        with open(self.logs / f"{group}-{mode}.stderr", "a") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(WORKER),
                    str(self.path),
                    str(self.db),
                    group,
                    mode,
                    str(count),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env(),
            )
        self.procs.append(proc)
        return proc

    def run(self, group: str, mode: str, count: int) -> list[str]:
        proc = self.start(group, mode, count)
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 0, (self.logs / f"{group}-{mode}.stderr").read_text()
        return out.split()

    @staticmethod
    def wait_for_line(proc: subprocess.Popen[str], line: str) -> None:
        assert proc.stdout is not None
        # A worker that hangs is killed, which ends the loop below with a clear failure.
        watchdog = threading.Timer(TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            for got in proc.stdout:
                if got.strip() == line:
                    return
        finally:
            watchdog.cancel()
        raise AssertionError(f"worker exited (or hung) before printing {line!r}")

    @staticmethod
    def next_check(proc: subprocess.Popen[str]) -> int:
        """The ``check_count`` of the next check an ``unknown`` worker was asked."""
        assert proc.stdout is not None
        watchdog = threading.Timer(TIMEOUT_S, proc.kill)
        watchdog.start()
        try:
            for got in proc.stdout:
                if got.startswith("CHECKED "):
                    return int(got.split()[1])
        finally:
            watchdog.cancel()
        raise AssertionError("worker exited (or hung) before it was asked a check")

    @staticmethod
    def kill(proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)


@pytest.fixture
def half_dir(tmp_path: Path) -> Iterator[Path]:
    yield half_broker(tmp_path / "mq", SETTINGS)
    stop_broker(tmp_path / "mq")


def half_broker(directory: Path, settings: dict[str, str]) -> Path:
    directory.mkdir(mode=0o700)
    write_persisted(directory, settings)
    ensure_broker(directory)
    return directory


def kill_broker(path: Path) -> None:
    endpoint = Endpoint.read(path)
    assert endpoint is not None and endpoint.pid > 0
    os.kill(endpoint.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(endpoint.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError("the broker did not die")


def listed(path: Path, *, discarded: bool = False, group: str | None = None) -> list[HalfMessage]:
    cluster = Cluster(AdminConfig.from_properties({"path": str(path)}))
    try:
        response = cluster.request(ListHalfMessagesRequest(discarded, group))
    finally:
        cluster.close()
    assert response.error_code == 0, response.error_message
    return list(response.messages)


def wait_until(what: str, condition: object) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def read_topic(path: Path, topic: str) -> list[bytes]:
    consumer = Consumer(path=path, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        # One partition: the broker's num.partitions default, and the discard topic's count.
        partitions = [tp]
        consumer.assign(partitions)
        end = consumer.end_offsets(partitions)
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while any(consumer.position(p) < end[p] for p in partitions):
            assert time.monotonic() < deadline, f"could not read {tp} to its end"
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        return values
    finally:
        consumer.close()


def committed_rows(db: Path) -> list[bytes]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [bytes(v) for (v,) in conn.execute("SELECT value FROM orders")]


@pytest.mark.slow
def test_half_messages_follow_their_local_transactions(half_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "orders.sqlite"
    workers = Workers(half_dir, db, tmp_path)
    try:
        assert workers.run("orders", "commit", 3) == ["COMMIT", "0", "COMMIT", "1", "COMMIT", "2"]
        assert workers.run("orders", "rollback", 2) == ["ROLLBACK", "-1", "ROLLBACK", "-1"]

        after = workers.start("orders", "die-after-local-commit")
        workers.wait_for_line(after, "LOCAL-COMMITTED")
        workers.kill(after)
        # Another group, so that no live producer answers for either message before the
        # broker dies (a live producer of the same group would: that is the point of it).
        before = workers.start("refunds", "die-before-local-commit")
        workers.wait_for_line(before, "IN-LOCAL-TXN")
        workers.kill(before)
        unknown = workers.start("unsure", "unknown")
        workers.wait_for_line(unknown, "SENT")
        groups = sorted(m.producer_group for m in listed(half_dir))
        assert groups == ["orders", "refunds", "unsure"]

        # The broker dies with the three half messages pending; its successor rebuilds them.
        kill_broker(half_dir)
        ensure_broker(half_dir)
        assert sorted(m.producer_group for m in listed(half_dir)) == groups

        # A live producer of each group answers the checks of the dead ones' messages.
        workers.start("orders", "serve")
        workers.start("refunds", "serve")
        wait_until(
            "the checks of orders and refunds",
            lambda: {m.producer_group for m in listed(half_dir)} <= {"unsure"},
        )
        wait_until("the discard", lambda: listed(half_dir, discarded=True))
        (gone,) = listed(half_dir, discarded=True)
        assert (gone.producer_group, gone.value, gone.check_count) == ("unsure", b"unknown-0", 3)
        assert read_topic(half_dir, DISCARD_TOPIC) == [b"unknown-0"]

        values = read_topic(half_dir, "payments")
        rows = committed_rows(db)
        assert sorted(rows) == [b"commit-0", b"commit-1", b"commit-2", b"die-after-local-commit-0"]
        assert collections.Counter(values) == collections.Counter(rows)
    finally:
        workers.kill_all()


@pytest.mark.slow
def test_a_check_out_when_the_broker_dies_costs_no_check(tmp_path: Path) -> None:
    # A long interval: the check handed out stays out (its answer not yet due) until the
    # broker is killed, and no second check comes before it.
    slow = {
        **SETTINGS,
        "transaction.check.interval.ms": "60000",
        "transaction.half.timeout.ms": "500",
    }
    path = half_broker(tmp_path / "mq", slow)
    workers = Workers(path, tmp_path / "orders.sqlite", tmp_path)
    try:
        unsure = workers.start("unsure", "unknown")
        workers.wait_for_line(unsure, "SENT")
        assert workers.next_check(unsure) == 1
        (message,) = listed(path)
        assert message.check_count == 1  # asked once, the answer not due for a minute

        # The broker dies with that check out; the producer's answer would have come on the
        # connection that died with it. The successor asks again, as the first check.
        kill_broker(path)
        ensure_broker(path)
        assert workers.next_check(unsure) == 1
        (message,) = listed(path)
        assert message.check_count == 1
    finally:
        workers.kill_all()
        stop_broker(path)


class AlwaysCommit:
    def execute_local_transaction(
        self, message: TransactionalMessage, arg: object
    ) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message: TransactionalMessage) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def end_again(path: Path, message_id: str) -> EndHalfMessageResponse:
    cluster = Cluster(AdminConfig.from_properties({"path": str(path)}))
    try:
        response: EndHalfMessageResponse = cluster.request(
            EndHalfMessageRequest("orders", message_id, HalfAction.COMMIT)
        )
        return response
    finally:
        cluster.close()


@pytest.mark.slow
def test_the_broker_forgets_an_outcome_after_its_retention(tmp_path: Path) -> None:
    short = {**SETTINGS, "transaction.half.op.retention.ms": "1500"}
    path = half_broker(tmp_path / "mq", short)
    try:
        with TransactionalMessageProducer(
            path, producer_group="orders", listener=AlwaysCommit()
        ) as producer:
            result = producer.send("payments", b"paid", key=b"order-1")
        assert (result.state, result.offset) == (LocalTransactionState.COMMIT, 0)
        again = end_again(path, result.message_id)
        assert (again.error_code, again.offset) == (0, 0)  # a repeat, within the retention
        # The broker's check job forgets it once the retention has passed.
        wait_until(
            "the outcome to expire",
            lambda: (
                end_again(path, result.message_id).error_code == ErrorCode.HALF_MESSAGE_NOT_FOUND
            ),
        )
        kill_broker(path)
        ensure_broker(path)
        late = end_again(path, result.message_id)
        assert late.error_code == ErrorCode.HALF_MESSAGE_NOT_FOUND
        assert listed(path) == [] and read_topic(path, "payments") == [b"paid"]
    finally:
        stop_broker(path)
