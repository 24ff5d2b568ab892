"""Helpers shared by the sink tests: read a topic back whole, as a read_committed (or
read_uncommitted) consumer sees it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spark_mq import Admin, Consumer, TopicPartition

#: Upper bound on the polls of one read (a topic in these tests is far smaller).
MAX_POLLS = 10_000


def read_topic(path: Path | str, topic: str, isolation: str = "read_committed") -> pa.Table:
    """Every record of ``topic`` visible at ``isolation``, partition by partition in offset
    order (columns of ``Consumer.poll_batch``)."""
    with Admin(path=str(path)) as admin:
        count = admin.describe_topic(topic).partition_count
    partitions = [TopicPartition(topic, p) for p in range(count)]
    with Consumer(
        path=str(path), auto_offset_reset="earliest", isolation_level=isolation
    ) as consumer:
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        pieces = []
        for _ in range(MAX_POLLS):
            if all(consumer.position(tp) >= ends[tp] for tp in partitions):
                break
            pieces.append(consumer.poll_batch(timeout_ms=200))
        else:
            raise AssertionError(f"could not read {topic} to its end {ends}")
    if not pieces:
        return pa.table({"partition": pa.array([], pa.int32()), "value": pa.array([], pa.binary())})
    return pa.concat_tables(pieces)


def values(path: Path | str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """The values of ``topic`` sorted (a multiset to compare)."""
    return sorted(read_topic(path, topic, isolation).column("value").to_pylist())


def create_topic(path: Path | str, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions."""
    with Admin(path=str(path)) as admin:
        admin.create_topic(topic, partitions=partitions)
