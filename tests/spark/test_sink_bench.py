"""The sink benchmark (``benchmarks/bench_sink.py``): its goal line, table and Markdown
section, and a small smoke run."""

from __future__ import annotations

import collections
import datetime
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_sink as bench  # noqa: E402
from bench_report import Run  # noqa: E402


def _cases(sink_seconds: float) -> list[bench.Case]:
    return [
        bench.Case("discard (ceiling)", [10.0, 12.0], cpu=[19.0, 20.0]),
        bench.Case("spark_mq, exactlyOnce=true", [sink_seconds], cpu=[30.0], broker_cpu=[8.0]),
        bench.Case("spark_mq, exactlyOnce=false", [12.0], cpu=[24.0]),
        bench.Case("Parquet (peer)", [25.0], cpu=[40.0]),
        bench.Case("bytes only (floor)", [12.5], cpu=[25.0], broker_cpu=[2.0], server_pid=1),
    ]


#: 100 bytes a row, new page cache at 2 CPU s per GB: 1M rows cost 0.2 CPU s to store.
CHEAP_STORAGE = bench.Storage(100.0, 500.0, 2.0, 5000.0)


def test_goal_line_passes_at_the_ratio_and_misses_below() -> None:
    assert bench.goal_line(_cases(10.0 / 0.7), 1_000_000).startswith("PASS")
    assert bench.goal_line(_cases(10.0 / 0.69), 1_000_000).startswith("MISS")
    # The verdict is on best runs (10 s), the median ratio (11 s) is reported beside it.
    line = bench.goal_line(_cases(10.0 / 0.69), 1_000_000)
    assert "judged on best runs; median runs: 0.76)" in line


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_rounds_balance_which_writer_follows_which(n: int) -> None:
    cases = list(range(n))
    rounds = n if n % 2 == 0 else 2 * n
    orders = [bench.round_order(cases, run) for run in range(rounds)]
    assert all(sorted(order) == cases for order in orders)
    # Every writer runs in every place, and right after every other writer, equally often.
    places = collections.Counter((order[i], i) for order in orders for i in range(n))
    assert set(places.values()) == {rounds // n}
    follows = collections.Counter(p for order in orders for p in itertools.pairwise(order))
    assert len(follows) == n * (n - 1) and set(follows.values()) == {rounds // n}
    assert bench.round_order(cases, rounds) == orders[0]
    assert bench.round_order([], 3) == []


def test_table_reports_best_runs_and_ratios() -> None:
    table = bench.results_table(_cases(20.0), 1_000_000)
    # Best runs: 10 s and 20 s; median runs: 11 s and 20 s.
    assert "| discard (ceiling) | 100,000 | 10.0 | 1.00 | 1.00 | 1.20 | 19.0 | 10.00, 12.00 |" in (
        table
    )
    assert "| spark_mq, exactlyOnce=true | 50,000 | 5.0 | 0.50 | 0.55 | 0.60 | 30.0 | 20.00 |" in (
        table
    )


def test_analysis_splits_what_the_sink_adds_against_the_budget() -> None:
    cases = _cases(20.0)
    cores = len(bench.os.sched_getaffinity(0))
    budget = cores * 10.0 / bench.GOAL_RATIO - 19.0
    text = "\n".join(bench.where_the_time_goes(cases, 1_000_000, CHEAP_STORAGE))
    assert f"**{budget:.1f} CPU s**" in text
    # 1M rows x 100 bytes at 2 CPU s/GB of new pages.
    assert "into new pages would cost 0.2 CPU s in the kernel alone" in text
    assert "segment.drop.behind.bytes" in text
    # 30 - 19 = 11 CPU s added: the broker 8, the tasks the other 3.
    assert f"11.0 more than discarding, against the budget of {budget:.1f}" in text
    assert "appending every byte) took 8.0, and the rest, 3.0, is the write tasks'" in text
    assert "Parquet writer" in text  # the peer, at 0.4 of discard here, is below the goal too
    # The floor ran 12.5 s (0.80 of discard) on 25 - 19 = 6 CPU s more, 2 in its receiver;
    # the sink's 20 s is 0.62 of it, and 11 - 6 = 5 CPU s above it.
    assert "reached 0.80 of the discarding writer, using 6.0 CPU s more than it (2.0 in" in text
    assert "The exactly-once sink reached 0.62 of the floor" in text
    assert "cost 5.0 CPU s on top of it" in text


def test_analysis_says_whether_new_pages_cost_a_host_fault_in_this_run() -> None:
    cases = _cases(20.0)
    slow = "\n".join(bench.where_the_time_goes(cases, 1_000_000, CHEAP_STORAGE))
    assert "so a new page costs a fault on the host" in slow
    fast = bench.Storage(100.0, 5_000.0, 0.2, 12_000.0)
    text = "\n".join(bench.where_the_time_goes(cases, 1_000_000, fast))
    assert "new pages cost little in this run" in text
    assert "so a new page costs a fault on the host" not in text


def test_analysis_reports_what_a_record_batch_costs_against_larger_batches() -> None:
    cases = [*_cases(20.0), bench.Case(bench.BIG_BATCH_CASE, [16.0], cpu=[28.0])]
    storage = bench.Storage(100.0, 500.0, 2.0, 5000.0, 500.0, 125.0)
    text = "\n".join(bench.where_the_time_goes(cases, 1_000_000, storage))
    # 30 - 28 = 2 CPU s for 500 - 125 = 375 batches fewer; 10 / 16 of the discard rate.
    assert "a run wrote 125 record batches instead of 500" in text
    assert "reached 0.62 of the discarding writer and used 2.0 CPU s less" in text
    assert "(5.33 CPU ms for each of the 375 batches fewer)" in text
    # No measurable difference, or more CPU: said as such, never "-0.0 CPU s less".
    for big_cpu, said in (
        (29.98, "used as much CPU (within 0.1 s: run-to-run noise hides the difference)"),
        (30.5, "used 0.5 CPU s more (run-to-run noise is larger than the difference)"),
    ):
        cases[-1] = bench.Case(bench.BIG_BATCH_CASE, [16.0], cpu=[big_cpu])
        text = "\n".join(bench.where_the_time_goes(cases, 1_000_000, storage))
        assert said in text and "CPU s less" not in text and "batches fewer" not in text
    # Without the case (an older run's figures) the paragraph is left out.
    assert "Per record batch" not in "\n".join(
        bench.where_the_time_goes(_cases(20.0), 1_000_000, storage)
    )


@pytest.mark.parametrize(
    ("eo_seconds", "eo_cpu", "expected"),
    [
        (
            12.2,
            24.3,
            "0.98 of exactlyOnce=false's rows/s on best runs and 0.98 on median runs, "
            "using 0.3 CPU s more in its best run; within run-to-run noise (about 3%)",
        ),
        (
            15.0,
            29.0,
            "0.80 of exactlyOnce=false's rows/s on best runs and 0.80 on median runs, "
            "using 5.0 CPU s more in its best run; transactions cost 20% of the rate in this run.",
        ),
        (
            11.0,
            22.0,
            "1.09 of exactlyOnce=false's rows/s on best runs and 1.09 on median runs, "
            "using 2.0 CPU s less in its best run; exactly-once was the faster",
        ),
        (
            (11.0, 12.8, 12.8),
            22.0,
            "1.09 of exactlyOnce=false's rows/s on best runs and 0.94 on median runs, "
            "using 2.0 CPU s less in its best run; no difference beyond run-to-run noise",
        ),
    ],
    ids=["noise", "costly", "faster", "mixed"],
)
def test_analysis_reports_the_cost_of_exactly_once_from_the_run(
    eo_seconds: float | tuple[float, ...], eo_cpu: float, expected: str
) -> None:
    runs = eo_seconds if isinstance(eo_seconds, tuple) else (eo_seconds,)
    cases = _cases(min(runs))
    cases[1].seconds = list(runs)
    cases[1].cpu = [eo_cpu] * len(runs)
    text = "\n".join(bench.where_the_time_goes(cases, 1_000_000, CHEAP_STORAGE))
    line = next(x for x in text.splitlines() if x.startswith("- The cost of exactly-once"))
    assert expected in line, line


def test_data_batches_counts_record_batches_but_not_markers(tmp_path: Path) -> None:
    from spark_mq.storage.record_batch import ControlType, encode_batch, encode_control_batch

    first = tmp_path / "eo-0.log"
    first.write_bytes(
        bytes(encode_batch([b"a", b"b"]))
        + bytes(
            encode_control_batch(
                ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0
            )
        )
        + bytes(encode_batch([b"c"]))
    )
    second = tmp_path / "eo-1.log"
    second.write_bytes(bytes(encode_batch([b"d"])))
    assert bench.data_batches(iter([first, second])) == 3


def test_section_replaces_only_its_own_markers(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"keep me\n{bench.SECTION.begin}\nold\n{bench.SECTION.end}\ntail\n")
    run = Run(
        command="cmd",
        started=datetime.datetime.now(datetime.UTC),
        t_start=0.0,
        load_start="0.1",
        facts=[("Spark master", "local[4]")],
        elapsed=1.0,
        load_end="0.2",
    )
    section = bench.render_markdown(
        run,
        rows=1_000_000,
        cases=_cases(20.0),
        storage=CHEAP_STORAGE,
        small=_small(),
        small_rows=4_000,
    )
    bench.SECTION.write(doc, section)
    text = doc.read_text()
    assert text.startswith("keep me\n") and text.endswith("tail\n")
    assert "old" not in text and "## Spark sink" in text and "MISS" in text
    assert "| spark_mq, exactlyOnce=true | 150 | 40 | 12 |" in text


def _small() -> list[bench.SmallJobs]:
    return [
        bench.SmallJobs("discard (ceiling)", 20, 4.0, 1.6, 0.0),
        bench.SmallJobs("spark_mq, exactlyOnce=true", 20, 3.0, 0.8, 0.24),
    ]


def test_small_jobs_table_reports_per_job_figures() -> None:
    lines = bench.small_jobs_table(_small(), 4_000)
    assert lines[0].startswith("Small jobs: 20 jobs of 4,000 rows in 4 partitions per writer")
    assert "| discard (ceiling) | 200 | 80 | 0 |" in lines
    assert "| spark_mq, exactlyOnce=true | 150 | 40 | 12 |" in lines
    assert bench.small_jobs_table([], 4_000) == []


@pytest.mark.slow
def test_smoke_run_writes_its_section(tmp_path: Path) -> None:
    out = tmp_path / "bench.md"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_sink.py"),
            *("--rows", "20000", "--runs", "2", "--warmup", "1", "--master", "local[2]"),
            *("--out", str(out)),
            *("--small-jobs", "2", "--small-rows", "100"),
            # A cluster's ZooKeeper and three brokers would add their start-up to this run;
            # the cluster case's report has a test of its own.
            "--no-cluster",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "exactly-once spark_mq writes" in done.stdout
    section = out.read_text()
    assert "| Parquet (peer) |" in section
    # The floor case ran too (a task that cannot reach its receiver fails the run).
    assert "| bytes only (floor) |" in section and "The floor of the design" in section
    assert f"| {bench.BIG_BATCH_CASE} |" in section and "Per record batch" in section
    assert "Small jobs: 2 jobs of 100 rows" in section
    assert "1 untimed warm-up round of every writer" in section
    assert bench.CLUSTER_CASE not in section


def test_cluster_case_is_reported_as_a_ratio_of_the_embedded_broker() -> None:
    cluster = bench.Case(
        bench.CLUSTER_CASE, [40.0, 50.0], cpu=[60.0, 70.0], broker_cpu=[24.0, 30.0]
    )
    (line,) = bench.cluster_lines([*_cases(20.0), cluster], 1_000_000)
    # 1M rows in 40 s against 20 s embedded; median runs 45 s against 20 s.
    assert "wrote 25,000 rows/s, **0.50** of the embedded broker's 50,000" in line
    assert "0.44 on median runs" in line
    assert "broker processes used 24.0 CPU s in its best run (the embedded broker 8.0)" in line
    # A run without the cluster case (--no-cluster) says nothing about it.
    assert bench.cluster_lines(_cases(20.0), 1_000_000) == []
