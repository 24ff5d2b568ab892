"""A dead broker under a streaming query: the embedded broker is killed with SIGKILL while a
query copies a topic through the exactly-once sink. The clients start a new broker, which
recovers the log; a micro-batch that fails meanwhile stops the query, which is restarted
from its checkpoint. At the end the read_committed output is the transformed input exactly
once, and no transaction is left to hold back readers."""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from sink_helpers import create_topic, produce, start_upper_copy, values

from spark_mq import Admin
from spark_mq.broker.local import broker_status

pytestmark = pytest.mark.slow

RECORDS = 3_000
KILLS = 3
#: Restarts allowed after failed runs before the test gives up.
MAX_RUNS = 6


def _kill_broker_now_and_then(directory: Path, seed: int, stop: threading.Event) -> list[int]:
    """Kill the broker of ``directory`` ``KILLS`` times, 0.3-2 s apart; returns the pids."""
    killed: list[int] = []
    rnd = random.Random(seed)

    def run() -> None:
        while len(killed) < KILLS and not stop.wait(rnd.uniform(0.3, 2.0)):
            status = broker_status(directory)
            if status is not None and status.pid > 0 and status.state == "serving":
                os.kill(status.pid, signal.SIGKILL)
                killed.append(status.pid)

    threading.Thread(target=run, name="broker-killer", daemon=True).start()
    return killed


def test_a_broker_killed_under_a_streaming_sink_loses_and_doubles_nothing(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    create_topic(mq_dir, "src", 2)
    create_topic(mq_dir, "dst", 2)
    produce(mq_dir, "src", [b"r%05d" % i for i in range(RECORDS)])
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> bool:
        query = start_upper_copy(
            spark,
            mq_dir,
            checkpoint,
            source={"maxOffsetsPerTrigger": "200"},  # many micro-batches for the kills to hit
        )
        try:
            query.awaitTermination()
        except Exception:  # a micro-batch met the dead broker: restart from the checkpoint
            return False
        return True

    stop = threading.Event()
    killed = _kill_broker_now_and_then(mq_dir, seed=20261122, stop=stop)
    try:
        runs = 1
        while not run():
            runs += 1
            assert runs <= MAX_RUNS, f"the query failed {MAX_RUNS} times; brokers killed {killed}"
    finally:
        stop.set()
    assert killed, "the query finished before any broker was killed"
    assert values(mq_dir, "dst") == sorted(b"R%05d" % i for i in range(RECORDS))
    with Admin(path=str(mq_dir)) as admin:
        hanging = [
            (t.transactional_id, t.state)
            for t in admin.list_transactions()
            if t.state in ("Ongoing", "Prepared")
        ]
    assert hanging == []
