"""The replication benchmark (``benchmarks/bench_replication.py``): the log ends its lag
sampler reads from segment files, and its goal line. (A run needs a 3-broker cluster: it is
run by hand, see docs/benchmarks.md.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa

from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import encode_batch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_replication as bench  # noqa: E402


def batch(n: int, base_offset: int = 0) -> bytes:
    return encode_batch(pa.array([b"v" * 100] * n), base_offset=base_offset)


def test_log_end_follows_a_growing_log(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), topic="t", partition=0)
    try:
        end = bench.LogEnd(tmp_path / "t-0")
        assert end.read() == 0
        log.append(batch(3))
        log.append(batch(4))
        assert end.read() == 7 == log.log_end_offset
        log.append(batch(5))
        assert end.read() == 12
    finally:
        log.close()


def test_log_end_stops_before_a_partly_written_batch(tmp_path: Path) -> None:
    whole, next_one = batch(2), batch(3, base_offset=2)
    (tmp_path / f"{0:020d}.log").write_bytes(whole + next_one[:40])
    end = bench.LogEnd(tmp_path)
    assert end.read() == 2
    (tmp_path / f"{0:020d}.log").write_bytes(whole + next_one)
    assert end.read() == 5


def test_the_goal_is_four_tenths_of_the_ceiling() -> None:
    def results(ratio: float) -> dict[str, bench.CaseResult]:
        rps = {bench.CASES[0].name: 1000.0, bench.CASES[1].name: 1000.0 * ratio}
        rps[bench.CASES[2].name] = 500.0
        return {
            name: bench.CaseResult(name, [value], {b: [0.001] for b in (1, 2, 3)})
            for name, value in rps.items()
        }

    latency = {"acks=1": [1.0, 2.0], "acks=all": [3.0, 5.0]}
    console, body = bench.report(results(0.4), latency, bench.QUICK)
    assert "PASS RF 3 acks=all at 0.40" in "\n".join(console)
    # Nearest-rank percentiles: p50 and p99 of two requests are both the slower one.
    assert "| added by acks=all | +3.00 | +3.00 |  |" in "\n".join(body)
    console, _ = bench.report(results(0.39), latency, bench.QUICK)
    assert "MISS RF 3 acks=all at 0.39" in "\n".join(console)
