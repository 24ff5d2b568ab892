"""The sink task's OwnerHeartbeat thread: while it runs, a prepared transaction of its owner
outlives the owner's timeout; once it stops, the coordinator ends the transaction; a
heartbeat that cannot reach a broker is logged, never raised."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from spark_mq import Admin, Producer
from spark_mq.broker.local import ensure_broker
from spark_mq.sink.task import OwnerHeartbeat

TIMEOUT_MS = 600


def _state(mq_dir: Path, tid: str) -> str:
    with Admin(path=str(mq_dir)) as admin:
        return admin.describe_transactions([tid])[0].state


def test_heartbeats_keep_the_owner_alive_until_the_task_ends(mq_dir: Path) -> None:
    ensure_broker(
        mq_dir, config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "50"}
    )
    with Producer(
        path=str(mq_dir), transactional_id="hb/0", transaction_timeout_ms=TIMEOUT_MS
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"prepared", partition=0)
        producer.prepare_transaction(owner_prefix="hb/")
    with OwnerHeartbeat({"path": str(mq_dir)}, "hb/", TIMEOUT_MS / 4000):
        time.sleep(4 * TIMEOUT_MS / 1000)  # four timeouts
        assert _state(mq_dir, "hb/0") == "Prepared"
    deadline = time.monotonic() + 30
    while _state(mq_dir, "hb/0") != "CompleteAbort":
        assert time.monotonic() < deadline, "the quiet owner's transaction was never ended"
        time.sleep(0.05)


def test_a_heartbeat_that_fails_is_logged_and_the_task_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint: dict[str, object] = {"bootstrap.servers": "127.0.0.1:9"}  # nothing listens
    with caplog.at_level(logging.WARNING, logger="spark_mq.sink.task"):
        started = time.monotonic()
        with OwnerHeartbeat(endpoint, "gone/", 0.05):
            time.sleep(0.3)
        assert time.monotonic() - started < 5  # leaving does not wait for a heartbeat
        deadline = time.monotonic() + 30
        while "heartbeat of gone/ failed" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
