"""Produce and fetch against a real broker process over TCP and the Unix socket."""

from __future__ import annotations

import struct
import threading

import crc32c
import pyarrow as pa
import pytest

from spark_mq.protocol import fetch, produce
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.batch_decoder import decode_records
from spark_mq.storage.record_batch import encode_batch


def batch(values: list[bytes], **kwargs: object) -> bytes:
    return encode_batch(pa.array(values, pa.binary()), **kwargs)  # type: ignore[arg-type]


def values_of(records: bytes, start: int = 0) -> list[bytes]:
    return decode_records(records, start_offset=start).column("value").to_pylist()


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_produce_fetch_round_trip(broker, unix):
    with broker.connect(unix=unix) as conn:
        first = conn.produce("events", 0, batch([b"a", b"b"]))
        second = conn.produce("events", 0, batch([b"c"]))
        assert (first.error_code, first.base_offset) == (0, 0)
        assert (second.error_code, second.base_offset) == (0, 2)
        part, records = conn.fetch("events", 0, 0)
        assert part.error_code == 0
        assert (part.high_watermark, part.last_stable_offset, part.log_start_offset) == (3, 3, 0)
        assert part.records_size == len(records)
        assert values_of(records) == [b"a", b"b", b"c"]
        # Reading from the middle: the first batch comes whole, the reader skips its head.
        _, records = conn.fetch("events", 0, 1)
        assert values_of(records, start=1) == [b"b", b"c"]


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_large_fetch_is_sent_whole_with_sendfile(broker, unix):
    """Ranges above SENDFILE_MIN_BYTES go out with sendfile: several MB arrive intact."""
    payload = [bytes([i % 251]) * 1000 for i in range(1000)]
    with broker.connect(unix=unix) as conn:
        for i in range(0, 1000, 100):
            assert conn.produce("big", 0, batch(payload[i : i + 100])).error_code == 0
        part, records = conn.fetch("big", 0, 0)
        assert part.records_size == len(records) > 1_000_000
        assert values_of(records) == payload


def test_fetch_limits_keep_the_first_batch_whole(broker):
    with broker.connect() as conn:
        for i in range(3):
            conn.produce("t", 0, batch([b"x" * 5000, bytes([i])]))
        _, records = conn.fetch("t", 0, 0, partition_max_bytes=100)
        assert values_of(records) == [b"x" * 5000, b"\x00"]  # one batch, over the limit
        _, records = conn.fetch("t", 0, 0, partition_max_bytes=20_000, max_bytes=12_000)
        assert len(values_of(records)) == 4  # two batches fit max_bytes


def test_long_poll_fetch_wakes_on_append(broker):
    with broker.connect() as waiting, broker.connect() as producer:
        producer.produce("poll", 0, batch([b"first"]))
        request = fetch.FetchRequest(
            max_wait_ms=60_000,
            min_bytes=1,
            max_bytes=1 << 20,
            topics=[fetch.FetchTopic("poll", [fetch.FetchPartition(0, 1, 1 << 20)])],
            isolation_level=fetch.READ_UNCOMMITTED,
        )
        waiting.send(request)
        producer.produce("poll", 0, batch([b"second"]))
        reply = waiting.recv(request)
        # Without the wake-up this would only return, empty, after 60 s.
        assert values_of(reply.records, start=1) == [b"second"]


def test_long_poll_times_out_empty(broker):
    with broker.connect() as conn:
        conn.produce("quiet", 0, batch([b"v"]))
        part, records = conn.fetch("quiet", 0, 1, max_wait_ms=50, min_bytes=1)
        assert (part.error_code, records) == (0, b"")


def test_acks_zero_gets_no_response_and_keeps_order(broker):
    with broker.connect() as conn:
        conn.produce("fire", 0, batch([b"a"]), acks=0)
        conn.produce("fire", 0, batch([b"b"]), acks=0)
        # The next response on the connection is the fetch's: the produces were handled first.
        _, records = conn.fetch("fire", 0, 0)
        assert values_of(records) == [b"a", b"b"]


def test_acks_zero_failure_closes_the_connection(broker):
    with broker.connect() as conn:
        conn.produce("fire2", 0, b"\x00" * 80, acks=0)
        assert conn.closed_by_peer()
    with broker.connect() as conn:  # the broker is fine
        assert conn.produce("fire2", 0, batch([b"ok"])).error_code == 0


def test_corrupt_batches_are_rejected_before_anything_is_appended(broker):
    good = batch([b"good"])
    bad_crc = bytearray(batch([b"bad"]))
    bad_crc[-1] ^= 0xFF
    with broker.connect() as conn:
        conn.produce("c", 0, good)
        reply = conn.produce("c", 0, bytes(bad_crc))
        assert reply.error_code == ErrorCode.CORRUPT_MESSAGE
        assert "CRC" in reply.error_message
        # A valid CRC over a body that is not Arrow: caught by the body validation.
        body = bytearray(good)
        body[61:] = b"\x01" * (len(body) - 61)
        struct.pack_into(">I", body, 17, crc32c.crc32c(bytes(body[21:])))
        reply = conn.produce("c", 0, bytes(body))
        assert reply.error_code == ErrorCode.CORRUPT_MESSAGE
        part, records = conn.fetch("c", 0, 0)
        assert part.high_watermark == 1 and values_of(records) == [b"good"]


def test_oversize_batch_is_refused(broker):
    with broker.connect() as conn:
        conn.create_topic("small", configs={"max.message.bytes": "2000"})
        reply = conn.produce("small", 0, batch([b"x" * 5000]))
        assert reply.error_code == ErrorCode.MESSAGE_TOO_LARGE
        assert "max.message.bytes" in reply.error_message


def test_unknown_topic_and_partition(start_broker):
    broker = start_broker(overrides={"auto.create.topics.enable": "false"})
    with broker.connect() as conn:
        reply = conn.produce("nope", 0, batch([b"v"]))
        assert reply.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "does not exist" in reply.error_message
        part, _ = conn.fetch("nope", 0, 0)
        assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        conn.create_topic("one", 1)
        assert (
            conn.produce("one", 5, batch([b"v"])).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )


def test_offset_out_of_range(broker):
    with broker.connect() as conn:
        conn.produce("r", 0, batch([b"v"]))
        part, _ = conn.fetch("r", 0, 5)
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert "valid offsets are 0..1" in part.error_message


def test_request_level_refusals(broker):
    with broker.connect() as conn:
        reply = conn.produce("t", 0, batch([b"v"]), transactional_id="tx")
        assert reply.error_code == ErrorCode.INVALID_REQUEST
        request = produce.ProduceRequest(
            acks=2,
            timeout_ms=1000,
            topics=[produce.ProduceTopic("t", [produce.ProducePartition(0, 0)])],
        )
        part = conn.call(request).body.topics[0].partitions[0]
        assert part.error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_idempotent_retry_returns_the_original_offset(broker):
    with broker.connect() as conn:
        conn.produce("idem", 0, batch([b"other"]))
        data = batch([b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0)
        first = conn.produce("idem", 0, data)
        again = conn.produce("idem", 0, data)
        assert (first.error_code, again.error_code) == (0, 0)
        assert first.base_offset == again.base_offset == 1
        gap = batch([b"c"], producer_id=7, producer_epoch=0, base_sequence=5)
        assert conn.produce("idem", 0, gap).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        _, records = conn.fetch("idem", 0, 0)
        assert values_of(records) == [b"other", b"a", b"b"]


def test_concurrent_producers_each_keep_their_order(broker):
    per_producer = 50

    def run(n: int) -> None:
        with broker.connect(unix=n % 2 == 0) as conn:
            for i in range(per_producer):
                assert conn.produce("many", 0, batch([f"{n}:{i}".encode()])).error_code == 0

    threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with broker.connect() as conn:
        _, records = conn.fetch("many", 0, 0)
    seen: dict[str, list[int]] = {}
    for value in values_of(records):
        producer_id, i = value.decode().split(":")
        seen.setdefault(producer_id, []).append(int(i))
    assert seen == {str(n): list(range(per_producer)) for n in range(6)}


def test_multi_megabyte_request_of_several_batches(broker):
    """A request far above the reader's read-ahead and the inline-append limit."""
    batches = [batch([bytes([i]) * 900_000]) for i in range(5)]
    with broker.connect(unix=True) as conn:
        part = conn.produce("mb", 0, b"".join(batches))
        assert (part.error_code, part.base_offset) == (0, 0)
        _, records = conn.fetch("mb", 0, 0, partition_max_bytes=1)
        assert values_of(records) == [b"\x00" * 900_000]  # first batch whole despite the limit
        _, records = conn.fetch("mb", 0, 0)
        assert values_of(records) == [bytes([i]) * 900_000 for i in range(5)]
