#!/usr/bin/env python
"""Storage engine benchmark: append, read and recovery throughput against same-run ceilings.

Run from the repository root::

    .venv/bin/python benchmarks/bench_storage.py                            # ~4 minutes
    .venv/bin/python benchmarks/bench_storage.py --quick                    # ~30 s smoke run
    .venv/bin/python benchmarks/bench_storage.py --out docs/benchmarks.md   # also write the doc

What is measured, for 100-byte and 1 KiB values, batches of 1, 100 and 10,000 records and the
codecs none, lz4 and zstd:

- ``append``: ``PartitionLog.append`` of ready (pre-encoded) batches, one call per batch.
- ``encode+append``: ``encode_batch`` from an Arrow array, then ``PartitionLog.append``.
- ``read_records cold`` / ``read_records warm``: ``PartitionLog.read_records`` from offset 0 to
  the log end, ``--fetch-bytes`` per call (through ``read_records_with_next``, whose table is
  ``read_records``' and whose next offset drives the loop), after dropping the page cache
  (cold, only when ``/proc/sys/vm/drop_caches`` is writable) or with the file in the page
  cache (warm).
- ``decode_records``: the raw decoder (``batch_decoder.decode_records``) over the bytes of the
  same ``FileRange`` fetches, already in memory: CRC, decompression and Arrow decoding only.

Every result is compared with a ceiling measured in the same run, in the same directory, on the
same bytes: appends with a plain ``os.write`` of each batch's bytes to a new file (the same
bytes, the same number of writes), reads with a plain ``os.pread`` of the segment file in
``--fetch-bytes`` chunks (cold or warm like the row; ``decode_records`` uses the warm one).
MB/s always counts stored bytes (the batches as they are in the file, header and Arrow framing
included, compressed when the codec compresses), MB = 10^6 bytes.

Each case is warmed up once and then run at least ``--runs`` times (short rows get more runs,
up to twice as many); the tables show medians, the number of runs and their spread. Log and
ceiling runs interleave (a write-ceiling run before every append run; the order rotates), each
write run on new files after ``os.sync()`` so that neither side inherits the other's dirty
pages; the page cache is dropped (when permitted) before cold reads and recovery runs only. No
timed run includes an fsync: the log's defaults never fsync on append, nor does the ceiling.

The goals of the issue are printed as PASS/MISS lines; a benchmark never fails a build, so the
exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import random
import shutil
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

# Imported before spark_mq: it makes spark_mq importable from this repository when it is
# not installed.
from bench_report import (
    Run,
    Section,
    TimedRow,
    base_parser,
    bench_directory_fact,
    common_facts,
    fmt_int,
    goals_block,
    markdown_table,
    sources_digest,
    text_table,
)

from spark_mq.storage.batch_decoder import decode_records, iter_batches
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import encode_batch

KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * MIB

VALUE_SIZES = (100, 1024)
BATCH_SIZES = (1, 100, 10_000)
CODECS = ("none", "lz4", "zstd")

#: Batches of 10,000 records (1.2 MB at 100 B, 10.5 MB at 1 KiB) exceed Kafka's default
#: max.message.bytes (1 MiB + 12); this is the one non-default setting of the throughput cases.
MAX_MESSAGE_BYTES = 16 * MIB

GOAL_APPEND_FRACTION = 0.70
GOAL_ENCODE_APPEND_RPS = 3_000_000
GOAL_READ_RPS = 10_000_000

SECTION = Section(
    name="storage-engine",
    title="Storage engine",
    begin="<!-- BEGIN storage-engine (written by benchmarks/bench_storage.py) -->",
    end="<!-- END storage-engine -->",
)

TOPIC = "bench"


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    case_bytes: int  # raw value bytes per case (before the batch cap)
    max_batches: int  # at most this many batches per case (bounds the 1-record cases)
    runs: int
    min_timed: float  # more runs (up to 2x) until the log runs of a case add up to this
    fetch_bytes: int
    recovery_bytes: int
    drop_caches: bool


@dataclasses.dataclass
class Row(TimedRow):
    op: str
    value_size: int
    batch_size: int
    codec: str
    records: int
    stored_bytes: int
    samples: list[float]  # seconds of each timed run
    ceiling_seconds: float  # median of the ceiling of this row (same bytes)
    ceiling_name: str

    @property
    def rps(self) -> float:
        return self.records / self.seconds

    @property
    def mbps(self) -> float:
        return self.stored_bytes / self.seconds / 1e6

    @property
    def ceiling_mbps(self) -> float:
        return self.stored_bytes / self.ceiling_seconds / 1e6

    @property
    def fraction(self) -> float:
        return self.mbps / self.ceiling_mbps

    def case(self) -> str:
        value = "1 KiB" if self.value_size == KIB else f"{self.value_size} B"
        return f"{self.op} {value} x{self.batch_size} {self.codec}"


@dataclasses.dataclass
class Recovery:
    bytes_: int
    batches: int
    records: int
    seconds: float
    ceiling_seconds: float
    runs: int
    cold: bool
    segment_bytes: int
    batch_bytes: int

    @property
    def scale(self) -> float:
        return GIB / self.bytes_


# ---------------------------------------------------------------------------------------------
# Environment


def drop_page_cache() -> bool:
    """``sync`` then drop clean page-cache pages; False if this process may not."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def settle(settings: Settings) -> None:
    """Before a cold run: no dirty pages, no garbage, and (if permitted) no page cache."""
    gc.collect()
    if settings.drop_caches:
        drop_page_cache()
    else:
        os.sync()


def settle_writes() -> None:
    """Before a write run: no dirty pages left over and no garbage. The page cache is not
    dropped: on a VM freshly freed memory costs a host page fault on first touch, which made
    write throughput after a drop vary several-fold from run to run (for the ceiling as for
    the log; see docs/benchmarks.md)."""
    gc.collect()
    os.sync()


def machine_facts(
    work_dir: Path, settings: Settings, cold_permitted: bool
) -> list[tuple[str, str]]:
    cache = (
        "dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every cold read and every "
        "recovery run; before write runs only os.sync()"
        if settings.drop_caches
        else (
            "NOT dropped (--no-drop-caches)"
            if cold_permitted
            else "NOT dropped (drop_caches not permitted): every read, and its ceiling, is "
            "from the page cache"
        )
    )
    return [
        *common_facts(("pyarrow", "numpy", "lz4", "zstandard", "crc32c")),
        bench_directory_fact(work_dir),
        ("page cache", cache),
        ("storage sources sha256", sources_digest()),
    ]


# ---------------------------------------------------------------------------------------------
# Data


def text_pool(rng: random.Random, size: int) -> np.ndarray:
    """``size`` bytes of space-separated words from a 4,000-word vocabulary: data that
    compresses about as well as typical log lines or JSON events (zstd ~2-3x, lz4 less)."""
    vocab = [
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10))) for _ in range(4000)
    ]
    words: list[str] = []
    total = 0
    while total < size:
        chunk = rng.choices(vocab, k=10_000)
        words.extend(chunk)
        total += sum(len(w) + 1 for w in chunk)
    return np.frombuffer(" ".join(words).encode()[:size], dtype=np.uint8)


def batch_arrays(
    pool: np.ndarray, seed: int, value_size: int, batch_size: int, num_batches: int
) -> list[pa.Array]:
    """``num_batches`` binary arrays of ``batch_size`` values of ``value_size`` bytes, each a
    slice of the pool at a random position; one Arrow array per batch, as a producer builds."""
    n = batch_size * num_batches
    starts = np.random.default_rng(seed).integers(0, len(pool) - value_size, size=n)
    windows = np.lib.stride_tricks.sliding_window_view(pool, value_size)
    flat = np.ascontiguousarray(windows[starts]).reshape(-1)
    offsets = pa.py_buffer(np.arange(batch_size + 1, dtype=np.int32) * value_size)
    step = batch_size * value_size
    return [
        pa.Array.from_buffers(
            pa.binary(), batch_size, [None, offsets, pa.py_buffer(flat[i * step : (i + 1) * step])]
        )
        for i in range(num_batches)
    ]


# ---------------------------------------------------------------------------------------------
# Timed operations (each returns elapsed seconds of the timed part only)


class RunDir:
    """A fresh subdirectory per run; the previous one is removed before the next starts."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self.count = 0
        self.current: Path | None = None

    def fresh(self) -> Path:
        self.discard()
        self.count += 1
        self.current = self.parent / f"run-{self.count}"
        self.current.mkdir()
        return self.current

    def discard(self) -> None:
        if self.current is not None:
            shutil.rmtree(self.current, ignore_errors=True)
            self.current = None


def write_ceiling(directory: Path, batches: list[bytes]) -> float:
    fd = os.open(directory / "ceiling.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write = os.write
        t0 = time.perf_counter()
        for b in batches:
            write(fd, b)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    size = os.stat(directory / "ceiling.bin").st_size
    assert size == sum(len(b) for b in batches), "short write in the ceiling"
    return elapsed


def open_log(directory: Path, config: LogConfig, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(directory, config, topic=TOPIC, partition=0, **kwargs)  # type: ignore[arg-type]


def append_ready(directory: Path, config: LogConfig, batches: list[bytes]) -> float:
    log = open_log(directory, config)
    try:
        append = log.append
        t0 = time.perf_counter()
        for b in batches:
            append(b)
        elapsed = time.perf_counter() - t0
    finally:
        log.close()
    return elapsed


def encode_append(directory: Path, config: LogConfig, arrays: list[pa.Array], codec: str) -> float:
    log = open_log(directory, config)
    try:
        append = log.append
        t0 = time.perf_counter()
        for a in arrays:
            append(encode_batch(a, codec=codec))
        elapsed = time.perf_counter() - t0
    finally:
        log.close()
    return elapsed


def read_ceiling(path: Path, chunk: int) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pread = os.pread
        got = 0
        t0 = time.perf_counter()
        while got < size:
            n = len(pread(fd, chunk, got))
            if not n:
                break
            got += n
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
    assert got == size
    return elapsed


def read_all_records(log: PartitionLog, fetch_bytes: int) -> tuple[float, int]:
    end = log.log_end_offset
    offset = 0
    records = 0
    read_records_with_next = log.read_records_with_next
    t0 = time.perf_counter()
    while offset < end:
        table, offset = read_records_with_next(offset, fetch_bytes)
        records += table.num_rows
    elapsed = time.perf_counter() - t0
    return elapsed, records


def fetch_chunks(log: PartitionLog, fetch_bytes: int) -> list[bytes]:
    """The bytes of the FileRanges that ``read`` hands out from offset 0 to the log end."""
    chunks: list[bytes] = []
    offset = 0
    while offset < log.log_end_offset:
        info = log.read(offset, fetch_bytes)
        assert info.records is not None
        with info.records as file_range:
            data = file_range.read()
        chunks.append(data)
        headers = [header for header, _ in iter_batches(data, verify_crc=False)]
        offset = headers[-1].next_offset
    return chunks


def decode_chunks(chunks: list[bytes]) -> tuple[float, int]:
    records = 0
    t0 = time.perf_counter()
    for data in chunks:
        records += decode_records(data).num_rows
    return time.perf_counter() - t0, records


# ---------------------------------------------------------------------------------------------
# Cases


def run_case(
    settings: Settings,
    work: Path,
    pool: np.ndarray,
    *,
    value_size: int,
    batch_size: int,
    codec: str,
) -> list[Row]:
    num_batches = max(
        1, min(settings.max_batches, settings.case_bytes // (value_size * batch_size))
    )
    records = num_batches * batch_size
    seed = value_size * 100_000 + batch_size * 10 + CODECS.index(codec)  # reproducible
    arrays = batch_arrays(pool, seed, value_size, batch_size, num_batches)
    # Timestamps step 1 ms per batch, as a producer's would advance (the time index grows).
    now_ms = time.time_ns() // 1_000_000
    ready = [encode_batch(a, codec=codec, now_ms=now_ms + i) for i, a in enumerate(arrays)]
    stored = sum(len(b) for b in ready)
    config = LogConfig(max_message_bytes=MAX_MESSAGE_BYTES)
    runs = RunDir(work)

    # --- appends: a ceiling run right before every log run (the write ceiling is the noisiest
    # number on a VM, so it gets twice the samples); warm-up once; the order rotates per run.
    ops: dict[str, Callable[[Path], float]] = {
        "append": lambda d: append_ready(d, config, ready),
        "encode+append": lambda d: encode_append(d, config, arrays, codec),
    }
    names = list(ops)
    times: dict[str, list[float]] = {name: [] for name in [*names, "ceiling"]}
    for name in names:
        settle_writes()
        write_ceiling(runs.fresh(), ready)
        settle_writes()
        ops[name](runs.fresh())
    for r in range(2 * settings.runs):
        for name in names[r % 2 :] + names[: r % 2]:
            if r >= settings.runs and sum(times[name]) >= settings.min_timed:
                continue  # enough samples of this one; only the short ones get more runs
            settle_writes()
            times["ceiling"].append(write_ceiling(runs.fresh(), ready))
            settle_writes()
            times[name].append(ops[name](runs.fresh()))
    # The log of the last "append" run is re-made below for reading: same bytes, clean close.
    runs.discard()
    ceiling_w = statistics.median(times["ceiling"])

    def row(op: str, samples: list[float], ceiling: float, ceiling_name: str, n: int) -> Row:
        return Row(op, value_size, batch_size, codec, n, stored, samples, ceiling, ceiling_name)

    rows = [
        row("append", times["append"], ceiling_w, "write", records),
        row("encode+append", times["encode+append"], ceiling_w, "write", records),
    ]

    # --- reads, of a log holding exactly the `ready` batches
    log_dir = runs.fresh()
    append_ready(log_dir, config, ready)
    log = open_log(log_dir, config, had_clean_shutdown=True)
    try:
        seg_files = sorted(log_dir.glob("*.log"))
        assert len(seg_files) == 1, seg_files
        seg = seg_files[0]
        assert os.stat(seg).st_size == stored
        fetch = settings.fetch_bytes

        def timed_read() -> float:
            elapsed, n = read_all_records(log, fetch)
            assert n == records, (n, records)
            return elapsed

        chunks = fetch_chunks(log, fetch)

        def timed_decode() -> float:
            elapsed, n = decode_chunks(chunks)
            assert n == records, (n, records)
            return elapsed

        read_ops: dict[str, Callable[[], float]] = {
            "ceiling warm": lambda: read_ceiling(seg, fetch),
            "read_records warm": timed_read,
            "decode_records": timed_decode,
        }
        if settings.drop_caches:
            read_ops["ceiling cold"] = lambda: (drop_page_cache(), read_ceiling(seg, fetch))[1]
            read_ops["read_records cold"] = lambda: (drop_page_cache(), timed_read())[1]
        read_names = list(read_ops)
        for name in read_names:  # warm-up (also brings the file into the page cache)
            gc.collect()
            read_ops[name]()
        read_times: dict[str, list[float]] = {name: [] for name in read_names}
        k = len(read_names)
        for r in range(2 * settings.runs):
            for name in read_names[r % k :] + read_names[: r % k]:
                if r >= settings.runs and sum(read_times[name]) >= settings.min_timed:
                    continue
                gc.collect()
                if not name.endswith("cold"):
                    read_ceiling(seg, 64 * MIB)  # make sure the file is cached again
                read_times[name].append(read_ops[name]())
    finally:
        log.close()
        runs.discard()

    if settings.drop_caches:
        cold = statistics.median(read_times["ceiling cold"])
        rows.append(
            row("read_records cold", read_times["read_records cold"], cold, "pread cold", records)
        )
    warm = statistics.median(read_times["ceiling warm"])
    rows.append(
        row("read_records warm", read_times["read_records warm"], warm, "pread warm", records)
    )
    rows.append(row("decode_records", read_times["decode_records"], warm, "pread warm", records))
    return rows


def run_recovery(settings: Settings, work: Path, pool: np.ndarray) -> Recovery:
    """Write ~``recovery_bytes`` of 100 x 100 B batches (codec none) with the default config
    (segment.bytes 1 GiB: one segment), abandon the log without close(), and time
    ``PartitionLog.open(recovery_point=0, had_clean_shutdown=False)``."""
    config = LogConfig()
    directory = work / "recovery"
    directory.mkdir()
    arrays = batch_arrays(pool, 7, 100, 100, 256)
    now_ms = time.time_ns() // 1_000_000
    batch_bytes = len(encode_batch(arrays[0], now_ms=now_ms))
    target = min(settings.recovery_bytes, config.segment_bytes)
    log = open_log(directory, config)
    written = batches = records = 0
    while written + batch_bytes <= target:
        # Encoded one by one so that timestamps advance (1 ms a batch) as a producer's would.
        data = encode_batch(arrays[batches % len(arrays)], now_ms=now_ms + batches)
        info = log.append(data)
        written += len(data)
        records += info.num_records
        batches += 1
    assert log.num_segments == 1, "the recovery data must fit one segment"
    # An unclean shutdown: the object is dropped without close() (no final flush, no index
    # trim: the index files stay preallocated). What the OS had is on disk after sync.
    del log, info, data
    gc.collect()
    segment = next(directory.glob("*.log"))
    seconds: list[float] = []
    ceiling: list[float] = []
    for r in range(settings.runs):
        for what in ("open", "ceiling") if r % 2 == 0 else ("ceiling", "open"):
            settle(settings)
            if what == "ceiling":
                ceiling.append(read_ceiling(segment, 8 * MIB))
                continue
            t0 = time.perf_counter()
            reopened = open_log(directory, config, recovery_point=0, had_clean_shutdown=False)
            seconds.append(time.perf_counter() - t0)
            assert reopened.log_end_offset == records, (reopened.log_end_offset, records)
            del reopened  # abandoned again: every run recovers the same state
            gc.collect()
    shutil.rmtree(directory, ignore_errors=True)
    return Recovery(
        bytes_=written,
        batches=batches,
        records=records,
        seconds=statistics.median(seconds),
        ceiling_seconds=statistics.median(ceiling),
        runs=settings.runs,
        cold=settings.drop_caches,
        segment_bytes=config.segment_bytes,
        batch_bytes=batch_bytes,
    )


# ---------------------------------------------------------------------------------------------
# Goals and output


def value_label(size: int) -> str:
    return "1 KiB" if size == KIB else f"{size} B"


def find(rows: list[Row], op: str, value_size: int, batch_size: int, codec: str) -> Row | None:
    for r in rows:
        if (r.op, r.value_size, r.batch_size, r.codec) == (op, value_size, batch_size, codec):
            return r
    return None


def goal_lines(rows: list[Row], recovery: Recovery | None, settings: Settings) -> list[str]:
    lines: list[str] = []
    for bs in BATCH_SIZES:
        group = [r for r in rows if r.op == "append" and r.batch_size == bs]
        if not group:
            continue
        worst = min(group, key=lambda r: r.fraction)
        best = max(group, key=lambda r: r.fraction)
        ok = worst.fraction >= GOAL_APPEND_FRACTION
        lines.append(
            f"{'PASS' if ok else 'MISS'} goal 1, append of ready batches >= "
            f"{GOAL_APPEND_FRACTION:.0%} of the write ceiling, batches of {bs}: worst "
            f"{worst.fraction:.0%} ({value_label(worst.value_size)} {worst.codec}, "
            f"{worst.mbps:,.0f} of {worst.ceiling_mbps:,.0f} MB/s), best {best.fraction:.0%} "
            f"({value_label(best.value_size)} {best.codec})"
        )
    r = find(rows, "encode+append", 100, 10_000, "none")
    if r is not None:
        ok = r.rps >= GOAL_ENCODE_APPEND_RPS
        lines.append(
            f"{'PASS' if ok else 'MISS'} goal 2, encode from Arrow + append >= "
            f"{fmt_int(GOAL_ENCODE_APPEND_RPS)} records/s (100 B, batches of 10000, none): "
            f"{fmt_int(r.rps)} records/s ({r.rps / GOAL_ENCODE_APPEND_RPS:.0%} of the goal)"
        )
    for op, what in (
        ("read_records warm", "PartitionLog.read_records, file in the page cache"),
        ("read_records cold", "PartitionLog.read_records, page cache dropped first"),
        ("decode_records", "raw decode_records over FileRange bytes already in memory"),
    ):
        r = find(rows, op, 100, 10_000, "none")
        if r is None:
            continue
        ok = r.rps >= GOAL_READ_RPS
        lines.append(
            f"{'PASS' if ok else 'MISS'} goal 3, read + decode to Arrow >= "
            f"{fmt_int(GOAL_READ_RPS)} records/s via {what} (100 B, batches of 10000, none): "
            f"{fmt_int(r.rps)} records/s ({r.rps / GOAL_READ_RPS:.0%} of the goal)"
        )
    if recovery is not None:
        rec = recovery
        gib = rec.bytes_ / GIB
        scaled = ""
        if settings.quick or rec.bytes_ < 0.9 * GIB:
            scaled = (
                f"; --quick: measured on {rec.bytes_ / MIB:,.0f} MiB, scaled linearly to 1 GiB: "
                f"{rec.seconds * rec.scale:.2f} s"
            )
        lines.append(
            f"INFO goal 4, recovery (report only, no threshold): PartitionLog.open of "
            f"{gib:.3f} GiB past the recovery point took {rec.seconds:.2f} s "
            f"({rec.bytes_ / rec.seconds / 1e6:,.0f} MB/s, {rec.records / rec.seconds:,.0f} "
            f"records/s); plain {'cold ' if rec.cold else ''}read of the same file "
            f"{rec.ceiling_seconds:.2f} s ({rec.ceiling_seconds / rec.seconds:.0%} of the "
            f"recovery time){scaled}"
        )
    return lines


HEADERS = (
    "case",
    "records",
    "B/rec",
    "records/s",
    "MB/s",
    "ceiling",
    "ceiling MB/s",
    "fraction",
    "runs",
    "spread",
)


def row_cells(r: Row) -> tuple[str, ...]:
    return (
        r.case(),
        fmt_int(r.records),
        f"{r.stored_bytes / r.records:,.0f}",
        fmt_int(r.rps),
        f"{r.mbps:,.1f}",
        r.ceiling_name,
        f"{r.ceiling_mbps:,.1f}",
        f"{r.fraction:.2f}",
        str(len(r.samples)),
        f"{r.spread:.0%}",
    )


def method_lines(settings: Settings, recovery: Recovery | None) -> list[str]:
    lines = [
        f"Each case: {settings.case_bytes // MIB} MiB of values or at most "
        f"{settings.max_batches:,} batches, whichever is less (so batches of 1 record hold "
        f"{settings.max_batches:,} records); one warm-up, then the median of at least "
        f"{settings.runs} runs (more, up to {2 * settings.runs}, until the runs of a row add up to "
        f"{settings.min_timed:g} s; `runs` column), log and ceiling runs interleaved; a "
        "write-ceiling run precedes every append run, so the write ceiling has twice the "
        "samples; os.sync() before every write run. `spread` = (slowest - fastest) / median of "
        "the row's runs: the noise of this VM (other sessions' tests shared its 2 cores).",
        "Values: slices of a text pool (random words from a 4,000-word vocabulary); keys and "
        "headers null; timestamps now, 1 ms apart from batch to batch.",
        f"Config: LogConfig() defaults (segment.bytes {LogConfig().segment_bytes:,} = 1 GiB, "
        f"no fsync on append) except max.message.bytes = {MAX_MESSAGE_BYTES:,} (a batch of "
        "10,000 records is over the 1 MiB default).",
        "MB/s counts stored bytes (batch header, Arrow framing, compressed body), MB = 10^6 "
        "bytes; B/rec is stored bytes per record.",
        "Ceilings: `write` = one os.write per batch of the same bytes to a new file in the same "
        f"directory; `pread` = os.pread of the segment file in {settings.fetch_bytes // KIB} "
        "KiB chunks (cold: page cache dropped first; warm: file cached). read_records fetches "
        f"{settings.fetch_bytes // KIB} KiB per call (at least one whole batch).",
        "decode_records = batch_decoder.decode_records over the bytes of the same FileRange "
        "fetches, already in memory (CRC, decompression, Arrow decoding; no file access).",
    ]
    if recovery is not None:
        lines.append(
            f"Recovery: {recovery.batches:,} batches of 100 x 100 B records "
            f"({recovery.batch_bytes:,} bytes each, codec none, about Kafka's 16 KiB "
            f"batch.size), {recovery.bytes_:,} bytes in one segment (segment.bytes "
            f"{recovery.segment_bytes:,}, otherwise LogConfig() "
            "defaults); the log is dropped without close() (indexes left preallocated, as after "
            "a crash), then PartitionLog.open(recovery_point=0, had_clean_shutdown=False) is "
            f"timed, median of {recovery.runs}"
            + (", page cache dropped before each" if recovery.cold else "")
            + "; its ceiling is a plain read of the same .log file in 8 MiB chunks."
        )
    return lines


def render_markdown(
    run: Run, *, settings: Settings, rows: list[Row], recovery: Recovery | None, goals: list[str]
) -> str:
    append_rows = [r for r in rows if "append" in r.op]
    read_rows = [r for r in rows if "append" not in r.op]
    body = [
        *goals_block(goals),
        "",
        "### Append",
        "",
        markdown_table(HEADERS, [row_cells(r) for r in append_rows], 1),
        "",
        "### Read",
        "",
        markdown_table(HEADERS, [row_cells(r) for r in read_rows], 1),
    ]
    return SECTION.render(
        run,
        method=[f"- {line}" for line in method_lines(settings, recovery)],
        body=body,
        note=" (**--quick smoke run: small data, scaled recovery**)" if settings.quick else "",
    )


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = base_parser(__doc__, quick_help="~30 s smoke run (small data)")
    p.add_argument("--runs", type=int, help="timed runs per case (default 3, --quick 2)")
    p.add_argument("--case-mib", type=int, help="MiB of values per case (default 256, quick 8)")
    p.add_argument("--max-batches", type=int, help="batch cap per case (default 5000, quick 1000)")
    p.add_argument("--fetch-bytes", type=int, default=MIB, help="bytes per read (default 1 MiB)")
    p.add_argument("--recovery-mib", type=int, help="recovery data (default 1024, quick 64)")
    p.add_argument("--no-recovery", action="store_true", help="skip the recovery measurement")
    p.add_argument("--no-drop-caches", action="store_true", help="never drop the page cache")
    p.add_argument(
        "--only",
        help="run only cases whose label contains this (e.g. '100 B x10000 none'); for profiling",
    )
    args = p.parse_args(argv)
    quick = args.quick
    settings = Settings(
        quick=quick,
        case_bytes=(args.case_mib or (8 if quick else 256)) * MIB,
        max_batches=args.max_batches or (1000 if quick else 5_000),
        runs=args.runs or (2 if quick else 3),
        min_timed=0.1 if quick else 0.5,
        fetch_bytes=args.fetch_bytes,
        recovery_bytes=(args.recovery_mib or (64 if quick else 1024)) * MIB,
        drop_caches=False,
    )
    return args, settings


def cases() -> Iterator[tuple[int, int, str]]:
    for value_size in VALUE_SIZES:
        for batch_size in BATCH_SIZES:
            for codec in CODECS:
                yield value_size, batch_size, codec


def main(argv: list[str] | None = None) -> int:
    args, settings = parse_args(argv)
    cold_permitted = drop_page_cache()
    settings = dataclasses.replace(settings, drop_caches=cold_permitted and not args.no_drop_caches)
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_storage_", dir=args.dir))
    run = Run.start(machine_facts(work, settings, cold_permitted))
    for line in method_lines(settings, None):
        print(line)
    print(flush=True)

    rows: list[Row] = []
    recovery: Recovery | None = None
    try:
        pool = text_pool(random.Random(42), 8 * MIB)
        for value_size, batch_size, codec in cases():
            label = f"{value_label(value_size)} x{batch_size} {codec}"
            if args.only and args.only not in label:
                continue
            t0 = time.perf_counter()
            new = run_case(
                settings, work, pool, value_size=value_size, batch_size=batch_size, codec=codec
            )
            rows.extend(new)
            print(f"case {label}: {time.perf_counter() - t0:.1f} s", flush=True)
            for r in new:
                print("   " + "  ".join(row_cells(r)), flush=True)
        if not args.no_recovery:
            t0 = time.perf_counter()
            recovery = run_recovery(settings, work, pool)
            print(f"recovery: {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    run.finish()
    goals = goal_lines(rows, recovery, settings)
    print()
    print(text_table(HEADERS, [row_cells(r) for r in rows if "append" in r.op], 1))
    print()
    print(text_table(HEADERS, [row_cells(r) for r in rows if "append" not in r.op], 1))
    print()
    if recovery is not None:
        for line in method_lines(settings, recovery)[-1:]:
            print(line)
        print()
    for line in goals:
        print(line)
    print(run.end_line())
    if args.out is not None:
        SECTION.write(
            args.out,
            render_markdown(run, settings=settings, rows=rows, recovery=recovery, goals=goals),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
