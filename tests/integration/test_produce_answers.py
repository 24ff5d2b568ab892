"""Every batch gets its own answer. A producer without idempotence may put several batches of
one partition into one Produce request; the broker answers each request entry, in order, and
the producer must give each record's future the answer of its own batch. Real broker
processes."""

from __future__ import annotations

import time
from typing import Any

from spark_mq.client import Consumer, TopicPartition
from spark_mq.client.accumulator import RecordAccumulator
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ProducerConfig
from spark_mq.client.interceptors import ProducerInterceptors
from spark_mq.client.sender import Sender
from spark_mq.errors import SparkMQError
from spark_mq.protocol import produce
from spark_mq.storage.record_batch import encode_batch

MESSAGE_TOO_LARGE = 10
RECORD_BYTES = 225  # what the accumulator counts a 200-byte value as (see record_size)


def read_log(address: str, topic: str, partition: int) -> dict[int, bytes]:
    """Offset -> value of everything in the partition."""
    with Consumer(bootstrap_servers=address, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, "timed out reading the partition back"
            for records in consumer.poll(timeout_ms=500, max_records=100_000).values():
                out.update((r.offset, r.value) for r in records)
    return out


def test_the_broker_answers_every_entry_in_request_order(broker: Any) -> None:
    with broker.connect() as conn:
        conn.create_topic("t", 1, {"max.message.bytes": "20000"})
        conn.create_topic("u", 1)
        big = encode_batch([b"x" * 25_000])
        small = encode_batch([b"a", b"b"])
        other = encode_batch([b"c"])
        request = produce.ProduceRequest(
            acks=1,
            timeout_ms=30_000,
            topics=[
                produce.ProduceTopic(
                    "t",
                    [
                        produce.ProducePartition(0, len(big)),
                        produce.ProducePartition(0, len(small)),
                    ],
                ),
                produce.ProduceTopic("u", [produce.ProducePartition(0, len(other))]),
                # The same topic in a second entry: answered in a second entry.
                produce.ProduceTopic("t", [produce.ProducePartition(0, len(small))]),
            ],
        )
        reply = conn.call(request, big + small + other + small)
    shape = [
        (t.name, [(p.partition, p.error_code, p.base_offset) for p in t.partitions])
        for t in reply.body.topics
    ]
    assert shape == [
        ("t", [(0, MESSAGE_TOO_LARGE, -1), (0, 0, 0)]),
        ("u", [(0, 0, 0)]),
        ("t", [(0, 0, 2)]),
    ]


def test_batches_of_a_partition_sent_together_each_get_their_own_answer(broker: Any) -> None:
    # The case found under load: a topic that takes batches of at most 20,000 bytes, and a
    # producer whose batch.size is 30,000, so of two batches of the partition in one request
    # the first is refused (and split and sent again) and the second written. Both are
    # queued before the sender starts, so they go out in one request whatever the timing.
    address = f"{broker.address.host}:{broker.address.port}"
    with broker.connect() as conn:
        conn.create_topic("t", 1, {"max.message.bytes": "20000"})
    config = ProducerConfig.from_properties(
        bootstrap_servers=address, enable_idempotence=False, acks=1, retries=0, linger_ms=60_000
    )
    cluster = Cluster(config)
    cluster.refresh(["t"])
    acc = RecordAccumulator(
        batch_size=30_000,
        max_batch_bytes=1 << 20,
        linger_ms=60_000,
        buffer_memory=1 << 24,
        max_block_ms=1000,
    )
    values = [f"{i:05d}".encode() + b"x" * 195 for i in range(213)]
    futures = [
        acc.append("t", 0, time.time() * 1000, None, v, None, RECORD_BYTES, None) for v in values
    ]
    acc.begin_flush()
    sent_together: list[list[int]] = []
    sender = Sender(config, acc, cluster, ProducerInterceptors([]))
    send_produce = sender._send_produce

    def record_request(conn: Any, batches: list[Any]) -> None:
        sent_together.append([b.record_count for b in batches])
        send_produce(conn, batches)

    sender._send_produce = record_request  # type: ignore[method-assign]
    sender.start()
    try:
        outcomes: list[Any] = []
        for future in futures:
            try:
                outcomes.append(future.get(60))
            except SparkMQError as exc:
                outcomes.append(exc)
    finally:
        sender.force_close()
        sender.join(10)
    assert sent_together[0] == [133, 80], "both batches were meant to go in one request"
    log = read_log(address, "t", 0)
    wrong = [
        (i, outcome.offset)
        for i, outcome in enumerate(outcomes)
        if not isinstance(outcome, Exception) and log.get(outcome.offset) != values[i]
    ]
    assert not wrong, f"{len(wrong)} records reported written are not where reported"
    # The refused batch was split and sent again after the accepted one: every record is
    # written, each at the offset its future reports, in order within each batch.
    assert not [o for o in outcomes if isinstance(o, Exception)]
    assert [m.offset for m in outcomes[133:]] == list(range(80))
    assert [m.offset for m in outcomes[:133]] == list(range(80, 213))
    assert sum(sum(request) for request in sent_together[1:]) == 133
