#!/usr/bin/env python
"""Client benchmark: Producer / Consumer throughput and latency, against the same-run ceiling
of a plain loopback socket and against Redis Streams.

Run from the repository root::

    .venv/bin/python benchmarks/bench_clients.py                            # ~3 minutes
    .venv/bin/python benchmarks/bench_clients.py --quick                    # ~10 s smoke run
    .venv/bin/python benchmarks/bench_clients.py --out docs/benchmarks.md   # also write the doc

What is measured, with 100-byte values (no key, no headers, codec none) on topics of 1 and 8
partitions, through the embedded local broker of a fresh directory (``path=``, a Unix socket)
and through the same broker's TCP listener (``bootstrap_servers=127.0.0.1:PORT``):

- ``send()``: one ``Producer.send`` per record, then ``flush()``; the clock covers both.
- ``send_batch()``: ``Producer.send_batch`` of Arrow tables of ``--batch-records`` rows, then
  ``flush()``.
- ``poll()`` / ``poll_batch()``: a fresh ``Consumer`` assigned every partition of a topic
  written beforehand (untimed), from the beginning, until it has returned the run's records.
- end-to-end latency: a producer ``send()``s records paced at ``--rate`` records/s (in 1 ms
  ticks), each value starting with its CLOCK_MONOTONIC send time; a ``Consumer`` in another
  process polls them and subtracts that stamp from its clock when ``poll()`` returns.

In the same run, on the same machine:

- the **ceiling**: the same value bytes through one plain TCP loopback connection, written by
  a sender process in 16 KiB chunks (the producer's ``batch.size``) and in 1 MiB chunks (a
  fetch's size), read with ``recv_into``; reported as MB/s and the records/s those bytes
  would be at 100 B a record;
- **Redis Streams**: Debian's ``redis-server`` on a free loopback port with no persistence,
  through redis-py with the hiredis parser: XADD in pipelines of ``--redis-pipeline``
  commands (one stream per partition, records round-robin), XREAD and XRANGE with COUNT
  10,000, and the same paced latency run (XADD pipelined per 1 ms tick, XREAD BLOCK in
  another process).

Each throughput case runs once untimed to calibrate (which also warms up), then ``--runs``
timed runs sized to take about ``--run-seconds`` each; rows show the median and the spread of
the runs. The goals of the issue are printed as PASS/MISS lines; a benchmark never fails a
build, so the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_clients_peers as peers
import numpy as np

# The report scaffolding is shared by every benchmark next to this file; importing it also
# makes spark_mq importable from the repository when it is not installed.
from bench_report import (
    Run,
    Section,
    TimedRow,
    base_parser,
    common_facts,
    fmt_int,
    goals_block,
    markdown_table,
    new_page_cache_write,
    text_table,
)

MIB = 1024 * 1024
RECORD_BYTES = 100
PARTITION_COUNTS = (1, 8)

GOAL_SEND_RPS = 500_000
GOAL_SEND_BATCH_RPS = 3_000_000
GOAL_POLL_BATCH_RPS = 5_000_000
GOAL_P99_MS = 10.0
GOAL_REDIS_FACTOR = 2.0

SECTION = Section(
    name="clients",
    title="Clients: Producer and Consumer",
    begin="<!-- BEGIN clients (written by benchmarks/bench_clients.py) -->",
    end="<!-- END clients -->",
)

_SPAWN = mp.get_context("spawn")


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    runs: int
    run_seconds: float  # each timed run is sized to take about this long
    calibrate_records: int  # the untimed first run of a case
    max_records: int  # no run moves more records than this
    consume_records: int  # records written (untimed) per partition count for the poll cases
    batch_records: int  # rows per send_batch() table
    rate: int  # records/s of the latency runs
    latency_records: int
    latency_warmup: int  # records sent (at the same rate) before the measured ones
    ceiling_bytes: int
    redis_pipeline: int
    tcp: bool
    redis: bool


@dataclasses.dataclass
class Row(TimedRow):
    system: str  # "spark_mq", "ceiling", "redis"
    transport: str  # "path= (unix)", "tcp", "loopback"
    partitions: int
    op: str
    records: int
    samples: list[float]
    value_bytes: int = RECORD_BYTES
    note: str = ""

    @property
    def rps(self) -> float:
        return self.records / self.seconds

    @property
    def mbps(self) -> float:
        return self.records * self.value_bytes / self.seconds / 1e6


@dataclasses.dataclass
class Latency:
    system: str
    transport: str
    partitions: int
    rate: int
    records: int
    achieved_rps: float
    pct: dict[str, float]


@dataclasses.dataclass
class Results:
    rows: list[Row] = dataclasses.field(default_factory=list)
    latencies: list[Latency] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    #: New page cache on this machine: (MB/s, CPU s per GB, MB/s rewriting cached pages).
    page_cache: tuple[float, float, float] | None = None
    #: Bytes a send_batch() record takes in the log (codec none).
    stored_bytes_per_record: float | None = None

    def find(self, system: str, transport: str, partitions: int, op: str) -> Row | None:
        for r in self.rows:
            if (r.system, r.transport, r.partitions, r.op) == (system, transport, partitions, op):
                return r
        return None


_T0 = time.perf_counter()


def step(message: str) -> None:
    """A progress line, with the seconds since the start."""
    print(f"{time.perf_counter() - _T0:6.1f} s  {message}", flush=True)


def payloads(count: int = 1000, seed: int = 7) -> list[bytes]:
    rng = np.random.default_rng(seed)
    block = rng.integers(32, 127, size=RECORD_BYTES + count, dtype=np.uint8).tobytes()
    return [block[i : i + RECORD_BYTES] for i in range(count)]


def measure(
    run: Callable[[int], float], settings: Settings, *, floor: int = 1_000, cap: int | None = None
) -> tuple[int, list[float]]:
    """Calibrate with one untimed run, then ``settings.runs`` timed runs of the size that
    takes about ``settings.run_seconds``; returns (records per run, seconds of each run)."""
    cap = min(cap or settings.max_records, settings.max_records)
    first = min(settings.calibrate_records, cap)
    seconds = run(first)
    n = int(first / max(seconds, 1e-6) * settings.run_seconds)
    n = max(min(n, cap), min(floor, cap))
    return n, [run(n) for _ in range(settings.runs)]


# ---------------------------------------------------------------------------------------------
# spark_mq


class SparkMQCases:
    """The spark_mq cases against one broker, through one transport."""

    def __init__(self, conn: dict[str, Any], transport: str, settings: Settings) -> None:
        self.conn = conn
        self.transport = transport
        self.settings = settings
        self.values = payloads()

    def admin(self) -> Any:
        from spark_mq import Admin

        return Admin(**self.conn)

    def create_topic(self, name: str, partitions: int) -> None:
        with self.admin() as admin:
            admin.create_topic(name, partitions=partitions)

    def delete_topic(self, name: str) -> None:
        with self.admin() as admin:
            admin.delete_topic(name)

    def send(self, topic: str) -> tuple[int, list[float]]:
        from spark_mq import Producer

        values = self.values
        m = len(values)
        with Producer(**self.conn) as producer:
            producer.partitions_for(topic)
            send = producer.send

            def run(n: int) -> float:
                t0 = time.perf_counter()
                for i in range(n):
                    send(topic, values[i % m])
                producer.flush()
                return time.perf_counter() - t0

            return measure(run, self.settings)

    def batch_tables(self) -> list[Any]:
        import pyarrow as pa

        size = self.settings.batch_records
        values = self.values
        # A few different tables (rotated), each built once, outside the clock.
        return [
            pa.table(
                {
                    "value": pa.array(
                        [values[(j + i) % len(values)] for i in range(size)], pa.binary()
                    )
                }
            )
            for j in range(4)
        ]

    def send_batch(self, topic: str) -> tuple[int, list[float]]:
        from spark_mq import Producer

        tables = self.batch_tables()
        size = self.settings.batch_records
        with Producer(**self.conn) as producer:
            producer.partitions_for(topic)

            def run(n: int) -> float:
                calls = max(1, n // size)
                t0 = time.perf_counter()
                for c in range(calls):
                    producer.send_batch(topic, tables[c % len(tables)])
                producer.flush()
                return time.perf_counter() - t0

            n, samples = measure(run, self.settings, floor=size)
            return max(1, n // size) * size, samples

    def fill(self, topic: str, records: int) -> None:
        """Write ``records`` records to ``topic`` with send_batch (untimed)."""
        from spark_mq import Producer

        tables = self.batch_tables()
        size = self.settings.batch_records
        with Producer(**self.conn) as producer:
            for c in range(-(-records // size)):
                producer.send_batch(topic, tables[c % len(tables)])
            producer.flush()

    def _consumer(self, topic: str, partitions: int) -> Any:
        from spark_mq import Consumer, TopicPartition

        consumer = Consumer(**self.conn)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        return consumer

    def poll(self, topic: str, partitions: int, available: int) -> tuple[int, list[float]]:
        def run(n: int) -> float:
            with self._consumer(topic, partitions) as consumer:
                got = 0
                t0 = time.perf_counter()
                while got < n:
                    polled = consumer.poll(timeout_ms=1000, max_records=10_000)
                    if not polled:
                        raise RuntimeError(f"poll() returned nothing after {got} of {n} records")
                    for records in polled.values():
                        got += len(records)
                return time.perf_counter() - t0

        return measure(run, self.settings, cap=available)

    def poll_batch(self, topic: str, partitions: int, available: int) -> tuple[int, list[float]]:
        def run(n: int) -> float:
            with self._consumer(topic, partitions) as consumer:
                got = 0
                t0 = time.perf_counter()
                while got < n:
                    table = consumer.poll_batch(timeout_ms=1000)
                    if table.num_rows == 0:
                        raise RuntimeError(
                            f"poll_batch() returned nothing after {got} of {n} records"
                        )
                    got += table.num_rows
                return time.perf_counter() - t0

        return measure(run, self.settings, cap=available, floor=10_000)

    def latency(self, topic: str, partitions: int) -> tuple[np.ndarray, float]:
        from spark_mq import Producer

        s = self.settings
        parent, child = _SPAWN.Pipe()
        reader = _SPAWN.Process(
            target=peers.latency_reader,
            args=(self.conn, topic, partitions, s.latency_records, child),
            daemon=True,
        )
        reader.start()
        try:
            if not parent.poll(60) or parent.recv() != "ready":
                raise RuntimeError("latency consumer did not start")
            pad = b"x" * (RECORD_BYTES - peers.STAMP.size)
            with Producer(**self.conn) as producer:
                producer.partitions_for(topic)
                send = producer.send

                def send_one(i: int, stamp: bytes) -> None:
                    send(topic, stamp + pad)

                seconds = peers.paced_send(
                    s.rate, s.latency_records, send_one, lambda: None, warmup=s.latency_warmup
                )
                producer.flush()
            if not parent.poll(60):
                raise RuntimeError("latency consumer did not receive every record in 60 s")
            reply = parent.recv_bytes()
            if reply.startswith(b"error:"):
                raise RuntimeError(reply.decode())
            lat = np.frombuffer(reply, dtype=np.int64)
        finally:
            reader.join(10)
            if reader.is_alive():
                reader.kill()
        return lat, seconds


def tcp_address(directory: Path) -> str | None:
    from spark_mq.broker import broker_status

    status = broker_status(directory)
    if status is None:
        return None
    for address in status.addresses:
        if address.unix_path is None:
            return str(address)
    return None


def run_spark_mq(settings: Settings, work: Path, results: Results) -> None:
    from spark_mq.broker import ensure_broker, stop_broker

    directory = work / "mq"
    config = {"broker.idle.exit.ms": "-1"}
    if settings.tcp:
        # The embedded broker listens on TCP only when asked.
        config["listeners"] = "UNIX://,PLAINTEXT://127.0.0.1:0"
    ensure_broker(directory, config=config)
    try:
        transports: list[tuple[str, dict[str, Any]]] = [("path= (unix)", {"path": str(directory)})]
        tcp = tcp_address(directory)
        if settings.tcp and tcp is not None:
            transports.append(("tcp", {"bootstrap_servers": tcp}))
        elif settings.tcp:
            results.notes.append("the broker reported no TCP listener: TCP rows are missing")
        for k in PARTITION_COUNTS:
            data_topic = f"data-p{k}"
            first = SparkMQCases(transports[0][1], transports[0][0], settings)
            first.create_topic(data_topic, k)
            step(f"[spark_mq] writing {settings.consume_records:,} records to {data_topic}")
            first.fill(data_topic, settings.consume_records)
            # Write the filled data back now: otherwise the kernel does it (30 s after it was
            # dirtied) during whichever timed case is running then.
            os.sync()
            for name, conn in transports:
                cases = SparkMQCases(conn, name, settings)
                tag = "u" if name.startswith("path") else "t"
                for op in ("send()", "send_batch()"):
                    topic = f"{'send' if op == 'send()' else 'batch'}-{tag}-p{k}"
                    cases.create_topic(topic, k)
                    step(f"[spark_mq] {name} {k} partition(s): {op}")
                    fn = cases.send if op == "send()" else cases.send_batch
                    n, samples = fn(topic)
                    results.rows.append(Row("spark_mq", name, k, op, n, samples))
                    cases.delete_topic(topic)
                    _print_row(results.rows[-1])
                for op in ("poll()", "poll_batch()"):
                    step(f"[spark_mq] {name} {k} partition(s): {op}")
                    fn2 = cases.poll if op == "poll()" else cases.poll_batch
                    n, samples = fn2(data_topic, k, settings.consume_records)
                    results.rows.append(Row("spark_mq", name, k, op, n, samples))
                    _print_row(results.rows[-1])
                topic = f"lat-{tag}-p{k}"
                cases.create_topic(topic, k)
                step(f"[spark_mq] {name} {k} partition(s): latency at {settings.rate:,}/s")
                lat, seconds = cases.latency(topic, k)
                results.latencies.append(
                    Latency(
                        "spark_mq",
                        name,
                        k,
                        settings.rate,
                        len(lat),
                        settings.latency_records / seconds,
                        peers.percentiles_ms(lat),
                    )
                )
                _print_latency(results.latencies[-1])
                cases.delete_topic(topic)
            first.delete_topic(data_topic)
    finally:
        stop_broker(directory)


# ---------------------------------------------------------------------------------------------
# Peers


def run_page_cache(work: Path, results: Results) -> None:
    """What appending new bytes to any file costs here, and what a send_batch() record
    weighs in the log (its batch encoded as the producer encodes it, codec none)."""
    import pyarrow as pa

    from spark_mq.storage.record_batch import encode_batch

    step("[ceiling] new page cache")
    results.page_cache = new_page_cache_write(work)
    values = pa.array(payloads()[:1] * 10_000, pa.binary())
    results.stored_bytes_per_record = len(encode_batch(values)) / len(values)


def run_ceiling(settings: Settings, results: Results) -> None:
    pool = os.urandom(8 * MIB)
    records = settings.ceiling_bytes // RECORD_BYTES
    for chunk, label in ((16 * 1024, "16 KiB writes"), (MIB, "1 MiB writes")):
        step(f"[ceiling] loopback socket, {label}")
        peers.loopback_ceiling(min(settings.ceiling_bytes, 64 * MIB), chunk, pool)  # warm-up
        samples = [
            peers.loopback_ceiling(records * RECORD_BYTES, chunk, pool)
            for _ in range(settings.runs)
        ]
        results.rows.append(Row("ceiling", "loopback", 1, f"socket, {label}", records, samples))
        _print_row(results.rows[-1])


def run_redis(settings: Settings, work: Path, results: Results) -> str:
    missing = peers.redis_missing()
    if missing is not None:
        results.notes.append(f"Redis Streams not measured: {missing}")
        step(f"[redis] skipped: {missing}")
        return "not measured"
    values = payloads()
    with peers.RedisServer(work) as server:
        port = server.port
        for k in PARTITION_COUNTS:
            names = peers.stream_names(f"bench{k}", k)
            produced = 0

            def produce(n: int, names: list[str] = names) -> float:
                nonlocal produced
                produced += n
                return peers.redis_produce(port, names, values, n, settings.redis_pipeline)

            step(f"[redis] {k} stream(s): XADD")
            n, samples = measure(produce, settings)
            results.rows.append(
                Row("redis", "tcp", k, f"XADD (pipeline {settings.redis_pipeline})", n, samples)
            )
            _print_row(results.rows[-1])
            for op, fn in (
                ("XREAD COUNT 10000", peers.redis_consume_xread),
                ("XRANGE COUNT 10000", peers.redis_consume_xrange),
            ):
                step(f"[redis] {k} stream(s): {op}")
                n, samples = measure(
                    lambda n, fn=fn, names=names: fn(port, names, n, 10_000),  # type: ignore[misc]
                    settings,
                    cap=produced,
                )
                results.rows.append(Row("redis", "tcp", k, op, n, samples))
                _print_row(results.rows[-1])
            server.flush()
            step(f"[redis] {k} stream(s): latency at {settings.rate:,}/s")
            lat, seconds = peers.redis_latency(
                port,
                peers.stream_names(f"lat{k}", k),
                settings.rate,
                settings.latency_records,
                RECORD_BYTES,
            )
            results.latencies.append(
                Latency(
                    "redis",
                    "tcp",
                    k,
                    settings.rate,
                    len(lat),
                    settings.latency_records / seconds,
                    peers.percentiles_ms(lat),
                )
            )
            _print_latency(results.latencies[-1])
            server.flush()
        return server.version()


# ---------------------------------------------------------------------------------------------
# Reporting


def _print_row(r: Row) -> None:
    print(
        f"    {r.records:,} records, median {r.seconds:.3f} s: {fmt_int(r.rps)} records/s, "
        f"{r.mbps:,.1f} MB/s (spread {r.spread:.0%})",
        flush=True,
    )


def _print_latency(lat: Latency) -> None:
    p = lat.pct
    print(
        f"    {lat.records:,} records at {lat.achieved_rps:,.0f}/s: p50 {p['p50']:.2f} ms, "
        f"p99 {p['p99']:.2f} ms, max {p['max']:.2f} ms",
        flush=True,
    )


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def storage_lines(results: Results, goal: float) -> list[str]:
    """What storing ``goal`` records/s costs the broker's kernel alone on this machine."""
    if results.page_cache is None or results.stored_bytes_per_record is None:
        return []
    new_mb_s, cpu_per_gb, rewrite_mb_s = results.page_cache
    stored_mb_s = goal * results.stored_bytes_per_record / 1e6
    return [
        "INFO storing send_batch() records: one takes "
        f"{results.stored_bytes_per_record:.1f} bytes in the log, so {fmt_int(goal)} "
        f"records/s append {stored_mb_s:,.0f} MB/s; "
        f"this machine wrote new page cache at {new_mb_s:,.0f} MB/s using "
        f"{cpu_per_gb:.2f} CPU s/GB (rewriting cached pages: {rewrite_mb_s:,.0f} MB/s), so "
        f"into new pages the goal would cost {stored_mb_s / 1e3 * cpu_per_gb:.2f} CPU s per "
        "second in the broker's write() alone; the broker's drop-behind (topic setting "
        "segment.drop.behind.bytes) lets go of each partition's older written pages, so "
        "appends reuse them instead"
    ]


def goal_lines(results: Results) -> list[str]:
    lines: list[str] = []
    local = "path= (unix)"
    for k in PARTITION_COUNTS:
        where = f"{k} partition{'s' if k > 1 else ''}, path="
        for op, goal in (
            ("send()", GOAL_SEND_RPS),
            ("send_batch()", GOAL_SEND_BATCH_RPS),
            ("poll_batch()", GOAL_POLL_BATCH_RPS),
        ):
            r = results.find("spark_mq", local, k, op)
            if r is None:
                lines.append(f"MISS {op} >= {fmt_int(goal)} records/s ({where}): not measured")
                continue
            lines.append(
                f"{_verdict(r.rps >= goal)} {op} >= {fmt_int(goal)} records/s ({where}): "
                f"{fmt_int(r.rps)} ({r.rps / goal:.0%} of the goal)"
            )
            if op == "send_batch()" and k == PARTITION_COUNTS[0]:
                lines.extend(storage_lines(results, goal))
        lat = next(
            (
                x
                for x in results.latencies
                if (x.system, x.transport, x.partitions) == ("spark_mq", local, k)
            ),
            None,
        )
        if lat is None:
            lines.append(
                f"MISS p99 < {GOAL_P99_MS:g} ms at 10,000 records/s ({where}): not measured"
            )
        else:
            p99 = lat.pct["p99"]
            lines.append(
                f"{_verdict(p99 < GOAL_P99_MS)} end-to-end p99 < {GOAL_P99_MS:g} ms at "
                f"{lat.rate:,} records/s ({where}): p50 {lat.pct['p50']:.2f} ms, p99 {p99:.2f} ms"
            )
        redis_produce = next(
            (
                r
                for r in results.rows
                if r.system == "redis" and r.partitions == k and r.op.startswith("XADD")
            ),
            None,
        )
        redis_consume = max(
            (
                r
                for r in results.rows
                if r.system == "redis" and r.partitions == k and not r.op.startswith("XADD")
            ),
            key=lambda r: r.rps,
            default=None,
        )
        for side, fast_op, slow_op, peer in (
            ("produce", "send_batch()", "send()", redis_produce),
            ("consume", "poll_batch()", "poll()", redis_consume),
        ):
            fast = results.find("spark_mq", local, k, fast_op)
            slow = results.find("spark_mq", local, k, slow_op)
            if peer is None or fast is None:
                lines.append(
                    f"MISS {side} >= {GOAL_REDIS_FACTOR:g}x Redis Streams ({where}): not measured"
                )
                continue
            ratio = fast.rps / peer.rps
            lines.append(
                f"{_verdict(ratio >= GOAL_REDIS_FACTOR)} {side} >= {GOAL_REDIS_FACTOR:g}x Redis "
                f"Streams ({where}, vs {k} stream{'s' if k > 1 else ''}): {fast_op} "
                f"{fmt_int(fast.rps)} vs {peer.op} {fmt_int(peer.rps)} records/s = {ratio:.1f}x"
            )
            if slow is not None:
                lines.append(
                    f"INFO {side}, record at a time ({where}): {slow_op} {fmt_int(slow.rps)} vs "
                    f"{peer.op} {fmt_int(peer.rps)} records/s = {slow.rps / peer.rps:.1f}x"
                )
    return lines


ROW_HEADERS = (
    "system",
    "transport",
    "partitions",
    "operation",
    "records",
    "records/s",
    "MB/s",
    "vs ceiling",
    "runs",
    "spread",
)
LAT_HEADERS = (
    "system",
    "transport",
    "partitions",
    "rate/s",
    "records",
    "p50 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
)


def _ceiling_mbps(results: Results) -> float | None:
    best = [r.mbps for r in results.rows if r.system == "ceiling"]
    return max(best) if best else None


def row_cells(r: Row, ceiling: float | None) -> tuple[str, ...]:
    return (
        r.system,
        r.transport,
        str(r.partitions),
        r.op,
        fmt_int(r.records),
        fmt_int(r.rps),
        f"{r.mbps:,.1f}",
        f"{r.mbps / ceiling:.2f}" if ceiling else "-",
        str(len(r.samples)),
        f"{r.spread:.0%}",
    )


def lat_cells(x: Latency) -> tuple[str, ...]:
    p = x.pct
    return (
        x.system,
        x.transport,
        str(x.partitions),
        fmt_int(x.rate),
        fmt_int(x.records),
        f"{p['p50']:.2f}",
        f"{p['p99']:.2f}",
        f"{p['p99.9']:.2f}",
        f"{p['max']:.2f}",
    )


def machine_facts(work: Path, redis_version: str) -> list[tuple[str, str]]:
    return [
        *common_facts(("pyarrow", "numpy", "msgspec", "redis", "hiredis")),
        ("redis-server", redis_version),
        ("bench directory", f"{work} (deleted at the end)"),
    ]


def method_lines(settings: Settings) -> list[str]:
    return [
        f"- Records: {RECORD_BYTES}-byte values (printable random bytes from a pool of 1,000), no "
        "key, no headers, codec none; MB/s counts value bytes, MB = 10^6 bytes.",
        "- spark_mq: one broker started with `ensure_broker(dir)` on a fresh directory "
        "(defaults, no idle exit, plus a loopback TCP listener unless --no-tcp); `path=` "
        "connects over its Unix socket, `tcp` over that TCP listener. Producer and Consumer "
        "defaults (linger.ms 5, batch.size 16384, acks all, idempotence on, read_committed). "
        "Topics are created before each case; send cases write keyless records (the default "
        "partitioner spreads them), the "
        f"poll cases read a topic written beforehand with send_batch ({settings.consume_records:,} "
        "records).",
        f"- send_batch: Arrow tables of {settings.batch_records:,} rows. poll: max_records "
        "10,000 per call. Every consumer is new and reads from offset 0 of every partition.",
        f"- Runs: one untimed calibration run per case, then {settings.runs} timed runs of "
        f"about {settings.run_seconds:g} s each (at most {settings.max_records:,} records); "
        "median; `spread` = (slowest - fastest) / median.",
        f"- Latency: {settings.latency_records:,} records paced at {settings.rate:,}/s in 1 ms "
        "ticks with send(), after "
        f"{settings.latency_warmup:,} warm-up records at the same rate that are not counted "
        "(first connections, first batches); the value starts with the send time "
        "(CLOCK_MONOTONIC ns); a consumer in another process, assigned every partition before "
        "the first send, subtracts it from its clock when poll() returns.",
        f"- Ceiling: {settings.ceiling_bytes // RECORD_BYTES:,} records' worth of bytes "
        f"({settings.ceiling_bytes / 1e6:,.0f} MB) from a sender process to this one over one "
        "TCP loopback connection (recv_into a 1 MiB buffer); `vs ceiling` = MB/s / the best "
        "ceiling MB/s.",
        f"- Redis: a fresh redis-server (--save '' --appendonly no) on loopback; redis-py with "
        f"hiredis; XADD of a one-field entry in non-transactional pipelines of "
        f"{settings.redis_pipeline:,}, one stream per partition, records round-robin; XREAD "
        "over every stream and XRANGE stream by stream, COUNT 10,000; latency with XADD "
        "pipelined per 1 ms tick and XREAD BLOCK in another process.",
    ]


def render_markdown(run: Run, *, settings: Settings, results: Results, goals: list[str]) -> str:
    ceiling = _ceiling_mbps(results)
    method = [*method_lines(settings), *(f"- Note: {n}" for n in results.notes)]
    body = [
        *goals_block(goals),
        "",
        "### Throughput",
        "",
        markdown_table(ROW_HEADERS, [row_cells(r, ceiling) for r in results.rows], 4),
        "",
        "### End-to-end latency",
        "",
        markdown_table(LAT_HEADERS, [lat_cells(x) for x in results.latencies], 3),
    ]
    return SECTION.render(run, method=method, body=body)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = base_parser(__doc__, quick_help="~10 s smoke run (small runs)")
    p.add_argument("--runs", type=int, help="timed runs per case (default 5, quick 1)")
    p.add_argument("--run-seconds", type=float, help="length of a timed run (default 1.0)")
    p.add_argument("--rate", type=int, default=10_000, help="latency run records/s (default 10000)")
    p.add_argument("--batch-records", type=int, default=10_000, help="rows per send_batch table")
    p.add_argument("--redis-pipeline", type=int, default=1_000, help="XADDs per pipeline")
    p.add_argument("--no-tcp", action="store_true", help="skip the TCP transport")
    p.add_argument("--no-redis", action="store_true", help="skip Redis Streams")
    p.add_argument("--no-spark-mq", action="store_true", help="only the ceiling and Redis")
    args = p.parse_args(argv)
    quick = args.quick
    settings = Settings(
        quick=quick,
        runs=args.runs or (1 if quick else 5),
        run_seconds=args.run_seconds or (0.1 if quick else 1.0),
        calibrate_records=10_000 if quick else 100_000,
        max_records=500_000 if quick else 20_000_000,
        consume_records=100_000 if quick else 5_000_000,
        batch_records=args.batch_records,
        rate=args.rate,
        latency_records=args.rate // 5 if quick else args.rate * 3,
        latency_warmup=args.rate // 20 if quick else args.rate // 2,
        ceiling_bytes=(10 if quick else 500) * 1_000_000,
        redis_pipeline=args.redis_pipeline,
        tcp=not args.no_tcp,
        redis=not args.no_redis,
    )
    return args, settings


def main(argv: list[str] | None = None) -> int:
    args, settings = parse_args(argv)
    # The facts are known at the end (the Redis version): printed there.
    run = Run.start(show=False)
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_clients_", dir=args.dir))
    print(f"command: {run.command}")
    for line in method_lines(settings):
        print(line)
    print(flush=True)
    results = Results()
    redis_version = "not measured"
    try:
        run_ceiling(settings, results)
        if not args.no_spark_mq:
            run_page_cache(work, results)
        if settings.redis:
            redis_version = run_redis(settings, work, results)
        if not args.no_spark_mq:
            try:
                import spark_mq.client  # noqa: F401
                from spark_mq import Admin, Consumer, Producer  # noqa: F401
            except ImportError as exc:
                results.notes.append(f"spark_mq clients not measured: {exc}")
                step(f"[spark_mq] skipped: {exc}")
            else:
                run_spark_mq(settings, work, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run.facts = machine_facts(work, redis_version)
    run.finish()
    goals = goal_lines(results)
    ceiling = _ceiling_mbps(results)
    print()
    for k, v in run.facts:
        print(f"{k}: {v}")
    print()
    print(text_table(ROW_HEADERS, [row_cells(r, ceiling) for r in results.rows], 4))
    print()
    print(text_table(LAT_HEADERS, [lat_cells(x) for x in results.latencies], 3))
    print()
    for note in results.notes:
        print(f"note: {note}")
    for line in goals:
        print(line)
    print(f"\nload average at start {run.load_start}, at end {run.load_end}")
    print(f"total {run.elapsed:.0f} s")
    if args.out is not None:
        section = render_markdown(run, settings=settings, results=results, goals=goals)
        SECTION.write(args.out, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
