#!/usr/bin/env python
"""Small-batch benchmark (issue 27, point 3): what one-record batches cost on disk, to
encode, to read, and what a low-latency producer sees end to end.

Run from the repository root::

    .venv/bin/python benchmarks/bench_small_batches.py                           # ~5 minutes
    .venv/bin/python benchmarks/bench_small_batches.py --quick                   # ~30 s
    .venv/bin/python benchmarks/bench_small_batches.py --no-spark                # skip Spark
    .venv/bin/python benchmarks/bench_small_batches.py --out docs/benchmarks.md  # write the doc

What is measured, with 10-byte values (no key, no headers, codec none):

- ``bytes``: one batch of one record, as the producer encodes it (a varint body), with an
  Arrow body (what every batch was before), and Kafka's record batch v2 of the same record
  (61 + the record, the same layout; the ceiling).
- ``encode``: the producer's encoding of a batch of n records from its lists
  (``ProducerBatch.encode``'s two paths, called directly), varint and Arrow, for the
  threshold ``VARINT_MAX_RECORDS``.
- ``validate`` / ``decode`` of one batch of n records: the broker's body check of a produced
  batch and the consumer's decode, for both bodies (the rest of the threshold's cost).
- ``decode``: ``decode_records`` over ~1 MiB of one-record batches (a fetch): varint bodies
  with the C scan and with its Python fallback, and Arrow bodies; the ceiling is the same
  records in one Arrow batch.
- ``poll_batch()``: a fresh ``Consumer`` reads a topic of ``--records`` one-record batches
  (written beforehand with ``LogManager`` appends, untimed) through the local broker; the
  ceiling is the same records in batches of 10,000.
- ``Spark source``: ``spark.read.format("spark_mq")`` counts the same two topics.
- latency: a producer ``send()``s records paced at ``--rate`` records/s (1 ms ticks, each
  value starting with its CLOCK_MONOTONIC send time) with ``linger.ms`` 0 and 5; a Consumer
  in another process polls them (bench_clients.py's method and helpers).

Each figure is the median of ``--runs`` runs (best for the read cases, which the machine's
other load only slows down), with the 1-minute load average when it was taken: the machine
may be shared, and the figures are only comparable at a low load. The goals of the issue are
printed as PASS/MISS lines; a benchmark never fails a build.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_clients_peers as peers
import numpy as np
import pyarrow as pa

# The report scaffolding is shared by every benchmark; its import also makes spark_mq
# importable from the repository when it is not installed.
from bench_report import Run, Section, base_parser, common_facts, loadavg

from spark_mq.storage.varint_records import VARINT_MAX_RECORDS

SECTION = Section(
    name="small-batches",
    title="Small batches",
    begin="<!-- BEGIN small-batches (written by benchmarks/bench_small_batches.py) -->",
    end="<!-- END small-batches -->",
)

VALUE_BYTES = 10
BULK_BATCH_RECORDS = 10_000
GOAL_BATCH_BYTES = 128
GOAL_READ_RPS = 1_000_000
GOAL_P99_MS = 5.0
ENCODE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

_SPAWN = mp.get_context("spawn")


def step(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def load1() -> str:
    return loadavg().split()[0]


class Report:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str]] = []  # case, variant, value, unit, load
        self.goals: list[str] = []

    def add(self, case: str, variant: str, value: float, unit: str) -> None:
        shown = f"{value:,.0f}" if value >= 100 else f"{value:,.2f}"
        self.rows.append((case, variant, shown, unit, load1()))
        print(f"{case:<14} {variant:<52} {shown:>14} {unit:<10} load {load1()}", flush=True)

    def goal(self, ok: bool, text: str) -> None:
        self.goals.append(f"{'PASS' if ok else 'MISS'}: {text}")
        print(self.goals[-1], flush=True)


def _value(i: int) -> bytes:
    return b"%010d" % i


# ---------------------------------------------------------------------------------------------
# bytes, encode, decode (in process)


def run_bytes(report: Report) -> None:
    from spark_mq.client.accumulator import ProducerBatch
    from spark_mq.storage.record_batch import HEADER_SIZE, encode_batch
    from spark_mq.storage.varint_records import record_size

    batch = ProducerBatch("t", 0, 0.0)
    batch.values.append(_value(0))
    batch.timestamps.append(time.time() * 1000)
    batch.record_count = 1
    batch.encode("none", -1, -1, -1)
    varint = sum(memoryview(p).nbytes for p in batch.wire)
    arrow = len(encode_batch(pa.array([_value(0)]), body_encoding="arrow"))
    kafka = HEADER_SIZE + record_size(-1, VALUE_BYTES)
    report.add("bytes", "1 record, varint body (the producer's choice)", varint, "bytes")
    report.add("bytes", "1 record, Arrow body (before)", arrow, "bytes")
    report.add("bytes", "ceiling: Kafka record batch v2", kafka, "bytes")
    report.goal(varint <= GOAL_BATCH_BYTES, f"a 1-record batch takes {varint} <= 128 bytes")


def _per_call_us(fn: Callable[[], object], seconds: float) -> float:
    fn()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(50):
            fn()
        n += 50
    return (time.perf_counter() - t0) / n * 1e6


def run_encode(report: Report, seconds: float) -> None:
    from spark_mq.storage.arrow_arrays import binary_array, from_numpy
    from spark_mq.storage.record_batch import encode_batch_parts, encode_varint_batch_parts

    now = time.time() * 1000
    for n in ENCODE_COUNTS:
        values = [_value(i) for i in range(n)]
        stamps = [now] * n

        def varint(values: list[bytes] = values, stamps: list[float] = stamps) -> object:
            return encode_varint_batch_parts(
                values, None, [int(t) for t in stamps], None, codec="none"
            )

        def arrow(values: list[bytes] = values, stamps: list[float] = stamps) -> object:
            ts = np.array(stamps, dtype=np.float64).astype(np.int64)
            return encode_batch_parts(
                binary_array(values), timestamp=from_numpy(ts), headers=None, codec="none"
            )

        report.add("encode", f"{n} records, varint", _per_call_us(varint, seconds), "us/batch")
        report.add("encode", f"{n} records, Arrow", _per_call_us(arrow, seconds), "us/batch")


def run_batch_checks(report: Report, seconds: float) -> None:
    """What one batch of n records costs after the producer: the broker's body check of
    every produced batch (``validate_batch_body``) and the consumer's decode
    (``decode_records``), for each body."""
    from spark_mq.storage.batch_decoder import decode_records, validate_batch, validate_batch_body
    from spark_mq.storage.record_batch import encode_batch

    for n in ENCODE_COUNTS:
        values = pa.array([_value(i) for i in range(n)])
        for encoding, label in (("varint", "varint"), ("arrow", "Arrow")):
            batch = bytes(encode_batch(values, body_encoding=encoding))  # type: ignore[arg-type]
            header = validate_batch(batch, 0)

            def check(batch: bytes = batch, header: Any = header) -> object:
                validate_batch_body(batch, 0, header)
                return None

            def decode(batch: bytes = batch) -> object:
                return decode_records(batch)

            variant = f"{n} records, {label}"
            report.add("validate", variant, _per_call_us(check, seconds), "us/batch")
            report.add("decode", variant, _per_call_us(decode, seconds), "us/batch")


def _one_record_batches(count: int, encoding: str, start: int = 0) -> bytes:
    from spark_mq.storage.record_batch import encode_batch, set_base_offset

    now = int(time.time() * 1000)
    out = bytearray()
    for i in range(start, start + count):
        batch = bytearray(encode_batch(pa.array([_value(i)]), now_ms=now, body_encoding=encoding))  # type: ignore[arg-type]
        set_base_offset(batch, 0, i)
        out += batch
    return bytes(out)


def _best_rps(fn: Callable[[], int], runs: int) -> float:
    fn()
    best = 0.0
    for _ in range(runs):
        t0 = time.perf_counter()
        n = fn()
        best = max(best, n / (time.perf_counter() - t0))
    return best


def run_decode(report: Report, runs: int) -> None:
    from spark_mq.storage import varint_records
    from spark_mq.storage.batch_decoder import decode_records
    from spark_mq.storage.record_batch import encode_batch

    count = (1 << 20) // 79
    varint = _one_record_batches(count, "varint")
    arrow = _one_record_batches(count // 8, "arrow")  # 8x larger batches: the same ~1 MiB
    bulk = encode_batch(pa.array([_value(i) for i in range(count)]))
    if varint_records.has_c_decoder():
        rps = _best_rps(lambda: decode_records(varint).num_rows, runs)
        report.add("decode", "~1 MiB of 1-record batches, varint body, C scan", rps, "records/s")
    else:
        report.goals.append("note: the C extension is not built; only the fallback was measured")

    def fallback() -> int:
        scanned = varint_records.scan(
            varint,
            0,
            start_offset=None,
            end_offset=None,
            verify_crc=True,
            stop_at_transactional=False,
            use_c=False,
        )
        return 0 if scanned.records is None else scanned.records.num_rows

    report.add("decode", "same, varint body, Python fallback", _best_rps(fallback, 1), "records/s")
    rps = _best_rps(lambda: decode_records(arrow).num_rows, runs)
    report.add("decode", "1-record batches, Arrow body (before)", rps, "records/s")
    rps = _best_rps(lambda: decode_records(bulk).num_rows, runs)
    report.add("decode", "ceiling: the same records in one Arrow batch", rps, "records/s")


# ---------------------------------------------------------------------------------------------
# poll_batch() and the Spark source (through a local broker)


def write_topics(directory: Path, records: int) -> None:
    from spark_mq import LogManager
    from spark_mq.storage.record_batch import encode_batch, set_base_offset

    now = int(time.time() * 1000)
    with LogManager(directory) as logs:
        logs.create_topic("one", partitions=1)
        logs.create_topic("bulk", partitions=1)
        small = logs.get_log("one", 0)
        chunk = 2_000
        for start in range(0, records, chunk):
            small.append(_one_record_batches(min(chunk, records - start), "varint", start))
        bulk = logs.get_log("bulk", 0)
        for start in range(0, records, BULK_BATCH_RECORDS):
            n = min(BULK_BATCH_RECORDS, records - start)
            batch = bytearray(
                encode_batch(pa.array([_value(i) for i in range(start, start + n)]), now_ms=now)
            )
            set_base_offset(batch, 0, start)
            bulk.append(bytes(batch))


def run_poll_batch(report: Report, directory: Path, records: int, runs: int) -> None:
    """Each run is a fresh consumer (a consumer that reached the end has a fetch waiting
    there for ``fetch.max.wait.ms``, which a seek back would wait out first); the clock
    covers its connection too (a few ms)."""
    from spark_mq import Consumer, TopicPartition

    for topic, label in (
        ("one", f"{records:,} 1-record batches (varint)"),
        ("bulk", f"ceiling: the same in batches of {BULK_BATCH_RECORDS:,}"),
    ):
        best = 0.0
        for _ in range(runs + 1):  # the first run warms up (page cache, imports)
            with Consumer(path=str(directory), auto_offset_reset="earliest") as consumer:
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                consumer.seek(tp, 0)
                got = 0
                t0 = time.perf_counter()
                while got < records:
                    got += consumer.poll_batch(timeout_ms=2000).num_rows
                best = max(best, got / (time.perf_counter() - t0))
        report.add("poll_batch()", label, best, "records/s")


def run_spark(report: Report, directory: Path, records: int, runs: int) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_small_batches")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for topic, label in (
            ("one", f"{records:,} 1-record batches (varint)"),
            ("bulk", f"ceiling: the same in batches of {BULK_BATCH_RECORDS:,}"),
        ):

            def count(topic: str = topic) -> int:
                df = (
                    spark.read.format("spark_mq")
                    .option("path", str(directory))
                    .option("subscribe", topic)
                    .load()
                )
                return int(df.selectExpr("count(*) AS n", "sum(length(value)) AS b").first().n)

            report.add("Spark source", label, _best_rps(count, runs), "records/s")
    finally:
        spark.stop()


# ---------------------------------------------------------------------------------------------
# End-to-end latency


def run_latency(
    report: Report, directory: Path, *, rate: int, records: int, warmup: int, runs: int
) -> None:
    from spark_mq import Admin, Producer

    pad = b"x" * (VALUE_BYTES - peers.STAMP.size) if peers.STAMP.size < VALUE_BYTES else b""
    for linger_ms in (0, 5):
        p50s: list[float] = []
        p99s: list[float] = []
        for run in range(runs):
            topic = f"lat-{linger_ms}-{run}"
            with Admin(path=str(directory)) as admin:
                admin.create_topic(topic, partitions=1)
            parent, child = _SPAWN.Pipe()
            reader = _SPAWN.Process(
                target=peers.latency_reader,
                args=({"path": str(directory), "fetch_max_wait_ms": 100}, topic, 1, records, child),
            )
            reader.start()
            try:
                if not parent.poll(60) or parent.recv() != "ready":
                    raise RuntimeError("latency consumer did not start")
                with Producer(path=str(directory), linger_ms=linger_ms) as producer:
                    send = producer.send

                    def send_one(
                        i: int, stamp: bytes, send: Any = send, topic: str = topic
                    ) -> None:
                        send(topic, stamp + pad)

                    peers.paced_send(rate, records, send_one, lambda: None, warmup=warmup)
                    producer.flush()
                if not parent.poll(60):
                    raise RuntimeError("latency consumer did not receive every record")
                reply = parent.recv_bytes()
                if reply.startswith(b"error:"):
                    raise RuntimeError(reply.decode())
                pct = peers.percentiles_ms(np.frombuffer(reply, dtype=np.int64))
                p50s.append(pct["p50"])
                p99s.append(pct["p99"])
            finally:
                reader.join(10)
                if reader.is_alive():
                    reader.kill()
        label = f"{rate:,} records/s, linger.ms={linger_ms}"
        report.add("latency", f"{label}: p50", statistics.median(p50s), "ms")
        report.add("latency", f"{label}: p99", statistics.median(p99s), "ms")
        if linger_ms == 0:
            p99 = statistics.median(p99s)
            report.goal(p99 < GOAL_P99_MS, f"p99 {p99:.1f} ms < 5 ms at linger.ms=0")


# ---------------------------------------------------------------------------------------------
# Report


def render_markdown(report: Report, args: argparse.Namespace, run: Run) -> str:
    method = [
        "- 10-byte values, no key, no headers, codec none; each row's last column is the "
        "1-minute load average when it was taken.",
        "- `bytes`: one record alone in a batch; the ceiling is Kafka's record batch v2.",
        "- `encode`: a producer batch of n records encoded from its lists (varint: "
        "`encode_varint_batch_parts`; Arrow: `encode_batch_parts`); the threshold "
        f"`VARINT_MAX_RECORDS` ({VARINT_MAX_RECORDS}) comes from these rows and the next two.",
        "- `validate` / `decode` (n records): one batch of n records through the broker's body "
        "check of a produced batch (`validate_batch_body`) and the consumer's "
        "`decode_records`, per body.",
        "- `decode` (~1 MiB): `decode_records` over ~1 MiB of one-record batches; the ceiling "
        "is the same records in one Arrow batch.",
        f"- `poll_batch()` / `Spark source`: {args.records:,} one-record batches in one "
        "partition, read whole through the local broker, best of the runs; the ceiling is the "
        f"same records in batches of {BULK_BATCH_RECORDS:,}.",
        f"- latency: `send()` paced at {args.rate:,} records/s, {args.latency_records:,} "
        "records after a warm-up, consumer in another process (bench_clients.py's method), "
        f"median of {args.runs} runs.",
    ]
    body = [
        "| case | variant | value | unit | load (1 min) |",
        "|---|---|---:|---|---:|",
        *(f"| {c} | {v} | {x} | {u} | {ld} |" for c, v, x, u, ld in report.rows),
        "",
        *(f"- {g}" for g in report.goals),
    ]
    return SECTION.render(run, method=method, body=body)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = base_parser(__doc__, quick_help="small sizes, one run", dir_help="small-batches")
    p.add_argument("--records", type=int, default=1_000_000, help="records of the read topics")
    p.add_argument("--rate", type=int, default=10_000, help="records/s of the latency runs")
    p.add_argument("--latency-records", type=int, default=20_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-spark", action="store_true", help="skip the Spark source case")
    args = p.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 50_000)
        args.latency_records = min(args.latency_records, 5_000)
        args.runs = 1
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = Run.start(common_facts(("pyarrow", "numpy")))
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="bench_small_", dir=args.dir))
    directory = work / "mq"
    try:
        step("bytes")
        run_bytes(report)
        step("encode")
        run_encode(report, 0.05 if args.quick else 0.3)
        step("validate and decode per batch")
        run_batch_checks(report, 0.05 if args.quick else 0.3)
        step("decode")
        run_decode(report, args.runs)
        step(f"writing {args.records:,} records twice (untimed)")
        write_topics(directory, args.records)
        from spark_mq.broker.local import ensure_broker, stop_broker

        ensure_broker(directory, config={"broker.idle.exit.ms": "-1"})
        try:
            step("poll_batch()")
            run_poll_batch(report, directory, args.records, args.runs)
            step("latency")
            run_latency(
                report,
                directory,
                rate=args.rate,
                records=args.latency_records,
                warmup=args.rate,
                runs=args.runs,
            )
        finally:
            stop_broker(directory)
        if not args.no_spark:
            step("Spark source")
            run_spark(report, directory, args.records, args.runs)
        reads = [
            float(x.replace(",", ""))
            for c, v, x, _, _ in report.rows
            if c in ("poll_batch()", "Spark source") and not v.startswith("ceiling")
        ]
        report.goal(
            bool(reads) and min(reads) >= GOAL_READ_RPS,
            "reading 1-record batches reaches 1,000,000 records/s "
            f"(poll_batch and Spark: {', '.join(f'{r:,.0f}' for r in reads)})",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run.finish()
    print(run.end_line())
    if args.out is not None:
        SECTION.write(args.out, render_markdown(report, args, run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
