#!/usr/bin/env python
"""Transactional produce benchmark: throughput with a commit every 100, 1,000 and 10,000
records against idempotent non-transactional produce, in the same run; commit latency.

Run from the repository root::

    .venv/bin/python benchmarks/bench_txn_produce.py                            # ~1 minute
    .venv/bin/python benchmarks/bench_txn_produce.py --quick                    # ~15 s smoke run
    .venv/bin/python benchmarks/bench_txn_produce.py --out docs/benchmarks.md   # also the doc

One embedded local broker (``path=``, Unix socket) on a fresh directory, one topic of
``--partitions`` partitions. Every case sends ``--records`` records of ``--value-bytes``-byte
values (no key) from one producer with the default settings (``linger.ms=5``,
``batch.size=16384``, ``acks=all``, idempotence on):

- ``idempotent``: ``send()`` every record, then one ``flush()``; the baseline;
- ``transactional, N per txn``: ``begin_transaction()``, N ``send()``\\ s,
  ``commit_transaction()`` (which flushes, then EndTxn), until every record is sent;
- the same two with ``send_batch()`` of Arrow tables of ``min(N, 1000)`` rows (1,000 rows
  for the baseline), waiting for the last batch's future at the end.

Throughput is records over the wall time of the whole loop (producer creation and
``init_transactions()`` excluded); median of ``--runs`` runs after one warm-up, the cases of a
run interleaved so a change of machine load hits them alike. Commit latency is the time of
each ``commit_transaction()`` call (flush of the transaction's tail included), p50 and p99
over every commit of every timed run. The goal of the issue: at 10,000 records per
transaction, ``send()`` throughput at least 0.8 of the idempotent baseline (PASS/MISS).

A benchmark never fails a build: the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

# The report scaffolding is shared by every benchmark next to this file; importing it also
# makes spark_mq importable from the repository when it is not installed.
from bench_report import Run, Section, base_parser, common_facts

from spark_mq import Admin, Producer
from spark_mq.broker import ensure_broker, stop_broker

SECTION = Section(
    name="txn-produce",
    title="Transactional produce: throughput and commit latency",
    begin="<!-- BEGIN txn-produce (written by benchmarks/bench_txn_produce.py) -->",
    end="<!-- END txn-produce -->",
)
BROKER_CONFIG = {"broker.idle.exit.ms": "-1"}
TOPIC = "bench"
PER_TXN = (100, 1_000, 10_000)
GOAL_PER_TXN = 10_000
GOAL_RATIO = 0.8
BATCH_ROWS = 1_000


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    records: int
    value_bytes: int
    partitions: int
    runs: int


@dataclasses.dataclass
class Case:
    """One line of the results: an API, and records per transaction (0: not transactional)."""

    api: str
    per_txn: int
    rates: list[float] = dataclasses.field(default_factory=list)
    commits_ms: list[float] = dataclasses.field(default_factory=list)

    @property
    def label(self) -> str:
        return "idempotent" if self.per_txn == 0 else f"transactional, {self.per_txn:,} per txn"

    @property
    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")


def run_case(path: str, case: Case, values: list[bytes], run: int) -> tuple[float, list[float]]:
    """One timed pass of ``case``: (records/s, commit latencies in ms)."""
    config: dict[str, object] = {}
    if case.per_txn:
        config["transactional.id"] = f"bench-{case.api}-{case.per_txn}-{run}"
    commits: list[float] = []
    table_rows = min(case.per_txn or BATCH_ROWS, BATCH_ROWS)
    table = pa.table({"value": pa.array(values[:table_rows], pa.binary())})
    with Producer(path=path, config=config) as producer:
        if case.per_txn:
            producer.init_transactions()
        producer.partitions_for(TOPIC)  # metadata outside the clock
        n = len(values)
        per_txn = case.per_txn or n
        started = time.perf_counter()
        sent = 0
        last = None
        while sent < n:
            if case.per_txn:
                producer.begin_transaction()
            stop = min(sent + per_txn, n)
            if case.api == "send()":
                send = producer.send
                for i in range(sent, stop):
                    send(TOPIC, values[i])
            else:
                for start in range(sent, stop, table_rows):
                    rows = table if stop - start >= table_rows else table.slice(0, stop - start)
                    last = producer.send_batch(TOPIC, rows)
            sent = stop
            if case.per_txn:
                t0 = time.perf_counter()
                producer.commit_transaction()
                commits.append((time.perf_counter() - t0) * 1000)
        if not case.per_txn:
            producer.flush()
            if last is not None:
                last.get(timeout=60)
        seconds = time.perf_counter() - started
    return n / seconds, commits


def make_cases() -> list[Case]:
    return [Case(api, per_txn) for api in ("send()", "send_batch()") for per_txn in (0, *PER_TXN)]


def run_all(path: str, settings: Settings) -> list[Case]:
    rng = np.random.default_rng(7)
    pool = rng.integers(0, 256, size=settings.value_bytes * 1024, dtype=np.uint8).tobytes()
    values = [
        pool[(i * 37) % 1000 : (i * 37) % 1000 + settings.value_bytes]
        for i in range(settings.records)
    ]
    cases = make_cases()
    warmup = values[: max(settings.records // 10, 10_000)]
    for case in cases:
        run_case(path, case, warmup, -1)
    for run in range(settings.runs):
        for case in cases:
            rate, commits = run_case(path, case, values, run)
            case.rates.append(rate)
            case.commits_ms.extend(commits)
            print(
                f"run {run + 1}: {case.api:13} {case.label:30} {rate:12,.0f} records/s", flush=True
            )
    return cases


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def results_table(cases: list[Case]) -> str:
    base = {c.api: c.rate for c in cases if c.per_txn == 0}
    lines = [
        "| API | mode | records/s | vs idempotent | commits | commit p50 ms | commit p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        ratio = c.rate / base[c.api]
        p50 = f"{pct(c.commits_ms, 50):.2f}" if c.commits_ms else "-"
        p99 = f"{pct(c.commits_ms, 99):.2f}" if c.commits_ms else "-"
        lines.append(
            f"| `{c.api}` | {c.label} | {c.rate:,.0f} | {ratio:.2f} | {len(c.commits_ms):,} "
            f"| {p50} | {p99} |"
        )
    return "\n".join(lines)


def goal_line(cases: list[Case]) -> str:
    base = next(c for c in cases if c.api == "send()" and c.per_txn == 0)
    txn = next(c for c in cases if c.api == "send()" and c.per_txn == GOAL_PER_TXN)
    ratio = txn.rate / base.rate
    verdict = "PASS" if ratio >= GOAL_RATIO else "MISS"
    return (
        f"{verdict}: transactional send() at {GOAL_PER_TXN:,} records per transaction reaches "
        f"{ratio:.2f} of idempotent send() ({txn.rate:,.0f} vs {base.rate:,.0f} records/s; "
        f"goal >= {GOAL_RATIO})"
    )


def render_markdown(run: Run, *, settings: Settings, cases: list[Case]) -> str:
    method = [
        f"- One embedded local broker (`path=`, Unix socket), topic of {settings.partitions} "
        f"partitions; one producer per case sends {settings.records:,} records of "
        f"{settings.value_bytes}-byte values, no key, default settings (`linger.ms=5`, "
        "`batch.size=16384`, `acks=all`, idempotence on). The broker is a separate process; "
        "both share the machine's cores (with whatever else runs: see the load average).",
        "- `idempotent`: `send()` every record, one `flush()` at the end (the baseline). "
        "`transactional, N per txn`: `begin_transaction()`, N sends, `commit_transaction()` "
        "(flush, then EndTxn; the first batch of the transaction to each partition waits for "
        "AddPartitionsToTxn). `send_batch()` rows: Arrow tables of min(N, 1000) rows.",
        f"- records/s: median of {settings.runs} runs after a warm-up, cases interleaved. "
        "Commit latency: every `commit_transaction()` of every timed run, including the "
        "flush of the transaction's last batches.",
    ]
    body = [results_table(cases), "", f"**{goal_line(cases)}**"]
    note = " (**--quick smoke run**)" if settings.quick else ""
    return SECTION.render(run, method=method, body=body, note=note)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = base_parser(__doc__, quick_help="~15 s smoke run", dir_help="broker")
    p.add_argument("--records", type=int, help="records per case and run (default 200,000)")
    p.add_argument("--value-bytes", type=int, default=100, help="value size (default 100)")
    p.add_argument("--partitions", type=int, default=4, help="topic partitions (default 4)")
    p.add_argument("--runs", type=int, default=3, help="timed runs (default 3)")
    args = p.parse_args(argv)
    settings = Settings(
        quick=args.quick,
        records=args.records or (20_000 if args.quick else 200_000),
        value_bytes=args.value_bytes,
        partitions=args.partitions,
        runs=1 if args.quick else args.runs,
    )
    return args, settings


def main(argv: list[str] | None = None) -> int:
    args, settings = parse_args(argv)
    run = Run.start(common_facts(("pyarrow", "msgspec")))
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_txn_produce_", dir=args.dir))
    path = str(work / "mq")
    ensure_broker(path, config=BROKER_CONFIG)
    try:
        with Admin(path=path) as admin:
            admin.create_topic(TOPIC, partitions=settings.partitions)
        cases = run_all(path, settings)
    finally:
        stop_broker(path)
        shutil.rmtree(work, ignore_errors=True)
    run.finish()
    print()
    print(results_table(cases))
    print()
    print(goal_line(cases))
    print(run.end_line())
    if args.out is not None:
        SECTION.write(args.out, render_markdown(run, settings=settings, cases=cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
