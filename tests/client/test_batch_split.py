"""Splitting a batch the broker refused as too large: the parts hold the batch's records in
order, with their keys, headers, timestamps, callbacks and sequence numbers; the records'
futures follow them; buffer memory stays counted once; the topic stops growing batches."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mq.client.accumulator import ProducerBatch, RecordAccumulator, record_size
from spark_mq.client.futures import FutureBatchMetadata, FutureRecordMetadata
from spark_mq.errors import RecordTooLargeError
from spark_mq.storage.batch_decoder import decode_records

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _acc(**kw: int) -> RecordAccumulator:
    options = {"batch_size": 1000, "linger_ms": 0, "buffer_memory": 1 << 24, "max_block_ms": 0}
    options.update(kw)
    return RecordAccumulator(max_batch_bytes=1 << 20, **options)


def _filled(acc: RecordAccumulator, values: list[bytes], codec: str = "none") -> ProducerBatch:
    """One drained, encoded batch of ``values`` (keys on even records, a header on the
    third), with a callback on every fifth record; sequence 100."""
    calls: list[tuple[int, object]] = []
    # A full batch waits ahead, so the next one grows past batch.size, as under load.
    blocker = b"b" * 2000
    acc.append("t", 0, 1.0, None, blocker, None, record_size(None, blocker), None)
    for i, value in enumerate(values):
        key = b"k%d" % i if i % 2 == 0 else None
        headers = [("h", b"%d" % i)] if i == 3 else None
        size = record_size(key, value, 8 if headers else 0)
        callback = (lambda m, e, i=i: calls.append((i, m))) if i % 5 == 0 else None
        acc.append("t", 0, 1000.0 + i, key, value, headers, size, callback)
    acc.begin_flush()
    _, batch = acc.drain(lambda tp: 2, 1 << 30)
    acc.end_flush()
    assert batch.record_count == len(values)
    batch.base_sequence = 100
    batch.encode(codec, 7, 0, 100)
    return batch


def _records(batch: ProducerBatch) -> pa.Table:
    batch.encode("none", 7, 0, batch.base_sequence or 0)
    return decode_records(b"".join(bytes(memoryview(p)) for p in batch.wire))


@pytest.mark.parametrize("codec", CODECS)
def test_parts_hold_the_records_in_order_with_their_fields(codec: str) -> None:
    acc = _acc()
    values = [b"%03d" % i + b"x" * (300 if i == 7 else 40) for i in range(30)]
    batch = _filled(acc, values, codec)
    whole = decode_records(b"".join(bytes(memoryview(p)) for p in batch.wire))
    parts = acc.split_and_reenqueue(batch)
    assert len(parts) >= 2
    joined = pa.concat_tables([_records(p) for p in parts])
    for name in ("key", "value", "timestamp", "headers"):
        assert joined.column(name).to_pylist() == whole.column(name).to_pylist()
    starts = [0]
    for part in parts[:-1]:
        starts.append(starts[-1] + part.record_count)
    assert [p.base_sequence for p in parts] == [100 + s for s in starts]
    assert sum(p.size for p in parts) == batch.size
    assert [p.created for p in parts] == [batch.created] * len(parts)
    callbacks = [(s + i) for p, s in zip(parts, starts, strict=True) for i, _ in p.callbacks or ()]
    assert callbacks == list(range(0, 30, 5))


def test_parts_are_cut_near_batch_size_and_a_large_record_ends_up_alone() -> None:
    acc = _acc(batch_size=500)
    values = [b"v" * 100] * 10 + [b"B" * 5000] + [b"v" * 100] * 10
    parts = acc.split_and_reenqueue(_filled(acc, values))
    counts = [p.record_count for p in parts]
    starts = [sum(counts[:i]) for i in range(len(counts))]
    assert sum(counts) == 21
    assert (10, 1) in zip(starts, counts, strict=True)  # the large record, alone
    assert all(c * 125 <= 500 for s, c in zip(starts, counts, strict=True) if s != 10)


def test_futures_and_batch_futures_follow_the_parts() -> None:
    acc = _acc()
    blocker = b"b" * 2000
    acc.append("t", 0, 1.0, None, blocker, None, record_size(None, blocker), None)
    futures = [
        acc.append("t", 0, 5.0, None, b"v" * 200, None, record_size(None, b"v" * 200), None)
        for i in range(10)
    ]
    acc.begin_flush()
    _, batch = acc.drain(lambda tp: 2, 1 << 30)
    batch.encode("none", -1, -1, -1)
    batch_future = FutureBatchMetadata([batch.result], [10])
    first, *rest = acc.split_and_reenqueue(batch)
    assert not futures[0].done() and not batch_future.done()
    first.result.complete(40)
    assert futures[0].get(0).offset == 40
    assert not batch_future.done()
    error = RecordTooLargeError("too large", size_bytes=1, max_bytes=1)
    for part in rest:
        part.result.complete(-1, -1, error)
    assert batch_future.done()
    assert futures[first.record_count].exception(0) is error
    with pytest.raises(RecordTooLargeError):
        batch_future.get(0)


def test_a_split_topic_stops_growing_its_batches() -> None:
    acc = _acc(batch_size=1000)
    assert acc.max_batch_bytes("t") == 1 << 20
    acc.split_and_reenqueue(_filled(acc, [b"x" * 100] * 20))
    assert acc.max_batch_bytes("t") == 1000 and acc.is_capped("t")
    assert acc.max_batch_bytes("other") == 1 << 20


def test_a_part_of_a_part_resolves_to_the_right_record() -> None:
    acc = _acc(batch_size=100)
    batch = _filled(acc, [b"y" * 60] * 12)
    future = FutureRecordMetadata(batch.result, 11, 1.0)
    parts = acc.split_and_reenqueue(batch)
    last = parts[-1]
    last.encode("none", 7, 0, last.base_sequence or 0)
    if last.record_count > 1:
        inner = acc.split_and_reenqueue(last)
        for part in parts[:-1] + inner[:-1]:
            part.result.complete(0)
        inner[-1].result.complete(77)
        index_in_last = inner[-1].record_count - 1
    else:
        for part in parts[:-1]:
            part.result.complete(0)
        last.result.complete(77)
        index_in_last = 0
    assert future.get(0).offset == 77 + index_in_last
