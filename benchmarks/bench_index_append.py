#!/usr/bin/env python
"""What index appends cost: the offset and time index on their own, and the log's append path
with an index entry on every batch (``index.interval.bytes=0``, the worst case).

Run from the repository root::

    .venv/bin/python benchmarks/bench_index_append.py            # ~20 s
    .venv/bin/python benchmarks/bench_index_append.py --dir /mnt/x

Rows (median of ``--runs`` runs, each in a new directory):

- ``offset index append``: ns per ``OffsetIndex.append`` into a new index;
- ``time index append``: ns per ``TimeIndex.maybe_append`` (increasing timestamps);
- ``log append, entry per batch``: us per ``PartitionLog.append`` of a ready one-record batch
  with ``index.interval.bytes=0``, so that every append also writes both index entries;
- ``blocks after 1 MB``: KiB of disk blocks the two index files of that log's active segment
  hold (``st_blocks``) while it is still active.

It measures the storage layer in-process, with no broker and no fsync. Times are the CPU time
of the appending thread (``time.thread_time_ns``), system calls included, so that other
processes on a shared machine do not count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.offset_index import OffsetIndex
from spark_mq.storage.record_batch import encode_batch
from spark_mq.storage.time_index import TimeIndex

INDEX_ENTRIES = 200_000
LOG_APPENDS = 20_000


def _offset_index_ns(directory: Path) -> float:
    index = OffsetIndex(directory / "00000000000000000000.index", 0)
    started = time.thread_time_ns()
    for i in range(INDEX_ENTRIES):
        index.append(i, i * 64)
    elapsed = time.thread_time_ns() - started
    index.close()
    return elapsed / INDEX_ENTRIES


def _time_index_ns(directory: Path) -> float:
    index = TimeIndex(directory / "00000000000000000000.timeindex", 0)
    started = time.thread_time_ns()
    for i in range(INDEX_ENTRIES):
        index.maybe_append(1_700_000_000_000 + i, i)
    elapsed = time.thread_time_ns() - started
    index.close()
    return elapsed / INDEX_ENTRIES


def _log_append_us(directory: Path) -> tuple[float, float]:
    config = LogConfig(index_interval_bytes=0)
    log = PartitionLog.open(directory / "t-0", config, topic="t", partition=0)
    batch = encode_batch(pa.array([b"x" * 100]))
    started = time.thread_time_ns()
    for _ in range(LOG_APPENDS):
        log.append(batch)
    elapsed = time.thread_time_ns() - started
    active = log.active_segment
    blocks = sum(
        os.stat(index.path).st_blocks * 512 for index in (active.offset_index, active.time_index)
    )
    log.close()
    return elapsed / LOG_APPENDS / 1000, blocks / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rows: dict[str, list[float]] = {
        "offset index append (ns)": [],
        "time index append (ns)": [],
        "log append, entry per batch (us)": [],
        f"index blocks after {LOG_APPENDS} appends (KiB)": [],
    }
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            root = Path(tmp)
            rows["offset index append (ns)"].append(_offset_index_ns(root))
            rows["time index append (ns)"].append(_time_index_ns(root))
            append_us, blocks_kib = _log_append_us(root)
            rows["log append, entry per batch (us)"].append(append_us)
            rows[f"index blocks after {LOG_APPENDS} appends (KiB)"].append(blocks_kib)
    for name, values in rows.items():
        print(f"{name:45s} median {statistics.median(values):10.1f}  (min {min(values):.1f})")


if __name__ == "__main__":
    main()
