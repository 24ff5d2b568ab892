"""Spark source benchmark: spark_mq records read by Spark, against an in-memory ceiling.

4 million 100-byte records in 4 partitions (``--records`` to change) are written to a local
broker's log directory, then Spark counts them and sums ``length(value)``:

- ``spark.read.format("spark_mq")`` (batch) and ``readStream`` with ``Trigger.AvailableNow``
  (one run from a fresh checkpoint, aggregated in ``foreachBatch``);
- the ceiling: a trivial Python data source, batch and streaming, that yields Arrow record
  batches of the same schema from memory (no storage, no broker), so it measures
  what Spark's Python data source path itself costs;
- a peer: Spark reading the same records from Parquet;
- the cluster case: the same records written with ``acks=all`` to a 3-broker cluster
  (replication factor 3, ``bench_cluster.py``) and read through ``bootstrap.servers``,
  reported as a ratio of the embedded broker's figure (``--no-cluster`` leaves it out).

Goal: spark_mq reaches at least 0.8 of the ceiling's rows/s; each case prints PASS or MISS.
``--out docs/benchmarks.md`` writes the ``spark-source`` section.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The report scaffolding is shared by every benchmark next to this file; importing it also
# makes spark_mq importable from the repository when it is not installed.
import bench_cluster
from bench_report import Run, Section, base_parser, common_facts

from spark_mq import Admin, Producer
from spark_mq.broker.local import stop_broker
from spark_mq.datasource.schema import ARROW_SCHEMA, source_ddl

SECTION = Section(
    name="spark-source",
    title="Spark source (spark_mq format)",
    begin="<!-- BEGIN spark-source (written by benchmarks/bench_source.py) -->",
    end="<!-- END spark-source -->",
)
TOPIC = "bench"
PARTITIONS = 4
VALUE_BYTES = 100
#: Rows per Arrow batch of the ceiling: about what one fetch of a reader task decodes.
CEILING_BATCH_ROWS = 150_000
GOAL_FRACTION = 0.8
PRODUCE_CHUNK = 200_000
#: Spark's message when a Python worker it started did not connect back within 10 s.
CONNECT_BACK_FAILURE = "Python worker failed to connect back"
CONNECT_BACK_RETRIES = 3
#: The name of the cluster case's rows.
CLUSTER = f"spark_mq, {bench_cluster.LABEL}"


# ---------------------------------------------------------------------------------------------
# The ceiling: Arrow batches from memory


def ceiling_batches(partition: int, rows: int) -> Iterator[pa.RecordBatch]:
    """``rows`` rows of the source schema for one partition, in batches built once."""
    size = min(rows, CEILING_BATCH_ROWS)
    value = pa.array(np.full(size, b"x" * VALUE_BYTES, dtype=f"S{VALUE_BYTES}"), pa.binary())
    offsets = pa.array(np.arange(size, dtype=np.int64))
    columns = [
        pa.nulls(size, pa.binary()),
        value,
        pa.repeat(pa.scalar(TOPIC, pa.string()), size),
        pa.array(np.full(size, partition, dtype=np.int32)),
        offsets,
        pa.array(np.full(size, 1_700_000_000_000_000, dtype=np.int64)).cast(
            ARROW_SCHEMA.field("timestamp").type
        ),
        pa.array(np.zeros(size, dtype=np.int32)),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    left = rows
    while left > 0:
        yield batch if left >= size else batch.slice(0, left)
        left -= size


def register_ceiling(spark: Any, records: int) -> None:
    """Register the ``bench_memory`` format: batch and streaming readers over memory."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        InputPartition,
    )
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    per_partition = records // PARTITIONS

    def read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return ceiling_batches(partition.value, per_partition)

    class MemoryReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            return read(partition)

    class MemoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def initialOffset(self) -> dict[str, int]:  # noqa: N802 (Spark API name)
            return {"done": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:  # noqa: N802 (Spark API name)
            return {"done": 1}

        def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark API name)
            pass

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            if start == end:
                return []
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            return read(partition)

    class MemorySource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_memory"

        def schema(self) -> str:
            return source_ddl(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return MemoryReader()

        def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802 (Spark API name)
            return MemoryStreamReader()

    if __name__ != "__main__":
        # Imported (by the smoke test): Spark's workers cannot import this module, so the
        # classes travel by value, as they do when the file runs as a script.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(MemorySource)


# ---------------------------------------------------------------------------------------------
# Data


def write_records(endpoint: dict[str, Any], records: int) -> None:
    """``records`` 100-byte values, round-robin over the partitions, keyless, to the broker
    of ``endpoint`` (``path=`` or ``bootstrap_servers=``), whose topic exists; acks=all (the
    producer's default)."""
    value = np.full(PRODUCE_CHUNK, b"x" * VALUE_BYTES, dtype=f"S{VALUE_BYTES}")
    with Producer(**endpoint, linger_ms=0) as producer:
        done = 0
        futures = []
        while done < records:
            n = min(PRODUCE_CHUNK, records - done)
            table = pa.table(
                {
                    "value": pa.array(value[:n], pa.binary()),
                    "partition": pa.array(np.arange(done, done + n) % PARTITIONS, pa.int32()),
                }
            )
            futures.append(producer.send_batch(TOPIC, table))
            done += n
        for future in futures:
            future.get()


def write_parquet(spark: Any, mq_dir: Path, target: Path) -> None:
    """The same records as Parquet, written by Spark from a spark_mq batch read."""
    df = spark.read.format("spark_mq").option("path", str(mq_dir)).option("subscribe", TOPIC)
    df.load().write.mode("overwrite").parquet(str(target))


# ---------------------------------------------------------------------------------------------
# Measurements


@dataclass
class Case:
    name: str
    query: str
    seconds: float
    rows: int
    total_bytes: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


@dataclass
class Plan:
    """One case before it is measured: ``run`` performs the query once and returns (rows,
    sum of value lengths)."""

    name: str
    query: str
    run: Callable[[], tuple[int, int]]


def run_once(plan: Plan) -> tuple[float, tuple[int, int]]:
    """Run ``plan`` once: its seconds and result. A run that failed because a Python worker
    Spark started did not connect back in time is run again (up to
    :data:`CONNECT_BACK_RETRIES` times), timed afresh: Spark gives the worker of a streaming
    source 10 s to connect (hard-coded), which a loaded machine can miss before the query
    read anything."""
    for attempt in range(CONNECT_BACK_RETRIES + 1):
        t0 = time.perf_counter()
        try:
            result = plan.run()
        except Exception as exc:
            if CONNECT_BACK_FAILURE not in str(exc) or attempt == CONNECT_BACK_RETRIES:
                raise
            print(f"{plan.name}, {plan.query}: {CONNECT_BACK_FAILURE}; again", flush=True)
            continue
        return time.perf_counter() - t0, result
    raise AssertionError("unreachable: the last attempt returns or raises")


def timed(plans: list[Plan], reps: int) -> list[Case]:
    """Every plan run once untimed (Python workers started, imports done, page cache filled,
    the JVM's hot paths compiled), then ``reps`` rounds that run each plan once in turn; a
    case's time is its fastest round.

    Round-robin rather than one case after another: the JVM keeps compiling for the first
    several queries of a session and the machine's other load comes and goes, and running
    the cases in turn spreads both evenly instead of charging them to whichever case ran first.
    """
    results = [run_once(plan)[1] for plan in plans]
    best = [float("inf")] * len(plans)
    for _ in range(reps):
        for i, plan in enumerate(plans):
            seconds, results[i] = run_once(plan)
            best[i] = min(best[i], seconds)
    return [
        Case(plan.name, plan.query, seconds, rows, total)
        for plan, seconds, (rows, total) in zip(plans, best, results, strict=True)
    ]


def batch_plans(name: str, load: Callable[[], Any]) -> list[Plan]:
    out = []
    for query, exprs in (
        ("count", ["count(*) AS n", "0L AS b"]),
        ("sum(length(value))", ["count(*) AS n", "sum(length(value)) AS b"]),
    ):

        def run(exprs: list[str] = exprs) -> tuple[int, int]:
            row = load().selectExpr(*exprs).first()
            return int(row.n), int(row.b or 0)

        out.append(Plan(name, query, run))
    return out


def stream_plan(name: str, reader: Callable[[], Any], work: Path) -> Plan:
    def run() -> tuple[int, int]:
        totals = [0, 0]

        def each(df: Any, batch_id: int) -> None:
            row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").first()
            totals[0] += int(row.n)
            totals[1] += int(row.b or 0)

        checkpoint = Path(tempfile.mkdtemp(prefix="ckpt_", dir=work))
        query = (
            reader()
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        shutil.rmtree(checkpoint, ignore_errors=True)
        return totals[0], totals[1]

    return Plan(name, "AvailableNow count + sum(length(value))", run)


def measure(
    spark: Any, work: Path, records: int, reps: int, *, cluster: bool = False
) -> list[Case]:
    """Write the records, then run every case; returns them in table order. ``cluster``: the
    cluster case too, on a cluster started under ``work`` and stopped at the end."""
    with contextlib.ExitStack() as stack:
        servers = None
        if cluster:
            replicated = stack.enter_context(bench_cluster.replicated_cluster(work / "cluster"))
            bench_cluster.create_topic(replicated, TOPIC, PARTITIONS)
            servers = replicated.bootstrap_servers
            write_records({"bootstrap_servers": servers}, records)
        return measure_on(spark, work, records, reps, servers)


def measure_on(spark: Any, work: Path, records: int, reps: int, servers: str | None) -> list[Case]:
    mq_dir = work / "mq"
    mq_dir.mkdir()
    with Admin(path=mq_dir) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS)
    write_records({"path": mq_dir}, records)
    register_ceiling(spark, records)
    parquet = work / "parquet"
    write_parquet(spark, mq_dir, parquet)
    # The set-up wrote about 1 GB (log and Parquet); without this the kernel writes it back
    # (30 s after it was dirtied) during whichever case is running then, usually the first.
    os.sync()

    def mq_batch(endpoint: dict[str, str]) -> Callable[[], Any]:
        return lambda: (
            spark.read.format("spark_mq").options(**endpoint).option("subscribe", TOPIC).load()
        )

    def mq_stream(endpoint: dict[str, str]) -> Callable[[], Any]:
        return lambda: (
            spark.readStream.format("spark_mq")
            .options(**endpoint)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .load()
        )

    embedded = {"path": str(mq_dir)}
    plans = [
        *batch_plans("spark_mq", mq_batch(embedded)),
        *batch_plans("ceiling", lambda: spark.read.format("bench_memory").load()),
        *batch_plans("Parquet", lambda: spark.read.parquet(str(parquet))),
        stream_plan("spark_mq", mq_stream(embedded), work),
        stream_plan("ceiling", lambda: spark.readStream.format("bench_memory").load(), work),
    ]
    if servers is not None:
        replicated = {"bootstrap.servers": servers}
        plans += [
            *batch_plans(CLUSTER, mq_batch(replicated)),
            stream_plan(CLUSTER, mq_stream(replicated), work),
        ]
    try:
        cases = timed(plans, reps)
    finally:
        stop_broker(mq_dir)
    return cases


def verdicts(cases: list[Case]) -> list[tuple[Case, Case, float, str]]:
    """(spark_mq case, its ceiling, fraction, PASS/MISS) for every query."""
    ceilings = {c.query: c for c in cases if c.name == "ceiling"}
    out = []
    for case in cases:
        if case.name == "spark_mq":
            ceiling = ceilings[case.query]
            fraction = case.rows_per_s / ceiling.rows_per_s
            out.append((case, ceiling, fraction, "PASS" if fraction >= GOAL_FRACTION else "MISS"))
    return out


def table(cases: list[Case]) -> str:
    lines = [
        "| source | query | best s | rows | rows/s | MB/s of values |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for c in cases:
        mb = c.rows * VALUE_BYTES / c.seconds / 1e6
        lines.append(
            f"| {c.name} | {c.query} | {c.seconds:.2f} | {c.rows:,} | "
            f"{c.rows_per_s:,.0f} | {mb:,.0f} |"
        )
    return "\n".join(lines)


def verdict_lines(cases: list[Case]) -> list[str]:
    return [
        f"- {case.query}: spark_mq {case.rows_per_s:,.0f} rows/s is {fraction:.2f} of the "
        f"ceiling's {ceiling.rows_per_s:,.0f} (goal {GOAL_FRACTION}): **{word}**"
        for case, ceiling, fraction, word in verdicts(cases)
    ]


def cluster_lines(cases: list[Case]) -> list[str]:
    """Each query on the cluster as a ratio of the same query on the embedded broker (none
    when the run had no cluster case)."""
    embedded = {c.query: c for c in cases if c.name == "spark_mq"}
    return [
        f"- {case.query} on the {bench_cluster.LABEL}: {case.rows_per_s:,.0f} rows/s, "
        f"{case.rows_per_s / embedded[case.query].rows_per_s:.2f} of the embedded broker's "
        f"{embedded[case.query].rows_per_s:,.0f}"
        for case in cases
        if case.name == CLUSTER
    ]


def render_markdown(run: Run, *, records: int, reps: int, cases: list[Case]) -> str:
    method = [
        f"- {records:,} records of {VALUE_BYTES}-byte values, keyless, in {PARTITIONS} "
        "partitions of one topic, written with `Producer.send_batch` to the local broker of "
        "a fresh log directory (`path=DIR`, Unix socket).",
        "- Spark `local[2]`, driver memory 2g. Every case runs once untimed, then "
        f"{reps} rounds run each case once in turn; a case's figure is its fastest round "
        "(wall clock of the action, planning included).",
        "- Batch: `spark.read.format(...).load().selectExpr(...)`, `count(*)` and "
        "`sum(length(value))`. Python data sources get no column pruning, so `count` moves "
        "every column too.",
        "- Streaming: `readStream` with `Trigger.AvailableNow` from a fresh checkpoint, "
        "`count` and `sum(length(value))` of each micro-batch in `foreachBatch`.",
        "- Ceiling: a Python data source (`bench_memory`) yielding Arrow batches of the same "
        f"schema, {CEILING_BATCH_ROWS:,} rows each, built once per partition in memory: "
        "Spark's Python data source path with no storage and no broker.",
        "- Peer: Spark's Parquet reader on the same records (written by Spark from a "
        "spark_mq read); `count` reads Parquet metadata only.",
    ]
    on_cluster = cluster_lines(cases)
    if on_cluster:
        method.append(
            f"- {CLUSTER}: the same records written with `acks=all` to {bench_cluster.METHOD}, "
            'read with `.option("bootstrap.servers", ...)`: each reader task fetches from its '
            "partition's leader, one of the three broker processes, over TCP."
        )
    body = [*run.loaded_note(), "Results:", "", table(cases), "", *verdict_lines(cases)]
    if on_cluster:
        body += [
            "",
            "On the replicated cluster, as a ratio of the embedded broker:",
            "",
            *on_cluster,
        ]
    return SECTION.render(run, method=method, body=body)


def make_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_source")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = base_parser(__doc__, quick_help=None, dir_help="work")
    p.add_argument("--records", type=int, default=4_000_000, help="records (default 4M)")
    p.add_argument("--reps", type=int, default=3, help="runs per case, best kept (default 3)")
    p.add_argument(
        "--no-cluster",
        action="store_true",
        help="leave out the cluster case (it needs Java and Debian's zookeeper package)",
    )
    args = p.parse_args(argv)
    if args.records < PARTITIONS or args.records % PARTITIONS:
        p.error(f"--records must be a positive multiple of {PARTITIONS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run.start(common_facts(("pyspark", "pyarrow", "numpy")))
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_source_", dir=args.dir))
    spark = make_session()
    try:
        cases = measure(spark, work, args.records, args.reps, cluster=not args.no_cluster)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    run.finish()
    print(table(cases))
    print("\n".join(verdict_lines(cases)))
    print("\n".join(cluster_lines(cases)))
    print(run.end_line())
    if args.out is not None:
        section = render_markdown(run, records=args.records, reps=args.reps, cases=cases)
        SECTION.write(args.out, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
