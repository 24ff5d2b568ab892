"""A Spark driver for the sink's crash test: a streaming query that copies an input topic to
an output topic with a transformation, exactly once, from a checkpoint.

Run by ``tests/spark/test_sink_crash.py`` in its own process group, which kills it with
SIGKILL at random times and at the sink's commit crash points (``sink.commit.*``, see
:mod:`spark_mq.crash_points`), then restarts it from the same checkpoint. Exits 0 once the
query has copied everything present (AvailableNow).

Failures are injected too, on the first attempt of partition 0's task
(``spark.task.maxFailures`` 4 lets the retry run), in turn by micro-batch id modulo 3:

- 0: the transformation raises;
- 1: the Python worker running the transformation kills itself with SIGKILL part way
  through the partition, a crashed worker rather than an exception (the sink's own worker
  gets its Arrow batch only once the transformation has done the partition, so with these
  batch sizes the sink has not sent records yet);
- 2: the sink's worker kills itself with SIGKILL once its records are in the log, its
  transaction still open (the sink's crash point ``sink.task.after_send``, see
  :mod:`spark_mq.sink.task`).

Each time the retry writes under its own transactional id and the micro-batch's commit
aborts whatever the failed attempt left.

    python tests/spark/sink_copier_driver.py --path MQ --checkpoint CKPT --input in --output out

``--bootstrap-servers host:port,...`` instead of ``--path`` copies on a running cluster
(``tests/spark/test_sink_on_cluster.py``).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
from pathlib import Path

from local_spark import local_session

#: Rows the killed first attempt transforms before its worker dies (each micro-batch gives
#: a partition about 150).
KILL_AFTER_ROWS = 60
_rows_seen: dict[str, int] = {}


def _transform_value(value):  # no hints: pyspark would read them as a pandas UDF
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is not None and context.attemptNumber() == 0 and context.partitionId() == 0:
        batch = context.getLocalProperty("streaming.sql.batchId")
        if batch is not None and int(batch) % 3 == 0:
            raise RuntimeError(f"injected failure: first attempt of batch {batch} partition 0")
        if batch is not None and int(batch) % 3 == 1:
            seen = _rows_seen[batch] = _rows_seen.get(batch, 0) + 1
            if seen == KILL_AFTER_ROWS:
                os.kill(os.getpid(), signal.SIGKILL)
    return "copied-" + value.upper()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--path")
    where.add_argument("--bootstrap-servers")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=300)
    parser.add_argument("--started-file", help="touched once the query has started")
    parser.add_argument("--group-id", help="the source's group.id (lag commits)")
    args = parser.parse_args()
    # `kill -USR1 <pid>` prints where every thread of this driver is (a stuck run's state).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # The sink's commit crash points kill this whole process group (driver, JVM, Python
    # workers). Set before spark_mq is imported (it reads them once) and before Spark starts,
    # so that its Python workers inherit them.
    os.environ["SPARK_MQ_CRASH_PGID"] = str(os.getpgid(0))
    armed = [os.environ.get("SPARK_MQ_CRASH_AT", ""), "sink.task.after_send@%3=2"]
    os.environ["SPARK_MQ_CRASH_AT"] = ",".join(filter(None, armed))
    from pyspark.sql.functions import col, udf

    spark = local_session(
        "local[2,4]",
        "spark_mq-sink-copier",
        {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"},
    )
    transform = udf(_transform_value, "string")
    endpoint = {"path": args.path} if args.path else {"bootstrap.servers": args.bootstrap_servers}
    lag = {"group.id": args.group_id} if args.group_id else {}
    source = (
        spark.readStream.format("spark_mq")
        .options(**endpoint, **lag)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
    )
    copied = source.select(col("key"), transform(col("value").cast("string")).alias("value"))
    query = (
        copied.writeStream.format("spark_mq")
        .options(**endpoint)
        .option("topic", args.output)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if args.started_file:
        Path(args.started_file).touch()
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
