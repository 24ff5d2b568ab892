"""The client benchmark's harness (``benchmarks/bench_clients.py``): ceiling, Redis peer,
pacing, goals and the Markdown section; plus a smoke run of ``--quick``.

The benchmark measures what ``spark-mq perf`` measures from the shell, which is why its tests
live with the command line's.
"""

from __future__ import annotations

import datetime
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_clients  # noqa: E402
import bench_clients_peers as peers  # noqa: E402
from bench_report import Run  # noqa: E402


def test_loopback_ceiling_moves_every_byte():
    pool = os.urandom(1024 * 1024)
    seconds = peers.loopback_ceiling(5_000_000, 16 * 1024, pool)
    assert seconds > 0


def test_paced_send_keeps_order_and_stamps_every_record():
    sent: list[tuple[int, int]] = []
    ticks = []

    def send(i: int, stamp: bytes) -> None:
        sent.append((i, peers.STAMP.unpack(stamp)[0]))

    seconds = peers.paced_send(20_000, 200, send, lambda: ticks.append(1), warmup=20)
    assert [i for i, _ in sent] == list(range(220))
    stamps = [s for _, s in sent]
    assert stamps[:20] == [0] * 20  # warm-up records: readers skip them
    assert stamps[20] > 0 and stamps[20:] == sorted(stamps[20:])
    assert ticks and seconds > 0
    # 220 records at 20,000/s take 11 ms: about 11 ticks of 1 ms, each sending some 20
    # records, not a wake-up per record (a loaded machine only makes ticks fewer and fuller).
    assert len(ticks) <= 30, len(ticks)


def test_percentiles_in_ms():
    lat = np.array([1_000_000, 2_000_000, 3_000_000], dtype=np.int64)
    p = peers.percentiles_ms(lat)
    assert (p["p50"], p["max"], p["avg"]) == (2.0, 3.0, 2.0)
    assert all(math.isnan(v) for v in peers.percentiles_ms(np.array([], dtype=np.int64)).values())


@pytest.mark.slow
@pytest.mark.skipif(peers.redis_missing() is not None, reason="redis-server or redis-py missing")
def test_redis_server_produce_consume_and_latency(tmp_path):
    values = [bytes([65 + i % 26]) * 100 for i in range(10)]
    with peers.RedisServer(tmp_path) as server:
        names = peers.stream_names("s", 3)
        assert peers.redis_produce(server.port, names, values, 2_500, 1_000) > 0
        client = server.client()
        assert sum(client.xlen(n) for n in names) == 2_500
        assert peers.redis_consume_xread(server.port, names, 2_500, 1_000) > 0
        assert peers.redis_consume_xrange(server.port, names, 2_500, 1_000) > 0
        lat, seconds = peers.redis_latency(server.port, ["lat"], 5_000, 500, 100, warmup=50)
        assert len(lat) == 500 and (lat > 0).all() and seconds > 0
        proc, directory = server.proc, server.dir
    assert proc is not None and proc.poll() is not None  # stopped, and its files removed
    assert not directory.exists()


def _results() -> bench_clients.Results:
    results = bench_clients.Results()
    rows = [
        ("spark_mq", "path= (unix)", "send()", 600_000),
        ("spark_mq", "path= (unix)", "send_batch()", 2_000_000),
        ("spark_mq", "path= (unix)", "poll()", 900_000),
        ("spark_mq", "path= (unix)", "poll_batch()", 6_000_000),
        ("redis", "tcp", "XADD (pipeline 1000)", 200_000),
        ("redis", "tcp", "XREAD COUNT 10000", 500_000),
        ("redis", "tcp", "XRANGE COUNT 10000", 600_000),
        ("ceiling", "loopback", "socket, 1 MiB writes", 30_000_000),
    ]
    for system, transport, op, rps in rows:
        results.rows.append(bench_clients.Row(system, transport, 1, op, rps, [1.0, 1.1, 0.9]))
    pct = {"avg": 1.0, "p50": 0.8, "p95": 2.0, "p99": 4.0, "p99.9": 6.0, "max": 9.0}
    results.latencies.append(
        bench_clients.Latency("spark_mq", "path= (unix)", 1, 10_000, 30_000, 9_990.0, pct)
    )
    return results


def test_goal_lines_pass_miss_and_not_measured():
    lines = bench_clients.goal_lines(_results())
    one = [line for line in lines if "(1 partition," in line]
    assert one[0].startswith("PASS send() >= 500,000 records/s") and "600,000" in one[0]
    assert one[1].startswith("MISS send_batch() >= 3,000,000")
    assert one[2].startswith("PASS poll_batch() >= 5,000,000")
    assert one[3].startswith("PASS end-to-end p99 < 10 ms") and "p99 4.00 ms" in one[3]
    produce = next(line for line in one if line.startswith(("PASS produce", "MISS produce")))
    assert produce.startswith("PASS") and "= 10.0x" in produce
    consume = next(line for line in one if line.startswith(("PASS consume", "MISS consume")))
    assert "XRANGE" in consume and "= 10.0x" in consume  # against the faster Redis read
    eight = [line for line in lines if "(8 partitions," in line]
    assert eight and all(line.startswith("MISS") and "not measured" in line for line in eight)


def test_goal_lines_say_what_storing_the_send_batch_goal_costs():
    results = _results()
    assert not any("storing" in line for line in bench_clients.goal_lines(results))
    results.page_cache = (400.0, 2.5, 5000.0)  # new pages: MB/s, CPU s per GB; rewrite MB/s
    results.stored_bytes_per_record = 130.0
    lines = bench_clients.goal_lines(results)
    at = next(i for i, line in enumerate(lines) if " send_batch() >=" in line)
    info = lines[at + 1]
    assert info.startswith("INFO storing send_batch() records: one takes 130.0 bytes")
    # 3M records/s x 130 bytes = 390 MB/s; at 2.5 CPU s/GB that is 0.975 CPU s per second.
    assert "append 390 MB/s" in info and "would cost 0.98 CPU s" in info
    assert "segment.drop.behind.bytes" in info
    assert sum("storing" in line for line in lines) == 1  # once, under the 1-partition goal


def test_markdown_section_replaces_only_its_own_markers(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n<!-- BEGIN other -->\nkeep me\n<!-- END other -->\n\n"
        f"{bench_clients.SECTION.begin}\nold\n{bench_clients.SECTION.end}\n"
    )
    _, settings = bench_clients.parse_args(["--quick"])
    results = _results()
    run = Run(
        command=".venv/bin/python benchmarks/bench_clients.py --out docs/benchmarks.md",
        started=datetime.datetime.now(datetime.UTC),
        t_start=0.0,
        load_start="0.1",
        facts=[("nproc", "2")],
        elapsed=12.0,
        load_end="0.2",
    )
    section = bench_clients.render_markdown(
        run, settings=settings, results=results, goals=bench_clients.goal_lines(results)
    )
    bench_clients.SECTION.write(doc, section)
    text = doc.read_text()
    assert "keep me" in text and "\nold\n" not in text
    assert text.count(bench_clients.SECTION.begin) == 1
    assert "- load average (1/5/15 min) at start: 0.1; at end: 0.2" in text
    assert "| spark_mq | path= (unix) | 1 | send() | 600,000 |" in text
    assert "### End-to-end latency" in text


@pytest.mark.slow
def test_quick_run_smoke(tmp_path):
    """``bench_clients.py --quick`` runs end to end and prints its goal lines (no --out)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_clients.py"), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "send_batch() >= 3,000,000 records/s" in proc.stdout
    assert "socket, 1 MiB writes" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 120
