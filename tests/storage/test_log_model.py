"""PartitionLog against a plain-Python reference model (a Hypothesis state machine).

The model is a list of whole batches of ``(offset, timestamp, key, value)`` records plus the
log start and log end offsets; the high watermark follows the log end (single node). Every
rule does the same thing to the log and to the model and compares what the log answers with
what the model says it must answer. Segment boundaries are the log's business: the model never
looks at ``PartitionLog.segments`` to decide what retention should delete; it only checks what
follows from the model (what is gone is gone, what stays is intact, the log start only moves
forward and lands on a batch boundary, expired data is old, fully expired data all goes).

Small ``segment.bytes``, ``index.interval.bytes`` and ``segment.index.bytes`` make rolls and
index lookups happen after a few appends. The clock is injected (``time_ms=``) and only moves
when a rule moves it. On failure Hypothesis prints the steps and a reproduction blob.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from spark_mq.config import LONG_MAX
from spark_mq.errors import OffsetOutOfRangeError, RecordTooLargeError
from spark_mq.storage.log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    PartitionLog,
)
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import encode_batch
from spark_mq.storage.segment import TimestampAndOffset

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
START_MS = 10_000_000
#: Record timestamps are the clock plus a delta from this range: unordered, mostly in the past.
TIMESTAMP_DELTA_MS = (-60_000, 5_000)
DEFAULT_INDEX_BYTES = 10 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None


@dataclasses.dataclass(frozen=True, slots=True)
class ModelBatch:
    base_offset: int
    size_bytes: int
    records: tuple[Record, ...]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    @property
    def max_timestamp_ms(self) -> int:
        return max(r.timestamp_ms for r in self.records)


@dataclasses.dataclass(frozen=True, slots=True)
class BatchSpec:
    """A batch to append, drawn small: its contents come from a seeded generator.

    Drawing every key, value and timestamp through Hypothesis would exhaust its per-example
    data budget after a few appends and cut the runs short; a seed keeps a run long and the
    failing example printable, and the contents are still a pure function of the example.
    """

    records: int
    seed: int
    codec: str

    def columns(self, now_ms: int) -> tuple[list[bytes | None], list[bytes | None], list[int]]:
        """Keys and values (some None) and timestamps (unordered, mostly in the past)."""
        rng = random.Random(self.seed)
        keys = [
            None if rng.random() < 0.2 else rng.randbytes(rng.randrange(9))
            for _ in range(self.records)
        ]
        values = [
            None if rng.random() < 0.1 else rng.randbytes(rng.randrange(25))
            for _ in range(self.records)
        ]
        shape = rng.randrange(3)
        if shape == 0:  # one timestamp for the whole batch
            stamps = [now_ms + rng.randrange(*TIMESTAMP_DELTA_MS)] * self.records
        elif shape == 1:  # increasing within the batch
            first = now_ms + rng.randrange(*TIMESTAMP_DELTA_MS)
            stamps = [first + i for i in range(self.records)]
        else:  # anything
            stamps = [now_ms + rng.randrange(*TIMESTAMP_DELTA_MS) for _ in range(self.records)]
        return keys, values, stamps

    def encode(self, now_ms: int) -> bytes:
        keys, values, stamps = self.columns(now_ms)
        return encode_batch(
            pa.array(values, type=pa.binary()),
            key=pa.array(keys, type=pa.binary()),
            timestamp=pa.array(stamps, type=pa.int64()),
            codec=self.codec,
        )


RETENTION_MS = st.sampled_from([10_000, 40_000, -1])
RETENTION_BYTES = st.sampled_from([5_000, 0, 30_000, -1])

BATCH_SPECS = st.builds(
    BatchSpec,
    records=st.integers(1, 50),
    seed=st.integers(0, 2**32 - 1),
    codec=st.sampled_from(CODECS),
)


class PartitionLogMachine(RuleBasedStateMachine):
    """Appends, reads, lookups by time, rolls, truncations, deletions, retention, restarts."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="log-model-"))
        self.generation = 0
        self.now_ms = START_MS
        # Whole batches since the last reset of the log (some may lie below the log start: a
        # superset of what the log still holds on disk). Offsets are contiguous.
        self.batches: list[ModelBatch] = []
        self.log_start = 0
        self.log_end = 0
        self.log: PartitionLog | None = None
        self.config = LogConfig()

    # -----------------------------------------------------------------------------------------
    # Helpers

    @property
    def directory(self) -> Path:
        return self.root / f"model-{self.generation}"

    def open_log(self, *, clean: bool, recovery_point: int, log_start: int | None) -> None:
        self.log = PartitionLog.open(
            self.directory,
            self.config,
            topic="model",
            partition=0,
            recovery_point=recovery_point,
            log_start_offset=log_start,
            had_clean_shutdown=clean,
            time_ms=lambda: self.now_ms,
        )

    @property
    def the_log(self) -> PartitionLog:
        assert self.log is not None
        return self.log

    def visible(self, start: int | None = None) -> list[Record]:
        """Records a reader may see from ``start`` (default: the log start) to the end."""
        lo = self.log_start if start is None else start
        return [r for b in self.batches for r in b.records if lo <= r.offset < self.log_end]

    def boundaries(self) -> set[int]:
        """Offsets at which a batch starts, plus the log end: where the log may be cut."""
        return {b.base_offset for b in self.batches} | {self.log_end}

    def batch_index_of(self, offset: int) -> int:
        return bisect.bisect_right([b.base_offset for b in self.batches], offset) - 1

    def check_rows(self, table: pa.Table, expected: list[Record]) -> None:
        got = list(
            zip(
                table.column("offset").to_pylist(),
                table.column("timestamp").to_pylist(),
                table.column("key").to_pylist(),
                table.column("value").to_pylist(),
                strict=True,
            )
        )
        want = [(r.offset, r.timestamp_ms, r.key, r.value) for r in expected]
        assert got == want
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        assert set(table.column("timestamp_type").to_pylist()) <= {1 if log_append else 0}

    def check_contents(self) -> None:
        """Everything from the log start is readable and right; nothing below it is."""
        log = self.the_log
        expected = self.visible()
        offset = self.log_start
        got: list[Record] = []
        while offset < self.log_end:
            table = log.read_records(offset, 64 * 1024)
            assert table.num_rows > 0, f"no records at {offset} below the log end {self.log_end}"
            self.check_rows(table, expected[len(got) : len(got) + table.num_rows])
            got.extend(expected[len(got) : len(got) + table.num_rows])
            offset = got[-1].offset + 1
        assert len(got) == len(expected)
        assert log.read_records(self.log_end).num_rows == 0
        if self.log_start > 0:
            with pytest.raises(OffsetOutOfRangeError):
                log.read_records(self.log_start - 1)

    # -----------------------------------------------------------------------------------------
    # Setup and teardown

    # Hypothesis favours the first choice of sampled_from, so it is the one that makes things
    # happen (small indexes, retention on); the defaults come last.
    @initialize(
        segment_bytes=st.integers(2 * 1024, 20 * 1024),
        index_interval_bytes=st.integers(0, 2000),
        segment_index_bytes=st.sampled_from([240, 24, 60, 1200, DEFAULT_INDEX_BYTES]),
        segment_ms=st.sampled_from([30_000, 5_000, 7 * 24 * 3600 * 1000]),
        retention_ms=RETENTION_MS,
        retention_bytes=RETENTION_BYTES,
        max_message_bytes=st.sampled_from([1024 * 1024 + 12, 3_000]),
        timestamp_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
        flush_messages=st.sampled_from([LONG_MAX, 1, 50]),
    )
    def open_new_log(
        self,
        *,
        segment_bytes: int,
        index_interval_bytes: int,
        segment_index_bytes: int,
        segment_ms: int,
        retention_ms: int,
        retention_bytes: int,
        max_message_bytes: int,
        timestamp_type: str,
        flush_messages: int,
    ) -> None:
        self.config = LogConfig.from_properties(
            {
                "segment.bytes": segment_bytes,
                "index.interval.bytes": index_interval_bytes,
                "segment.index.bytes": segment_index_bytes,
                "segment.ms": segment_ms,
                "retention.ms": retention_ms,
                "retention.bytes": retention_bytes,
                "max.message.bytes": max_message_bytes,
                "message.timestamp.type": timestamp_type,
                "flush.messages": flush_messages,
            }
        )
        self.open_log(clean=False, recovery_point=0, log_start=None)

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -----------------------------------------------------------------------------------------
    # Invariants

    @invariant()
    def offsets_match_the_model(self) -> None:
        if self.log is None:
            return
        log = self.log
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        assert log.log_start_offset == self.log_start
        assert log.high_watermark == self.log_end
        assert log.log_end_offset == self.log_end
        assert log.recovery_point <= log.log_end_offset

    # -----------------------------------------------------------------------------------------
    # Appends

    @rule(spec=BATCH_SPECS)
    def append_one_batch(self, spec: BatchSpec) -> None:
        self.append([spec])

    @rule(specs=st.lists(BATCH_SPECS, min_size=1, max_size=4))
    def append_batches(self, specs: list[BatchSpec]) -> None:
        self.append(specs)

    def append(self, specs: list[BatchSpec]) -> None:
        """One append of ``specs``: rejected whole if a batch or the append is too large."""
        log = self.the_log
        encoded = [spec.encode(self.now_ms) for spec in specs]
        data = b"".join(encoded)
        too_large = (
            any(len(e) > self.config.max_message_bytes for e in encoded)
            or len(data) > self.config.segment_bytes
        )
        size_before = log.size_bytes
        if too_large:
            with pytest.raises(RecordTooLargeError):
                log.append(data)
            assert log.size_bytes == size_before
            return
        info = log.append(data)
        log_append = self.config.message_timestamp_type == "LogAppendTime"
        offset = self.log_end
        new_batches = []
        for spec, batch_bytes in zip(specs, encoded, strict=True):
            keys, values, stamps = spec.columns(self.now_ms)
            records = tuple(
                Record(offset + i, self.now_ms if log_append else stamps[i], keys[i], values[i])
                for i in range(spec.records)
            )
            new_batches.append(ModelBatch(offset, len(batch_bytes), records))
            offset += len(records)
        assert info.first_offset == self.log_end
        assert info.last_offset == offset - 1
        assert info.num_batches == len(specs)
        assert info.num_records == offset - self.log_end
        assert info.valid_bytes == len(data)
        assert info.max_timestamp_ms == max(b.max_timestamp_ms for b in new_batches)
        assert info.log_append_time_ms == (self.now_ms if log_append else -1)
        assert log.size_bytes == size_before + len(data)
        self.batches.extend(new_batches)
        self.log_end = offset
        if self.config.flush_messages == 1:
            assert log.recovery_point == self.log_end

    # -----------------------------------------------------------------------------------------
    # Reads

    @rule(data=st.data(), max_bytes=st.integers(0, 30_000))
    def read_records(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.log_start, self.log_end), label="offset")
        table = self.the_log.read_records(offset, max_bytes)
        expected = self.visible(offset)
        n = table.num_rows
        assert n <= len(expected)
        if expected:
            assert n >= 1, "min_one_message: a read below the log end returns a record"
        self.check_rows(table, expected[:n])
        if n:
            # Whole batches, from the one holding the offset: the bytes read are the sizes of
            # the batches that hold the records, and they end on a batch boundary.
            first = self.batch_index_of(offset)
            last = self.batch_index_of(offset + n - 1)
            assert self.batches[last].next_offset == offset + n
            read_bytes = sum(b.size_bytes for b in self.batches[first : last + 1])
            assert read_bytes <= max_bytes or first == last

    @rule(data=st.data())
    def read_out_of_range(self, data: st.DataObject) -> None:
        log = self.the_log
        candidates = [st.integers(self.log_end + 1, self.log_end + 100)]
        if self.log_start > 0:
            candidates.append(st.integers(0, self.log_start - 1))
        offset = data.draw(st.one_of(*candidates), label="offset")
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read_records(offset)
        assert info.value.offset == offset
        assert info.value.log_start_offset == self.log_start
        assert info.value.log_end_offset == self.log_end

    @rule(data=st.data())
    def find_offset_by_timestamp(self, data: st.DataObject) -> None:
        target = data.draw(
            st.one_of(
                st.sampled_from([EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP]),
                st.integers(self.now_ms + TIMESTAMP_DELTA_MS[0] - 10_000, self.now_ms + 6_000),
            ),
            label="timestamp",
        )
        found = self.the_log.find_offset_by_timestamp(target)
        visible = self.visible()
        expected: TimestampAndOffset | None
        if target == EARLIEST_TIMESTAMP:
            expected = TimestampAndOffset(-1, self.log_start)
        elif target == LATEST_TIMESTAMP:
            expected = TimestampAndOffset(-1, self.log_end)
        elif target == MAX_TIMESTAMP:
            expected = None
            for r in visible:
                if expected is None or r.timestamp_ms > expected.timestamp_ms:
                    expected = TimestampAndOffset(r.timestamp_ms, r.offset)
        else:
            hits = [r for r in visible if r.timestamp_ms >= target]
            expected = TimestampAndOffset(hits[0].timestamp_ms, hits[0].offset) if hits else None
        assert found == expected

    # -----------------------------------------------------------------------------------------
    # Segments, truncation, deletion, retention

    @rule()
    def roll(self) -> None:
        segments_before = self.the_log.num_segments
        had_data = self.the_log.active_segment.size_bytes > 0
        self.the_log.roll()
        assert self.the_log.active_segment.size_bytes == 0
        assert self.the_log.num_segments == segments_before + (1 if had_data else 0)
        assert self.the_log.active_segment.base_offset == self.log_end

    @precondition(lambda self: self.log_end > self.log_start)
    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log_end + 3), label="offset")
        self.the_log.truncate_to(offset)
        if offset >= self.log_end:
            pass
        elif offset < self.log_start:
            self.batches = []
            self.log_start = self.log_end = offset
        else:
            cut = next(i for i, b in enumerate(self.batches) if b.next_offset > offset)
            self.log_end = self.batches[cut].base_offset
            del self.batches[cut:]
            self.log_start = min(self.log_start, self.log_end)
        self.check_contents()

    @precondition(lambda self: self.log_end > self.log_start)
    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log_end), label="offset")
        new_start = self.the_log.delete_records_before(offset)
        self.log_start = max(self.log_start, offset)
        assert new_start == self.log_start
        self.check_contents()

    @rule(beyond=st.integers(1, 10))
    def delete_records_beyond_high_watermark(self, beyond: int) -> None:
        with pytest.raises(OffsetOutOfRangeError):
            self.the_log.delete_records_before(self.log_end + beyond)

    @rule(ms=st.integers(0, 30_000))
    def advance_clock(self, ms: int) -> None:
        self.now_ms += ms

    @rule(retention_ms=RETENTION_MS, retention_bytes=RETENTION_BYTES)
    def change_retention(self, retention_ms: int, retention_bytes: int) -> None:
        self.config = self.config.with_overrides(
            retention_ms=retention_ms, retention_bytes=retention_bytes
        )
        self.the_log.update_config(self.config)

    @precondition(lambda self: self.log_end > self.log_start)
    @rule()
    def apply_retention(self) -> None:
        log = self.the_log
        start_before = self.log_start
        self.the_log.apply_retention()
        new_start = log.log_start_offset
        assert new_start >= start_before, "the log start only moves forward"
        if new_start != start_before:
            assert new_start in self.boundaries(), "retention deletes whole segments"
            assert log.segments[0].base_offset == new_start
        retention_ms = self.config.retention_ms
        cutoff_ms = self.now_ms - retention_ms
        gone = [r for r in self.visible() if r.offset < new_start]
        if retention_ms >= 0 and self.config.retention_bytes < 0:
            # Only time retention: a deleted record sat in a segment whose newest record was
            # older than retention.ms.
            assert all(r.timestamp_ms < cutoff_ms for r in gone)
        if retention_ms >= 0 and all(b.max_timestamp_ms < cutoff_ms for b in self.batches):
            # Every record the log could still hold is expired: every segment goes.
            assert new_start == self.log_end
        if self.config.retention_bytes < 0 and retention_ms < 0:
            assert new_start == start_before
        self.log_start = new_start
        self.check_contents()

    # -----------------------------------------------------------------------------------------
    # Restarts

    @rule()
    def close_and_reopen_clean(self) -> None:
        log = self.the_log
        log.close()
        # What the LogManager checkpoints on a clean shutdown, and passes back on open.
        self.open_log(clean=True, recovery_point=log.recovery_point, log_start=self.log_start)
        self.check_contents()

    @rule(data=st.data())
    def crash_and_recover(self, data: st.DataObject) -> None:
        """A process crash: the files as they are now (page cache included), never closed."""
        log = self.the_log
        checkpointed = data.draw(st.integers(0, log.recovery_point), label="recovery_point")
        crashed = self.directory
        self.generation += 1
        shutil.copytree(crashed, self.directory)
        log.close()
        shutil.rmtree(crashed)
        self.open_log(clean=False, recovery_point=checkpointed, log_start=self.log_start)
        self.check_contents()

    @precondition(lambda self: self.log is not None)
    @rule()
    def read_everything(self) -> None:
        self.check_contents()


TestPartitionLogModel = PartitionLogMachine.TestCase
TestPartitionLogModel.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
