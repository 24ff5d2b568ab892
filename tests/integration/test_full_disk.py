"""A broker whose disk fills up, on a real small file system (the ``small_disk`` tmpfs of
tests/conftest.py): the producer gets a typed error that names the full disk, nothing
acknowledged is lost or torn, and writes resume once space is freed, without restarting
anything."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq import Admin, Consumer, DeliveryTimeoutError, Producer, TopicPartition
from spark_mq.broker.local import stop_broker
from spark_mq.errors import KafkaStorageError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

#: Room left for records once the filler file is written.
FREE_BYTES = 3 << 20
RECORD = b"r" * 50_000


def _values(directory: Path) -> list[bytes]:
    """Every value of partition t-0, in offset order."""
    partition = TopicPartition("t", 0)
    with Consumer(path=str(directory), auto_offset_reset="earliest") as consumer:
        consumer.assign([partition])
        end = consumer.end_offsets([partition])[partition]
        values: list[bytes] = []
        for _ in range(200):
            if consumer.position(partition) >= end:
                return values
            values.extend(consumer.poll_batch(timeout_ms=200).column("value").to_pylist())
    raise AssertionError(f"could not read t-0 to its end offset {end}")


def test_a_full_disk_fails_sends_clearly_and_keeps_every_acknowledged_record(
    small_disk: Path, fill_disk: Callable[[Path, int], Path]
) -> None:
    directory = small_disk / "mq"
    with Admin(path=str(directory)) as admin:
        admin.create_topic("t", partitions=1, config={"segment.index.bytes": str(64 << 10)})
    filler = fill_disk(small_disk, FREE_BYTES)

    acked: list[bytes] = []
    with Producer(
        path=str(directory), delivery_timeout_ms=3_000, request_timeout_ms=1_000, linger_ms=0
    ) as producer:
        with pytest.raises(DeliveryTimeoutError) as failed:
            for i in range(2 * FREE_BYTES // len(RECORD)):
                value = b"%05d" % i + RECORD
                producer.send("t", value).get()
                acked.append(value)
        # The error says what happened on the broker and what to do about it.
        assert isinstance(failed.value.__cause__, KafkaStorageError)
        message = str(failed.value)
        assert "LogDirectoryFullError" in message and "free space" in message, message
        assert acked, "nothing fitted before the disk filled"

        # Room again: the same broker and producer take records at once.
        filler.unlink()
        producer.send("t", b"after").get()

    # Everything acknowledged is there, in order, once, and nothing else (no torn batch).
    assert _values(directory) == [*acked, b"after"]
    # And it survives a restart of the broker, whose recovery reads the whole log.
    stop_broker(directory, timeout_ms=10_000)
    assert _values(directory) == [*acked, b"after"]


def test_repeated_refusals_are_logged_once_with_a_count(
    small_disk: Path, fill_disk: Callable[[Path, int], Path], start_broker: Any
) -> None:
    """Issue 26: every produce refused for a full disk was logged at ERROR with a full
    traceback (453 in 25 s). The first is logged, without a traceback (the message says what
    happened), and the rest are counted in one line. (The broker logs to stderr, on another
    disk: a log on the full disk would lose the lines this test counts.)"""
    directory = small_disk / "mq"
    directory.mkdir()
    broker = start_broker(directory)
    with broker.connect() as conn:
        conn.create_topic("t", 2, configs={"segment.index.bytes": str(64 << 10)})
        filler = fill_disk(small_disk, 0)
        for i in range(100):
            answer = conn.produce("t", i % 2, encode_batch(pa.array([RECORD])))
            assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR, answer
    filler.unlink()
    broker.stop(30)

    lines = [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]
    failures = [line for line in lines if "failed:" in line["msg"]]
    assert len(failures) == 2, failures
    assert [(f["level"], "exc" in f) for f in failures] == [("ERROR", False)] * 2
    # The first write that finds the disk full may be the batch or the partition's leader
    # epoch checkpoint (a partition's first append starts its epoch); either says so.
    for failure, partition in zip(failures, ("t-0", "t-1"), strict=True):
        assert re.match(
            rf"produce to {partition} failed: .*(disk full|the disk is full)", failure["msg"]
        ), failure["msg"]
    assert re.search(r"\[repeated 99 more times in the last \d+ s\]$", failures[1]["msg"])


def test_a_new_topic_on_a_full_disk_fails_at_once_with_the_cause(
    small_disk: Path, fill_disk: Callable[[Path, int], Path], start_broker: Any
) -> None:
    """Issue 27, point 7: producing to a topic the broker would create on demand, with its
    disk full, waited out the 60 s metadata timeout and then suggested enabling
    auto.create.topics.enable (already on), while the broker logged its failed attempts to
    build the topic's directory 62 times. The producer now fails at once with the broker's
    reason, and the broker logs the repeated failure once with a count."""
    directory = small_disk / "mq"
    directory.mkdir()
    broker = start_broker(directory)
    broker.wait_serving()
    filler = fill_disk(small_disk, 0)
    try:
        with Producer(path=str(directory), max_block_ms=60_000, linger_ms=0) as producer:
            started = time.monotonic()
            for _ in range(5):
                with pytest.raises(KafkaStorageError) as failed:
                    producer.send("fresh", b"v").get(timeout=60)
            elapsed = time.monotonic() - started
        message = str(failed.value)
        assert "auto.create.topics.enable" not in message, message
        assert "fresh" in message and "disk" in message.lower(), message
        # Five sends, each answered by the broker's first refusal, not by a timeout.
        assert elapsed < 10, f"five sends took {elapsed:.1f} s"
    finally:
        filler.unlink()
    # Room again: the topic is created on the next send.
    with Producer(path=str(directory), linger_ms=0) as producer:
        producer.send("fresh", b"after").get(timeout=30)
    broker.stop(30)

    lines = [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]
    leftovers = [line for line in lines if "leftover" in line["msg"] or "rebuild" in line["msg"]]
    assert len(leftovers) <= 1, leftovers
    creation_failures = [line for line in lines if "fresh" in line["msg"]]
    assert len(creation_failures) <= 3, creation_failures
