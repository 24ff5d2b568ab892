#!/usr/bin/env python
"""Log compaction benchmark: how fast LogCleaner cleans a compacted partition log.

Run from the repository root::

    .venv/bin/python benchmarks/bench_compaction.py                           # ~300 MB, minutes
    .venv/bin/python benchmarks/bench_compaction.py --quick                   # ~30 MB smoke run
    .venv/bin/python benchmarks/bench_compaction.py --out docs/benchmarks.md  # also write the doc

The log: ``--mb`` MB (10^6 bytes) of batches of ``--batch-records`` records, each with a key
drawn uniformly from ``--keys`` distinct keys (``key-%08d``) and a ``--value-bytes`` value,
codec ``--codec``, in ``segment.bytes`` = ``--segment-mb`` MiB segments. Two passes are timed:

- ``full``: the first clean of the whole log (everything dirty): build the offset map over all
  of it, then rewrite every segment.
- ``incremental``: after appending ``--update-fraction`` more records (updates of random
  existing keys), the next clean from the checkpoint: a small dirty section, a large clean
  section that is read and rewritten again (Kafka's cost model, hence the dirty ratio).
- ``transactional``: the first clean of a log of the same size and keys written as
  transactions instead: ``--producers`` transactional producers, picked at random batch by
  batch so that their transactions interleave, each transaction 1 to 9 batches, a
  ``--abort-fraction`` of them aborted. The cleaner removes the aborted batches whole, keeps
  them out of the offset map, compacts the committed ones and keeps each producer's last
  batch (transaction-aware compaction).

MB/s is input bytes read per second of cleaning (``CleanerStats.bytes_read`` over the whole
pass, map building included). The files are in the page cache (just written); no fsync is
timed except the cleaner's own (it fsyncs every cleaned segment before swapping it in).
The result is printed and, with ``--out``, written into its own section of the file, between
``<!-- BEGIN compaction -->`` and ``<!-- END compaction -->``; the rest is kept as is.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

# The report scaffolding is shared by every benchmark next to this file; importing it also
# makes spark_mq importable from the repository when it is not installed.
from bench_report import Run, Section, base_parser, common_facts

from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_cleaner import CleanerStats, LogCleaner
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import ControlType, encode_batch

SECTION = Section(
    name="compaction",
    title="Log compaction",
    begin="<!-- BEGIN compaction -->",
    end="<!-- END compaction -->",
)
MIB = 1024 * 1024


def open_compacted(directory: Path, args: argparse.Namespace) -> PartitionLog:
    config = LogConfig.from_properties(
        {
            "cleanup.policy": "compact",
            "segment.bytes": args.segment_mb * MIB,
            "max.message.bytes": 64 * MIB,
            "min.cleanable.dirty.ratio": 0.0,
        }
    )
    return PartitionLog.open(directory, config, topic="bench", partition=0)


def build_log(directory: Path, args: argparse.Namespace, rng: np.random.Generator) -> PartitionLog:
    log = open_compacted(directory, args)
    pool = rng.integers(0, 256, args.value_bytes * 4096, dtype=np.uint8).tobytes()
    target = args.mb * 1_000_000
    while log.size_bytes < target:
        append_batch(log, rng, pool, args, rng.integers(0, args.keys, args.batch_records))
    log.roll()
    return log


def append_batch(
    log: PartitionLog,
    rng: np.random.Generator,
    pool: bytes,
    args: argparse.Namespace,
    key_ids: np.ndarray,
    **producer: object,
) -> None:
    n = len(key_ids)
    keys = pa.array([b"key-%08d" % k for k in key_ids.tolist()], pa.binary())
    starts = rng.integers(0, len(pool) - args.value_bytes, n)
    values = pa.array([pool[s : s + args.value_bytes] for s in starts.tolist()], pa.binary())
    log.append(encode_batch(values, key=keys, codec=args.codec, **producer))  # type: ignore[arg-type]


def build_transactional_log(
    directory: Path, args: argparse.Namespace, rng: np.random.Generator
) -> PartitionLog:
    """The same records as :func:`build_log`, written as interleaved transactions."""
    log = open_compacted(directory, args)
    pool = rng.integers(0, 256, args.value_bytes * 4096, dtype=np.uint8).tobytes()
    sequences = [0] * args.producers
    left = [0] * args.producers  # batches before the producer's open transaction ends
    target = args.mb * 1_000_000
    while log.size_bytes < target:
        pid = int(rng.integers(0, args.producers))
        if left[pid] == 0:
            left[pid] = int(rng.integers(1, 10))
        key_ids = rng.integers(0, args.keys, args.batch_records)
        append_batch(
            log,
            rng,
            pool,
            args,
            key_ids,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=sequences[pid],
            is_transactional=True,
        )
        sequences[pid] += len(key_ids)
        left[pid] -= 1
        if left[pid] == 0:
            end_transaction(log, pid, abort=rng.random() < args.abort_fraction)
    for pid in range(args.producers):
        if left[pid]:
            end_transaction(log, pid, abort=rng.random() < args.abort_fraction)
    log.roll()
    return log


def end_transaction(log: PartitionLog, producer_id: int, *, abort: bool) -> None:
    log.append_transaction_marker(
        ControlType.ABORT if abort else ControlType.COMMIT,
        producer_id=producer_id,
        producer_epoch=0,
        coordinator_epoch=0,
    )


def timed_clean(log: PartitionLog, first_dirty: int) -> CleanerStats:
    stats = LogCleaner().clean(log, first_dirty_offset=first_dirty, force=True)
    assert stats is not None
    return stats


def describe(name: str, runs: list[CleanerStats]) -> str:
    """One table row: the median run by MB/s, and the spread of all runs."""
    ordered = sorted(runs, key=lambda r: r.mb_per_second)
    s = ordered[len(ordered) // 2]
    spread = (ordered[-1].mb_per_second - ordered[0].mb_per_second) / s.mb_per_second
    return (
        f"| {name} | {s.bytes_read / 1e6:,.1f} | {s.records_read:,} | {s.map_keys:,} | "
        f"{s.records_removed:,} | {s.bytes_written / 1e6:,.1f} | "
        f"{s.segments_before} -> {s.segments_after} | {s.map_seconds:.2f} | "
        f"{s.elapsed_seconds:.2f} | **{s.mb_per_second:,.0f}** | {len(runs)} | {spread:.0%} |"
    )


def one_run(
    work: Path, index: int, args: argparse.Namespace
) -> tuple[CleanerStats, CleanerStats, CleanerStats, int, int]:
    """Build a fresh log, clean it fully, update 10%, clean incrementally; then the same
    with transactions, cleaned fully. The same data every run (one seed), so runs differ
    only by the machine's noise."""
    rng = np.random.default_rng(1)
    log = build_log(work / f"bench-{index}", args, rng)
    size, records = log.size_bytes, log.log_end_offset
    full = timed_clean(log, 0)
    print(f"run {index}: full        {full.mb_per_second:,.1f} MB/s  {full}")
    pool = rng.integers(0, 256, args.value_bytes * 4096, dtype=np.uint8).tobytes()
    updates = int(records * args.update_fraction)
    for start in range(0, updates, args.batch_records):
        count = min(args.batch_records, updates - start)
        append_batch(log, rng, pool, args, rng.integers(0, args.keys, count))
    log.roll()
    incremental = timed_clean(log, full.first_dirty_offset)
    print(f"run {index}: incremental {incremental.mb_per_second:,.1f} MB/s  {incremental}")
    log.close()
    shutil.rmtree(work / f"bench-{index}")
    log = build_transactional_log(work / f"bench-txn-{index}", args, np.random.default_rng(1))
    transactional = timed_clean(log, 0)
    print(f"run {index}: transactional {transactional.mb_per_second:,.1f} MB/s  {transactional}")
    log.close()
    shutil.rmtree(work / f"bench-txn-{index}")
    return full, incremental, transactional, size, records


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__, quick_help="30 MB, 50,000 keys")
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=1000)
    parser.add_argument("--codec", default="none")
    parser.add_argument("--segment-mb", type=int, default=64)
    parser.add_argument("--update-fraction", type=float, default=0.1)
    parser.add_argument("--producers", type=int, default=8, help="transactional producers")
    parser.add_argument("--abort-fraction", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=3, help="runs per pass (the median is shown)")
    args = parser.parse_args(argv)
    if args.quick:
        args.mb, args.keys, args.segment_mb, args.runs = 30, 50_000, 8, 1
    run = Run.start(common_facts(("pyarrow", "numpy", "crc32c")))
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_compaction_", dir=args.dir))
    fulls: list[CleanerStats] = []
    incrementals: list[CleanerStats] = []
    transactionals: list[CleanerStats] = []
    try:
        for index in range(args.runs):
            full, incremental, transactional, size, records = one_run(work, index, args)
            fulls.append(full)
            incrementals.append(incremental)
            transactionals.append(transactional)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run.finish()
    section = render(
        run,
        args,
        fulls=fulls,
        incrementals=incrementals,
        transactionals=transactionals,
        size=size,
        records=records,
    )
    print(section)
    if args.out is not None:
        SECTION.write(args.out, section)
    return 0


def render(
    run: Run,
    args: argparse.Namespace,
    *,
    fulls: list[CleanerStats],
    incrementals: list[CleanerStats],
    transactionals: list[CleanerStats],
    size: int,
    records: int,
) -> str:
    txn = sorted(transactionals, key=lambda r: r.mb_per_second)[len(transactionals) // 2]
    method = [
        f"- Log: {size / 1e6:,.1f} MB, {records:,} records of a `key-%08d` key drawn uniformly "
        f"from {args.keys:,} keys and a {args.value_bytes}-byte value, batches of "
        f"{args.batch_records:,} records, codec {args.codec}, segment.bytes "
        f"{args.segment_mb} MiB, written just before (page cache warm).",
        "- `full`: the first clean, everything dirty. `incremental`: after appending "
        f"{args.update_fraction:.0%} more records (updates of random keys), the next clean from "
        "the checkpoint, which reads and rewrites the clean section again, as Kafka does.",
        f"- `transactional`: the first clean of a log of the same size and keys written as "
        f"transactions by {args.producers} producers picked at random batch by batch (so "
        f"transactions interleave), 1 to 9 batches each, {args.abort_fraction:.0%} of them "
        "aborted, every one closed by a marker. In the median run the cleaner removed "
        f"{txn.aborted_records_removed:,} aborted records (whole batches, never in the map), "
        f"kept {txn.empty_batches_kept:,} producers' last batches empty and "
        f"{txn.markers_removed:,} markers were removed (a first clean has no delete horizon, "
        "so markers stay).",
        "- LogCleaner defaults (128 MiB dedupe buffer, 4 MiB I/O runs), one thread; cleaned "
        "segments are fsynced before the swap, as always. MB/s = input bytes read "
        "(CleanerStats.bytes_read) per second of the whole pass, map building included; "
        "MB = 10^6 bytes. Each run builds the same log afresh (one seed); the row is the "
        "median run by MB/s, `spread` = (fastest - slowest) / median: the noise of this VM.",
    ]
    body = [
        "| pass | MB read | records read | keys in map | records removed | MB written "
        "| segments | map s | total s | MB/s | runs | spread |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
        describe("full", fulls),
        describe("incremental", incrementals),
        describe("transactional", transactionals),
    ]
    return SECTION.render(run, method=method, body=body)


if __name__ == "__main__":
    sys.exit(main())
