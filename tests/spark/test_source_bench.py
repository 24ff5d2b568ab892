"""Smoke run of ``benchmarks/bench_source.py`` on a few records, in the test session: every
case reads every record, the ceiling yields the exact schema, and the section renders."""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

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


def test_a_run_whose_python_worker_did_not_connect_back_is_run_again() -> None:
    attempts: list[int] = []

    def flaky() -> tuple[int, int]:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError(f"[STREAM_FAILED] {bench_source.CONNECT_BACK_FAILURE}.")
        return 7, 0

    seconds, result = bench_source.run_once(bench_source.Plan("a", "q", flaky))
    assert result == (7, 0) and len(attempts) == 2 and seconds >= 0

    def broken() -> tuple[int, int]:
        raise RuntimeError("some other failure")

    with pytest.raises(RuntimeError, match="some other failure"):
        bench_source.run_once(bench_source.Plan("b", "q", broken))


def test_cluster_case_is_reported_as_a_ratio_of_the_embedded_broker() -> None:
    def case(name: str, query: str, seconds: float) -> bench_source.Case:
        return bench_source.Case(name, query, seconds, 4_000_000, 0)

    cases = [
        case("spark_mq", "count", 1.0),
        case("ceiling", "count", 0.8),
        case(bench_source.CLUSTER, "count", 2.0),
    ]
    assert bench_source.cluster_lines(cases) == [
        f"- count on the {bench_source.bench_cluster.LABEL}: 2,000,000 rows/s, 0.50 of the "
        "embedded broker's 4,000,000"
    ]
    # The verdicts judge the embedded broker against the ceiling only.
    assert [v[0].name for v in bench_source.verdicts(cases)] == ["spark_mq"]
    assert bench_source.cluster_lines(cases[:2]) == []


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


def test_a_loaded_machine_is_said_in_the_section() -> None:
    def run(load: str) -> Run:
        return Run(
            command="bench",
            started=datetime.datetime.now(datetime.UTC),
            t_start=0.0,
            load_start=load,
            elapsed=1.0,
            load_end="0.5 0.5 0.5",
        )

    cores = os.cpu_count() or 1
    assert run(f"{cores + 0.5} 1 1").loaded_note()[0].startswith("**Figures from a loaded")
    assert run(f"{cores - 0.5} 1 1").loaded_note() == []
    assert run("unknown").loaded_note() == []
