"""The main job: a Spark Structured Streaming pipeline on the embedded broker, exactly once.

    python examples/quickstart.py [--dir DIR] [--events N] [--fresh]

No server to install: ``.option("path", DIR)`` starts (or finds) the local broker that owns
the log directory ``DIR/mq``; the query's checkpoint lives in ``DIR/checkpoint``.

1. A producer writes ``N`` purchase events (JSON, keyed by user) to the 3-partition topic
   ``events`` with ``send_batch``.
2. ``spark.readStream.format("spark_mq")`` reads them; Spark parses the JSON, keeps the
   purchases over 1.00, and keeps running totals per product category (count and revenue).
3. ``writeStream.format("spark_mq")`` writes each micro-batch's updated totals to the topic
   ``category-totals``, exactly once: every micro-batch is one transaction decision, so a
   ``read_committed`` consumer sees each batch whole or not at all, and a restart never
   writes a batch twice. The query runs with ``Trigger.AvailableNow`` (everything present,
   then stop), twice, with more events produced in between, to show the restart from the
   checkpoint.
4. A plain consumer reads ``category-totals`` back; the newest record per category must equal
   totals computed directly from the ``events`` topic. The job prints both and fails if they
   differ.

Run it again: it continues from its checkpoint, and the check covers every run's events.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's own convention)

from spark_mq import Admin, Consumer, Producer, TopicExistsError, TopicPartition
from spark_mq.broker.local import stop_broker

REPO_ROOT = Path(__file__).resolve().parents[1]
EVENTS, TOTALS = "events", "category-totals"
CATEGORIES = ("books", "games", "garden", "music", "tools")
MIN_AMOUNT = 1.0


def produce(path: str, count: int, seed: int) -> None:
    """Write ``count`` JSON purchase events to ``events`` (columnar, one send_batch)."""
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 500, count)
    categories = rng.integers(0, len(CATEGORIES), count)
    cents = rng.integers(0, 20_000, count)
    values = [
        json.dumps({"user": int(u), "category": CATEGORIES[c], "amount": a / 100})
        for u, c, a in zip(users, categories, cents, strict=True)
    ]
    table = pa.table(
        {
            "key": pa.array([f"user-{u}" for u in users]).cast(pa.binary()),
            "value": pa.array(values).cast(pa.binary()),
        }
    )
    with Producer(path=path, compression_type="zstd") as producer:
        producer.send_batch(EVENTS, table).get()


def ensure_topics(path: str) -> None:
    # Created, not listed first: only creating calls create the log of a new directory.
    with Admin(path=path) as admin:
        for topic, partitions in ((EVENTS, 3), (TOTALS, 1)):
            with contextlib.suppress(TopicExistsError):
                admin.create_topic(topic, partitions=partitions)


def run_query(spark: Any, path: str, checkpoint: str) -> None:
    """Process every event present, exactly once, then stop (Trigger.AvailableNow)."""
    events = (
        spark.readStream.format("spark_mq")
        .option("path", path)
        .option("subscribe", EVENTS)
        .option("startingOffsets", "earliest")
        .load()
    )
    parsed = events.select(
        F.from_json(
            F.col("value").cast("string"), "user INT, category STRING, amount DOUBLE"
        ).alias("e")
    ).select("e.*")
    totals = (
        parsed.where(F.col("amount") > MIN_AMOUNT)
        .groupBy("category")
        .agg(F.count("*").alias("purchases"), F.round(F.sum("amount"), 2).alias("revenue"))
    )
    out = totals.select(
        F.col("category").alias("key"),
        F.to_json(F.struct("category", "purchases", "revenue")).alias("value"),
    )
    query = (
        out.writeStream.format("spark_mq")
        .outputMode("complete")
        .option("path", path)
        .option("topic", TOTALS)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def read_all(path: str, topic: str) -> pa.Table:
    """Every committed record of ``topic`` (read_committed, the default)."""
    with Admin(path=path) as admin:
        count = admin.describe_topic(topic).partition_count
    partitions = [TopicPartition(topic, p) for p in range(count)]
    with Consumer(path=path, auto_offset_reset="earliest") as consumer:
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        pieces = [consumer.poll_batch(timeout_ms=500)]
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            pieces.append(consumer.poll_batch(timeout_ms=500))
    return pa.concat_tables(pieces)


def expected_totals(path: str) -> dict[str, tuple[int, float]]:
    """Totals computed straight from the events topic, with Arrow (no Spark)."""
    events = read_all(path, EVENTS)
    rows = pa.Table.from_pylist([json.loads(v) for v in events.column("value").to_pylist()])
    kept = rows.filter(pc.greater(rows.column("amount"), MIN_AMOUNT))
    grouped = kept.group_by("category").aggregate([("amount", "count"), ("amount", "sum")])
    return {
        row["category"]: (row["amount_count"], round(row["amount_sum"], 2))
        for row in grouped.to_pylist()
    }


def published_totals(path: str) -> tuple[dict[str, tuple[int, float]], int]:
    """The newest record per category in the totals topic, and how many records it has."""
    records = read_all(path, TOTALS)
    latest: dict[str, tuple[int, float]] = {}
    for value in records.column("value").to_pylist():  # offset order: newest last
        row = json.loads(value)
        latest[row["category"]] = (row["purchases"], row["revenue"])
    return latest, records.num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", default="quickstart-data", help="data directory (default: %(default)s)"
    )
    parser.add_argument("--events", type=int, default=100_000, help="events per round")
    parser.add_argument("--fresh", action="store_true", help="delete the data directory first")
    args = parser.parse_args()
    # Spark's Python workers must run this interpreter (it has spark_mq installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])
    )
    base = Path(args.dir).resolve()
    if args.fresh and base.exists():
        if (base / "mq").exists():
            stop_broker(base / "mq")
        shutil.rmtree(base)
    (base / "mq").mkdir(parents=True, exist_ok=True)
    path, checkpoint = str(base / "mq"), str(base / "checkpoint")

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("spark_mq quickstart")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ensure_topics(path)
    for round_number in (1, 2):
        produce(path, args.events, seed=round_number + os.getpid())
        print(f"round {round_number}: produced {args.events:,} events to '{EVENTS}'")
        run_query(spark, path, checkpoint)
        print(f"round {round_number}: the streaming query processed them (exactly once)")
    spark.stop()

    expected = expected_totals(path)
    published, records = published_totals(path)
    print(f"\n'{TOTALS}' holds {records} committed records; newest per category:")
    print(f"  {'category':<10}{'purchases':>12}{'revenue':>16}   check")
    ok = True
    for category in sorted(expected):
        got = published.get(category)
        good = got is not None and got[0] == expected[category][0]
        good = good and got is not None and abs(got[1] - expected[category][1]) < 0.05
        ok = ok and good
        purchases, revenue = got if got is not None else (0, 0.0)
        print(f"  {category:<10}{purchases:>12,}{revenue:>16,.2f}   {'ok' if good else 'WRONG'}")
    if not ok or set(published) != set(expected):
        print("FAILED: the published totals differ from the events", file=sys.stderr)
        return 1
    print("\nOK: every event counted exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
