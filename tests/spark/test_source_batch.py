"""Batch reads (``spark.read.format("spark_mq")``): several topics and partitions, the
schema, headers, offset and timestamp bounds, and the format resolving without register()."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from source_testing import produce, values

import spark_mq
from spark_mq import Consumer, TopicPartition
from spark_mq.broker.local import ensure_broker, stop_broker
from spark_mq.datasource.schema import spark_schema


def _read(spark: Any, mq_dir: Path, **options: str) -> Any:
    reader = spark.read.format("spark_mq").option("path", str(mq_dir))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_of_topics_and_partitions(spark: Any, mq_dir: Path) -> None:
    produce(mq_dir, "a", 3, 30)
    produce(mq_dir, "b", 2, 10, first=100)
    df = _read(spark, mq_dir, subscribe="a,b")
    assert df.schema == spark_schema(False)
    expected_rows = [(b"k%d" % i, b"v%d" % i, "a", i % 3, i // 3, 0) for i in range(30)] + [
        (b"k%d" % i, b"v%d" % i, "b", i % 2, (i - 100) // 2, 0) for i in range(100, 110)
    ]
    expected = spark.createDataFrame(
        expected_rows,
        "key binary, value binary, topic string, partition int, offset long, timestampType int",
    )
    actual = df.drop("timestamp")
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)

    # Headers, and every timestamp is the producer's (CreateTime, within this test).
    with_headers = _read(spark, mq_dir, subscribe="b", includeHeaders="true")
    assert with_headers.schema == spark_schema(True)
    rows = with_headers.select("value", "headers").collect()
    assert sorted((bytes(r.value), [(h.key, bytes(h.value)) for h in r.headers]) for r in rows) == [
        (b"v%d" % i, [("h", b"%d" % i)]) for i in range(100, 110)
    ]

    # assign with JSON offsets: a slice of two partitions.
    sliced = _read(
        spark,
        mq_dir,
        assign='{"a": [0, 2]}',
        startingOffsets='{"a": {"0": 2, "2": -2}}',
        endingOffsets='{"a": {"0": 5, "2": 1}}',
    )
    got = sorted(bytes(r.value) for r in sliced.select("value").collect())
    assert got == sorted([*values(range(6, 15, 3)), b"v2"])

    # Pattern subscription and aggregates over the binary column.
    row = (
        _read(spark, mq_dir, subscribePattern="[ab]")
        .selectExpr("count(*) AS n", "sum(length(value)) AS bytes")
        .first()
    )
    assert (row.n, row.bytes) == (
        40,
        sum(len(v) for v in values(range(30)) + values(range(100, 110))),
    )


def test_batch_read_by_timestamp(spark: Any, mq_dir: Path) -> None:
    produce(mq_dir, "ts", 1, 5)
    with Consumer(path=mq_dir, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("ts", 0)])
        first_ms = consumer.poll_batch(timeout_ms=5000).column("timestamp")[0].as_py()
    produce(mq_dir, "ts", 1, 5, first=5)
    all_rows = _read(spark, mq_dir, subscribe="ts").collect()
    assert len(all_rows) == 10
    later = _read(spark, mq_dir, subscribe="ts", startingTimestamp=str(first_ms))
    assert later.count() == 10
    none_later = str(10**15)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        _read(spark, mq_dir, subscribe="ts", startingTimestamp=none_later).collect()
    empty = _read(
        spark,
        mq_dir,
        subscribe="ts",
        startingTimestamp=none_later,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert empty.count() == 0
    bounded = _read(spark, mq_dir, subscribe="ts", endingOffsetsByTimestamp='{"ts": {"0": 0}}')
    assert bounded.count() == 0


def test_bad_options_fail_the_read_with_their_message(spark: Any, mq_dir: Path) -> None:
    with pytest.raises(Exception, match="exactly one of the options assign, subscribe"):
        _read(spark, mq_dir).collect()
    with pytest.raises(Exception, match="failOnDataLoss"):
        _read(spark, mq_dir, subscribe="x", failOnDataLoss="maybe").collect()


def test_register_keeps_working(spark: Any, mq_dir: Path) -> None:
    spark_mq.register(spark)
    produce(mq_dir, "r", 1, 3)
    assert _read(spark, mq_dir, subscribe="r").count() == 3


@pytest.mark.slow
def test_format_resolves_without_register_in_a_fresh_session(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
        spark = builder.getOrCreate()
        from spark_mq import Admin
        with Admin(path={str(tmp_path / "mq")!r}) as admin:
            admin.create_topic("empty", partitions=1)
        df = (spark.read.format("spark_mq").option("path", {str(tmp_path / "mq")!r})
              .option("subscribe", "empty").load())
        print("columns", ",".join(df.columns), df.count())
        spark.stop()
        from spark_mq.broker.local import stop_broker
        stop_broker({str(tmp_path / "mq")!r})
        """
    )
    # A log without the topic (a read of a directory that holds no log is refused).
    ensure_broker(tmp_path / "mq")
    stop_broker(tmp_path / "mq")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, check=True
    )
    assert "columns key,value,topic,partition,offset,timestamp,timestampType 0" in out.stdout
