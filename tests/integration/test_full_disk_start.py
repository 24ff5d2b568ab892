"""A broker on a (nearly) full disk, on a real small file system (the ``small_disk`` tmpfs of
tests/conftest.py) with real broker processes: it restarts after SIGKILL or a clean stop and
serves all its data; a partition it cannot open is reported offline while the rest is served;
a topic creation that fails leaves nothing behind and says why at once; a group commit says
the disk is full instead of "coordinator not found"."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.errors import KafkaStorageError, RequestTimedOutError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

VALUE = b"v" * 4_000
#: Batches of 16 records of 4 KB: about 64 KB each.
BATCH_RECORDS = 16


def _servers(broker: Any) -> str:
    return str(broker.address)


def _batch(first: int) -> bytes:
    values = [b"%06d" % (first + i) + VALUE for i in range(BATCH_RECORDS)]
    return encode_batch(pa.array(values))


def _values(broker: Any, topic: str, partition: int) -> list[bytes]:
    """Every value of ``topic``-``partition`` through a real consumer, in offset order."""
    tp = TopicPartition(topic, partition)
    with Consumer(bootstrap_servers=_servers(broker), auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"could not read {tp} to its end {end}"
            values.extend(consumer.poll_batch(timeout_ms=200).column("value").to_pylist())
    return values


def _fill_completely(disk: Path) -> Path:
    """Write a filler until the file system has no free block left."""
    filler = disk / "filler-rest"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("stop", ["SIGKILL", "clean stop"])
def test_a_broker_stopped_on_a_nearly_full_disk_restarts_and_serves_all_its_data(
    stop: str,
    small_disk: Path,
    fill_disk: Callable[[Path, int], Path],
    start_broker: Callable[..., Any],
) -> None:
    """Recovery after SIGKILL rebuilds every segment's indexes (no recovery point was
    checkpointed yet), a restart after a clean stop gives the active segment's indexes room
    again: neither may need more disk than the entries take."""
    directory = small_disk / "mq"
    directory.mkdir()
    broker = start_broker(directory)
    with broker.connect() as conn:
        created = conn.create_topic("t", 1, {"segment.bytes": str(1 << 20)})
        assert created.error_code == 0, created.error_message
        for i in range(100):  # about 6.4 MB in 7 segments
            reply = conn.produce("t", 0, _batch(i * BATCH_RECORDS))
            assert reply.error_code == 0, reply.error_message
    sent = [b"%06d" % n + VALUE for n in range(100 * BATCH_RECORDS)]
    if stop == "SIGKILL":
        broker.kill()
    else:
        assert broker.stop() == 0

    fill_disk(small_disk, 4096)
    restarted = start_broker(directory)
    assert _values(restarted, "t", 0) == sent
    log = restarted.log()
    assert "no room" not in log and "Traceback" not in log, log[-3000:]


def test_a_partition_that_cannot_be_opened_is_offline_and_the_rest_is_served(
    broker_dir: Path, start_broker: Callable[..., Any]
) -> None:
    broker = start_broker(broker_dir)
    with broker.connect() as conn:
        assert conn.create_topic("t", 2).error_code == 0
        for p in (0, 1):
            assert conn.produce("t", p, _batch(0)).error_code == 0
    broker.kill()
    # The segment file of t-1 cannot be read any more (a directory stands in its place, as an
    # unreadable file or one the loader cannot make sense of would).
    segment = broker_dir / "t-1" / "00000000000000000000.log"
    segment.unlink()
    segment.mkdir()

    restarted = start_broker(broker_dir)
    with restarted.connect() as conn:
        topic = conn.metadata(["t"]).topics[0]
        assert topic.error_code == 0, topic.error_message
        p0, p1 = sorted(topic.partitions, key=lambda p: p.partition)
        assert (p0.error_code, p0.leader_id) == (0, 0)
        assert p1.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert (p1.leader_id, p1.leader_epoch, p1.isr, p1.offline_replicas) == (-1, -1, [], [0])
        assert "t-1 is offline" in p1.error_message
        assert "cannot open segment file" in p1.error_message

        produced = conn.produce("t", 1, _batch(16))
        assert produced.error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert "t-1 is offline" in produced.error_message
        assert "Is a directory" in produced.error_message
        fetched, records = conn.fetch("t", 1, 0)
        assert fetched.error_code == ErrorCode.KAFKA_STORAGE_ERROR and records == b""
        assert "t-1 is offline" in fetched.error_message

        assert conn.produce("t", 0, _batch(16)).error_code == 0
    assert len(_values(restarted, "t", 0)) == 2 * BATCH_RECORDS
    # The broker said it once, at startup, however many requests met the partition since.
    assert restarted.log().count("partition t-1 is offline") == 1, restarted.log()[-3000:]


def test_a_topic_creation_on_a_full_disk_fails_at_once_and_leaves_nothing(
    small_disk: Path, start_broker: Callable[..., Any]
) -> None:
    directory = small_disk / "mq"
    directory.mkdir()
    broker = start_broker(directory)
    with Admin(bootstrap_servers=_servers(broker)) as admin:
        admin.create_topic("t", partitions=1)
    _fill_completely(small_disk)

    with Admin(bootstrap_servers=_servers(broker)) as admin:
        started = time.monotonic()
        with pytest.raises(KafkaStorageError, match="LogDirectoryFullError"):
            admin.create_topic("big", partitions=3)
        assert time.monotonic() - started < 5
        assert admin.list_topics() == ["t"]
    # Auto-creation by a producer: the same error, at once, not after max.block.ms.
    with Producer(bootstrap_servers=_servers(broker)) as producer:
        started = time.monotonic()
        with pytest.raises(KafkaStorageError, match="LogDirectoryFullError"):
            producer.send("auto", b"x").get()
        assert time.monotonic() - started < 5
    left = sorted(p.name for p in directory.iterdir() if p.name.startswith(("big", "auto")))
    assert left == [], left


def test_a_group_commit_on_a_full_disk_says_the_disk_is_full(
    small_disk: Path, start_broker: Callable[..., Any]
) -> None:
    directory = small_disk / "mq"
    directory.mkdir()
    broker = start_broker(directory)
    with Admin(bootstrap_servers=_servers(broker)) as admin:
        admin.create_topic("t", partitions=1)
    _fill_completely(small_disk)

    tp = TopicPartition("t", 0)
    with Consumer(
        bootstrap_servers=_servers(broker), group_id="g", default_api_timeout_ms=3_000
    ) as consumer:
        consumer.assign([tp])
        with pytest.raises(RequestTimedOutError) as failed:
            consumer.commit({tp: 1})
    message = str(failed.value)
    assert "LogDirectoryFullError" in message and "__consumer_offsets" in message, message
    assert "not found" not in message, message
    left = [p.name for p in directory.iterdir() if p.name.startswith("__consumer_offsets")]
    assert left == [], left
