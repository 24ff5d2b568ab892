"""A batch job for ``spark-submit``: read a topic, aggregate, write the result atomically.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master "local[2]" \\
        examples/batch_job.py --path ./batch-data

1. If the input topic (``--input``, default ``orders``) does not exist yet, the job seeds it
   with ``--seed-rows`` sample orders, written by ``df.write.format("spark_mq")``.
2. ``spark.read.format("spark_mq")`` reads the whole topic (``startingOffsets`` earliest,
   ``endingOffsets`` latest) and Spark sums the order amounts per customer.
3. ``df.write.format("spark_mq")`` writes one record per customer to ``--output`` (default
   ``order-totals``). The write is one transaction decision for the whole job: a consumer
   with ``read_committed`` sees every total of this run or, if the job fails, none.
4. The job reads the output back with ``spark.read`` and prints a few totals.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's own convention)

from spark_mq import Admin, TopicExistsError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="batch-data", help="log directory (embedded broker)")
    parser.add_argument("--input", default="orders")
    parser.add_argument("--output", default="order-totals")
    parser.add_argument("--seed-rows", type=int, default=100_000)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("spark_mq batch job").getOrCreate()
    with Admin(path=args.path) as admin:
        # Created before anything is listed: only creating calls create a new directory's log.
        with contextlib.suppress(TopicExistsError):
            admin.create_topic(args.output, partitions=2)
        topics = set(admin.list_topics())
    if args.input not in topics:
        orders = spark.range(args.seed_rows).select(
            F.format_string("customer-%03d", F.col("id") % 500).alias("key"),
            F.to_json(
                F.struct(
                    (F.col("id") % 500).alias("customer"),
                    ((F.col("id") * 37) % 10_000 / 100).alias("amount"),
                )
            ).alias("value"),
        )
        orders.write.format("spark_mq").mode("append").option("path", args.path).option(
            "topic", args.input
        ).save()
        print(f"seeded {args.seed_rows:,} orders into '{args.input}'")

    orders = (
        spark.read.format("spark_mq")
        .option("path", args.path)
        .option("subscribe", args.input)
        .load()
        .select(
            F.from_json(F.col("value").cast("string"), "customer INT, amount DOUBLE").alias("o")
        )
        .select("o.*")
    )
    totals = orders.groupBy("customer").agg(
        F.count("*").alias("orders"), F.round(F.sum("amount"), 2).alias("total")
    )
    totals.select(
        F.format_string("customer-%03d", "customer").alias("key"),
        F.to_json(F.struct("customer", "orders", "total")).alias("value"),
    ).write.format("spark_mq").mode("append").option("path", args.path).option(
        "topic", args.output
    ).save()

    written = (
        spark.read.format("spark_mq")
        .option("path", args.path)
        .option("subscribe", args.output)
        .load()
        .selectExpr("CAST(key AS STRING) AS customer", "CAST(value AS STRING) AS totals")
    )
    print(f"'{args.output}' now holds {written.count():,} committed records, e.g.:")
    for row in written.orderBy("customer").limit(5).collect():
        print(f"  {row.customer}: {row.totals}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
