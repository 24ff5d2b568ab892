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

The pass cleans transactional data too (:mod:`~spark_mq.storage.cleaner_transactions`):
interleaved producers commit and abort, so it removes aborted batches, empties producers'
last batches, drops markers whose data is gone and entries from ``.txnindex`` files, across
groups. So after every crash also: ``read_committed`` is cleaned below a boundary and
uncleaned above it in the same way; no transaction is left open (a marker is never gone
while its data stays); every ``.txnindex`` entry has its marker; and producer state, rebuilt
from the log alone (recovery from offset 0 uses no snapshot), still recognises each
producer's last batch as a duplicate.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.storage.abstract_index import AbstractIndex
from spark_mq.storage.batch_decoder import iter_batches
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_cleaner import LogCleaner
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import ControlType, encode_batch

START_MS = 1_700_000_000_000
RETENTION_MS = 10_000
CONFIG = LogConfig.from_properties(
    {
        "cleanup.policy": "compact",
        "segment.bytes": 3000,
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
) -> bytes:
    data = encode_batch(
        pa.array([v for _, v in pairs], pa.binary()),
        key=pa.array([k for k, _ in pairs], pa.binary()),
        timestamp=pa.array([clock()] * len(pairs), pa.int64()),
        **kw,
    )
    log.append(data)
    return data


def read_all(
    log: PartitionLog, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
) -> list[Record]:
    """All records, read as a consumer does (see test_log_cleaner.read_all)."""
    out: list[Record] = []
    offset = log.log_start_offset
    bound = (
        log.last_stable_offset if isolation is FetchIsolation.TXN_COMMITTED else log.high_watermark
    )
    while offset < bound:
        table, offset = log.read_records_with_next(offset, 64 * 1024, isolation=isolation)
        rows = table.select(["offset", "timestamp", "key", "value"]).to_pylist()
        out.extend((r["offset"], r["timestamp"], r["key"], r["value"]) for r in rows)
    return out


def check_transactions(log: PartitionLog, last_batches: dict[int, bytes], where: str) -> None:
    """No transaction left open, every entry has its marker, retries are duplicates."""
    assert log.last_stable_offset == log.log_end_offset, f"{where}: a transaction is open"
    markers = {
        header.base_offset
        for segment in log.segments
        for header, _ in iter_batches(segment.records.read(0, segment.size_bytes))
        if header.is_control
    }
    for segment in log.segments:
        for txn in segment.txn_index.all_aborted_txns():
            assert txn.last_offset in markers, f"{where}: {txn} outlived its marker"
    end = log.log_end_offset
    for pid, data in last_batches.items():
        assert log.append(data).is_duplicate, f"{where}: producer {pid}'s last batch again"
    assert log.log_end_offset == end


class Transactions:
    """Producers 5, 6 and 7 writing transactions; the bytes of each one's last batch."""

    def __init__(self, log: PartitionLog, clock: Clock) -> None:
        self.log, self.clock = log, clock
        self.seq = {5: 0, 6: 0, 7: 0}
        self.last: dict[int, bytes] = {}

    def write(self, pid: int, pairs: list[tuple[bytes, bytes | None]]) -> None:
        self.last[pid] = put(
            self.log,
            self.clock,
            pairs,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=self.seq[pid],
            is_transactional=True,
        )
        self.seq[pid] += len(pairs)

    def end(self, pid: int, control_type: ControlType) -> None:
        self.log.append_transaction_marker(
            control_type, producer_id=pid, producer_epoch=0, coordinator_epoch=0
        )


@pytest.fixture(scope="module")
def pristine(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, int, Clock, dict[int, bytes]]:
    """A closed log ready for a pass that merges, rewrites and removes across segments.

    Three rounds of writes, each ``delete.retention.ms`` after the last, with a clean after
    the first two: the pass under test then has a clean section newer than the first round,
    so the delete horizon lies past the first round's segments, and small segments to merge.
    Every round has plain records (some tombstones) and interleaved transactions that commit
    or abort, whose keys later rounds overwrite. Returns the directory, the checkpoint for
    the pass, the clock, and each producer's last batch.
    """
    directory = tmp_path_factory.mktemp("pristine")
    clock = Clock()
    log = open_log(directory, clock, clean=True)
    txns = Transactions(log, clock)
    checkpoint = 0
    for round_no in range(3):
        for i in range(3):
            pairs: list[tuple[bytes, bytes | None]] = [
                (b"k%d" % ((i * 3 + j + round_no) % 7), b"v%d-%d-%d" % (round_no, i, j) * 10)
                for j in range(4)
            ]
            if i % 4 == 3:
                pairs[1] = (pairs[1][0], None)  # a tombstone
            put(log, clock, pairs)
            pid = 5 + i % 3
            txns.write(pid, [(b"t%d" % (i % 4), b"txn-%d-%d" % (round_no, i))])
            if i % 2 == 1:
                for ending in (5, 6, 7):
                    # Producer 6 always aborts, the others commit: aborted data and markers
                    # in every round, and committed data that later rounds supersede.
                    if ending in txns.last and log.producer_state.entry(ending) is not None:
                        entry = log.producer_state.entry(ending)
                        if entry is not None and entry.current_txn_first_offset is not None:
                            txns.end(
                                ending, ControlType.ABORT if ending == 6 else ControlType.COMMIT
                            )
        for pid in (5, 6, 7):
            entry = log.producer_state.entry(pid)
            if entry is not None and entry.current_txn_first_offset is not None:
                txns.end(pid, ControlType.ABORT if pid == 6 else ControlType.COMMIT)
        log.roll()
        if round_no < 2:
            stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=checkpoint)
            assert stats is not None
            checkpoint = stats.first_dirty_offset
            clock.now_ms += RETENTION_MS + 1
    log.close()
    return directory, checkpoint, clock, txns.last


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
    # The crash is a killed process, not a power loss: the page cache keeps every write
    # (a shared mapping's pages are the page cache), so fsync and msync change nothing these
    # tests can observe, and thousands of them cost many seconds.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(AbstractIndex, "flush", lambda self: None)

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
    pristine: tuple[Path, int, Clock, dict[int, bytes]],
    tmp_path: Path,
    count_fs_steps: Callable[[int | None], list[str]],
) -> None:
    source, checkpoint, clock, last_batches = pristine
    committed = FetchIsolation.TXN_COMMITTED
    # The outcome without a crash, and the steps it takes.
    reference = copy_of(source, tmp_path / "reference")
    log = open_log(reference, clock, clean=True)
    pre, pre_committed = read_all(log), read_all(log, committed)
    bases = [s.base_offset for s in log.segments] + [log.log_end_offset]
    end = log.log_end_offset
    steps = count_fs_steps(None)
    stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=checkpoint)
    total_steps = len(steps)
    count_fs_steps(None)
    assert stats is not None and stats.records_removed > 0
    assert stats.segments_after < stats.segments_before  # groups of several segments
    # The pass removes aborted data and markers, and keeps emptied last batches.
    assert stats.aborted_records_removed and stats.markers_removed and stats.empty_batches_kept
    post, post_committed = read_all(log), read_all(log, committed)
    log.close()
    assert post != pre and post_committed != pre_committed and total_steps > 20

    def split_at(boundary: int, cleaned: list[Record], uncleaned: list[Record]) -> list[Record]:
        return [r for r in cleaned if r[0] < boundary] + [r for r in uncleaned if r[0] >= boundary]

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
        got, got_committed = read_all(recovered), read_all(recovered, committed)
        matches = [
            b
            for b in bases
            if got == split_at(b, post, pre)
            and got_committed == split_at(b, post_committed, pre_committed)
        ]
        assert matches, f"{where}: the log is not cleaned-below/uncleaned-above any boundary"
        outcomes.add("pre" if got == pre else "post" if got == post else "between groups")
        check_transactions(recovered, last_batches, where)
        # Still a working log: appends go on, and cleaning again finishes the job.
        put(recovered, clock, [(b"after", b"crash")])
        again = LogCleaner(time_ms=clock).clean(recovered, first_dirty_offset=checkpoint)
        if got != post:
            assert again is not None, where
        assert read_all(recovered)[: len(post)] == post, where
        assert read_all(recovered, committed)[: len(post_committed)] == post_committed, where
        recovered.close()
        shutil.rmtree(directory)
    # Crashes landed before any commit, between groups and after the last one.
    assert outcomes == {"pre", "between groups", "post"}


def test_loading_removes_uncommitted_files(
    pristine: tuple[Path, int, Clock, dict[int, bytes]], tmp_path: Path
) -> None:
    source, _, clock, _ = pristine
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
