"""Transaction-aware compaction (spark_mq.storage.cleaner_transactions).

The first part pins the rules one at a time: aborted data goes and never shadows a committed
value, committed transactional data is compacted, a marker stays while its transaction keeps
a batch and until its segment passes the delete horizon, each producer's last batch stays
(empty if need be) so that a log rebuilt without snapshots still rejects a retry of it, the
``.txnindex`` keeps only entries whose data is still there, and nothing at or past the last
stable offset is touched.

The second part is a Hypothesis state machine against a reference model: transactional
producers (commits and aborts), an idempotent producer and plain writes interleave with
tombstones, clock ticks, rolls, cleans and restarts (clean, crashed, crashed without
snapshots). The model is the list of records still in the log, each with its batch and its
transaction; a clean applies, to the records that are not aborted, the per-key rules of the
cleaner's own model (``model_clean``: newest offset of the dirty section, tombstones by
segment and horizon) and removes aborted batches below the map's end. After every step:
``read_committed`` and ``read_uncommitted`` read from the log start exactly what the model
says (offsets included); every transaction that keeps a data batch in the log keeps its
marker; every ``.txnindex`` entry has its marker; the LSO is the model's. After every
restart, each producer's last batch, sent again, is recognised as a duplicate.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from log_testing import Clock

from spark_mq.storage.batch_decoder import iter_batches
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_cleaner import (
    DEFAULT_DEDUPE_BUFFER_BYTES,
    CleanerStats,
    LogCleaner,
    cleanable_section,
)
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.producer_state import SNAPSHOT_SUFFIX
from spark_mq.storage.record_batch import BatchHeader, ControlType, encode_batch

RETENTION_MS = 10_000
COMMIT = ControlType.COMMIT
ABORT = ControlType.ABORT
Pairs = Sequence[tuple[bytes, bytes | None]]


def compact_config(**overrides: object) -> LogConfig:
    props: dict[str, object] = {
        "cleanup.policy": "compact",
        "segment.bytes": 2500,
        "index.interval.bytes": 700,
        "segment.index.bytes": 4096,
        "delete.retention.ms": RETENTION_MS,
        "min.cleanable.dirty.ratio": 0.0,
    }
    props.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig.from_properties(props)


def open_log(directory: Path, config: LogConfig, clock: Clock, *, clean: bool) -> PartitionLog:
    return PartitionLog.open(
        directory, config, topic="t", partition=0, time_ms=clock, had_clean_shutdown=clean
    )


class Producer:
    """An idempotent or transactional producer, keeping the bytes of its last batch."""

    def __init__(self, log: PartitionLog, clock: Clock, pid: int) -> None:
        self.log, self.clock, self.pid = log, clock, pid
        self.seq = 0
        self.last: bytes | None = None

    def send(self, pairs: Pairs, *, transactional: bool = True) -> int:
        data = encode_batch(
            pa.array([v for _, v in pairs], pa.binary()),
            key=pa.array([k for k, _ in pairs], pa.binary()),
            timestamp=pa.array([self.clock()] * len(pairs), pa.int64()),
            producer_id=self.pid,
            producer_epoch=0,
            base_sequence=self.seq,
            is_transactional=transactional,
        )
        info = self.log.append(data)
        assert not info.is_duplicate
        self.seq += len(pairs)
        self.last = data
        return info.first_offset

    def end(self, control_type: ControlType) -> int:
        return self.log.append_transaction_marker(
            control_type, producer_id=self.pid, producer_epoch=0, coordinator_epoch=0
        ).first_offset


def plain(log: PartitionLog, clock: Clock, pairs: Pairs) -> int:
    data = encode_batch(
        pa.array([v for _, v in pairs], pa.binary()),
        key=pa.array([k for k, _ in pairs], pa.binary()),
        timestamp=pa.array([clock()] * len(pairs), pa.int64()),
    )
    return log.append(data).first_offset


def read(log: PartitionLog, isolation: FetchIsolation) -> list[tuple[int, bytes, bytes | None]]:
    """``(offset, key, value)`` of every record from the log start, as a consumer loops."""
    out: list[tuple[int, bytes, bytes | None]] = []
    offset = log.log_start_offset
    bound = (
        log.last_stable_offset if isolation is FetchIsolation.TXN_COMMITTED else log.high_watermark
    )
    while offset < bound:
        table, next_offset = log.read_records_with_next(offset, 4096, isolation=isolation)
        assert offset < next_offset <= bound, (offset, next_offset, bound)
        out += zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
        offset = next_offset
    return out


def values(log: PartitionLog, isolation: FetchIsolation) -> list[bytes | None]:
    return [v for _, _, v in read(log, isolation)]


def batches(log: PartitionLog) -> list[BatchHeader]:
    """Every batch header in the log, in order."""
    out: list[BatchHeader] = []
    for segment in log.segments:
        data = segment.records.read(0, segment.size_bytes)
        out += [header for header, _ in iter_batches(data)]
    return out


def marker_offsets(log: PartitionLog) -> set[int]:
    return {h.base_offset for h in batches(log) if h.is_control}


def txn_entries(log: PartitionLog) -> list[tuple[int, int, int]]:
    """``(producer id, first offset, marker offset)`` of every ``.txnindex`` entry."""
    return [
        (t.producer_id, t.first_offset, t.last_offset)
        for s in log.segments
        for t in s.txn_index.all_aborted_txns()
    ]


def clean(log: PartitionLog, clock: Clock, first_dirty: int, **kw: object) -> CleanerStats:
    stats = LogCleaner(time_ms=clock).clean(log, first_dirty_offset=first_dirty, force=True, **kw)  # type: ignore[arg-type]
    assert stats is not None
    return stats


def crash_and_reopen(
    log: PartitionLog,
    directory: Path,
    config: LogConfig,
    clock: Clock,
    *,
    snapshots: bool,
    recovery_point: int = 0,
) -> PartitionLog:
    """Abandon ``log`` as a killed process would (no close) and open the directory again,
    recovering from ``recovery_point`` (from the newest snapshot at or below it)."""
    del log
    if not snapshots:
        for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
            path.unlink()
    return PartitionLog.open(
        directory,
        config,
        topic="t",
        partition=0,
        time_ms=clock,
        had_clean_shutdown=False,
        recovery_point=recovery_point,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


# ---------------------------------------------------------------------------------------------
# The rules, one at a time


def test_aborted_data_is_removed_and_never_shadows_a_committed_value(
    tmp_path: Path, clock: Clock
) -> None:
    log = open_log(tmp_path, compact_config(), clock, clean=True)
    producer = Producer(log, clock, 1)
    plain(log, clock, [(b"k", b"committed")])
    aborted_at = producer.send([(b"k", b"aborted"), (b"j", b"aborted too")])
    producer.end(ABORT)
    producer.send([(b"other", b"o1")])  # its last batch is not the aborted one
    producer.end(COMMIT)
    log.roll()
    assert values(log, FetchIsolation.HIGH_WATERMARK) == [
        b"committed",
        b"aborted",
        b"aborted too",
        b"o1",
    ]
    stats = clean(log, clock, 0)
    assert stats.aborted_records_removed == 2
    # The aborted record was newer, yet the committed value of its key stays.
    assert values(log, FetchIsolation.TXN_COMMITTED) == [b"committed", b"o1"]
    assert values(log, FetchIsolation.HIGH_WATERMARK) == [b"committed", b"o1"]
    assert aborted_at not in {h.base_offset for h in batches(log)}
    assert txn_entries(log) == []  # its data is gone, so is its entry
    log.close()


def test_committed_transactional_data_is_compacted(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(), clock, clean=True)
    producer = Producer(log, clock, 1)
    for i in range(3):
        producer.send([(b"k", b"v%d" % i), (b"n%d" % i, b"x")])
        producer.end(COMMIT)
    plain(log, clock, [(b"n0", b"plain")])
    log.roll()
    clean(log, clock, 0)
    assert read(log, FetchIsolation.TXN_COMMITTED) == [
        (4, b"n1", b"x"),
        (6, b"k", b"v2"),
        (7, b"n2", b"x"),
        (9, b"n0", b"plain"),
    ]
    log.close()


def test_a_marker_stays_while_its_data_does_then_goes_after_the_horizon(
    tmp_path: Path, clock: Clock
) -> None:
    # One batch a segment: segments never merge, so each keeps its own largest timestamp.
    config = compact_config(segment_bytes=1000)
    log = open_log(tmp_path, config, clock, clean=True)
    superseded, kept = Producer(log, clock, 1), Producer(log, clock, 2)
    superseded.send([(b"a", b"old")])
    superseded_marker = superseded.end(COMMIT)
    kept.send([(b"b", b"only")])
    kept_marker = kept.end(COMMIT)
    plain(log, clock, [(b"a", b"new")])
    superseded.send([(b"c", b"later")])  # producer 1's last batch is elsewhere
    superseded.end(COMMIT)
    log.roll()
    checkpoint = clean(log, clock, 0).first_dirty_offset
    # A first clean has no delete horizon: the data is gone, the marker not yet.
    assert superseded_marker in marker_offsets(log)
    assert values(log, FetchIsolation.TXN_COMMITTED) == [b"only", b"new", b"later"]
    # Newer data in the clean section moves the horizon past the marker's segment.
    clock.now_ms += RETENTION_MS + 1
    for i in range(2):
        plain(log, clock, [(b"z", b"%d" % i)])
        log.roll()
        checkpoint = clean(log, clock, checkpoint).first_dirty_offset
    markers = marker_offsets(log)
    assert superseded_marker not in markers
    assert kept_marker in markers  # its transaction still has data, horizon or not
    assert values(log, FetchIsolation.TXN_COMMITTED) == [b"only", b"new", b"later", b"1"]
    log.close()


def test_a_marker_goes_in_the_pass_that_removes_its_last_data(tmp_path: Path, clock: Clock) -> None:
    config = compact_config(segment_bytes=1000)
    log = open_log(tmp_path, config, clock, clean=True)
    plain(log, clock, [(b"warm", b"up")])
    log.roll()
    clock.now_ms += RETENTION_MS + 1
    plain(log, clock, [(b"clean", b"section")])
    log.roll()
    checkpoint = clean(log, clock, 0).first_dirty_offset  # the clean section: now + retention
    producer = Producer(log, clock, 1)
    clock.now_ms -= 2 * RETENTION_MS  # old data arriving late: its segments are past the horizon
    producer.send([(b"a", b"aborted")])
    marker = producer.end(ABORT)
    producer.send([(b"b", b"last")])
    producer.end(COMMIT)
    log.roll()
    snapshots = log.producer_state.snapshot_offsets()
    assert any(offset <= marker for offset in snapshots)
    stats = clean(log, clock, checkpoint)
    assert stats.markers_removed == 1 and stats.aborted_records_removed == 1
    assert marker not in marker_offsets(log)
    assert txn_entries(log) == []
    # A snapshot at or below the marker could hold its transaction open, and a recovery
    # starting there would never see it close: those snapshots went first.
    assert all(offset > marker for offset in log.producer_state.snapshot_offsets())
    log = crash_and_reopen(log, tmp_path, config, clock, snapshots=True, recovery_point=marker)
    assert log.last_stable_offset == log.log_end_offset
    log.close()


@pytest.mark.parametrize("restart", ["crash", "crash without snapshots", "clean"])
def test_a_producers_last_batch_stays_empty_and_its_retry_is_still_a_duplicate(
    tmp_path: Path, clock: Clock, restart: str
) -> None:
    config = compact_config()
    log = open_log(tmp_path, config, clock, clean=True)
    idempotent, transactional = Producer(log, clock, 7), Producer(log, clock, 8)
    idempotent.send([(b"a", b"first")], transactional=False)
    idempotent.send([(b"a", b"superseded")], transactional=False)
    transactional.send([(b"t", b"aborted last batch")])
    transactional.end(ABORT)
    plain(log, clock, [(b"a", b"newest")])
    log.roll()
    stats = clean(log, clock, 0)
    assert stats.empty_batches_kept == 2
    headers = {h.producer_id: h for h in batches(log) if not h.is_control}
    emptied = headers[7]
    assert (emptied.record_count, emptied.base_offset, emptied.last_offset) == (0, 1, 1)
    assert (emptied.base_sequence, emptied.max_timestamp) == (1, clock())
    assert headers[8].record_count == 0
    # The aborted transaction keeps a (now empty) batch, so it keeps its marker and its entry.
    assert txn_entries(log) == [(8, 2, 3)]
    assert values(log, FetchIsolation.TXN_COMMITTED) == [b"newest"]
    end = log.log_end_offset
    if restart == "clean":
        log.close()
        for path in tmp_path.glob(f"*{SNAPSHOT_SUFFIX}"):
            path.unlink()  # rebuilt from the log alone all the same
        log = open_log(tmp_path, config, clock, clean=True)
    else:
        log = crash_and_reopen(log, tmp_path, config, clock, snapshots=restart == "crash")
    assert log.last_stable_offset == log.log_end_offset == end  # no transaction left open
    for producer in (idempotent, transactional):
        assert producer.last is not None
        info = log.append(producer.last)
        assert info.is_duplicate and log.log_end_offset == end
    # The next sequence follows the emptied batch's last one.
    idempotent.log = log
    idempotent.send([(b"a", b"after")], transactional=False)
    assert values(log, FetchIsolation.TXN_COMMITTED) == [b"newest", b"after"]
    log.close()


def test_cleaning_never_reaches_an_open_transaction(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path, compact_config(), clock, clean=True)
    early, late = Producer(log, clock, 1), Producer(log, clock, 2)
    plain(log, clock, [(b"k", b"v0")])
    plain(log, clock, [(b"k", b"v1")])
    lso = early.send([(b"k", b"open")])
    late.send([(b"k", b"aborted after the lso")])
    late.end(ABORT)
    plain(log, clock, [(b"k", b"v2")])
    log.roll()
    assert log.last_stable_offset == lso
    stats = clean(log, clock, 0)
    assert stats.first_dirty_offset == lso
    # Below the LSO, v1 shadows v0; at and past it nothing changed, aborted data included.
    assert values(log, FetchIsolation.HIGH_WATERMARK) == [
        b"v1",
        b"open",
        b"aborted after the lso",
        b"v2",
    ]
    early.end(COMMIT)
    log.roll()
    clean(log, clock, stats.first_dirty_offset)
    assert values(log, FetchIsolation.TXN_COMMITTED) == [b"v2"]
    assert values(log, FetchIsolation.HIGH_WATERMARK) == [b"v2"]
    log.close()


# ---------------------------------------------------------------------------------------------
# The reference model


@dataclasses.dataclass(frozen=True, slots=True)
class Rec:
    offset: int
    batch: int  # base offset of its batch
    timestamp_ms: int
    key: bytes
    value: bytes | None
    txn: int | None  # index into the machine's transactions; None: not transactional


@dataclasses.dataclass
class Txn:
    producer_id: int
    batches: list[int]
    marker: int | None = None
    status: str = "open"  # "committed", "aborted"


def model_clean(
    records: list[Rec],
    segments: list[tuple[int, int]],
    *,
    first_dirty: int,
    map_end: int,
    delete_retention_ms: int,
) -> list[Rec]:
    """One clean of records that are not aborted (the rules of test_log_cleaner's model).

    ``segments`` are (base offset, largest timestamp) before the clean.
    """
    clean_section = [ts for base, ts in segments if base < first_dirty]
    horizon = clean_section[-1] - delete_retention_ms if clean_section else None
    bases = [base for base, _ in segments]
    latest: dict[bytes, int] = {}
    for r in records:
        if first_dirty <= r.offset < map_end:
            latest[r.key] = r.offset
    kept = []
    for r in records:
        if r.offset >= map_end:
            kept.append(r)
            continue
        if r.offset < latest.get(r.key, -1):
            continue
        segment_ts = segments[int(np.searchsorted(bases, r.offset, side="right")) - 1][1]
        if r.value is None and horizon is not None and segment_ts <= horizon:
            continue
        kept.append(r)
    return kept


KEYS = st.integers(0, 6).map(lambda i: b"k%d" % i)
PAIRS = st.lists(
    st.tuples(KEYS, st.one_of(st.none(), st.binary(max_size=16))), min_size=1, max_size=4
)
TXN_PIDS = (1, 2, 3)
IDEMPOTENT_PID = 7


class TransactionalCleanerMachine(RuleBasedStateMachine):
    @initialize(segment_bytes=st.sampled_from([1500, 2500, 6000]), small_buffer=st.booleans())
    def setup(self, segment_bytes: int, small_buffer: bool) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="txn_cleaner_model_"))
        self.clock = Clock()
        self.config = compact_config(segment_bytes=segment_bytes)
        self.log = open_log(self.directory, self.config, self.clock, clean=True)
        self.small_buffer = small_buffer
        self.cleaner = LogCleaner(
            time_ms=self.clock,
            dedupe_buffer_bytes=1024 if small_buffer else DEFAULT_DEDUPE_BUFFER_BYTES,
            io_buffer_bytes=2048,
        )
        self.checkpoint = 0
        self.records: list[Rec] = []
        self.txns: list[Txn] = []
        self.open_txn: dict[int, int] = {}  # producer id -> its open transaction
        self.producers = {
            pid: Producer(self.log, self.clock, pid) for pid in (*TXN_PIDS, IDEMPOTENT_PID)
        }

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _appended(self, base: int, pairs: Pairs, txn: int | None) -> None:
        self.records += [
            Rec(base + i, base, self.clock(), k, v, txn) for i, (k, v) in enumerate(pairs)
        ]

    # Writes -----------------------------------------------------------------------------------

    @rule(pid=st.sampled_from(TXN_PIDS), pairs=PAIRS)
    def transactional_write(self, pid: int, pairs: Pairs) -> None:
        base = self.producers[pid].send(pairs)
        if pid not in self.open_txn:
            self.open_txn[pid] = len(self.txns)
            self.txns.append(Txn(pid, []))
        txn = self.open_txn[pid]
        self.txns[txn].batches.append(base)
        self._appended(base, pairs, txn)

    @precondition(lambda self: self.open_txn)
    @rule(data=st.data(), commit=st.booleans())
    def end_transaction(self, data: st.DataObject, commit: bool) -> None:
        pid = data.draw(st.sampled_from(sorted(self.open_txn)))
        txn = self.txns[self.open_txn.pop(pid)]
        txn.marker = self.producers[pid].end(COMMIT if commit else ABORT)
        txn.status = "committed" if commit else "aborted"

    @rule(pairs=PAIRS)
    def idempotent_write(self, pairs: Pairs) -> None:
        base = self.producers[IDEMPOTENT_PID].send(pairs, transactional=False)
        self._appended(base, pairs, None)

    @rule(pairs=PAIRS)
    def plain_write(self, pairs: Pairs) -> None:
        self._appended(plain(self.log, self.clock, pairs), pairs, None)

    @rule(ms=st.integers(0, 2 * RETENTION_MS))
    def tick(self, ms: int) -> None:
        self.clock.now_ms += ms

    @rule()
    def roll(self) -> None:
        self.log.roll()

    # Cleaning and restarts --------------------------------------------------------------------

    @rule()
    def clean(self) -> None:
        log = self.log
        before = [(s.base_offset, s.largest_timestamp_ms) for s in log.segments]
        section = cleanable_section(log, first_dirty_offset=self.checkpoint, now_ms=self.clock())
        stats = self.cleaner.clean(log, first_dirty_offset=self.checkpoint, force=True)
        assert (stats is not None) == (section.dirty_bytes > 0)
        if stats is None:
            return
        # What the run exercised (pytest --hypothesis-show-statistics shows these).
        for what, count in (
            ("removed aborted data", stats.aborted_records_removed),
            ("removed a marker", stats.markers_removed),
            ("kept an emptied batch", stats.empty_batches_kept),
            ("removed records", stats.records_removed),
        ):
            if count:
                event(f"a clean {what}")
        map_end = stats.first_dirty_offset
        assert map_end <= log.last_stable_offset
        if not self.small_buffer:
            assert map_end == section.first_uncleanable_offset

        def aborted(r: Rec) -> bool:
            return r.txn is not None and self.txns[r.txn].status == "aborted"

        kept = model_clean(
            [r for r in self.records if not aborted(r)],
            before,
            first_dirty=section.first_dirty_offset,
            map_end=map_end,
            delete_retention_ms=RETENTION_MS,
        )
        kept += [r for r in self.records if aborted(r) and r.batch >= map_end]
        self.records = sorted(kept, key=lambda r: r.offset)
        self.checkpoint = map_end

    @rule(key=KEYS)
    def age_and_clean(self, key: bytes) -> None:
        """Move the delete horizon past everything written so far: newer data goes into the
        clean section, and the next pass may drop expired tombstones and idle markers."""
        for _ in range(2):
            self.clock.now_ms += 3 * RETENTION_MS
            self.plain_write([(key, b"aged")])
            self.log.roll()
            self.clean()

    @rule(how=st.sampled_from(["clean", "crash", "crash without snapshots"]), data=st.data())
    def restart(self, how: str, data: st.DataObject) -> None:
        if self.checkpoint:
            event(f"{how} after a clean")
        if how == "clean":
            self.log.close()
            self.log = open_log(self.directory, self.config, self.clock, clean=True)
        else:
            # A recovery point anywhere (a checkpoint may be old): the replay then starts at
            # the newest snapshot at or below it, which may predate what cleaning removed.
            bases = [s.base_offset for s in self.log.segments]
            recovery_point = data.draw(st.sampled_from([0, *bases, self.log.recovery_point]))
            self.log = crash_and_reopen(
                self.log,
                self.directory,
                self.config,
                self.clock,
                snapshots=how == "crash",
                recovery_point=recovery_point,
            )
        end = self.log.log_end_offset
        for producer in self.producers.values():
            producer.log = self.log
            if producer.last is not None:
                info = self.log.append(producer.last)
                assert info.is_duplicate, f"producer {producer.pid}: its last batch again"
                assert self.log.log_end_offset == end

    # Checks -----------------------------------------------------------------------------------

    def lso(self) -> int:
        firsts = [self.txns[t].batches[0] for t in self.open_txn.values()]
        return min(firsts, default=self.log.log_end_offset)

    @invariant()
    def reads_match_the_model(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.last_stable_offset == self.lso()
        committed = [
            (r.offset, r.key, r.value)
            for r in self.records
            if (r.txn is None or self.txns[r.txn].status == "committed") and r.offset < self.lso()
        ]
        assert read(self.log, FetchIsolation.TXN_COMMITTED) == committed
        everything = [(r.offset, r.key, r.value) for r in self.records]
        assert read(self.log, FetchIsolation.HIGH_WATERMARK) == everything

    @invariant()
    def markers_outlive_their_data(self) -> None:
        if not hasattr(self, "log"):
            return
        headers = batches(self.log)
        data = {h.base_offset for h in headers if not h.is_control}
        markers = {h.base_offset for h in headers if h.is_control}
        for txn in self.txns:
            if txn.marker is not None and data.intersection(txn.batches):
                assert txn.marker in markers, f"{txn} lost its marker but kept data"
        for _, _, marker in txn_entries(self.log):
            assert marker in markers, f"a .txnindex entry outlived its marker {marker}"


TransactionalCleanerMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_transactional_cleaner_model = TransactionalCleanerMachine.TestCase
