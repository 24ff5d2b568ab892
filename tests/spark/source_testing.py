"""Helpers of the Spark source tests: topics with known records, and collecting what a
streaming query read (``foreachBatch`` into a list of per-batch row lists)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_mq import Admin, Producer, TopicExistsError


def produce(mq_dir: Path, topic: str, partitions: int, count: int, *, first: int = 0) -> None:
    """``count`` records ``v<i>`` keyed ``k<i>``, spread over ``partitions`` partitions by an
    explicit partition column (i % partitions), creating the topic if needed."""
    with Admin(path=mq_dir) as admin, contextlib.suppress(TopicExistsError):
        # create_topic first: listing a directory that holds no log yet is refused.
        admin.create_topic(topic, partitions=partitions)
    ids = range(first, first + count)
    table = pa.table(
        {
            "value": [b"v%d" % i for i in ids],
            "key": [b"k%d" % i for i in ids],
            "partition": pa.array([i % partitions for i in ids], pa.int32()),
            "headers": pa.array(
                [[("h", b"%d" % i)] for i in ids],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    with Producer(path=mq_dir) as producer:
        producer.send_batch(topic, table).get()


class Collector:
    """A ``foreachBatch`` function that keeps every micro-batch's (batch id, values)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[bytes]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        values = [bytes(r.value) for r in df.select("value").collect()]
        self.batches.append((batch_id, values))

    @property
    def values(self) -> list[bytes]:
        return [v for _, vs in self.batches for v in vs]


def run_available_now(
    spark: Any, options: dict[str, str], checkpoint: Path, collector: Collector
) -> None:
    """One AvailableNow run of a spark_mq stream into ``collector``."""
    reader = spark.readStream.format("spark_mq")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    exc = query.exception()
    if exc is not None:
        raise exc


def values(ids: range) -> list[bytes]:
    return [b"v%d" % i for i in ids]
