"""A batch job's driver dies after its tasks prepared and before its decision: nothing of the
job becomes visible, and once no task of the job has been active for the sink's
``transaction.timeout.ms``, the coordinator aborts its prepared transactions, so they stop
holding back ``read_committed`` readers (instead of waiting out
``transaction.prepared.max.timeout.ms``, seven days by default).

The driver (``sink_retry_driver.py``, without an injected task failure) runs in its own
process group; the sink's commit test hook kills that group just before the decision.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from sink_helpers import create_topic, run_batch_driver

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.local import ensure_broker

ROWS = 20_000
#: The job's transaction.timeout.ms: how long the coordinator waits for a sign of life.
TIMEOUT_MS = 2_000


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_batch_job_killed_before_its_decision_stops_holding_back_readers(
    mq_dir: Path, tmp_path: Path
) -> None:
    ensure_broker(
        mq_dir, config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}
    )
    create_topic(mq_dir, "out", 1)
    log = tmp_path / "driver.log"
    code = run_batch_driver(
        log,
        [
            *("--path", str(mq_dir), "--topic", "out", "--rows", str(ROWS)),
            *("--sink-id", "dead-job", "--option", f"kafka.transaction.timeout.ms={TIMEOUT_MS}"),
        ],
        {"SPARK_MQ_CRASH_AT": "sink.commit.before_complete@0"},
    )
    assert code == -signal.SIGKILL, log.read_text()[-4000:]
    with Admin(path=str(mq_dir)) as admin:
        prepared = admin.list_transactions(prefix="dead-job/")
    assert prepared, "the job's task never prepared a transaction"
    # No decision was made (by now the timeout may have aborted it already).
    assert {t.state for t in prepared} <= {"Prepared", "PrepareAbort", "CompleteAbort"}, prepared

    # A record committed after the job's: read_committed readers see it only once the
    # job's prepared transaction no longer holds back the last stable offset.
    with Producer(path=str(mq_dir), transactional_id="after-the-job") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"after the job", partition=0)
        producer.commit_transaction()
    seen: list[bytes] = []
    started = time.monotonic()
    with Consumer(
        path=str(mq_dir), auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign([TopicPartition("out", 0)])
        while b"after the job" not in seen:
            assert time.monotonic() - started < 120, "the dead job's transaction still hangs"
            seen.extend(consumer.poll_batch(timeout_ms=200).column("value").to_pylist())
    assert seen == [b"after the job"]  # nothing of the job is visible
    with Admin(path=str(mq_dir)) as admin:
        states = {t.state for t in admin.list_transactions(prefix="dead-job/")}
    assert states == {"CompleteAbort"}, states
