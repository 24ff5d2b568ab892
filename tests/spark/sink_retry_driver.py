"""A Spark driver for ``tests/spark/test_sink_task_retry.py``: one exactly-once batch write
whose only task fails on its first attempt *after* records of that attempt reached the log
(``--fail-at``; without it no task fails). ``--option KEY=VALUE`` adds a sink option. The
driver names its own process group for the sink's commit test hook
(``SPARK_MQ_CRASH_AT``, see :mod:`spark_mq.crash_points`), which
``tests/spark/test_sink_driver_death.py`` uses to kill it before its decision.

The write task's rows come through a Python UDF. On attempt 0, at row ``--fail-at``, the UDF
waits until the output topic's log holds records (the sink's task sends as Spark's Arrow
batches reach it, in groups of about 8 x ``max.request.size``, set small here), then raises.
So the failed attempt leaves records in its open transaction, and ``spark.task.maxFailures``
(``local[2,4]``) lets Spark run the task again under a new attempt number.

    python tests/spark/sink_retry_driver.py --path MQ --topic out --rows 40000 --fail-at 35000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from local_spark import local_session

#: How long the failing attempt waits for its records to show in the log.
WAIT_FOR_RECORDS_S = 60


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--fail-at", type=int, default=-1)
    parser.add_argument("--sink-id", default="retry-job")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    os.environ["SPARK_MQ_CRASH_PGID"] = str(os.getpgid(0))
    extra = dict(option.split("=", 1) for option in args.option)
    from pyspark.sql.functions import col, udf

    spark = local_session(
        "local[2,4]",
        "spark_mq-sink-retry",
        {"spark.sql.shuffle.partitions": "1", "spark.driver.memory": "1g"},
    )
    path, topic, fail_at = args.path, args.topic, args.fail_at

    def value_of(number):  # no hints: pyspark would read them as a pandas UDF
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is not None and context.attemptNumber() == 0 and number == fail_at:
            from spark_mq import Consumer, TopicPartition

            with Consumer(path=path, isolation_level="read_uncommitted") as consumer:
                partition = TopicPartition(topic, 0)
                deadline = time.monotonic() + WAIT_FOR_RECORDS_S
                while consumer.end_offsets([partition])[partition] == 0:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the first attempt's records never reached the log")
                    time.sleep(0.05)
            raise RuntimeError(f"injected failure at row {number} of the first attempt")
        return f"row-{number:08d}-" + "x" * 84

    rows = spark.range(0, args.rows, numPartitions=1)
    rows.select(udf(value_of, "string")(col("id")).alias("value")).write.format("spark_mq").mode(
        "append"
    ).option("path", path).option("topic", topic).option("sink.id", args.sink_id).option(
        "kafka.max.request.size", "16384"
    ).options(**extra).save()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
