"""A batch larger than its topic takes is split and sent again, as Kafka's producer does:
records keep their futures, order and (with idempotence) their exactly-once writing; only a
single record over the limit fails. Real broker processes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.client import Admin, Consumer, Producer, TopicPartition
from spark_mq.errors import RecordTooLargeError


def _values(directory: Path, topic: str, partitions: int) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    with Consumer(path=directory, auto_offset_reset="earliest") as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        for tp in tps:
            out[tp.partition] = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline
            for tp, records in consumer.poll(timeout_ms=500, max_records=500_000).items():
                out[tp.partition].extend(r.value for r in records)
    return out


@pytest.fixture
def mq(tmp_path: Path) -> Any:
    from spark_mq.broker.local import stop_broker

    directory = tmp_path / "mq"
    yield directory
    stop_broker(directory)


def test_idempotent_producer_under_load_fits_its_batches_to_the_topic(mq: Path) -> None:
    # The case: the default (idempotent) producer, 200,000 records of 100 bytes sent
    # as fast as send() goes, so batches grow under back-pressure, for a topic that takes
    # batches of at most 40,000 bytes. Before, 199,420 failed.
    with Admin(path=mq) as admin:
        admin.create_topic("t", 2, config={"max.message.bytes": "40000"})
    values = [b"%08d" % i + b"v" * 92 for i in range(200_000)]
    with Producer(path=mq) as producer:
        futures = [producer.send("t", v, key=v[-9:-8] + v[:1]) for v in values]
        producer.flush()
    metadata = [f.get(0) for f in futures]
    logs = _values(mq, "t", 2)
    assert sum(len(log) for log in logs.values()) == len(values)
    for value, m in zip(values, metadata, strict=True):
        assert logs[m.partition][m.offset] == value
    # Each partition holds its records in the order they were sent.
    for partition, log in logs.items():
        sent = [v for v, m in zip(values, metadata, strict=True) if m.partition == partition]
        assert log == sent


def test_send_batch_pieces_too_large_for_the_topic_are_split(mq: Path) -> None:
    with Admin(path=mq) as admin:
        admin.create_topic("t", 1, config={"segment.bytes": "65536"})
    values = [b"%07d" % i + b"w" * 193 for i in range(20_000)]
    with Producer(path=mq) as producer:
        batches = producer.send_batch("t", pa.table({"value": values})).get(60)
        # The first table's pieces were refused and split; the next table's pieces are cut
        # to batch.size from the start.
        later = producer.send_batch("t", pa.table({"value": values[:1000]})).get(60)
    assert sum(b.record_count for b in batches) == len(values)
    assert [b.base_offset for b in batches] == sorted(b.base_offset for b in batches)
    assert _values(mq, "t", 1)[0] == values + values[:1000]
    assert all(b.record_count * 200 <= 16_384 + 400 for b in later)


def test_a_single_record_over_the_limit_fails_alone(mq: Path) -> None:
    with Admin(path=mq) as admin:
        admin.create_topic("t", 1, config={"max.message.bytes": "20000"})
    with Producer(path=mq, linger_ms=50) as producer:
        small = [producer.send("t", b"a" * 100, partition=0) for _ in range(50)]
        big = producer.send("t", b"b" * 30_000, partition=0)
        more = [producer.send("t", b"c" * 100, partition=0) for _ in range(50)]
        producer.flush()
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        big.get(0)
    offsets = [f.get(0).offset for f in small + more]
    assert offsets == list(range(100))
