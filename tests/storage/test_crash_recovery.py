"""Crash recovery of a partition log: killed writers, torn writes, bit flips, broken indexes.

The fault model, i.e. what a crash or a bad disk may leave behind:

- A writer process killed with SIGKILL at any moment: while starting, during its own recovery,
  between appends or in the middle of one, while rolling a segment. The page cache survives a
  killed process, so every acknowledged append must still be there after recovery.
- The tail of the last ``.log`` file cut short, bit-flipped, overwritten, or followed by
  garbage; a segment in the middle of the log damaged the same way; a second crash in the
  middle of the recovery that repairs it.
- Index files that are missing, cut to a size that is not a whole number of entries, or hold
  entries that break the index's order: they fail the sanity check and must be rebuilt.
- ``*.deleted`` and ``*.tmp`` files, and index files whose ``.log`` is gone.

One fault is left out on purpose: a ``baseOffset`` that *grows*. The field is outside the CRC
(the log patches it on append, as Kafka does), and offsets may legitimately jump forward
(compaction, follower appends), so nothing can tell such a flip from real data. The faults
below never raise a base offset; they do lower some, which recovery must catch because offsets
then go backwards.

After recovery the same invariants are checked every time (:func:`check_log`): the log is
exactly a prefix, by whole batches, of the deterministic sequence ``crash_writer.py`` appends,
and the length of that prefix is computed from the fault (:func:`expected_end_after_damage`);
no reader returns a byte of a corrupt batch; lookups by offset and by time are right; appends
continue at the log end; a second open changes nothing.

Every case is driven by one seed and every assertion message carries it. To replay a case, run
its parametrized id, e.g. ``pytest tests/storage/test_crash_recovery.py -k 'tail and flip-7'``.
The SIGKILL test (marked slow) takes its seed from ``SPARK_MQ_CRASH_SEED`` (default 1); its
seed fixes the schedule (delays, recovery points, configuration), while where exactly each kill
lands is up to the OS. A killed process never leaves a torn write behind in practice (the page
cache has every byte a ``pwritev`` copied), so torn tails are the fast tests' business.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

from spark_mq.config import LONG_MAX
from spark_mq.errors import CorruptRecordError
from spark_mq.storage import abstract_index, file_records
from spark_mq.storage.batch_decoder import iter_batches, validate_batch_body
from spark_mq.storage.codecs import codec_for_name
from spark_mq.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT
from spark_mq.storage.log import MAX_TIMESTAMP, FetchIsolation, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import BatchHeader, encode_batch
from spark_mq.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TimestampAndOffset

WRITER_PATH = Path(__file__).with_name("crash_writer.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _load_writer_module() -> ModuleType:
    # Loaded by path so that the tests do not depend on pytest's import mode.
    spec = importlib.util.spec_from_file_location("crash_writer", WRITER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("crash_writer", module)
    spec.loader.exec_module(module)
    return module


cw = _load_writer_module()

FAST_SEEDS = range(16)
_BASE_OFFSET = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------
# The deterministic sequence and the invariant checker


class Expected:
    """The writer's deterministic sequence for one seed, computed lazily and cached."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.batches: list[cw.ExpectedBatch] = []
        self._bases: list[int] = []

    def _extend_past(self, offset: int) -> None:
        next_offset = self.batches[-1].next_offset if self.batches else 0
        while next_offset <= offset:
            batch = cw.expected_batch(self.seed, next_offset)
            self.batches.append(batch)
            self._bases.append(next_offset)
            next_offset = batch.next_offset

    def batch_at(self, base_offset: int) -> cw.ExpectedBatch:
        """The batch that starts at ``base_offset``, which must be a batch boundary."""
        self._extend_past(base_offset)
        i = bisect.bisect_right(self._bases, base_offset) - 1
        batch = self.batches[i]
        assert batch.base_offset == base_offset, (
            f"seed={self.seed}: offset {base_offset} is not a batch boundary of the sequence"
        )
        return batch

    def batch_holding(self, offset: int) -> cw.ExpectedBatch:
        self._extend_past(offset)
        return self.batches[bisect.bisect_right(self._bases, offset) - 1]

    def records(self, start: int, end: int) -> tuple[list[bytes], list[bytes], list[int]]:
        """Keys, values and timestamps of offsets ``[start, end)``."""
        keys: list[bytes] = []
        values: list[bytes] = []
        stamps: list[int] = []
        offset = start
        while offset < end:
            batch = self.batch_holding(offset)
            lo = offset - batch.base_offset
            hi = min(end, batch.next_offset) - batch.base_offset
            keys += batch.keys[lo:hi]
            values += batch.values[lo:hi]
            stamps += batch.timestamps[lo:hi]
            offset = batch.base_offset + hi
        return keys, values, stamps

    def encoded(self, base_offset: int) -> bytes:
        batch = self.batch_at(base_offset)
        return encode_batch(
            pa.array(batch.values, pa.binary()),
            key=pa.array(batch.keys, pa.binary()),
            timestamp=pa.array(batch.timestamps, pa.int64()),
            codec=batch.codec,
        )


def append_next(log: PartitionLog, expected: Expected) -> None:
    """Append the sequence's next batch and check the offsets the log gave it."""
    base = log.log_end_offset
    batch = expected.batch_at(base)
    info = log.append(expected.encoded(base))
    assert (info.first_offset, info.last_offset + 1) == (base, batch.next_offset), (
        f"seed={expected.seed}: append at log end {base} got offsets "
        f"{info.first_offset}..{info.last_offset}"
    )


def _check_header(header: BatchHeader, expected: Expected, base_offset: int) -> None:
    batch = expected.batch_at(base_offset)
    ctx = f"seed={expected.seed} batch@{base_offset}"
    assert header.base_offset == base_offset, f"{ctx}: base offset {header.base_offset}"
    assert header.record_count == len(batch.values), f"{ctx}: {header.record_count} records"
    assert header.last_offset_delta == len(batch.values) - 1, ctx
    assert header.codec_id == codec_for_name(batch.codec).id, ctx
    assert header.max_timestamp == batch.timestamps[-1], ctx


def check_log(
    log: PartitionLog, expected: Expected, *, end: int, start: int = 0, rng: random.Random
) -> None:
    """Every invariant of a recovered log that holds exactly ``[start, end)`` of the sequence."""
    ctx = f"seed={expected.seed}"
    assert log.log_end_offset == end, f"{ctx}: log end {log.log_end_offset}, expected {end}"
    assert log.log_start_offset == start, f"{ctx}: log start {log.log_start_offset} != {start}"
    assert log.high_watermark == end, ctx

    # Structure: contiguous segments of whole batches of the sequence, nothing after the last.
    segments = log.segments
    offset = segments[0].base_offset
    assert offset <= start, ctx
    for segment in segments:
        assert segment.base_offset == offset, (
            f"{ctx}: segment {segment.base_offset} does not start at {offset}: a hole in the log"
        )
        position = 0
        boundaries: dict[int, int] = {}
        for header, pos in segment.records.headers():
            _check_header(header, expected, offset)
            boundaries[offset] = pos
            offset = header.next_offset
            position = pos + header.size
        assert position == segment.size_bytes, (
            f"{ctx}: segment {segment.base_offset} has {segment.size_bytes - position} bytes "
            "after its last whole batch"
        )
        assert segment.next_offset() == offset, ctx
        # Every index entry points at a batch boundary; every time index entry is a batch's
        # largest timestamp (timestamps follow offsets in the sequence).
        for i in range(segment.offset_index.entries):
            entry = segment.offset_index.entry(i)
            assert boundaries.get(entry.offset) == entry.position, f"{ctx}: bad index {entry}"
        for i in range(segment.time_index.entries):
            entry = segment.time_index.entry(i)
            assert segment.base_offset <= entry.offset < offset, f"{ctx}: bad time index {entry}"
            assert entry.timestamp == cw.BASE_TIMESTAMP_MS + entry.offset, ctx
    assert offset == end, f"{ctx}: batches end at {offset}, log end is {end}"

    # The raw reader: every byte it hands out is a whole, valid batch of the sequence.
    offset = start
    while offset < end:
        info = log.read(offset, rng.choice([1, 2048, 1 << 20]), isolation=FetchIsolation.LOG_END)
        assert info.records is not None, f"{ctx}: nothing to read at {offset} < {end}"
        with info.records as file_range:
            data = file_range.read()
        consumed = 0
        for header, pos in iter_batches(data):
            validate_batch_body(data, pos, header)
            # The first batch is the one holding the offset asked for; the rest follow it.
            want = offset if consumed else expected.batch_holding(offset).base_offset
            _check_header(header, expected, want)
            consumed = pos + header.size
            offset = header.next_offset
        assert consumed == len(data), f"{ctx}: read() returned a partial batch"

    # The decoding reader: exactly the sequence's records, offset by offset.
    offset = start
    while offset < end:
        table = log.read_records(offset, rng.choice([1, 4096, 1 << 20]))
        n = table.num_rows
        assert n > 0, f"{ctx}: read_records({offset}) returned nothing below the log end {end}"
        keys, values, stamps = expected.records(offset, offset + n)
        assert table.column("offset").to_pylist() == list(range(offset, offset + n)), ctx
        assert table.column("value").to_pylist() == values, f"{ctx}: values at {offset}"
        assert table.column("key").to_pylist() == keys, f"{ctx}: keys at {offset}"
        assert table.column("timestamp").to_pylist() == stamps, f"{ctx}: timestamps at {offset}"
        offset += n
    assert log.read_records(end).num_rows == 0, ctx

    # Lookups through the rebuilt indexes.
    if end > start:
        for offset in [start, end - 1, *(rng.randrange(start, end) for _ in range(5))]:
            first = log.read_records(offset, 1).column("offset")[0].as_py()
            assert first == offset, f"{ctx}: read_records({offset}) starts at {first}"
            found = log.find_offset_by_timestamp(cw.BASE_TIMESTAMP_MS + offset)
            assert found == TimestampAndOffset(cw.BASE_TIMESTAMP_MS + offset, offset), (
                f"{ctx}: lookup by time of offset {offset} gave {found}"
            )
        newest = log.find_offset_by_timestamp(MAX_TIMESTAMP)
        assert newest == TimestampAndOffset(cw.BASE_TIMESTAMP_MS + end - 1, end - 1), ctx
    assert log.find_offset_by_timestamp(cw.BASE_TIMESTAMP_MS + end) is None, ctx


def all_files(directory: Path) -> dict[str, bytes]:
    """Every file of a directory and its contents."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def segment_file_names(directory: Path) -> set[str]:
    """Segment files only: producer state snapshots are named by offset, not segment base, and
    the leader epoch checkpoint belongs to the whole partition."""
    return {
        p.name
        for p in directory.iterdir()
        if not p.name.endswith(".snapshot") and p.name != LEADER_EPOCH_CHECKPOINT
    }


def open_log(directory: Path, config: LogConfig, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(directory, config, topic="t", partition=0, **kwargs)  # type: ignore[arg-type]


def recover_and_check(
    directory: Path,
    config: LogConfig,
    expected: Expected,
    rng: random.Random,
    *,
    end: int,
    start: int = 0,
    recovery_point: int,
    had_clean_shutdown: bool = False,
) -> None:
    """Open (recovering) and check; reopen (a no-op); append and check; reopen clean and check."""
    ctx = f"seed={expected.seed}"
    kwargs: dict[str, object] = {
        "recovery_point": recovery_point,
        "had_clean_shutdown": had_clean_shutdown,
        "log_start_offset": start,
    }
    log = open_log(directory, config, **kwargs)
    try:
        # Everything left was validated (or was clean) and fsynced: the whole log is durable.
        assert log.recovery_point == end, ctx
        check_log(log, expected, end=end, start=start, rng=rng)
    finally:
        log.close()
    names = segment_file_names(directory)
    assert all(n.endswith((".log", INDEX_SUFFIX, TIME_INDEX_SUFFIX, ".txnindex")) for n in names), (
        f"{ctx}: stray files left after recovery: {sorted(names)}"
    )
    assert {n.split(".")[0] for n in names} == {
        n.split(".")[0] for n in names if n.endswith(".log")
    }, f"{ctx}: index files without a .log after recovery: {sorted(names)}"
    before = all_files(directory)

    # A second open of what recovery left must find nothing to do: not a byte changes, not
    # even in the indexes it rebuilds.
    log = open_log(directory, config, **kwargs)
    try:
        assert log.log_end_offset == end, ctx
    finally:
        log.close()
    assert all_files(directory) == before, f"{ctx}: a second recovery changed the files"

    log = open_log(directory, config, **kwargs)
    try:
        # New appends continue the sequence at the log end.
        for _ in range(rng.randint(1, 3)):
            append_next(log, expected)
        new_end = log.log_end_offset
        check_log(log, expected, end=new_end, start=start, rng=rng)
    finally:
        log.close()
    log = open_log(
        directory, config, recovery_point=new_end, had_clean_shutdown=True, log_start_offset=start
    )
    try:
        check_log(log, expected, end=new_end, start=start, rng=rng)
    finally:
        log.close()


# ---------------------------------------------------------------------------------------------
# Building logs and damaging them


def random_config(rng: random.Random) -> LogConfig:
    return LogConfig(
        segment_bytes=rng.randint(8, 32) * 1024,
        # Timestamps of the sequence are from 2023: only size (and full indexes) may roll.
        segment_ms=LONG_MAX,
        retention_ms=-1,
        index_interval_bytes=rng.choice([0, 1, 300, 1024, 4096]),
        # Small indexes fill up and roll segments too.
        segment_index_bytes=rng.choice([96, 240, 1024, 1 << 20]),
    )


def build_log(
    directory: Path, expected: Expected, rng: random.Random, *, min_segments: int = 1
) -> tuple[LogConfig, int]:
    """A log of the sequence with at least ``min_segments`` segments; returns config and end."""
    config = random_config(rng)
    log = open_log(directory, config)
    try:
        batches = rng.randint(10, 60)
        while batches > 0 or log.num_segments < min_segments:
            append_next(log, expected)
            batches -= 1
        end = log.log_end_offset
    finally:
        log.close()
    return config, end


def batches_of(path: Path) -> tuple[bytes, list[tuple[BatchHeader, int]]]:
    """The bytes of a healthy ``.log`` file and its batches."""
    data = path.read_bytes()
    batches = list(iter_batches(data))
    assert sum(h.size for h, _ in batches) == len(data)
    return data, batches


def segment_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def expected_end_after_damage(
    batches: list[tuple[BatchHeader, int]], before: bytes, after: bytes, segment_end: int
) -> tuple[int, bool]:
    """Where recovery of a damaged segment must cut the log, and whether it cuts at all.

    A batch is damaged if it is cut short, if its base offset went down (offsets go
    backwards), or if any byte changed outside the partition leader epoch (bytes 12..15, not
    covered by the CRC and harmless to the records). Recovery keeps the batches before the
    first damaged one. If no batch is damaged but bytes were added after the last one, it cuts
    them off, which also deletes every later segment.
    """
    for header, pos in batches:
        end = pos + header.size
        if len(after) < end:
            return header.base_offset, True
        old, new = before[pos:end], after[pos:end]
        (old_base,) = _BASE_OFFSET.unpack_from(old)
        (new_base,) = _BASE_OFFSET.unpack_from(new)
        assert new_base <= old_base, "the fault model never raises a base offset"
        if new_base < old_base or old[8:12] != new[8:12] or old[16:] != new[16:]:
            return header.base_offset, True
    return segment_end, len(after) > len(before)


def _batch_starts(batches: list[tuple[BatchHeader, int]]) -> list[int]:
    return [pos for _, pos in batches]


def _raises_base_offset(
    batches: list[tuple[BatchHeader, int]], data: bytes, at: int, bit: int
) -> bool:
    """Whether flipping ``bit`` of byte ``at`` would raise a batch's base offset."""
    starts = _batch_starts(batches)
    i = bisect.bisect_right(starts, at) - 1
    return i >= 0 and at - starts[i] < 8 and not data[at] & (1 << bit)


def damage(
    rng: random.Random, data: bytes, batches: list[tuple[BatchHeader, int]], kind: str
) -> bytes:
    """Return ``data`` damaged near its end by a fault of ``kind`` (never raising a base offset)."""
    out = bytearray(data)
    size = len(data)
    if kind == "truncate":
        return bytes(out[: rng.randint(0, max(size - 1, 0))])
    if kind == "flip":
        window = rng.randint(1, min(size, 4096))
        for at in rng.sample(range(size - window, size), min(window, rng.randint(1, 8))):
            bit = rng.randrange(8)
            if not _raises_base_offset(batches, data, at, bit):
                out[at] ^= 1 << bit
        return bytes(out)
    if kind == "zero_tail":
        # A write whose last pages never reached the disk reads back as zeros.
        n = rng.randint(1, min(size, 8192))
        out[size - n :] = bytes(n)
        return bytes(out)
    if kind == "overwrite":
        # Random bytes or zeros inside the CRC-covered part of one of the last batches.
        header, pos = batches[-rng.randint(1, min(len(batches), 4))]
        lo = rng.randint(pos + 21, pos + header.size - 1)
        hi = rng.randint(lo + 1, pos + header.size)
        out[lo:hi] = rng.randbytes(hi - lo) if rng.random() < 0.5 else bytes(hi - lo)
        return bytes(out)
    if kind == "lower_base":
        candidates = [(h, p) for h, p in batches[-4:] if h.base_offset > 0]
        if candidates:
            header, pos = rng.choice(candidates)
            _BASE_OFFSET.pack_into(out, pos, rng.randrange(header.base_offset))
        return bytes(out)
    if kind == "garbage":
        n = rng.randint(1, 3000)
        choice = rng.randrange(3)
        if choice == 0:
            out += rng.randbytes(n)
        elif choice == 1:
            out += bytes(n)
        else:
            # A torn copy of a real batch, as if the next append stopped part way.
            header, pos = rng.choice(batches)
            torn = bytearray(data[pos : pos + rng.randint(1, header.size - 1)])
            if len(torn) >= 8:
                _BASE_OFFSET.pack_into(torn, 0, batches[-1][0].next_offset)
            out += torn
        return bytes(out)
    raise AssertionError(f"unknown fault {kind}")


TAIL_FAULTS = ["truncate", "flip", "zero_tail", "overwrite", "lower_base", "garbage"]


# ---------------------------------------------------------------------------------------------
# Damage to the tail of the log


@pytest.mark.parametrize("seed", FAST_SEEDS)
@pytest.mark.parametrize("kind", TAIL_FAULTS)
def test_damaged_tail_is_cut_at_the_first_bad_batch(tmp_path: Path, kind: str, seed: int) -> None:
    """A torn, flipped, overwritten or overlong last segment is cut back to its valid prefix."""
    rng = random.Random(f"tail:{kind}:{seed}")
    expected = Expected(seed)
    config, end = build_log(tmp_path, expected, rng)
    last = segment_paths(tmp_path)[-1]
    before, batches = batches_of(last)
    after = damage(rng, before, batches, kind)
    last.write_bytes(after)
    cut, _ = expected_end_after_damage(batches, before, after, end)
    # The last segment is recovered wherever the recovery point is, even past the log end.
    recovery_point = rng.choice([0, rng.randint(0, end), end, end + 10])
    recover_and_check(tmp_path, config, expected, rng, end=cut, recovery_point=recovery_point)


# ---------------------------------------------------------------------------------------------
# Damage to a segment in the middle of the log


class _SimulatedCrash(BaseException):
    """Raised by an injected fault to stop recovery the way a crash would."""


def _crash_at_nth_file_deletion(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Make the ``n``-th (0-based) deletion of a segment or index file crash instead."""
    count = [0]

    def wrap(original: Callable[..., object]) -> Callable[..., object]:
        def delete(self: object) -> object:
            if count[0] == n:
                raise _SimulatedCrash
            count[0] += 1
            return original(self)

        return delete

    monkeypatch.setattr(file_records.FileRecords, "delete", wrap(file_records.FileRecords.delete))
    monkeypatch.setattr(
        abstract_index.AbstractIndex, "delete", wrap(abstract_index.AbstractIndex.delete)
    )


@pytest.mark.parametrize("seed", FAST_SEEDS)
@pytest.mark.parametrize("crash_during_recovery", [False, True], ids=["", "crash"])
def test_damaged_middle_segment_cuts_the_log_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, crash_during_recovery: bool
) -> None:
    """Recovering from before a damaged segment cuts it and removes every later segment.

    With ``crash``, the first recovery crashes at a random file deletion (of the later
    segments) and a second recovery must still end with exactly the same log: nothing after a
    hole may survive a crash of the recovery itself.
    """
    rng = random.Random(f"middle:{crash_during_recovery}:{seed}")
    expected = Expected(seed)
    config, end = build_log(tmp_path, expected, rng, min_segments=3)
    paths = segment_paths(tmp_path)
    m = rng.randrange(len(paths) - 1)
    next_base = int(paths[m + 1].name.split(".")[0])
    before, batches = batches_of(paths[m])
    kind = rng.choice(TAIL_FAULTS)
    # Overwrites and lowered base offsets hit any batch of the segment, not only its last ones.
    pick = (
        batches[: rng.randint(1, len(batches))] if kind in ("overwrite", "lower_base") else batches
    )
    after = damage(rng, before, pick, kind)
    paths[m].write_bytes(after)
    cut, cuts = expected_end_after_damage(batches, before, after, next_base)
    if not cuts:
        cut = end  # The fault happened to change nothing that matters (an epoch, zeros on zeros).
    # Any recovery point whose segment is at or before the damaged one.
    recovery_point = rng.randint(0, next_base - 1)
    if crash_during_recovery and cuts:
        later_files = 3 * (len(paths) - m - 1)
        _crash_at_nth_file_deletion(monkeypatch, rng.randrange(later_files))
        with contextlib.suppress(_SimulatedCrash):
            open_log(tmp_path, config, recovery_point=recovery_point).close()
        monkeypatch.undo()
    recover_and_check(tmp_path, config, expected, rng, end=cut, recovery_point=recovery_point)


@pytest.mark.parametrize("seed", range(8))
def test_damage_below_the_recovery_point_is_never_served(tmp_path: Path, seed: int) -> None:
    """A bit flip in a segment below the recovery point is not scanned on open, but the
    decoding reader refuses the bad batch, and every other batch reads back intact."""
    rng = random.Random(f"below:{seed}")
    expected = Expected(seed)
    config, end = build_log(tmp_path, expected, rng, min_segments=3)
    paths = segment_paths(tmp_path)
    m = rng.randrange(len(paths) - 1)
    next_base = int(paths[m + 1].name.split(".")[0])
    data, batches = batches_of(paths[m])
    header, pos = rng.choice(batches)
    # One flipped bit inside the CRC-covered bytes: the batch keeps its size and place.
    at = rng.randrange(pos + 21, pos + header.size)
    corrupt = bytearray(data)
    corrupt[at] ^= 1 << rng.randrange(8)
    paths[m].write_bytes(bytes(corrupt))
    bad = header.base_offset

    log = open_log(tmp_path, config, recovery_point=rng.randint(next_base, end))
    try:
        assert log.log_end_offset == end, f"seed={seed}"
        offset = 0
        while offset < end:
            batch = expected.batch_at(offset)
            if offset == bad:
                with pytest.raises(CorruptRecordError):
                    log.read_records(offset, 1)
            else:
                table = log.read_records(offset, 1)
                assert table.column("value").to_pylist() == batch.values, f"seed={seed} @{offset}"
            offset = batch.next_offset
    finally:
        log.close()


# ---------------------------------------------------------------------------------------------
# Broken indexes


def _break_index(rng: random.Random, path: Path, kind: str, log_size: int) -> None:
    data = bytearray(path.read_bytes())
    entry = 8 if path.suffix == INDEX_SUFFIX else 12
    if kind == "missing":
        path.unlink()
    elif kind == "unaligned":
        # Cut inside an entry, or a few junk bytes after the last one.
        if data and rng.random() < 0.5:
            cut = rng.randrange(len(data) // entry) * entry + rng.randint(1, entry - 1)
            path.write_bytes(bytes(data[:cut]))
        else:
            path.write_bytes(bytes(data) + rng.randbytes(rng.randint(1, entry - 1)))
    elif kind == "out_of_order":
        # A copy of the first entry (or an entry with a huge key) before the real ones.
        first = bytes(data[:entry]) if data else b""
        if not first:
            first = struct.pack(">iI", 5, 0) if entry == 8 else struct.pack(">qi", 10**12, 5)
        path.write_bytes(first + first + bytes(data))
    elif kind == "past_end":
        if entry == 8:
            path.write_bytes(
                bytes(data) + struct.pack(">iI", 2**31 - 1, log_size + rng.randint(0, 10**6))
            )
        else:
            path.write_bytes(struct.pack(">qi", -rng.randint(1, 10**9), 0) + bytes(data))
    elif kind == "sparse":
        # Entries cut off at an entry boundary, or zeroed: a valid index, only sparser. It
        # passes the sanity check and is kept; lookups must still be right.
        keep = rng.randint(0, len(data) // entry) * entry
        zeros = bytes(len(data) - keep) if rng.random() < 0.5 else b""
        path.write_bytes(bytes(data[:keep]) + zeros)
    else:
        raise AssertionError(kind)


INDEX_FAULTS = ["missing", "unaligned", "out_of_order", "past_end", "sparse"]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
@pytest.mark.parametrize("kind", INDEX_FAULTS)
def test_index_that_fails_its_sanity_check_is_rebuilt(
    tmp_path: Path, kind: str, clean: bool, seed: int
) -> None:
    """Missing or insane index files are rebuilt from the log, after a clean shutdown too,
    exactly as the appends wrote them; a sane but sparser index may be kept."""
    rng = random.Random(f"index:{kind}:{clean}:{seed}")
    expected = Expected(seed)
    config, end = build_log(tmp_path, expected, rng, min_segments=2)
    originals = {p.name: p.read_bytes() for p in tmp_path.glob("*index")}
    for log_path in rng.sample(segment_paths(tmp_path), rng.randint(1, 2)):
        for suffix in rng.choice(
            [[INDEX_SUFFIX], [TIME_INDEX_SUFFIX], [INDEX_SUFFIX, TIME_INDEX_SUFFIX]]
        ):
            _break_index(rng, log_path.with_suffix(suffix), kind, log_path.stat().st_size)
    # Unclean, the recovery point is the log end: only the last segment is re-read, so the
    # others depend on the sanity check alone.
    recovery_point = end if rng.random() < 0.7 else rng.randint(0, end)
    log = open_log(tmp_path, config, recovery_point=recovery_point, had_clean_shutdown=clean)
    try:
        check_log(log, expected, end=end, rng=rng)
    finally:
        log.close()
    if kind != "sparse":
        rebuilt = {p.name: p.read_bytes() for p in tmp_path.glob("*index")}
        assert rebuilt == originals, (
            f"seed={seed}: rebuilt indexes differ from the ones the appends wrote"
        )
    recover_and_check(
        tmp_path, config, expected, rng, end=end, recovery_point=end, had_clean_shutdown=clean
    )


@pytest.mark.parametrize("seed", range(8))
def test_random_index_damage_is_repaired_by_a_full_recovery(tmp_path: Path, seed: int) -> None:
    """Indexes are caches: whatever is in them, recovering from offset 0 rebuilds them all."""
    rng = random.Random(f"index-random:{seed}")
    expected = Expected(seed)
    config, end = build_log(tmp_path, expected, rng, min_segments=2)
    for path in tmp_path.glob("*index"):
        data = bytearray(path.read_bytes())
        if data and rng.random() < 0.7:
            for at in rng.sample(range(len(data)), rng.randint(1, min(len(data), 6))):
                data[at] ^= 1 << rng.randrange(8)
        else:
            data += rng.randbytes(rng.randint(0, 40))
        path.write_bytes(bytes(data))
    recover_and_check(tmp_path, config, expected, rng, end=end, recovery_point=0)


# ---------------------------------------------------------------------------------------------
# Leftovers of interrupted deletions


@pytest.mark.parametrize("seed", range(8))
def test_deleted_and_orphan_files_are_removed(tmp_path: Path, seed: int) -> None:
    """``.deleted`` files, ``.tmp`` files and index files without a ``.log`` are cleaned up
    and never mistaken for segments, even where a segment will be rolled later."""
    rng = random.Random(f"leftovers:{seed}")
    expected = Expected(seed)
    config, end = build_log(tmp_path, expected, rng, min_segments=3)
    paths = segment_paths(tmp_path)
    contents = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    # Move the log start into the third segment: retention deletes the first two.
    start = rng.randint(int(paths[2].name.split(".")[0]), end)
    log = open_log(tmp_path, config, recovery_point=end, had_clean_shutdown=True)
    try:
        assert log.delete_records_before(start) == start
        assert log.num_segments <= len(paths) - 2
    finally:
        log.close()
    # A crash between the rename and the removal of the deleted segments' files.
    for name, data in contents.items():
        if not (tmp_path / name).exists() and rng.random() < 0.8:
            (tmp_path / f"{name}.deleted").write_bytes(data)
    # Index files of segments that are gone, one at the offset where the next segment will be
    # rolled, all holding entries that would pass a sanity check; an unfinished temporary file.
    for base in {0, end, end + rng.randint(1, 50), 10**9}:
        (tmp_path / f"{base:020d}{INDEX_SUFFIX}").write_bytes(
            struct.pack(">iIiI", 1, 10**6, 2, 2 * 10**6)
        )
        (tmp_path / f"{base:020d}{TIME_INDEX_SUFFIX}").write_bytes(struct.pack(">qi", 10**13, 3))
    (tmp_path / "recovery-point-offset-checkpoint.tmp").write_bytes(b"junk")
    leftovers = segment_file_names(tmp_path)

    log = open_log(tmp_path, config, recovery_point=rng.randint(0, end), log_start_offset=start)
    try:
        names = segment_file_names(tmp_path)
        assert not any(n.endswith((".deleted", ".tmp")) for n in names), f"seed={seed}: {names}"
        assert names <= leftovers, f"seed={seed}"
        check_log(log, expected, end=end, start=start, rng=rng)
        # A segment rolled where an orphan index was must start with empty indexes.
        log.roll()
        assert log.active_segment.base_offset == end, f"seed={seed}"
        assert log.active_segment.offset_index.entries == 0, f"seed={seed}"
        assert log.active_segment.time_index.entries == 0, f"seed={seed}"
        while log.log_end_offset < end + 60 or log.num_segments < 2:
            append_next(log, expected)
            if rng.random() < 0.2:
                log.roll()
        new_end = log.log_end_offset
        check_log(log, expected, end=new_end, start=start, rng=rng)
    finally:
        log.close()
    recover_and_check(
        tmp_path,
        config,
        expected,
        rng,
        end=new_end,
        start=start,
        recovery_point=rng.randint(0, new_end),
    )


# ---------------------------------------------------------------------------------------------
# A real process killed with SIGKILL, many times


def _writer_command(
    directory: Path, seed: int, recovery_point: int, config: LogConfig, acks: Path
) -> list[str]:
    return [
        sys.executable,
        str(WRITER_PATH),
        str(directory),
        str(seed),
        str(recovery_point),
        json.dumps(config.to_properties()),
        str(acks),
    ]


def _events(acks: Path, start: int) -> Iterator[tuple[str, int, int]]:
    """Whole lines of the ack file from byte ``start``: ``(kind, a, b)``."""
    text = acks.read_bytes()[start:].decode()
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            return  # A line the kill cut short: it acknowledges nothing.
        kind, *numbers = line.split()
        yield kind, int(numbers[0]), int(numbers[-1])


def _wait_for_open(process: subprocess.Popen[bytes], acks: Path, start: int, seed: int) -> None:
    # A bound on a wait, not a timing assertion: a writer that never opens its log is stuck.
    deadline = time.monotonic() + 120
    while not any(kind == "open" for kind, _, _ in _events(acks, start)):
        if process.poll() is not None:
            return  # It died on its own; the caller reports how.
        assert time.monotonic() < deadline, f"seed={seed}: the writer did not open its log"
        time.sleep(0.005)


def _some_offset_up_to(rng: random.Random, high: int, *, at_end: int = 1) -> int:
    """0, ``high``, or an offset in between; the draws never depend on ``high``, which
    depends on timing, so the rest of the seeded schedule stays the same from run to run."""
    choice = rng.randrange(2 + at_end)
    between = int(rng.random() * (high + 1))
    return 0 if choice == 0 else between if choice == 1 else high


#: Another seed explores another schedule: SPARK_MQ_CRASH_SEED=7 pytest -m slow ...
CRASH_SEED = int(os.environ.get("SPARK_MQ_CRASH_SEED", "1"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [CRASH_SEED])
def test_sigkilled_writer_always_recovers_to_an_acknowledged_prefix(
    tmp_path: Path, seed: int
) -> None:
    """A writer process is killed with SIGKILL at random moments, many times over.

    After every kill the parent opens the log as after an unclean stop (at a random recovery
    point, in place or on a copy so that the writer also recovers crash images itself) and
    checks it: exactly a prefix of the sequence, by whole batches, holding every acknowledged
    record; the next writer continues at the log end the parent found. Some kills land while
    the writer is starting or recovering.
    """
    rng = random.Random(f"sigkill:{seed}")
    expected = Expected(seed)
    config = LogConfig(
        segment_bytes=rng.randint(8, 64) * 1024,
        segment_ms=LONG_MAX,
        retention_ms=-1,
        index_interval_bytes=rng.choice([0, 100, 1024, 4096]),
        segment_index_bytes=rng.choice([240, 1024, 4096, 1 << 20]),
        flush_messages=rng.choice([LONG_MAX, LONG_MAX, 50]),
    )
    directory = tmp_path / "t-0"
    copy = tmp_path / "copy"
    acks = tmp_path / "acks"
    acks.touch()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    acked_end = 0  # Every record below this was acknowledged by some writer.
    log_end = 0  # Where the last check found the log end.
    kills = 24
    for round_no in range(kills):
        ctx = f"seed={seed} round={round_no}"
        ack_start = acks.stat().st_size
        # Recovery from 0 re-reads everything and is slow on a long log: only sometimes.
        recovery_point = _some_offset_up_to(rng, log_end, at_end=2)
        stderr_path = tmp_path / f"writer-{round_no}.err"
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                _writer_command(directory, seed, recovery_point, config, acks),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        try:
            if rng.random() < 0.2:
                time.sleep(rng.uniform(0, 0.6))  # Maybe while importing or recovering.
            else:
                _wait_for_open(process, acks, ack_start, seed)
                time.sleep(rng.uniform(0, 0.3))
            process.send_signal(signal.SIGKILL)
        finally:
            process.kill()
            returncode = process.wait()
        assert returncode == -signal.SIGKILL, (
            f"{ctx}: the writer exited with {returncode} before it was killed:\n"
            f"{stderr_path.read_text()}"
        )
        events = list(_events(acks, ack_start))
        opened = [a for kind, a, _ in events if kind == "open"]
        if opened:
            assert opened == [log_end], (
                f"{ctx}: the writer recovered the log to {opened[0]}, the parent to {log_end}"
            )
        next_first = log_end
        for kind, first, next_offset in events:
            if kind == "ack":
                assert first == next_first, f"{ctx}: acks are not contiguous at {first}"
                next_first = next_offset
                acked_end = max(acked_end, next_offset)

        # Check in place (the next writer then sees a recovered log) or on a copy (the next
        # writer recovers the crash image itself).
        target = directory
        if rng.random() < 0.5 and directory.exists():
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(directory, copy)
            target = copy
        if not target.exists():
            continue  # Killed before the log directory was even created.
        log = open_log(target, config, recovery_point=_some_offset_up_to(rng, acked_end))
        try:
            log_end = log.log_end_offset
            assert log_end >= acked_end, (
                f"{ctx}: acknowledged records {log_end}..{acked_end - 1} were lost"
            )
            # Its own generator, so that how long the log grew (timing) does not change the
            # schedule of the next rounds.
            check_log(log, expected, end=log_end, rng=random.Random(f"{seed}:{round_no}"))
        finally:
            log.close()
    assert log_end > 0, f"seed={seed}: no writer ever appended anything"
