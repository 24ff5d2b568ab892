"""The transactional produce benchmark (``benchmarks/bench_txn_produce.py``): its table, goal
line and Markdown section, and a smoke run of ``--quick``."""

from __future__ import annotations

import datetime
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_txn_produce as bench  # noqa: E402
from bench_report import Run  # noqa: E402


def cases(txn_rate: float) -> list[bench.Case]:
    out = bench.make_cases()
    for case in out:
        case.rates = [100_000.0 if case.per_txn == 0 else txn_rate]
        case.commits_ms = [] if case.per_txn == 0 else [1.0, 2.0, 30.0]
    return out


def test_goal_line_passes_at_the_ratio_and_misses_below() -> None:
    assert bench.goal_line(cases(80_000.0)).startswith("PASS")
    assert bench.goal_line(cases(79_000.0)).startswith("MISS")


def test_table_has_every_case_and_the_ratio() -> None:
    table = bench.results_table(cases(50_000.0))
    assert table.count("\n") == 1 + len(bench.make_cases())
    assert "| `send()` | transactional, 10,000 per txn | 50,000 | 0.50 | 3 | 2.00 |" in table
    assert "| `send_batch()` | idempotent | 100,000 | 1.00 | 0 | - | - |" in table


def test_section_replaces_only_its_own_markers(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"keep me\n{bench.SECTION.begin}\nold\n{bench.SECTION.end}\ntail\n")
    settings = bench.Settings(quick=True, records=10, value_bytes=100, partitions=4, runs=1)
    run = Run(
        command="cmd",
        started=datetime.datetime.now(datetime.UTC),
        t_start=0.0,
        load_start="0.1",
        elapsed=1.0,
        load_end="0.2",
    )
    section = bench.render_markdown(run, settings=settings, cases=cases(90_000.0))
    bench.SECTION.write(doc, section)
    text = doc.read_text()
    assert "keep me" in text and "tail" in text and "\nold\n" not in text
    assert text.count(bench.SECTION.begin) == 1
    assert "PASS: transactional send()" in text


@pytest.mark.slow
def test_quick_run_smoke(tmp_path: Path) -> None:
    """``bench_txn_produce.py --quick`` runs end to end and prints its goal line."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_txn_produce.py"), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "transactional send() at 10,000 records per transaction" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 180
