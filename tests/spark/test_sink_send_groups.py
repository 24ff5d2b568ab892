"""A write task's sending (spark_mq.sink.task._send_all) with a real producer and the embedded
broker, without Spark: consecutive Arrow batches of a topic go out together, so the record
batches are full across Spark's Arrow batches; each topic keeps its rows' order."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from sink_helpers import create_topic, read_topic

from spark_mq.client import Producer
from spark_mq.client.accumulator import RECORD_OVERHEAD_BYTES
from spark_mq.client.producer import BATCH_OVERHEAD_BYTES
from spark_mq.sink.columns import ColumnPlan
from spark_mq.sink.task import SEND_GROUP_REQUESTS, _send_all

LIMIT = 16_000
ROWS_PER_BATCH = 150  # about 20 KB: over max.request.size, so alone a full piece and a tail
VALUE_BYTES = 96


def _arrow_batches(count: int, **extra: pa.Array) -> list[pa.RecordBatch]:
    out = []
    for b in range(count):
        first = b * ROWS_PER_BATCH
        values = pa.array(
            [f"{i:08d}".encode() * 12 for i in range(first, first + ROWS_PER_BATCH)], pa.binary()
        )
        columns = {"value": values, **{k: v.slice(first, ROWS_PER_BATCH) for k, v in extra.items()}}
        out.append(pa.RecordBatch.from_pydict(columns))
    return out


def _numbers(table: pa.Table, partition: int) -> list[int]:
    rows = table.filter(pa.compute.equal(table.column("partition"), partition))
    return [int(v[:8]) for v in rows.sort_by("offset").column("value").to_pylist()]


def test_a_task_fills_record_batches_across_spark_arrow_batches(mq_dir: Path) -> None:
    create_topic(mq_dir, "out", 2)
    batches = _arrow_batches(40)
    with Producer(path=str(mq_dir), max_request_size=LIMIT) as producer:
        rows, futures = _send_all(producer, iter(batches), ColumnPlan(("value",), "out"))
        producer.flush()
        written = [meta for future in futures for meta in future.get(30)]
    n = 40 * ROWS_PER_BATCH
    assert rows == n and sum(meta.record_count for meta in written) == n
    # One send_batch per group of SEND_GROUP_REQUESTS x max.request.size of Arrow batches.
    per_group = -(-SEND_GROUP_REQUESTS * LIMIT // batches[0].nbytes)
    assert len(futures) == -(-40 // per_group)
    # Sent one by one the 40 Arrow batches would make 80 record batches; grouped, all but the
    # last of each group are full.
    assert len(written) < 60
    # As many rows as the producer's estimate fits in a request.
    full = (LIMIT - BATCH_OVERHEAD_BYTES) // (VALUE_BYTES + RECORD_OVERHEAD_BYTES)
    for future in futures:
        metas = future.get(0)
        assert [meta.record_count for meta in metas[:-1]] == [full] * (len(metas) - 1)
    # The log holds every row once, each record batch the table's next rows.
    table = read_topic(mq_dir, "out", "read_uncommitted")
    where = {
        (p, o): int(v[:8])
        for p, o, v in zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    }
    first = 0
    for meta in written:
        offsets = range(meta.base_offset, meta.base_offset + meta.record_count)
        assert [where[(meta.partition, o)] for o in offsets] == list(
            range(first, first + meta.record_count)
        )
        first += meta.record_count


def test_topics_from_a_column_are_grouped_apart_and_keep_their_order(mq_dir: Path) -> None:
    create_topic(mq_dir, "even", 1)
    create_topic(mq_dir, "odd", 1)
    n = 30 * ROWS_PER_BATCH
    topics = pa.array(["even" if (i // 7) % 2 == 0 else "odd" for i in range(n)])
    batches = _arrow_batches(30, topic=topics)
    with Producer(path=str(mq_dir), max_request_size=LIMIT) as producer:
        rows, futures = _send_all(producer, iter(batches), ColumnPlan(("value", "topic"), None))
        producer.flush()
        for future in futures:
            future.get(30)
    assert rows == n
    expected = {
        name: [i for i in range(n) if topics[i].as_py() == name] for name in ("even", "odd")
    }
    for name, numbers in expected.items():
        assert _numbers(read_topic(mq_dir, name, "read_uncommitted"), 0) == numbers


def test_a_change_of_schema_starts_a_new_group(mq_dir: Path) -> None:
    """A timestamp column with nulls is cast (null timestamps become now) and one without is
    not: their tables cannot be concatenated, and both still go out, in order."""
    create_topic(mq_dir, "ts", 1)
    n = 6 * ROWS_PER_BATCH
    stamps = pa.array(
        [None if (i // ROWS_PER_BATCH) % 2 else 1_700_000_000_000_000 + i for i in range(n)],
        pa.timestamp("us", tz="UTC"),
    )
    batches = _arrow_batches(6, timestamp=stamps)
    plan = ColumnPlan(("value", "timestamp"), "ts")
    with Producer(path=str(mq_dir), max_request_size=LIMIT) as producer:
        rows, futures = _send_all(producer, iter(batches), plan)
        producer.flush()
        for future in futures:
            future.get(30)
    assert rows == n and len(futures) == 6
    table = read_topic(mq_dir, "ts", "read_uncommitted")
    assert _numbers(table, 0) == list(range(n))
    # The given timestamps arrive (milliseconds); the null ones became the time of sending.
    got = table.sort_by("offset").column("timestamp").cast(pa.int64()).to_pylist()
    for i, stamp in enumerate(stamps.to_pylist()):
        if stamp is not None:
            assert got[i] == (1_700_000_000_000_000 + i) // 1000
        else:
            assert got[i] > 1_700_000_000_000
