"""Small batches through a real broker (issue 27, point 3): a record fits max.request.size
when it fits with the batch header, as in Kafka; one-record batches are Kafka-sized on disk;
logs that mix Arrow and varint batches read back in order through poll_batch()."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.client import Admin, Consumer, Producer, TopicPartition
from spark_mq.errors import RecordTooLargeError
from spark_mq.storage.batch_decoder import iter_batches


def servers(broker: Any) -> str:
    return str(broker.address)


def read_values(broker: Any, topic: str, count: int) -> list[bytes]:
    out: list[bytes] = []
    with Consumer(bootstrap_servers=servers(broker), auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            out.extend(consumer.poll_batch(timeout_ms=500).column("value").to_pylist())
    return out


def test_max_request_size_1024_sends_a_2_byte_value(broker: Any) -> None:
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.create_topic("tiny", partitions=1)
    with Producer(bootstrap_servers=servers(broker), max_request_size=1024) as producer:
        producer.send("tiny", b"hi").get(30)
        producer.send_batch("tiny", pa.table({"value": [b"yo", b"ok"]})).get(30)
        # 1024 - 61 (header) - 25 (the record's own estimate) = 938 bytes of value fit ...
        producer.send("tiny", b"x" * 938).get(30)
        # ... and one more byte does not.
        with pytest.raises(RecordTooLargeError):
            producer.send("tiny", b"x" * 939)
    assert read_values(broker, "tiny", 4) == [b"hi", b"yo", b"ok", b"x" * 938]


def test_one_record_batches_are_kafka_sized_on_disk(broker: Any, broker_dir: Path) -> None:
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.create_topic("trickle", partitions=1)
    with Producer(bootstrap_servers=servers(broker), linger_ms=0) as producer:
        for i in range(20):
            producer.send("trickle", b"%010d" % i).get(30)
    assert read_values(broker, "trickle", 20) == [b"%010d" % i for i in range(20)]
    data = b"".join(p.read_bytes() for p in sorted((broker_dir / "trickle-0").glob("*.log")))
    sizes = [header.size for header, _ in iter_batches(data)]
    assert len(sizes) == 20
    assert max(sizes) <= 128, sizes


def test_mixed_arrow_and_varint_batches_read_back_in_order(broker: Any) -> None:
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.create_topic("mixed", partitions=1)
    expected: list[bytes] = []
    with Producer(bootstrap_servers=servers(broker), linger_ms=0) as producer:
        for round_ in range(3):
            bulk = [b"bulk-%d-%d" % (round_, i) for i in range(500)]
            producer.send_batch("mixed", pa.table({"value": bulk})).get(30)
            expected.extend(bulk)
            for i in range(5):
                value = b"one-%d-%d" % (round_, i)
                producer.send("mixed", value, key=b"k", headers=[("h", b"v")]).get(30)
                expected.append(value)
    assert read_values(broker, "mixed", len(expected)) == expected
