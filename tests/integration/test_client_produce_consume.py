"""Producer and Consumer against a real broker: round trips for every codec through send()
and send_batch(), keyed partitioning, poll() vs poll_batch(), callbacks and interceptors,
oversize records, unknown topics, acks."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.broker.local import stop_broker
from spark_mq.client import Admin, Consumer, Producer, TopicPartition
from spark_mq.client.partitioner import murmur2
from spark_mq.errors import InvalidRecordError, RecordTooLargeError, UnknownTopicOrPartitionError
from spark_mq.storage.codecs import CODEC_NAMES


def servers(broker: Any) -> str:
    return str(broker.address)


def create(broker: Any, topic: str, partitions: int = 1) -> None:
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.create_topic(topic, partitions=partitions)


def read_all(consumer: Consumer, count: int, *, batch: bool = False) -> list[Any]:
    """Poll until ``count`` records arrived (the deadline only guards against a hang)."""
    out: list[Any] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        if batch:
            out.extend(consumer.poll_batch(timeout_ms=500).to_pylist())
        else:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
    assert len(out) == count
    return out


def consumer_for(broker: Any, *partitions: TopicPartition, **config: Any) -> Consumer:
    consumer = Consumer(bootstrap_servers=servers(broker), auto_offset_reset="earliest", **config)
    consumer.assign(list(partitions))
    return consumer


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_send_round_trip(broker: Any, codec: str) -> None:
    create(broker, "t")
    with Producer(bootstrap_servers=servers(broker), compression_type=codec) as producer:
        futures = [
            producer.send(
                "t",
                f"value-{i}".encode(),
                key=None if i % 3 else f"k{i}".encode(),
                timestamp_ms=1_700_000_000_000 + i,
                headers=[("h", str(i).encode())] if i % 2 else None,
            )
            for i in range(50)
        ]
        producer.flush()
        metadata = [f.get(10) for f in futures]
    assert [m.offset for m in metadata] == list(range(50))
    assert metadata[7].timestamp == 1_700_000_000_007
    with consumer_for(broker, TopicPartition("t", 0)) as consumer:
        records = read_all(consumer, 50)
    for i, record in enumerate(records):
        assert (record.topic, record.partition, record.offset) == ("t", 0, i)
        assert record.value == f"value-{i}".encode()
        assert record.key == (None if i % 3 else f"k{i}".encode())
        assert record.timestamp == 1_700_000_000_000 + i and record.timestamp_type == 0
        assert record.headers == ((("h", str(i).encode()),) if i % 2 else ())


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_send_batch_round_trip(broker: Any, codec: str) -> None:
    create(broker, "t", partitions=3)
    n = 3000
    table = pa.table(
        {
            "value": pa.array([f"v{i}".encode() for i in range(n)]),
            "key": pa.array([f"key-{i % 17}".encode() for i in range(n)]),
            "timestamp": pa.array(range(1_000, 1_000 + n), pa.int64()),
        }
    )
    with Producer(
        bootstrap_servers=servers(broker), compression_type=codec, partitioner="murmur2"
    ) as producer:
        written = producer.send_batch("t", table).get(30)
    assert sum(b.record_count for b in written) == n
    with consumer_for(broker, *(TopicPartition("t", p) for p in range(3))) as consumer:
        rows = read_all(consumer, n, batch=True)
    by_value = {row["value"]: row for row in rows}
    for i in range(n):
        row = by_value[f"v{i}".encode()]
        key = f"key-{i % 17}".encode()
        assert row["partition"] == (murmur2(key) & 0x7FFFFFFF) % 3
        assert row["timestamp"] == 1_000 + i and row["key"] == key
    # Each partition keeps the table's row order.
    for p in range(3):
        values = [int(r["value"][1:]) for r in rows if r["partition"] == p]
        assert values == sorted(values)


def test_send_batch_keeps_keyless_rows_in_whole_batches(broker: Any) -> None:
    create(broker, "runs", partitions=3)
    n = 3000
    table = pa.table({"value": [f"{i:08d}".encode() * 12 for i in range(n)]})
    # About 130 bytes a row: max.request.size cuts the table into batches of ~120 rows; two
    # of them are over batch.size, so each batch goes to the next partition, whole (all but
    # the last, small one, which may still fit beside the one before).
    with Producer(bootstrap_servers=servers(broker), max_request_size=16_000) as producer:
        written = producer.send_batch("runs", table).get(30)
    assert len(written) > 6 and sum(b.record_count for b in written) == n
    assert all((b.partition - a.partition) % 3 == 1 for a, b in itertools.pairwise(written[:-1]))
    with consumer_for(broker, *(TopicPartition("runs", p) for p in range(3))) as consumer:
        rows = read_all(consumer, n, batch=True)
    where = {(r["partition"], r["offset"]): int(r["value"][:8]) for r in rows}
    first = 0
    for batch in written:
        # Each batch holds the next rows of the table, in order.
        offsets = range(batch.base_offset, batch.base_offset + batch.record_count)
        values = [where[(batch.partition, offset)] for offset in offsets]
        assert values == list(range(first, first + batch.record_count))
        first += batch.record_count


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_send_batch_cuts_batches_across_the_record_batches_of_a_table(
    broker: Any, codec: str
) -> None:
    """A table of 20 record batches of 150 rows (each over max.request.size, so sent alone
    each would be a full batch and a remainder) is cut exactly as the same rows in one
    array: full batches across the record batches, rows in order."""
    create(broker, "chunked", partitions=2)
    create(broker, "whole", partitions=2)
    n, per = 3000, 150
    rows = [f"{i:08d}".encode() * 12 for i in range(n)]
    table = pa.concat_tables(
        [pa.table({"value": pa.array(rows[i : i + per], pa.binary())}) for i in range(0, n, per)]
    )
    assert table.column("value").num_chunks == n // per
    with Producer(
        bootstrap_servers=servers(broker), max_request_size=16_000, compression_type=codec
    ) as producer:
        chunked = producer.send_batch("chunked", table).get(30)
        whole = producer.send_batch("whole", table.combine_chunks()).get(30)
    assert [b.record_count for b in chunked] == [b.record_count for b in whole]
    assert len(chunked) < n // per * 2
    with consumer_for(broker, *(TopicPartition("chunked", p) for p in range(2))) as consumer:
        got = read_all(consumer, n, batch=True)
    where = {(r["partition"], r["offset"]): r["value"] for r in got}
    first = 0
    for batch in chunked:
        offsets = range(batch.base_offset, batch.base_offset + batch.record_count)
        assert [where[(batch.partition, o)] for o in offsets] == rows[first : first + len(offsets)]
        first += batch.record_count
    assert first == n


def test_send_batch_stamps_every_batch_of_one_call_with_the_time_of_the_call(
    broker: Any,
) -> None:
    """Rows without a timestamp get the time of the send_batch call (CreateTime), the same
    in every batch the call is cut into, and the batch header's max timestamp is that time."""
    create(broker, "stamped")
    # Hundreds of batches: encoding them takes several milliseconds, so a time taken per
    # batch would differ between them.
    rows = [b"%06d" % i * 20 for i in range(20_000)]
    with Producer(bootstrap_servers=servers(broker), max_request_size=8_000) as producer:
        before = int(time.time() * 1000)
        sent = producer.send_batch("stamped", pa.table({"value": rows})).get(30)
        after = int(time.time() * 1000)
        later = producer.send_batch("stamped", pa.table({"value": rows[:10]})).get(30)
    assert len(sent) > 300
    with consumer_for(broker, TopicPartition("stamped", 0)) as consumer:
        got = read_all(consumer, len(rows) + 10, batch=True)
    stamps = {r["timestamp"] for r in got[: len(rows)]}
    assert len(stamps) == 1
    (stamp,) = stamps
    assert before <= stamp <= after
    assert all(r["timestamp"] >= stamp for r in got[len(rows) :])
    assert [r["value"] for r in got] == rows + rows[:10]
    assert later[0].base_offset == len(rows)


def test_keyed_records_land_where_kafka_would_put_them(broker: Any) -> None:
    create(broker, "keyed", partitions=6)
    keys = [f"user-{i}".encode() for i in range(40)]
    with Producer(bootstrap_servers=servers(broker), partitioner="murmur2") as producer:
        metadata = [producer.send("keyed", b"x", key=k) for k in keys]
        producer.flush()
        for key, future in zip(keys, metadata, strict=True):
            assert future.get().partition == (murmur2(key) & 0x7FFFFFFF) % 6


def test_poll_and_poll_batch_return_the_same_records(broker: Any) -> None:
    create(broker, "same", partitions=3)
    with Producer(bootstrap_servers=servers(broker), linger_ms=0) as producer:
        for i in range(1500):
            producer.send(
                "same", f"{i}".encode(), key=f"{i % 10}".encode(), headers={"n": str(i).encode()}
            )
        producer.send_batch("same", pa.table({"value": [b"tail"] * 500}))
        producer.flush()
    tps = [TopicPartition("same", p) for p in range(3)]
    with consumer_for(broker, *tps) as consumer:
        rows = read_all(consumer, 2000, batch=True)
    with consumer_for(broker, *tps, max_poll_records=77) as consumer:
        records = read_all(consumer, 2000)
    as_rows = [
        {
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "timestamp_type": r.timestamp_type,
            "key": r.key,
            "value": r.value,
            "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
        }
        for r in records
    ]

    def order(row: dict[str, Any]) -> tuple[int, int]:
        return (row["partition"], row["offset"])

    assert sorted(as_rows, key=order) == sorted(rows, key=order)


def test_callbacks_and_interceptors(broker: Any) -> None:
    create(broker, "hooks")
    acked: list[Any] = []

    class Upper:
        def on_send(self, record: Any) -> Any:
            return record._replace(value=record.value.upper())

        def on_acknowledgement(self, metadata: Any, exception: Any) -> None:
            acked.append((metadata.offset, exception))

    class Tagging:
        def on_consume(self, records: Any) -> Any:
            return {tp: [r._replace(key=b"seen") for r in rs] for tp, rs in records.items()}

    calls: list[Any] = []
    with Producer(bootstrap_servers=servers(broker), interceptors=[Upper()]) as producer:
        producer.send("hooks", b"a", callback=lambda md, exc: calls.append((md.offset, exc)))
        producer.send("hooks", b"b")
        producer.flush()
    assert calls == [(0, None)]
    assert sorted(acked) == [(0, None), (1, None)]
    with consumer_for(broker, TopicPartition("hooks", 0), interceptors=[Tagging]) as consumer:
        records = read_all(consumer, 2)
    assert [(r.value, r.key) for r in records] == [(b"A", b"seen"), (b"B", b"seen")]


def test_an_oversize_record_is_refused_before_anything_is_sent(broker: Any) -> None:
    create(broker, "big")
    with Producer(bootstrap_servers=servers(broker), max_request_size=10_000) as producer:
        with pytest.raises(RecordTooLargeError, match=r"max\.request\.size=10000") as info:
            producer.send("big", b"x" * 20_000)
        assert info.value.max_bytes == 10_000
        table = pa.table({"value": [b"ok", b"x" * 20_000]})
        with pytest.raises(RecordTooLargeError):
            producer.send_batch("big", table)
        with pytest.raises(InvalidRecordError, match="'value' column"):
            producer.send_batch("big", pa.table({"data": [b"x"]}))
        producer.flush()
    with Admin(bootstrap_servers=servers(broker)) as admin:
        latest = admin.list_offsets({TopicPartition("big", 0): "latest"})
    assert latest[TopicPartition("big", 0)].offset == 0  # nothing reached the log


def test_unknown_topics_without_auto_creation(start_broker: Any) -> None:
    broker = start_broker(overrides={"auto.create.topics.enable": "false"})
    with (
        Producer(bootstrap_servers=servers(broker), max_block_ms=200) as producer,
        pytest.raises(UnknownTopicOrPartitionError, match="create it with Admin"),
    ):
        producer.send("missing", b"x")
    create(broker, "two", partitions=2)
    with (
        Producer(bootstrap_servers=servers(broker)) as producer,
        pytest.raises(UnknownTopicOrPartitionError, match="has 2 partition"),
    ):
        producer.send("two", b"x", partition=2)
    with Consumer(bootstrap_servers=servers(broker)) as consumer:
        consumer.assign([TopicPartition("missing", 0)])
        with pytest.raises(UnknownTopicOrPartitionError, match="does not exist"):
            consumer.position(TopicPartition("missing", 0))
        assert consumer.poll(timeout_ms=50) == {}  # polling an unknown topic is not an error


def test_topics_are_created_on_first_send_by_default(broker: Any) -> None:
    with Producer(bootstrap_servers=servers(broker)) as producer:
        assert producer.send("fresh", b"x").get(10).offset == 0
        assert producer.partitions_for("fresh") == [0]


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_zero_and_one(broker: Any, acks: int) -> None:
    create(broker, "acks")
    with Producer(bootstrap_servers=servers(broker), acks=acks) as producer:
        assert not producer.config.enable_idempotence
        futures = [producer.send("acks", f"{i}".encode()) for i in range(20)]
        producer.flush()
    expected = [-1] * 20 if acks == 0 else list(range(20))
    assert [f.get().offset for f in futures] == expected
    with consumer_for(broker, TopicPartition("acks", 0)) as consumer:
        assert [r.value for r in read_all(consumer, 20)] == [f"{i}".encode() for i in range(20)]


def test_path_mode_starts_the_local_broker(tmp_path: Path) -> None:
    directory = tmp_path / "mq"
    try:
        with Producer(path=directory) as producer:
            producer.send("local", b"hello").get(30)
        with Consumer(path=directory, auto_offset_reset="earliest") as consumer:
            consumer.assign([("local", 0)])
            assert [r.value for r in read_all(consumer, 1)] == [b"hello"]
    finally:
        stop_broker(directory)
