"""Log compaction (spark_mq.storage.log_cleaner) against a plain-Python reference model.

The model is the list of records ``(offset, timestamp, key, value)`` the log must return. A
clean turns it into exactly what the rules of the module docstring say, computed here
independently from the segments' base offsets and largest timestamps before the clean:
per key, the newest record of the dirty section wins; tombstones go once their segment's
largest timestamp is at or below the delete horizon; records past the cleaned section,
and records without a key, stay. The log is read back with ``read_records`` (so readers must
cope with the offset gaps cleaning leaves) and compared record by record, offsets included.

The clock is injected and only moves when a rule moves it. Small ``segment.bytes`` make
several segments, and so several groups, out of a few appends.
"""

from __future__ import annotations

import dataclasses
import doctest
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spark_mq.errors import ConfigError, CorruptRecordError
from spark_mq.storage import cleaner_filter, cleaner_swap, cleaner_transactions, log_cleaner
from spark_mq.storage.batch_decoder import iter_batches
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_cleaner import (
    DEFAULT_DEDUPE_BUFFER_BYTES,
    CleanerStats,
    LogCleaner,
    cleanable_section,
    dirty_ratio,
)
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import (
    BatchHeader,
    ControlType,
    TimestampType,
    encode_batch,
)

START_MS = 1_700_000_000_000
RETENTION_MS = 10_000


class Clock:
    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@dataclasses.dataclass(frozen=True, slots=True)
class Rec:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


def compact_config(**overrides: object) -> LogConfig:
    props: dict[str, object] = {
        "cleanup.policy": "compact",
        "segment.bytes": 3000,
        "index.interval.bytes": 700,
        "delete.retention.ms": RETENTION_MS,
        "min.cleanable.dirty.ratio": 0.0,
    }
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig.from_properties(props)


def open_log(
    directory: Path | str, config: LogConfig, clock: Clock, **kwargs: object
) -> PartitionLog:
    return PartitionLog.open(directory, config, topic="t", partition=0, time_ms=clock, **kwargs)  # type: ignore[arg-type]


def append(
    log: PartitionLog,
    pairs: Sequence[tuple[bytes | None, bytes | None]],
    clock: Clock,
    **kw: object,
) -> list[Rec]:
    keys = pa.array([k for k, _ in pairs], pa.binary())
    values = pa.array([v for _, v in pairs], pa.binary())
    stamps = pa.array([clock()] * len(pairs), pa.int64())
    info = log.append(encode_batch(values, key=keys, timestamp=stamps, **kw))  # type: ignore[arg-type]
    return [Rec(info.first_offset + i, clock(), k, v) for i, (k, v) in enumerate(pairs)]


def read_all(log: PartitionLog) -> list[Rec]:
    """Every record from the log start, through the decoding reader, as a consumer reads.

    The next offset comes from ``read_records_with_next`` (batch headers): a fetch at an
    offset inside a rewritten batch's span but past its last kept record finds no record
    there, and must still move on.
    """
    out: list[Rec] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        table, next_offset = log.read_records_with_next(offset, max_bytes=64 * 1024)
        assert next_offset > offset, f"no progress at {offset}"
        rows = table.select(["offset", "timestamp", "key", "value"]).to_pylist()
        out.extend(Rec(r["offset"], r["timestamp"], r["key"], r["value"]) for r in rows)
        offset = next_offset
    return out


def expected_after_clean(
    records: list[Rec],
    segments: list[tuple[int, int]],
    *,
    first_dirty: int,
    map_end: int,
    delete_retention_ms: int,
) -> list[Rec]:
    """The model of one clean. ``segments`` are (base offset, largest timestamp) before it."""
    clean = [ts for base, ts in segments if base < first_dirty]
    horizon = clean[-1] - delete_retention_ms if clean else None
    bases = [base for base, _ in segments]
    latest: dict[bytes, int] = {}
    for r in records:
        if first_dirty <= r.offset < map_end and r.key is not None:
            latest[r.key] = r.offset

    def segment_ts(offset: int) -> int:
        i = int(np.searchsorted(bases, offset, side="right")) - 1
        return segments[i][1]

    kept = []
    for r in records:
        if r.offset >= map_end or r.key is None:
            kept.append(r)
            continue
        if r.offset < latest.get(r.key, -1):
            continue
        if r.value is None and horizon is not None and segment_ts(r.offset) <= horizon:
            continue
        kept.append(r)
    return kept


def segments_info(log: PartitionLog) -> list[tuple[int, int]]:
    return [(s.base_offset, s.largest_timestamp_ms) for s in log.segments]


def leftovers(directory: Path | str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap", ".deleted")))


# ---------------------------------------------------------------------------------------------
# The reference-model state machine


class CleanerMachine(RuleBasedStateMachine):
    """Appends, clock ticks, rolls, cleans and reopens, checked against the model."""

    @initialize(
        ratio=st.sampled_from([0.0, 0.4, 0.8]),
        segment_bytes=st.sampled_from([1500, 3000, 8000]),
        small_buffer=st.booleans(),
    )
    def setup(self, ratio: float, segment_bytes: int, small_buffer: bool) -> None:
        self.directory = tempfile.mkdtemp(prefix="cleaner_model_")
        self.clock = Clock()
        self.config = compact_config(segment_bytes=segment_bytes, min_cleanable_dirty_ratio=ratio)
        self.log = open_log(self.directory, self.config, self.clock)
        self.small_buffer = small_buffer
        self.cleaner = LogCleaner(
            time_ms=self.clock,
            dedupe_buffer_bytes=1024 if small_buffer else DEFAULT_DEDUPE_BUFFER_BYTES,
            io_buffer_bytes=2048,
        )
        self.checkpoint = 0
        self.model: list[Rec] = []

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    @rule(
        pairs=st.lists(
            st.tuples(
                st.integers(0, 40).map(lambda i: b"k%d" % i),
                st.one_of(st.none(), st.binary(max_size=24)),
            ),
            min_size=1,
            max_size=8,
        ),
        codec=st.sampled_from(["none", "lz4", "zstd"]),
    )
    def append(self, pairs: list[tuple[bytes, bytes | None]], codec: str) -> None:
        self.model.extend(append(self.log, pairs, self.clock, codec=codec))

    @rule(ms=st.integers(0, 2 * RETENTION_MS))
    def tick(self, ms: int) -> None:
        self.clock.now_ms += ms

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(force=st.booleans())
    def clean(self, force: bool) -> None:
        log = self.log
        before = segments_info(log)
        active = log.active_segment
        active_bytes = active.records.read(0, active.size_bytes)
        end, start = log.log_end_offset, log.log_start_offset
        section = cleanable_section(log, first_dirty_offset=self.checkpoint, now_ms=self.clock())
        stats = self.cleaner.clean(log, first_dirty_offset=self.checkpoint, force=force)
        qualifies = section.dirty_bytes > 0 and (
            force or section.forced or section.dirty_ratio >= self.config.min_cleanable_dirty_ratio
        )
        assert (stats is not None) == qualifies, (section, stats)
        # Offsets, the log end and the active segment never change.
        assert (log.log_end_offset, log.log_start_offset) == (end, start)
        assert log.active_segment is active
        assert active.records.read(0, active.size_bytes) == active_bytes
        assert leftovers(self.directory) == []
        if stats is None:
            return
        map_end = stats.first_dirty_offset
        assert section.first_dirty_offset < map_end <= section.first_uncleanable_offset
        if not self.small_buffer:
            assert map_end == section.first_uncleanable_offset
        self.model = expected_after_clean(
            self.model,
            before,
            first_dirty=section.first_dirty_offset,
            map_end=map_end,
            delete_retention_ms=RETENTION_MS,
        )
        self.checkpoint = map_end
        assert stats.records_kept + stats.records_removed == stats.records_read
        if map_end == section.first_uncleanable_offset:
            # Nothing is dirty any more: cleaning again finds nothing to do.
            assert self.cleaner.clean(log, first_dirty_offset=map_end, force=True) is None

    @rule(clean_shutdown=st.booleans())
    def reopen(self, clean_shutdown: bool) -> None:
        if clean_shutdown:
            self.log.close()
        self.log = open_log(
            self.directory, self.config, self.clock, had_clean_shutdown=clean_shutdown
        )

    @invariant()
    def log_matches_model(self) -> None:
        if hasattr(self, "log"):
            got = read_all(self.log)
            assert got == self.model
            offsets = [r.offset for r in got]
            assert offsets == sorted(set(offsets))


CleanerMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cleaner_model = CleanerMachine.TestCase


# ---------------------------------------------------------------------------------------------
# Rules, one at a time


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_keeps_newest_record_per_key_with_original_offsets(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(segment_bytes=2000), clock)
    for i in range(30):
        append(log, [(b"k%d" % (i % 4), b"v%d" % i)], clock)
    segments_before = log.num_segments
    stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0)
    assert stats is not None
    got = read_all(log)
    active_base = log.active_segment.base_offset
    cleaned = [(r.offset, r.value) for r in got if r.offset < active_base]
    newest = {b"k%d" % (i % 4): i for i in range(active_base)}
    assert cleaned == sorted((o, b"v%d" % o) for o in newest.values())
    assert [r.offset for r in got if r.offset >= active_base] == list(range(active_base, 30))
    assert stats.first_dirty_offset == active_base
    assert stats.segments_before == stats.segments_after == segments_before - 1
    assert stats.bytes_written < stats.bytes_read
    # Groups are formed from the sizes before cleaning; the next pass merges the small
    # segments the first one left.
    again = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0)
    assert again is not None and again.records_removed == 0
    assert again.segments_after < again.segments_before
    assert log.num_segments == again.segments_after + 1
    assert read_all(log) == got
    log.close()


def test_tombstones_expire_only_after_delete_retention(tmp_path: Path, clock: Clock) -> None:
    """Kafka's classic rule: horizon = largest timestamp of the last clean segment - retention."""
    # Segments too large to be merged: a merge gives the tombstone's segment a newer largest
    # timestamp, which delays its expiry (as in Kafka), and is not what this test is about.
    log = open_log(tmp_path, compact_config(segment_bytes=1500), clock)
    cleaner = LogCleaner(time_ms=clock)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock)
    append(log, [(b"a", None)], clock)  # tombstone at offset 2, timestamp T0
    log.roll()
    stats = cleaner.clean(log, first_dirty_offset=0)
    assert stats is not None and stats.tombstones_removed == 0  # no clean section yet
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"a", None)]

    clock.now_ms += RETENTION_MS  # exactly the retention: the horizon is T0, not past it
    append(log, [(b"c", b"1")], clock)
    log.roll()
    stats = cleaner.clean(log, first_dirty_offset=stats.first_dirty_offset)
    assert stats is not None and stats.tombstones_removed == 0
    assert (b"a", None) in [(r.key, r.value) for r in read_all(log)]

    clock.now_ms += 1
    append(log, [(b"d", b"1")], clock)
    log.roll()
    first_dirty = stats.first_dirty_offset
    # The last clean segment now holds c (T0 + retention): the horizon is T0, and the
    # tombstone's segment (largest timestamp T0) is at it, so the tombstone goes.
    stats = cleaner.clean(log, first_dirty_offset=first_dirty)
    assert stats is not None and stats.tombstones_removed == 1
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"c", b"1"), (b"d", b"1")]
    log.close()


def test_dirty_ratio_and_forced_cleaning(tmp_path: Path, clock: Clock) -> None:
    config = compact_config(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=60_000)
    log = open_log(tmp_path, config, clock)
    cleaner = LogCleaner(time_ms=clock)
    for i in range(20):
        append(log, [(b"k", b"v%d" % i)], clock)
    log.roll()
    stats = cleaner.clean(log, first_dirty_offset=0)
    assert stats is not None  # everything is dirty: ratio 1.0
    append(log, [(b"k", b"new")], clock)
    log.roll()
    section = cleanable_section(log, first_dirty_offset=stats.first_dirty_offset, now_ms=clock())
    assert 0 < section.dirty_ratio < 0.9
    assert section.dirty_ratio == dirty_ratio(section.clean_bytes, section.dirty_bytes)
    assert not section.forced
    assert cleaner.clean(log, first_dirty_offset=stats.first_dirty_offset) is None
    clock.now_ms += 60_001  # the dirty batch is now older than max.compaction.lag.ms
    section = cleanable_section(log, first_dirty_offset=stats.first_dirty_offset, now_ms=clock())
    assert section.forced
    assert cleaner.clean(log, first_dirty_offset=stats.first_dirty_offset) is not None
    assert [r.value for r in read_all(log)] == [b"new"]
    log.close()


def test_max_compaction_lag_rolls_and_cleans_an_idle_active_segment(
    tmp_path: Path, clock: Clock
) -> None:
    # Big segments: without the lag rule nothing would roll for a week (segment.ms).
    config = compact_config(
        segment_bytes=10**6, max_compaction_lag_ms=60_000, min_cleanable_dirty_ratio=0.9
    )
    log = open_log(tmp_path, config, clock)
    for i in range(4):
        append(log, [(b"k", b"v%d" % i)], clock)
    cleaner = LogCleaner(time_ms=clock)
    assert cleaner.clean(log, first_dirty_offset=0) is None  # all in the active segment
    assert log.num_segments == 1
    clock.now_ms += 60_001  # no append since: only the cleaner can roll it
    stats = cleaner.clean(log, first_dirty_offset=0)
    assert stats is not None and stats.records_removed == 3
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert [r.value for r in read_all(log)] == [b"v3"]
    log.close()


def test_min_compaction_lag_and_high_watermark_bound_the_dirty_section(
    tmp_path: Path, clock: Clock
) -> None:
    config = compact_config(min_compaction_lag_ms=5_000)
    log = open_log(tmp_path, config, clock, high_watermark_follows_log_end=False)
    for _ in range(3):
        append(log, [(b"k", b"old")], clock)
        log.roll()
    clock.now_ms += 10_000
    young = log.log_end_offset
    append(log, [(b"k", b"young")], clock)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    section = cleanable_section(log, first_dirty_offset=0, now_ms=clock())
    assert section.first_uncleanable_offset == young  # within the lag: not cleanable
    log.update_high_watermark(1)
    section = cleanable_section(log, first_dirty_offset=0, now_ms=clock())
    assert section.first_uncleanable_offset == 1
    log.update_high_watermark(log.log_end_offset)
    stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0)
    assert stats is not None and stats.first_dirty_offset == young
    assert [r.value for r in read_all(log)] == [b"old", b"young"]
    log.close()


def test_small_dedupe_buffer_cleans_a_prefix_then_converges(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(segment_bytes=200_000), clock)
    model: list[Rec] = []
    rng = np.random.default_rng(7)
    for _ in range(40):
        keys = rng.integers(0, 400, 25)
        model += append(log, [(b"key-%05d" % k, b"x" * 10) for k in keys], clock)
    log.roll()
    cleaner = LogCleaner(time_ms=clock, dedupe_buffer_bytes=4096)  # ~100 keys
    first_dirty = 0
    passes = 0
    while True:
        before = segments_info(log)
        stats = cleaner.clean(log, first_dirty_offset=first_dirty)
        if stats is None:
            break
        passes += 1
        assert stats.map_keys <= 4096 // log_cleaner.MAP_ENTRY_OVERHEAD_BYTES
        model = expected_after_clean(
            model,
            before,
            first_dirty=first_dirty,
            map_end=stats.first_dirty_offset,
            delete_retention_ms=RETENTION_MS,
        )
        assert read_all(log) == model
        first_dirty = stats.first_dirty_offset
    assert passes > 3
    assert first_dirty == log.active_segment.base_offset
    assert sorted(r.key or b"" for r in read_all(log)) == sorted({r.key or b"" for r in model})
    log.close()


def test_batch_header_fields_survive_a_rewrite(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(segment_bytes=100_000), clock)
    sequence = 0
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        pairs = [(b"a", b"1"), (b"x" + codec.encode(), b"2"), (b"b", b"3")]
        append(
            log, pairs, clock, codec=codec, producer_id=42, producer_epoch=3, base_sequence=sequence
        )
        sequence += len(pairs)
    append(
        log,
        [(b"a", b"new"), (b"b", b"new")],
        clock,
        producer_id=42,
        producer_epoch=3,
        base_sequence=sequence,
    )
    log.roll()
    before = {h.base_offset: h for h, _ in iter_batches(log.segments[0].records.read(0, 1 << 20))}
    assert LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0) is not None
    after = {h.base_offset: h for h, _ in iter_batches(log.segments[0].records.read(0, 1 << 20))}
    assert after.keys() == before.keys()
    for base, h in after.items():
        old = before[base]
        same = (
            "last_offset_delta",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            "attributes",
            "partition_leader_epoch",
        )
        assert [getattr(h, f) for f in same] == [getattr(old, f) for f in same]
        if base < 15:
            assert h.record_count == 1 and h.last_sequence == old.last_sequence
    assert [r.key for r in read_all(log)] == [
        b"x" + c.encode() for c in ("none", "gzip", "snappy", "lz4", "zstd")
    ] + [b"a", b"b"]
    log.close()


def test_log_append_time_batches_keep_their_timestamps(tmp_path: Path, clock: Clock) -> None:
    config = compact_config(message_timestamp_type="LogAppendTime")
    log = open_log(tmp_path, config, clock)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock)
    clock.now_ms += 5
    append(log, [(b"a", b"2")], clock)
    log.roll()
    before = {(r.offset): r.timestamp_ms for r in read_all(log)}
    assert LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0) is not None
    table = log.read_records(0)
    assert table.column("timestamp_type").to_pylist() == [TimestampType.LOG_APPEND_TIME] * 2
    assert {r.offset: r.timestamp_ms for r in read_all(log)} == {1: before[1], 2: before[2]}
    log.close()


def test_records_without_key_stay_and_are_reported(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # Written while the topic was not compacted (a compacted topic refuses them on append).
    log = open_log(tmp_path, compact_config(cleanup_policy="delete"), clock)
    append(log, [(None, b"orphan"), (b"k", b"1")], clock)
    append(log, [(b"k", b"2")], clock)
    log.roll()
    log.update_config(compact_config())
    with caplog.at_level(logging.WARNING, logger="spark_mq.storage.log_cleaner"):
        stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0)
    assert stats is not None and stats.null_key_records == 1
    assert "without a key" in caplog.text
    assert [(r.offset, r.value) for r in read_all(log)] == [(0, b"orphan"), (2, b"2")]
    log.close()


def test_rules_without_transactions_copy_transactional_data_and_markers(
    tmp_path: Path, clock: Clock
) -> None:
    """The base CleanerFilter (compaction's phase 1) stays available as a filter_factory."""
    log = open_log(tmp_path, compact_config(), clock)
    append(log, [(b"k", b"plain")], clock)
    txn = {"producer_id": 9, "producer_epoch": 0, "is_transactional": True}
    append(log, [(b"k", b"aborted")], clock, base_sequence=0, **txn)
    log.append_transaction_marker(
        ControlType.ABORT, producer_id=9, producer_epoch=0, coordinator_epoch=0
    )
    append(log, [(b"k", b"newest")], clock)
    log.roll()
    aborted = [t for s in log.segments for t in s.txn_index.all_aborted_txns()]
    assert aborted
    cleaner = LogCleaner(time_ms=clock, filter_factory=lambda _log: log_cleaner.CleanerFilter())
    assert cleaner.clean(log, first_dirty_offset=0) is not None
    assert [t for s in log.segments for t in s.txn_index.all_aborted_txns()] == aborted
    assert [r.value for r in read_all(log)] == [b"aborted", b"newest"]
    log.close()
    reopened = open_log(tmp_path, compact_config(), clock)
    assert [t for s in reopened.segments for t in s.txn_index.all_aborted_txns()] == aborted
    reopened.close()


def test_unchanged_segments_are_not_rewritten(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(segment_bytes=700), clock)  # one batch a segment
    for i in range(4):
        append(log, [(b"k%d" % i, b"v")], clock)
    inodes = [os.stat(s.log_path).st_ino for s in log.segments]
    stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0)
    assert stats is not None and stats.records_removed == 0
    assert [os.stat(s.log_path).st_ino for s in log.segments] == inodes
    log.close()


def test_whole_group_removed_leaves_an_empty_segment(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(segment_bytes=700), clock)
    for i in range(4):
        append(log, [(b"k", b"v%d" % i)], clock)
    assert LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0) is not None
    sizes = [s.size_bytes for s in log.segments]
    assert sizes[0] == 0 and log.segments[0].base_offset == 0 and log.log_start_offset == 0
    assert [r.value for r in read_all(log)] == [b"v2", b"v3"]
    log.close()
    reopened = open_log(tmp_path, compact_config(segment_bytes=700), clock)
    assert reopened.log_start_offset == 0
    assert [r.value for r in read_all(reopened)] == [b"v2", b"v3"]
    reopened.close()


def test_corrupt_batch_stops_the_clean_and_changes_nothing(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(), clock)
    for i in range(10):
        append(log, [(b"k", b"v%d" % i)], clock)
    log.roll()
    path = log.segments[0].log_path
    with open(path, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    sizes = [s.size_bytes for s in log.segments]
    with pytest.raises(CorruptRecordError):
        LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0)
    assert [s.size_bytes for s in log.segments] == sizes
    assert leftovers(tmp_path) == []
    log.close()


def test_appends_and_cleaning_run_concurrently(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(segment_bytes=2500), clock)
    written: list[Rec] = []
    done = threading.Event()

    def produce() -> None:
        for i in range(600):
            written.extend(append(log, [(b"k%d" % (i % 9), b"v%d" % i)], clock))
        done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    cleaner = LogCleaner(time_ms=clock, io_buffer_bytes=4096)
    checkpoint, passes = 0, 0
    while not done.is_set() or passes == 0:
        stats = cleaner.clean(log, first_dirty_offset=checkpoint)
        if stats is not None:
            checkpoint, passes = stats.first_dirty_offset, passes + 1
    producer.join()
    log.roll()
    assert cleaner.clean(log, first_dirty_offset=checkpoint) is not None
    got = read_all(log)
    assert set(got) <= set(written)  # every record intact, at its original offset
    newest = {r.key: r for r in written}
    assert sorted(got, key=lambda r: r.offset) == sorted(newest.values(), key=lambda r: r.offset)
    assert passes > 1
    log.close()


def test_replace_segments_refuses_segments_that_changed(tmp_path: Path, clock: Clock) -> None:
    log = open_log(
        tmp_path,
        compact_config(segment_bytes=700, cleanup_policy="compact,delete", retention_ms=1000),
        clock,
    )
    for i in range(4):
        append(log, [(b"k", b"v%d" % i)], clock)
    stale = list(log.segments[:2])
    clock.now_ms += 5000
    append(log, [(b"k", b"late")], clock)
    assert log.apply_retention() > 0  # retention deletes the first segments
    assert log.replace_segments([stale[0]], stale) is False
    log.close()


def test_not_compacted_and_nothing_dirty_return_none(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(cleanup_policy="delete"), clock)
    append(log, [(b"k", b"v")], clock)
    log.roll()
    assert LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0, force=True) is None
    log.update_config(compact_config())
    cleaner = LogCleaner(time_ms=clock)
    assert cleaner.clean(log, first_dirty_offset=log.log_end_offset, force=True) is None
    # A checkpoint past the log end (truncation) means everything is dirty again.
    assert cleaner.clean(log, first_dirty_offset=10**6, force=True) is not None
    log.close()


def test_invalid_buffer_sizes_name_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"log\.cleaner\.dedupe\.buffer\.size"):
        LogCleaner(dedupe_buffer_bytes=10)
    with pytest.raises(ConfigError, match=r"log\.cleaner\.io\.buffer\.size"):
        LogCleaner(io_buffer_bytes=0)


def test_docstring_examples_run() -> None:
    for module in (log_cleaner, cleaner_swap, cleaner_filter, cleaner_transactions):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_stats_total() -> None:
    one = CleanerStats(
        bytes_read=10,
        map_bytes_read=5,
        bytes_written=4,
        records_read=3,
        records_kept=2,
        tombstones_removed=1,
        null_key_records=0,
        segments_before=2,
        segments_after=1,
        map_keys=3,
        map_seconds=0.1,
        elapsed_seconds=0.5,
        first_dirty_offset=7,
    )
    total = CleanerStats.total([one, one])
    assert total.bytes_read == 20 and total.first_dirty_offset == -1
    assert total.records_removed == 2 and one.mb_per_second == pytest.approx(10 / 1e6 / 0.5)


# ---------------------------------------------------------------------------------------------
# The log manager


def test_log_manager_cleans_compacted_logs_and_checkpoints(tmp_path: Path, clock: Clock) -> None:
    with LogManager(tmp_path, time_ms=clock) as manager:
        manager.create_topic(
            "c",
            config={
                "cleanup.policy": "compact",
                "segment.bytes": 700,
                "min.cleanable.dirty.ratio": 0.0,
            },
        )
        manager.create_topic("d", config={"segment.bytes": 700})
        for topic in ("c", "d"):
            for i in range(5):
                append(manager.get_log(topic, 0), [(b"k", b"v%d" % i)], clock)
        stats = manager.clean_logs()
        assert stats.records_removed > 0 and stats.first_dirty_offset == -1
        checkpoint = (tmp_path / "cleaner-offset-checkpoint").read_text()
        assert checkpoint == f"0\n1\nc 0 {manager.get_log('c', 0).active_segment.base_offset}\n"
        assert len(read_all(manager.get_log("d", 0))) == 5
        assert manager.clean_logs().segments_before == 0  # nothing dirty any more
    with LogManager(tmp_path, time_ms=clock) as manager:
        assert [r.value for r in read_all(manager.get_log("c", 0))] == [b"v3", b"v4"]
        assert manager.clean_logs().segments_before == 0  # the checkpoint was read back
        # A re-created topic starts from its log start, not from the old topic's checkpoint.
        manager.delete_topic("c")
        manager.create_topic("c", config={"cleanup.policy": "compact", "segment.bytes": 700})
        assert (tmp_path / "cleaner-offset-checkpoint").read_text() == "0\n0\n"
        for i in range(5):
            append(manager.get_log("c", 0), [(b"k", b"w%d" % i)], clock)
        assert manager.clean_logs().records_removed > 0


def test_log_manager_skips_a_log_that_fails(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"cleanup.policy": "compact", "segment.bytes": 700, "min.cleanable.dirty.ratio": 0.0}
    with LogManager(tmp_path, time_ms=clock) as manager:
        for topic in ("bad", "good"):
            manager.create_topic(topic, config=config)
            for i in range(5):
                append(manager.get_log(topic, 0), [(b"k", b"v%d" % i)], clock)
        path = manager.get_log("bad", 0).segments[0].log_path
        with open(path, "r+b") as f:
            f.seek(200)
            f.write(b"\xff\xff")
        with caplog.at_level(logging.ERROR):
            stats = manager.clean_logs()
        assert "cleaning bad-0 failed" in caplog.text
        assert stats.records_removed > 0
        assert [r.value for r in read_all(manager.get_log("good", 0))] == [b"v3", b"v4"]


def test_one_pass_per_log_at_a_time(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(segment_bytes=700), clock)
    for i in range(4):
        append(log, [(b"k", b"v%d" % i)], clock)
    results: list[CleanerStats | None] = []

    class Nested(log_cleaner.CleanerFilter):
        def include_in_map(self, header: BatchHeader) -> bool:
            if not results:  # a second pass on the same log, started during the first
                results.append(LogCleaner(time_ms=clock).clean(log, first_dirty_offset=0))
            return super().include_in_map(header)

    stats = LogCleaner(time_ms=clock, filter_factory=lambda _log: Nested()).clean(
        log, first_dirty_offset=0
    )
    assert results == [None] and stats is not None
    log.close()
