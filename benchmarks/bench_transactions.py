#!/usr/bin/env python
"""Transactions benchmark: read_committed against read_uncommitted on the same log, same run.

Run from the repository root::

    .venv/bin/python benchmarks/bench_transactions.py                            # ~1.5 minutes
    .venv/bin/python benchmarks/bench_transactions.py --quick                    # ~10 s smoke run
    .venv/bin/python benchmarks/bench_transactions.py --out docs/benchmarks.md   # also the doc

Each case builds one log of transactional batches (100 records of 100 B per batch by default)
written by several producers whose transactions interleave; each transaction holds a random
number of batches and ends with a commit marker or, for the case's fraction of transactions,
an abort marker (which also adds a ``.txnindex`` entry). Every transaction is closed at the
end, so the last stable offset equals the high watermark and both isolation levels cover the
same offsets. Then, on that log and in the same run:

- ``read_uncommitted``: ``PartitionLog.read_records_with_next`` from offset 0 to the high
  watermark with ``FetchIsolation.HIGH_WATERMARK``, ``--fetch-bytes`` per call;
- ``read_committed``: the same with ``FetchIsolation.TXN_COMMITTED``: up to the LSO, with the
  aborted transactions collected from the transaction indexes and their batches dropped.

Each call continues at the next offset the previous one returned
(``PartitionLog.read_records_with_next``: one past the last batch it examined), as a
consumer's position does; so a call that returns no record although it is below the bound (a
fetch of nothing but aborted batches and markers) still moves past them.

``records/s`` counts the records a read returns; ``log records/s`` counts the data records of
the log range it covered (aborted ones included), so it compares the two isolation levels per
unit of log read. The goal of the issue is the ratio of read_committed to read_uncommitted
``records/s`` in the 10%-aborted case, printed as a PASS/MISS line. Reads are warm: the log
was just written, so its file is in the page cache for both. Runs of the two isolation levels
alternate (the order flips every run); medians are reported with their spread. A benchmark
never fails a build: the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# The report scaffolding is shared by every benchmark next to this file; importing it also
# makes spark_mq importable from the repository when it is not installed. The value pool and
# the storage sources' digest come from the storage benchmark.
import bench_report as report
import numpy as np
from bench_report import (
    Run,
    Section,
    base_parser,
    bench_directory_fact,
    common_facts,
    sources_digest,
)
from bench_storage import batch_arrays, text_pool

from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import ControlType, encode_batch

MIB = 1024 * 1024
START_MS = 1_700_000_000_000

GOAL_RATIO = 0.8
GOAL_ABORT_FRACTION = 0.10

SECTION = Section(
    name="transactions",
    title="Transactions: read_committed vs read_uncommitted",
    begin="<!-- BEGIN transactions -->",
    end="<!-- END transactions -->",
)

TOPIC = "bench"


@dataclasses.dataclass(frozen=True)
class Case:
    abort_fraction: float
    #: Each transaction holds 1 .. 2 * mean - 1 batches (uniform): ``mean`` on average.
    mean_txn_batches: int
    codec: str

    @property
    def label(self) -> str:
        return (
            f"{self.abort_fraction:.0%} aborted, txns of ~{self.mean_txn_batches} batches, "
            f"{self.codec}"
        )

    @property
    def is_goal(self) -> bool:
        return (self.abort_fraction, self.mean_txn_batches, self.codec) == (
            GOAL_ABORT_FRACTION,
            5,
            "none",
        )


CASES = (
    Case(GOAL_ABORT_FRACTION, 5, "none"),
    Case(GOAL_ABORT_FRACTION, 5, "lz4"),
    Case(0.0, 5, "none"),
    Case(0.5, 5, "none"),
    Case(GOAL_ABORT_FRACTION, 1, "none"),
    Case(0.5, 1, "none"),
)


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    records: int  # data records per case
    batch_records: int
    value_bytes: int
    producers: int
    runs: int
    fetch_bytes: int
    segment_bytes: int


@dataclasses.dataclass
class BuiltLog:
    data_records: int
    committed_records: int
    batches: int
    transactions: int
    aborted_transactions: int
    markers: int
    log_bytes: int
    segments: int
    build_seconds: float


@dataclasses.dataclass
class Row(report.TimedRow):
    case: Case
    isolation: str
    returned: int  # records one read of the whole log returns
    covered: int  # data records of the log range it covers
    log_bytes: int
    samples: list[float]
    fetches: int
    empty_fetches: int

    @property
    def rps(self) -> float:
        return self.returned / self.seconds

    @property
    def log_rps(self) -> float:
        return self.covered / self.seconds

    @property
    def mbps(self) -> float:
        return self.log_bytes / self.seconds / 1e6


# ---------------------------------------------------------------------------------------------
# Building the log


def build_log(directory: Path, settings: Settings, case: Case, pool: np.ndarray) -> BuiltLog:
    """Interleaved transactions of ``settings.producers`` producers, all closed at the end."""
    rng = random.Random(f"bench-transactions:{case.label}")
    num_batches = settings.records // settings.batch_records
    arrays = batch_arrays(
        pool, rng.randrange(2**32), settings.value_bytes, settings.batch_records, num_batches
    )
    config = LogConfig(segment_bytes=settings.segment_bytes)
    log = PartitionLog.open(directory, config, topic=TOPIC, partition=0, time_ms=lambda: START_MS)
    sequences = [0] * settings.producers
    in_txn = [0] * settings.producers  # batches written in the open transaction
    txn_size = [0] * settings.producers  # batches the open transaction will hold
    pending = [0] * settings.producers  # records of the open transaction
    committed = transactions = aborted = markers = 0

    def end_txn(p: int) -> None:
        nonlocal committed, transactions, aborted, markers
        abort = rng.random() < case.abort_fraction
        log.append_transaction_marker(
            ControlType.ABORT if abort else ControlType.COMMIT,
            producer_id=p,
            producer_epoch=0,
            coordinator_epoch=0,
        )
        transactions += 1
        markers += 1
        aborted += abort
        committed += 0 if abort else pending[p]
        in_txn[p] = pending[p] = 0

    t0 = time.perf_counter()
    try:
        for values in arrays:
            p = rng.randrange(settings.producers)
            if in_txn[p] == 0:
                txn_size[p] = rng.randint(1, 2 * case.mean_txn_batches - 1)
            log.append(
                encode_batch(
                    values,
                    codec=case.codec,
                    producer_id=p,
                    producer_epoch=0,
                    base_sequence=sequences[p],
                    is_transactional=True,
                    now_ms=START_MS,
                )
            )
            sequences[p] += len(values)
            in_txn[p] += 1
            pending[p] += len(values)
            if in_txn[p] == txn_size[p]:
                end_txn(p)
        for p in range(settings.producers):
            if in_txn[p]:
                end_txn(p)
        assert log.last_stable_offset == log.high_watermark == log.log_end_offset
        built = BuiltLog(
            data_records=num_batches * settings.batch_records,
            committed_records=committed,
            batches=num_batches,
            transactions=transactions,
            aborted_transactions=aborted,
            markers=markers,
            log_bytes=log.size_bytes,
            segments=log.num_segments,
            build_seconds=time.perf_counter() - t0,
        )
    finally:
        log.close()
    return built


# ---------------------------------------------------------------------------------------------
# Reading


def read_everything(
    log: PartitionLog, isolation: FetchIsolation, fetch_bytes: int
) -> tuple[int, int, int]:
    """Read from offset 0 to the isolation's bound; returns (records, fetches, empty fetches)."""
    end = (
        log.last_stable_offset if isolation is FetchIsolation.TXN_COMMITTED else log.high_watermark
    )
    read_records_with_next = log.read_records_with_next
    offset = records = fetches = empty = 0
    while offset < end:
        table, offset = read_records_with_next(offset, fetch_bytes, isolation=isolation)
        fetches += 1
        n = table.num_rows
        records += n
        # Nothing but aborted batches and markers in this fetch: the next offset (from batch
        # headers) moves past them all the same.
        empty += n == 0
    return records, fetches, empty


def timed(fn: Callable[[], tuple[int, int, int]]) -> tuple[float, tuple[int, int, int]]:
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def run_case(settings: Settings, work: Path, case: Case, pool: np.ndarray) -> list[Row]:
    directory = work / f"case-{CASES.index(case)}"
    built = build_log(directory, settings, case, pool)
    log = PartitionLog.open(
        directory,
        LogConfig(segment_bytes=settings.segment_bytes),
        topic=TOPIC,
        partition=0,
        had_clean_shutdown=True,
        recovery_point=2**62,
        time_ms=lambda: START_MS,
    )
    try:
        isolations = {
            "read_uncommitted": FetchIsolation.HIGH_WATERMARK,
            "read_committed": FetchIsolation.TXN_COMMITTED,
        }
        expected = {
            "read_uncommitted": built.data_records,
            "read_committed": built.committed_records,
        }
        samples: dict[str, list[float]] = {name: [] for name in isolations}
        counts: dict[str, tuple[int, int, int]] = {}
        # One warm-up of each (also the correctness check), then alternating timed runs.
        for name, isolation in isolations.items():
            counts[name] = read_everything(log, isolation, settings.fetch_bytes)
            if counts[name][0] != expected[name]:
                raise AssertionError(
                    f"{case.label}: {name} returned {counts[name][0]} records, expected "
                    f"{expected[name]}"
                )
        names = list(isolations)
        for run in range(settings.runs):
            for name in names if run % 2 == 0 else reversed(names):
                seconds, result = timed(
                    functools.partial(read_everything, log, isolations[name], settings.fetch_bytes)
                )
                assert result == counts[name]
                samples[name].append(seconds)
    finally:
        log.close()
        shutil.rmtree(directory, ignore_errors=True)
    rows = [
        Row(
            case=case,
            isolation=name,
            returned=counts[name][0],
            covered=built.data_records,
            log_bytes=built.log_bytes,
            samples=samples[name],
            fetches=counts[name][1],
            empty_fetches=counts[name][2],
        )
        for name in isolations
    ]
    print(
        f"case {case.label}: {built.batches:,} batches, {built.transactions:,} transactions "
        f"({built.aborted_transactions:,} aborted), {built.segments} segments, "
        f"{built.log_bytes / 1e6:,.1f} MB; built in {built.build_seconds:.1f} s",
        flush=True,
    )
    for r in rows:
        print("   " + "  ".join(row_cells(r)), flush=True)
    BUILT[case] = built
    return rows


BUILT: dict[Case, BuiltLog] = {}


# ---------------------------------------------------------------------------------------------
# Reporting


HEADERS = (
    "case",
    "isolation",
    "records",
    "records/s",
    "log records/s",
    "MB/s",
    "fetches",
    "runs",
    "spread",
)


def row_cells(r: Row) -> tuple[str, ...]:
    return (
        r.case.label,
        r.isolation,
        report.fmt_int(r.returned),
        report.fmt_int(r.rps),
        report.fmt_int(r.log_rps),
        f"{r.mbps:,.1f}",
        f"{r.fetches:,}" + (f" ({r.empty_fetches} empty)" if r.empty_fetches else ""),
        str(len(r.samples)),
        f"{r.spread:.0%}",
    )


def pair(rows: list[Row], case: Case) -> tuple[Row, Row]:
    by_name = {r.isolation: r for r in rows if r.case == case}
    return by_name["read_committed"], by_name["read_uncommitted"]


def goal_lines(rows: list[Row]) -> list[str]:
    lines = []
    for case in CASES:
        if not any(r.case == case for r in rows):
            continue
        committed, uncommitted = pair(rows, case)
        ratio = committed.rps / uncommitted.rps
        per_log = committed.log_rps / uncommitted.log_rps
        detail = (
            f"read_committed {report.fmt_int(committed.rps)} records/s vs read_uncommitted "
            f"{report.fmt_int(uncommitted.rps)}: ratio {ratio:.2f} (per record of the log read: "
            f"{per_log:.2f})"
        )
        if case.is_goal:
            verdict = "PASS" if ratio >= GOAL_RATIO else "MISS"
            lines.append(
                f"{verdict} goal, read_committed >= {GOAL_RATIO} of read_uncommitted "
                f"records/s ({case.label}): {detail}"
            )
        else:
            lines.append(f"INFO {case.label}: {detail}")
    return lines


def machine_facts(work: Path) -> list[tuple[str, str]]:
    return [
        *common_facts(("pyarrow", "numpy", "lz4", "crc32c")),
        bench_directory_fact(work),
        ("page cache", "warm: each log is read right after it was written; never dropped"),
        ("storage sources sha256", sources_digest()),
    ]


def method_lines(settings: Settings) -> list[str]:
    return [
        f"Each case: {settings.records:,} records of {settings.value_bytes} B in batches of "
        f"{settings.batch_records} ({settings.records // settings.batch_records:,} "
        f"transactional batches), written by {settings.producers} producers picked at random "
        "batch by batch, so their transactions interleave; a transaction of ~N batches holds "
        "1 .. 2N-1 of them (uniform); each ends with a commit or abort marker (abort with the "
        "case's probability); all are closed at the end (LSO = high watermark = log end).",
        "Values: slices of a text pool (random words from a 4,000-word vocabulary); keys and "
        "headers null; producer ids 0..N-1, epoch 0, sequences from 0.",
        f"Config: LogConfig() defaults except segment.bytes = {settings.segment_bytes:,} (so "
        "the log has several segments and several transaction indexes).",
        "Reads: PartitionLog.read_records_with_next from offset 0 to the bound, "
        f"{settings.fetch_bytes // 1024} KiB per call (at least one whole batch), each call "
        "from the next offset the previous one returned (one past the last batch it "
        "examined). The same log, reopened clean, serves "
        f"both isolation levels; one warm-up run each (which checks the record counts), then "
        f"{settings.runs} timed runs each, alternating; medians. `spread` = (slowest - "
        "fastest) / median.",
        "records/s = records returned per second; log records/s = data records of the log "
        "range read (aborted ones included) per second; MB/s = bytes of the log (markers "
        "included) per second, MB = 10^6 bytes.",
        "fetches = read_records_with_next calls of one run; an `empty` one returned no record "
        "although below the bound (only markers or aborted batches: at a segment's end or the "
        "log's end); its next offset moves past them.",
    ]


def render_markdown(run: Run, *, settings: Settings, rows: list[Row], goals: list[str]) -> str:
    built_lines = [
        f"- {case.label}: {b.batches:,} batches, {b.transactions:,} transactions "
        f"({b.aborted_transactions:,} aborted, holding "
        f"{b.data_records - b.committed_records:,} records), {b.segments} segments, "
        f"{b.log_bytes / 1e6:,.1f} MB"
        for case, b in BUILT.items()
    ]
    body = [
        "Logs:",
        "",
        *built_lines,
        "",
        *report.goals_block(goals, "Goal"),
        "",
        "### Reads",
        "",
        report.markdown_table(HEADERS, [row_cells(r) for r in rows], 2),
    ]
    return SECTION.render(
        run,
        method=[f"- {line}" for line in method_lines(settings)],
        body=body,
        note=" (**--quick smoke run: small logs**)" if settings.quick else "",
    )


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = base_parser(__doc__, quick_help="~10 s smoke run (small logs)")
    p.add_argument(
        "--records", type=int, help="records per case (default 2,000,000; quick 200,000)"
    )
    p.add_argument("--runs", type=int, help="timed runs per isolation level (default 5, quick 3)")
    p.add_argument("--producers", type=int, default=8, help="producers (default %(default)s)")
    p.add_argument("--fetch-bytes", type=int, default=MIB, help="bytes per read (default 1 MiB)")
    args = p.parse_args(argv)
    quick = args.quick
    settings = Settings(
        quick=quick,
        records=args.records or (200_000 if quick else 2_000_000),
        batch_records=100,
        value_bytes=100,
        producers=args.producers,
        runs=args.runs or (3 if quick else 5),
        fetch_bytes=args.fetch_bytes,
        segment_bytes=(16 if quick else 64) * MIB,
    )
    return args, settings


def main(argv: list[str] | None = None) -> int:
    args, settings = parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_transactions_", dir=args.dir))
    run = Run.start(machine_facts(work))
    for line in method_lines(settings):
        print(line)
    print(flush=True)

    rows: list[Row] = []
    try:
        pool = text_pool(random.Random(42), 8 * MIB)
        for case in CASES:
            rows.extend(run_case(settings, work, case, pool))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    run.finish()
    goals = goal_lines(rows)
    print()
    print(report.text_table(HEADERS, [row_cells(r) for r in rows], 2))
    print()
    for line in goals:
        print(line)
    print(run.end_line())
    if args.out is not None:
        SECTION.write(args.out, render_markdown(run, settings=settings, rows=rows, goals=goals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
