"""The read path after compaction (spark_mq.storage.log_read): the next offset to fetch from.

Compaction leaves batches whose last records are gone (they keep their lastOffsetDelta),
batches with no record at all, offset gaps between batches and between segments, and ranges
holding nothing but a marker or aborted data. ``read_records_with_next`` must return the
next offset from batch headers so that a reader loop always makes progress and stops at its
bound. The logs here are written with ``assign_offsets=False`` (as a follower copies a
compacted leader), which lets a test place every batch at the offsets it wants.
"""

from __future__ import annotations

import dataclasses
import doctest
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_testing import OpenLog

from spark_mq.storage import log_read
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import (
    BatchHeader,
    ControlType,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
)

Row = tuple[int, bytes]


def put(
    log: PartitionLog,
    base: int,
    deltas: list[int],
    *,
    span: int | None = None,
    producer_id: int = -1,
    transactional: bool = False,
) -> list[Row]:
    """A batch at ``base`` holding records at ``base + delta``, spanning ``span`` offsets."""
    last_delta = (deltas[-1] if deltas else 0) if span is None else span - 1
    values = [b"v%d" % (base + d) for d in deltas]
    data = encode_batch(
        pa.array(values, pa.binary()),
        offset_delta=pa.array(deltas, pa.int32()),
        last_offset_delta=last_delta,
        base_offset=base,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=transactional,
        now_ms=1000,
    )
    if not deltas:
        data = encode_empty_batch(BatchHeader.unpack_from(data))
    log.append(data, assign_offsets=False)
    return [(base + d, v) for d, v in zip(deltas, values, strict=True)]


def marker(log: PartitionLog, base: int, producer_id: int, control: ControlType) -> None:
    data = encode_control_batch(
        control, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0, base_offset=base
    )
    log.append(data, assign_offsets=False)


def read_loop(
    log: PartitionLog,
    isolation: FetchIsolation,
    max_bytes: int,
    *,
    max_offset: int | None = None,
) -> list[Row]:
    """What a consumer loop reads from the log start to its bound, checking progress."""
    bound = (
        log.last_stable_offset if isolation is FetchIsolation.TXN_COMMITTED else log.high_watermark
    )
    if max_offset is not None:
        bound = min(bound, max_offset)
    offset = log.log_start_offset
    rows: list[Row] = []
    while offset < bound:
        table, next_offset = log.read_records_with_next(
            offset, max_bytes, isolation=isolation, max_offset=max_offset
        )
        assert offset < next_offset <= bound, (offset, next_offset, bound)
        got = list(
            zip(table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True)
        )
        assert all(offset <= o < next_offset for o, _ in got), (offset, next_offset, got)
        rows += got
        offset = next_offset
    return rows


def test_read_loop_crosses_gaps_empty_batches_markers_and_aborted_data(
    open_log: OpenLog,
) -> None:
    log = open_log(LogConfig(segment_bytes=4000))
    rows = put(log, 0, [0, 2], span=5)  # records 0 and 2 kept, the batch spans 0..4
    rows += put(log, 10, [], span=3, producer_id=5)  # a producer's last batch, emptied
    marker(log, 20, 5, ControlType.COMMIT)  # a marker whose data is gone
    aborted = put(log, 21, [0, 1], producer_id=6, transactional=True)
    marker(log, 23, 6, ControlType.ABORT)
    rows += put(log, 30, [0])
    log.roll()  # the next segment starts at 31, its first batch at 40
    rows += put(log, 40, [1, 3], span=6)
    log.roll()  # an empty active segment at 46
    assert log.high_watermark == log.last_stable_offset == 46
    for max_bytes in (1, 700, 1 << 20):
        assert read_loop(log, FetchIsolation.TXN_COMMITTED, max_bytes) == rows
        assert read_loop(log, FetchIsolation.HIGH_WATERMARK, max_bytes) == sorted(rows + aborted)
    # One batch at a time (max_bytes=1): a read inside a gap or an empty piece moves past it.
    for start, expected_next, expected_offsets in (
        (3, 5, []),  # inside the first batch, past its last kept record
        (5, 13, []),  # a gap, then the emptied batch
        (11, 13, []),
        (13, 21, []),  # a gap, then the lone marker
        (24, 31, [30]),
        (31, 46, [41, 43]),  # the gap between segments
        (45, 46, []),
    ):
        table, next_offset = log.read_records_with_next(start, 1)
        assert (next_offset, table.column("offset").to_pylist()) == (
            expected_next,
            expected_offsets,
        ), start
    # read_committed: a fetch of nothing but aborted data moves past it.
    table, next_offset = log.read_records_with_next(21, 1, isolation=FetchIsolation.TXN_COMMITTED)
    assert (table.num_rows, next_offset) == (0, 23)


def test_next_offset_at_and_near_the_bound(open_log: OpenLog) -> None:
    log = open_log()
    put(log, 0, [0])
    put(log, 3, [0, 4])  # spans 3..7
    put(log, 10, [0])
    # At the bound: no progress, nothing read.
    assert log.read_records_with_next(11) == (log.read_records(11), 11)
    # Nothing between the start and max_offset: max_offset.
    assert log.read_records_with_next(1, max_offset=3).next_offset == 3
    # A batch straddling max_offset is read up to it.
    table, next_offset = log.read_records_with_next(1, max_offset=5)
    assert (table.column("offset").to_pylist(), next_offset) == ([3], 5)
    assert log.read_records(3, max_offset=8).column("offset").to_pylist() == [3, 7]
    # A batch straddling the high watermark (set by replication) is not served: the reader
    # goes to its base and waits there for the high watermark to move.
    log.update_high_watermark(5)
    assert log.read_records_with_next(1).next_offset == 3
    assert log.read_records_with_next(3) == (log.read_records(3), 3)
    log.update_high_watermark(11)
    # An open transaction bounds read_committed at its first offset.
    put(log, 11, [0], producer_id=9, transactional=True)
    put(log, 12, [0])
    assert log.last_stable_offset == 11
    committed = FetchIsolation.TXN_COMMITTED
    assert log.read_records_with_next(8, isolation=committed).next_offset == 11
    assert log.read_records_with_next(12, isolation=committed).next_offset == 12


def test_read_records_is_read_records_with_next_without_the_offset(open_log: OpenLog) -> None:
    log = open_log()
    put(log, 0, [0, 1, 2])
    result = log.read_records_with_next(1, max_offset=2)
    assert result.records.equals(log.read_records(1, max_offset=2))
    assert result.records.column("offset").to_pylist() == [1] and result.next_offset == 2


def test_docstring_examples_run() -> None:
    from spark_mq.storage import log

    assert doctest.testmod(log_read).failed == 0
    assert doctest.testmod(log).failed == 0


# ---------------------------------------------------------------------------------------------
# Any layout


@dataclasses.dataclass(frozen=True)
class Piece:
    gap: int  # offsets skipped before the batch
    kind: str  # "data", "empty", "commit", "abort"
    deltas: tuple[int, ...]
    tail: int  # offsets the batch spans after its last record


PIECES = st.builds(
    Piece,
    gap=st.integers(0, 3),
    kind=st.sampled_from(["data", "data", "data", "empty", "commit", "abort"]),
    deltas=st.sets(st.integers(0, 6), min_size=1, max_size=4).map(lambda s: tuple(sorted(s))),
    tail=st.integers(0, 2),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(PIECES, min_size=1, max_size=14),
    rolls=st.sets(st.integers(0, 13)),
    max_bytes=st.sampled_from([1, 900, 3000, 1 << 20]),
)
def test_any_layout_is_read_exactly_and_the_loop_always_ends(
    pieces: list[Piece], rolls: set[int], max_bytes: int
) -> None:
    directory = Path(tempfile.mkdtemp(prefix="read_layout_"))
    log = PartitionLog.open(directory, LogConfig(), topic="t", partition=0)
    try:
        committed: list[Row] = []
        everything: list[Row] = []
        offset = 0
        for i, piece in enumerate(pieces):
            base = offset + piece.gap
            if piece.kind in ("commit", "abort"):
                # A transaction of its own producer: its data, then its marker.
                pid = 100 + i
                rows = put(log, base, list(piece.deltas), producer_id=pid, transactional=True)
                last = base + piece.deltas[-1]
                control = ControlType.COMMIT if piece.kind == "commit" else ControlType.ABORT
                marker(log, last + 1, pid, control)
                everything += rows
                committed += rows if piece.kind == "commit" else []
                offset = last + 2
            else:
                deltas = list(piece.deltas) if piece.kind == "data" else []
                span = piece.deltas[-1] + 1 + piece.tail
                rows = put(log, base, deltas, span=span, producer_id=7)
                everything += rows
                committed += rows
                offset = base + span
            if i in rolls:
                log.roll()
        for isolation, expected in (
            (FetchIsolation.TXN_COMMITTED, committed),
            (FetchIsolation.HIGH_WATERMARK, everything),
        ):
            assert read_loop(log, isolation, max_bytes) == expected
        # max_offset anywhere, even inside a batch: exactly the records below it.
        for bound in {offset // 3, offset // 2, offset - 1}:
            got = read_loop(log, FetchIsolation.HIGH_WATERMARK, max_bytes, max_offset=bound)
            assert got == [r for r in everything if r[0] < bound]
    finally:
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("isolation", list(FetchIsolation))
def test_an_empty_log_reads_nothing_and_stays(open_log: OpenLog, isolation: FetchIsolation) -> None:
    log = open_log()
    assert log.read_records_with_next(0, isolation=isolation).next_offset == 0
    assert log.read_records_with_next(0, isolation=isolation).records.num_rows == 0
