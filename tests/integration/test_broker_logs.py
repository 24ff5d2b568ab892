"""What a real broker's log says about its directory, retention and the cleaner.

Issue 27, point 8: a brand-new directory is not "recovered after an unclean shutdown"; a
recovery says which partitions it validated; retention says which partition, segments and
offsets it deleted and why; the cleaner logs at INFO when it cleaned something, and its idle
passes (every ``log.cleaner.backoff.ms``) say nothing at INFO.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow as pa

from spark_mq import Admin, Producer
from spark_mq.storage.record_batch import encode_batch


def log_lines(broker: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]


def messages(broker: Any, level: str = "INFO") -> list[str]:
    return [line["msg"] for line in log_lines(broker) if line["level"] == level]


def wait_for_message(broker: Any, text: str, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [m for m in messages(broker) if text in m]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no log line with {text!r} within {timeout_s} s:\n{broker.log()}")


def serving_line(broker: Any) -> str:
    return next(m for m in messages(broker) if " serving " in m)


def test_the_start_says_new_clean_or_recovered(start_broker: Any) -> None:
    first = start_broker()
    assert serving_line(first).endswith("new log directory)")
    assert "unclean" not in first.log() and "recover" not in first.log()
    with first.connect() as conn:
        conn.produce("crash", 0, encode_batch(pa.array([b"a", b"b"])))
    assert first.stop() == 0

    second = start_broker()
    assert serving_line(second).endswith("clean start)")
    with second.connect() as conn:
        for i in range(5):
            conn.produce("crash", 0, encode_batch(pa.array([b"v%d" % i])))
    second.kill()

    third = start_broker()
    assert serving_line(third).endswith("recovered after an unclean shutdown)")
    recovering = [m for m in messages(third) if m.startswith("recovering crash-0 ")]
    assert len(recovering) == 1
    assert "after an unclean shutdown: validating 1 segment (" in recovering[0]
    assert "from offset 0, the segment holding the recovery point 2" in recovering[0]


def test_retention_says_which_partition_offsets_and_rule(start_broker: Any) -> None:
    broker = start_broker(overrides={"log.retention.check.interval.ms": "200"})
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(
            "old", partitions=1, config={"segment.bytes": "2000", "retention.bytes": "3000"}
        )
    # Batches of 20 small records (about 300 bytes each): several 2,000-byte segments.
    with Producer(bootstrap_servers=servers, linger_ms=60_000) as producer:
        for batch in range(24):
            for i in range(20):
                producer.send("old", value=b"x%04d" % (batch * 20 + i), partition=0)
            producer.flush()

    line = wait_for_message(broker, "old-0: deleted ")
    assert "because the partition held " in line and "over retention.bytes=3000" in line
    assert "holding offsets 0 to " in line and "the log start offset is now " in line
    # The scheduler's bare count ("retention: 3") is gone from INFO.
    assert not [m for m in messages(broker) if m.startswith("retention:")]


def test_the_cleaner_logs_at_info_only_when_it_cleaned(start_broker: Any) -> None:
    broker = start_broker(overrides={"log.cleaner.backoff.ms": "100"})
    servers = str(broker.address)
    with Admin(bootstrap_servers=servers) as admin:
        admin.create_topic(
            "keys",
            partitions=1,
            config={
                "cleanup.policy": "compact",
                "segment.bytes": "2000",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
    with Producer(bootstrap_servers=servers, linger_ms=60_000) as producer:
        for batch in range(24):
            for i in range(20):
                producer.send("keys", key=b"k%d" % (i % 3), value=b"v%d" % batch, partition=0)
            producer.flush()

    line = wait_for_message(broker, "cleaned keys-0 up to offset ")
    assert "records read" in line and "kept" in line and "MB/s" in line
    # Segments rolled while the producer ran may take a few passes; then nothing is dirty.
    cleaned = settle(broker, lambda: cleaner_messages(broker), quiet_s=1.0)
    assert cleaned and all(m.startswith("cleaned keys-0 up to offset ") for m in cleaned)
    # Idle passes follow every 100 ms: none of them may log at INFO.
    time.sleep(2.0)
    assert cleaner_messages(broker) == cleaned


def cleaner_messages(broker: Any) -> list[str]:
    """INFO lines of the cleaner and of the scheduler that runs it."""
    return [
        line["msg"]
        for line in log_lines(broker)
        if line["level"] == "INFO"
        and line["logger"] in ("spark_mq.storage.log_cleaner", "spark_mq.broker.scheduler")
    ]


def settle(broker: Any, read: Any, quiet_s: float, timeout_s: float = 30.0) -> Any:
    """``read()`` once it has not changed for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last = read()
    changed = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = read()
        if now != last:
            last, changed = now, time.monotonic()
        elif time.monotonic() - changed >= quiet_s:
            return last
    raise AssertionError(f"still changing after {timeout_s} s: {last}")
