"""Smoke run of ``benchmarks/bench_source.py`` on a few records, in the test session: every
case reads every record, the ceiling yields the exact schema, and the section renders."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_source  # noqa: E402
from bench_report import Run  # noqa: E402

from spark_mq.datasource.schema import ARROW_SCHEMA  # noqa: E402


def test_ceiling_batches_have_the_source_schema() -> None:
    batches = list(bench_source.ceiling_batches(2, 10))
    assert sum(b.num_rows for b in batches) == 10
    assert all(b.schema == ARROW_SCHEMA for b in batches)
    assert batches[0].column("partition")[0] == pa.scalar(2, pa.int32())


def test_cases_are_warmed_up_then_timed_in_turn() -> None:
    calls: list[str] = []

    def plan(name: str) -> bench_source.Plan:
        def run() -> tuple[int, int]:
            calls.append(name)
            return len(calls), 0

        return bench_source.Plan(name, "q", run)

    cases = bench_source.timed([plan("a"), plan("b")], reps=2)
    # One untimed run of each, then the timed rounds a, b, a, b (not a, a, b, b).
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert [(c.name, c.rows) for c in cases] == [("a", 5), ("b", 6)]
    assert all(c.seconds > 0 for c in cases)


def test_smoke_run_reads_every_record(spark: Any, tmp_path: Path) -> None:
    records = 2_000
    work = tmp_path / "work"
    work.mkdir()
    cases = bench_source.measure(spark, work, records, reps=1)
    assert [(c.name, c.rows) for c in cases] == [
        ("spark_mq", records),
        ("spark_mq", records),
        ("ceiling", records),
        ("ceiling", records),
        ("Parquet", records),
        ("Parquet", records),
        ("spark_mq", records),
        ("ceiling", records),
    ]
    for case in cases:
        if case.query != "count":
            assert case.total_bytes == records * bench_source.VALUE_BYTES
    run = Run(
        command="bench",
        started=datetime.datetime.now(datetime.UTC),
        t_start=0.0,
        load_start="0",
        elapsed=1.0,
        load_end="0",
    )
    section = bench_source.render_markdown(run, records=records, reps=1, cases=cases)
    assert section.startswith(bench_source.SECTION.begin)
    assert section.rstrip().endswith(bench_source.SECTION.end)
    assert section.count("**PASS**") + section.count("**MISS**") == 3
