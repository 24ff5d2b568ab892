"""Crash safety of compaction: a crash at every file-system step of a cleaning pass.

A pass changes the directory only by ``mkdir``, ``rename`` and ``unlink`` (besides writing
its own ``*.cleaned`` files): it creates the cleaned segment, commits it by renaming its
files to ``*.swap``, renames the old segments to ``*.deleted``, gives the new files their
final names and unlinks the old ones. The injector counts those calls and raises instead of
performing the n-th one; every later call raises too, because the process is dead. The log
object is then abandoned without ``close()`` (the page cache keeps what was written, as after
a killed process) and the directory is reopened with ``had_clean_shutdown=False``. For
n = 1, 2, ... until a pass no longer reaches step n:

- no ``*.cleaned``, ``*.swap`` or ``*.deleted`` file is left;
- the log equals the cleaned log below some old segment boundary B and the uncleaned log at
  and above it (B = the log start: nothing was committed; B = the log end: everything was),
  record by record with original offsets; so the newest record of every key is the same;
- the log end is unchanged, appends continue, and a new clean from the same checkpoint
  brings the log to exactly the cleaned content.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_cleaner import LogCleaner
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import BatchHeader, ControlType, encode_batch

START_MS = 1_700_000_000_000
RETENTION_MS = 10_000
CONFIG = LogConfig.from_properties(
    {
        "cleanup.policy": "compact",
        "segment.bytes": 2200,
        "index.interval.bytes": 500,
        "segment.index.bytes": 4096,  # small preallocated indexes: opening them is cheap
        "delete.retention.ms": RETENTION_MS,
        "min.cleanable.dirty.ratio": 0.0,
    }
)
Record = tuple[int, int, bytes | None, bytes | None]


class Crash(BaseException):
    """The process died here (BaseException: no ``except Exception`` may swallow it)."""


class Clock:
    def __init__(self) -> None:
        self.now_ms = START_MS

    def __call__(self) -> int:
        return self.now_ms


def open_log(directory: Path, clock: Clock, *, clean: bool) -> PartitionLog:
    return PartitionLog.open(
        directory, CONFIG, topic="t", partition=0, time_ms=clock, had_clean_shutdown=clean
    )


def put(
    log: PartitionLog, clock: Clock, pairs: list[tuple[bytes, bytes | None]], **kw: Any
) -> None:
    log.append(
        encode_batch(
            pa.array([v for _, v in pairs], pa.binary()),
            key=pa.array([k for k, _ in pairs], pa.binary()),
            timestamp=pa.array([clock()] * len(pairs), pa.int64()),
            **kw,
        )
    )


def read_all(log: PartitionLog) -> list[Record]:
    """All records, read as a consumer does (see test_log_cleaner.read_all)."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        table = log.read_records(offset, max_bytes=64 * 1024)
        if table.num_rows:
            rows = table.select(["offset", "timestamp", "key", "value"]).to_pylist()
            out.extend((r["offset"], r["timestamp"], r["key"], r["value"]) for r in rows)
            offset = rows[-1]["offset"] + 1
            continue
        info = log.read(offset, 1)
        if info.records is None:
            break
        with info.records as file_range:
            offset = BatchHeader.unpack_from(file_range.read()).next_offset
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, Clock]:
    """A closed log ready for a pass that merges, rewrites and removes across segments.

    A first clean leaves small segments (so the next pass merges them into groups of
    several), an aborted transaction gives one segment a ``.txnindex`` to swap, and the
    clock moves past ``delete.retention.ms``. Returns
    the directory, the checkpoint for the pass, and the clock.
    """
    directory = tmp_path_factory.mktemp("pristine")
    clock = Clock()
    log = open_log(directory, clock, clean=True)
    for i in range(12):
        pairs: list[tuple[bytes, bytes | None]] = [
            (b"k%d" % ((i * 3 + j) % 7), b"v%d-%d" % (i, j) * 10) for j in range(4)
        ]
        if i % 4 == 3:
            pairs[1] = (pairs[1][0], None)  # a tombstone
        put(log, clock, pairs)
    put(
        log,
        clock,
        [(b"t", b"in-txn")],
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    log.append_transaction_marker(
        ControlType.ABORT, producer_id=5, producer_epoch=0, coordinator_epoch=0
    )
    log.roll()
    first = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0)
    assert first is not None
    clock.now_ms += RETENTION_MS + 1
    for i in range(12):
        put(log, clock, [(b"k%d" % (i % 4), b"w%d" % i * 10), (b"n%d" % (i % 3), b"x%d" % i)])
    log.roll()
    log.close()
    return directory, first.first_dirty_offset, clock


@pytest.fixture
def count_fs_steps(monkeypatch: pytest.MonkeyPatch) -> Callable[[int | None], list[str]]:
    """Install the injector; ``arm(n)`` makes the n-th step raise Crash (None: never)."""
    steps: list[str] = []
    state: dict[str, int | None] = {"crash_at": None}

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            steps.append(f"{name} {args[0]}")
            crash_at = state["crash_at"]
            if crash_at is not None and len(steps) >= crash_at:
                raise Crash(steps[-1])
            return real(*args, **kwargs)

        return step

    for name in ("rename", "replace", "unlink", "mkdir", "rmdir"):
        monkeypatch.setattr(os, name, wrap(name, getattr(os, name)))

    def arm(crash_at: int | None) -> list[str]:
        steps.clear()
        state["crash_at"] = crash_at
        return steps

    return arm


def copy_of(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, copy_function=shutil.copy2)
    return target


def leftovers(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap", ".deleted")))


def test_crash_at_every_step_of_a_pass(
    pristine: tuple[Path, int, Clock],
    tmp_path: Path,
    count_fs_steps: Callable[[int | None], list[str]],
) -> None:
    source, checkpoint, clock = pristine
    # The outcome without a crash, and the steps it takes.
    reference = copy_of(source, tmp_path / "reference")
    log = open_log(reference, clock, clean=True)
    pre = read_all(log)
    bases = [s.base_offset for s in log.segments] + [log.log_end_offset]
    end = log.log_end_offset
    steps = count_fs_steps(None)
    stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=checkpoint)
    total_steps = len(steps)
    count_fs_steps(None)
    assert stats is not None and stats.records_removed > 0
    assert stats.segments_after < stats.segments_before  # groups of several segments
    post = read_all(log)
    log.close()
    assert post != pre and total_steps > 20

    outcomes = set()
    for crash_at in range(1, total_steps + 1):
        directory = copy_of(source, tmp_path / f"crash-{crash_at}")
        log = open_log(directory, clock, clean=True)
        count_fs_steps(crash_at)
        with pytest.raises(Crash) as crashed:
            LogCleaner(time_ms=clock).clean(log, first_dirty_offset=checkpoint)
        where = f"crash at step {crash_at} ({crashed.value})"
        count_fs_steps(None)
        del log  # abandoned, not closed: a dead process
        recovered = open_log(directory, clock, clean=False)
        assert leftovers(directory) == [], where
        assert recovered.log_end_offset == end, where
        got = read_all(recovered)
        matches = [
            b for b in bases if got == [r for r in post if r[0] < b] + [r for r in pre if r[0] >= b]
        ]
        assert matches, f"{where}: the log is not cleaned-below/uncleaned-above any boundary"
        outcomes.add("pre" if got == pre else "post" if got == post else "between groups")
        # Still a working log: appends go on, and cleaning again finishes the job.
        put(recovered, clock, [(b"after", b"crash")])
        again = LogCleaner(time_ms=clock).clean(recovered, first_dirty_offset=checkpoint)
        if got != post:
            assert again is not None, where
        assert read_all(recovered)[: len(post)] == post, where
        recovered.close()
        shutil.rmtree(directory)
    # Crashes landed before any commit, between groups and after the last one.
    assert outcomes == {"pre", "between groups", "post"}


def test_loading_removes_uncommitted_files(
    pristine: tuple[Path, int, Clock], tmp_path: Path
) -> None:
    source, _, clock = pristine
    directory = copy_of(source, tmp_path / "log")
    log = open_log(directory, clock, clean=True)
    before = read_all(log)
    log.close()
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"half a segment")
    (directory / "00000000000000000000.index.cleaned").write_bytes(b"")
    staging = directory / "00000000000000000000.cleaned"
    staging.mkdir()
    (staging / "00000000000000000000.log").write_bytes(b"")
    log = open_log(directory, clock, clean=False)
    assert leftovers(directory) == []
    assert read_all(log) == before
    log.close()
