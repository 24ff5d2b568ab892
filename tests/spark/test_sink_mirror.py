"""The mirror pattern: a DataFrame read from the source written straight back with the sink.
The sink ignores the columns it does not write (``offset``, ``timestampType``) and matches
column names without regard to case, as Spark's Kafka sink does; the copy is exactly once
and keeps each record's partition, key, value, headers and timestamp, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sink_helpers import create_topic, read_topic
from source_testing import produce

COLUMNS = ("partition", "key", "value", "headers", "timestamp")


def _records(mq_dir: Path, topic: str) -> list[tuple[Any, ...]]:
    """(partition, key, value, headers, timestamp) of every record, partition by partition
    in offset order."""
    rows = read_topic(mq_dir, topic).to_pylist()
    return sorted(
        (tuple(row[c] for c in COLUMNS) for row in rows),
        key=lambda r: r[0],  # stable: offset order within a partition stays
    )


def test_a_stream_mirrors_a_topic_exactly_once(spark: Any, mq_dir: Path, tmp_path: Path) -> None:
    produce(mq_dir, "orig", 3, 60)
    create_topic(mq_dir, "mirror", 3)
    query = (
        spark.readStream.format("spark_mq")
        .option("path", str(mq_dir))
        .option("subscribe", "orig")
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", "25")
        .load()
        .writeStream.format("spark_mq")
        .option("path", str(mq_dir))
        .option("topic", "mirror")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    original = _records(mq_dir, "orig")
    assert len(original) == 60
    assert _records(mq_dir, "mirror") == original


def test_a_batch_write_back_matches_columns_in_any_case(spark: Any, mq_dir: Path) -> None:
    produce(mq_dir, "orig", 2, 20)
    create_topic(mq_dir, "copy", 2)
    df = (
        spark.read.format("spark_mq")
        .option("path", str(mq_dir))
        .option("subscribe", "orig")
        .option("includeHeaders", "true")
        .load()
        .selectExpr(
            "offset",
            "key AS KEY",
            "value AS Value",
            "partition AS Partition",
            "headers AS HEADERS",
            "timestamp AS TimeStamp",
            "timestampType",
        )
    )
    df.write.format("spark_mq").mode("append").option("path", str(mq_dir)).option(
        "topic", "copy"
    ).save()
    assert _records(mq_dir, "copy") == _records(mq_dir, "orig")
