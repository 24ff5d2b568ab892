"""A Spark application on ``local-cluster[2,1,1024]`` (a standalone master and two workers
inside the driver's JVM, each worker running one executor JVM with its own Python workers),
run by ``tests/spark/test_spark_local_cluster.py`` as a subprocess: a test process may hold
only one SparkSession, and its session fixture is ``local[2]``.

For each endpoint, the embedded broker of ``--path`` first, then the cluster whose
``bootstrap.servers`` the test writes into ``--cluster-file`` once it has started it (the
cluster starts while this application does; an empty file: no cluster), the application

1. creates the topics ``in`` (4 partitions), ``out`` and ``batch`` (2 each), with
   ``--replication-factor`` replicas on the cluster, and produces ``--records`` values
   ``event-<i>`` to ``in`` from this driver process (so on the embedded endpoint the driver
   starts the directory's broker);
2. copies ``in`` to ``out`` with a streaming query (``maxOffsetsPerTrigger`` makes several
   micro-batches; ``Trigger.AvailableNow``), turning each value into ``copied-<VALUE>``;
3. writes ``--rows`` rows ``row-<i>`` to ``batch`` with a batch write through the sink
   (exactly once, its default).

Before the cases, one small job reports the executor JVMs its tasks' Python workers descend
from (the pid of the nearest ``CoarseGrainedExecutorBackend`` ancestor, or ``driver``): two
separate processes, not the driver. The test reads the topics itself; this application
writes only what it alone knows to ``--results`` (JSON): those JVMs, each case's checkpoint,
and how long each step took.

    python tests/spark/local_cluster_driver.py --results R --work W --path MQ \\
        --cluster-file F --records 300 --rows 400
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from local_spark import local_session

MASTER = "local-cluster[2,1,1024]"
EXECUTORS = 2
#: How long to wait for both executors to register, and for the test's cluster.
WAIT_S = 300
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The executors' main class: a task's Python worker descends from a JVM running it.
EXECUTOR_MAIN = b"org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executor_jvm(_: object) -> str:
    """The pid of the executor JVM the Python worker running this task descends from
    (``driver`` if none)."""
    pid = os.getppid()
    while pid > 1:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        if EXECUTOR_MAIN in cmdline.split(b"\0"):
            return str(pid)
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return "driver"


def spark_home(work: Path) -> Path:
    """A SPARK_HOME for this application: pip's pyspark ships ``bin`` and ``jars`` (all a
    local-cluster worker needs to launch executors), and a worker runs its executors in
    ``SPARK_HOME/work``, which must not be the installed package's directory."""
    import pyspark

    installed = Path(pyspark.__file__).resolve().parent
    home = work / "spark_home"
    home.mkdir(parents=True, exist_ok=True)
    for name in ("bin", "jars"):
        link = home / name
        if not link.exists():
            link.symlink_to(installed / name)
    return home


def wait_for_executors(spark: Any) -> list[str]:
    """Block until both executors have registered (the block managers count the driver's),
    then run one small job: the executor JVMs its tasks ran in."""
    deadline = time.monotonic() + WAIT_S
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1 < EXECUTORS:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    tasks = spark.sparkContext.parallelize(range(2 * EXECUTORS), 2 * EXECUTORS)
    return sorted(set(tasks.map(executor_jvm).collect()))


def prepare(endpoint: dict[str, str], replication_factor: int, records: int) -> None:
    """The topics, and the input records produced from this (the driver) process."""
    from spark_mq import Admin, Producer

    with Admin(**endpoint) as admin:
        for topic, partitions in (("in", 4), ("out", 2), ("batch", 2)):
            admin.create_topic(topic, partitions=partitions, replication_factor=replication_factor)
    with Producer(**endpoint, acks="all") as producer:
        for i in range(records):
            producer.send("in", f"event-{i}".encode(), key=str(i % 7).encode())


def copy_stream(spark: Any, options: dict[str, str], checkpoint: Path, per_trigger: int) -> None:
    from pyspark.sql.functions import col, concat, lit, upper

    source = (
        spark.readStream.format("spark_mq")
        .options(**options)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
    )
    copied = source.select(
        col("key"), concat(lit("copied-"), upper(col("value").cast("string"))).alias("value")
    )
    query = (
        copied.writeStream.format("spark_mq")
        .options(**options)
        .option("topic", "out")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the copier failed: {query.exception()}")


def write_batch(spark: Any, options: dict[str, str], rows: int) -> None:
    from pyspark.sql.functions import col, concat, lit

    frame = spark.range(0, rows, 1, 4).select(
        concat(lit("row-"), col("id").cast("string")).alias("value")
    )
    frame.write.format("spark_mq").mode("append").options(**options).option("topic", "batch").save()


def run_case(spark: Any, options: dict[str, str], args: argparse.Namespace, name: str) -> dict:
    from spark_mq import Admin

    # Where the driver's own clients connect (the executor.* options are Spark's only).
    endpoint = {k.replace(".", "_"): v for k, v in options.items() if not k.startswith("executor.")}
    replication_factor = 1 if "path" in options else args.replication_factor
    checkpoint = args.work / f"checkpoint-{name}"
    seconds = {}
    began = time.monotonic()
    prepare(endpoint, replication_factor, args.records)
    seconds["prepare"] = round(time.monotonic() - began, 1)
    # A connection held open for the rest of the case: the embedded broker the driver
    # started never goes idle (broker.idle.exit.ms) while Spark plans, so it is the only one.
    with Admin(**endpoint) as admin:
        admin.list_topics()
        for step, run in (
            ("copy", lambda: copy_stream(spark, options, checkpoint, args.max_offsets_per_trigger)),
            ("batch write", lambda: write_batch(spark, options, args.rows)),
        ):
            began = time.monotonic()
            run()
            seconds[step] = round(time.monotonic() - began, 1)
            print(f"{name}: {step} took {seconds[step]} s", flush=True)
    return {"checkpoint": str(checkpoint), "seconds": seconds}


def wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {WAIT_S} s")
        time.sleep(0.1)
    return path.read_text().strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--path", help="the embedded case's log directory")
    parser.add_argument("--cluster-file", type=Path, help="holds bootstrap.servers once up")
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=150)
    args = parser.parse_args()
    os.environ["SPARK_HOME"] = str(spark_home(args.work))
    began = time.monotonic()
    spark = local_session(
        MASTER,
        "spark_mq-local-cluster",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.memory": "1g",
            # The JIT's first tier only and one GC thread: this short application's three
            # JVMs start in less CPU time, which a loaded two-core machine lacks.
            "spark.driver.extraJavaOptions": JVM_OPTIONS,
            "spark.executor.extraJavaOptions": JVM_OPTIONS,
        },
    )
    results: dict[str, Any] = {"master": spark.sparkContext.master}
    results["executor_jvms"] = wait_for_executors(spark)
    results["start_s"] = round(time.monotonic() - began, 1)
    print(f"Spark and executors {results['executor_jvms']} took {results['start_s']} s", flush=True)
    if args.path:
        # Executors told to reach the driver's broker as from another host: its token
        # listener over TCP, with the directory's token (docs/spark_source.md).
        embedded = {"path": args.path, "executor.endpoint": "tcp"}
        results["embedded"] = run_case(spark, embedded, args, "embedded")
    if args.cluster_file:
        servers = wait_for_file(args.cluster_file)
        if servers:  # empty: the test could not start a cluster
            results["cluster"] = run_case(spark, {"bootstrap.servers": servers}, args, "cluster")
    spark.stop()
    tmp = args.results.with_suffix(".tmp")
    tmp.write_text(json.dumps(results))
    tmp.rename(args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
