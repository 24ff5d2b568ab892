"""TimeIndex: a sorted-list reference model, the reserved last slot, corruption and misuse."""

from __future__ import annotations

import doctest
import shutil
import struct
import tempfile
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from spark_mq.errors import (
    ConfigError,
    CorruptIndexError,
    InvalidRecordError,
    LogClosedError,
    UsageError,
)
from spark_mq.storage import time_index
from spark_mq.storage.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

ENTRY = struct.Struct(">qi")
MAX_ENTRIES = 12
# Not a multiple of the entry size, so every test also exercises the rounding down.
MAX_BYTES = MAX_ENTRIES * 12 + 11


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.timeindex"


def restore_crash_image(index: TimeIndex) -> None:
    """Leave the file as a process crash would: untrimmed, as the shared mapping holds it."""
    image = index.path.read_bytes()
    index.close()
    index.path.write_bytes(image)


def write_entries(path: Path, entries: list[tuple[int, int]], extra: bytes = b"") -> None:
    path.write_bytes(b"".join(ENTRY.pack(ts, rel) for ts, rel in entries) + extra)


# ---------------------------------------------------------------------------------------------
# Reference model


def model_lookup(model: list[tuple[int, int]], base_offset: int, target: int) -> TimestampOffset:
    slot = bisect_right([timestamp for timestamp, _ in model], target) - 1
    return TimestampOffset(NO_TIMESTAMP, base_offset) if slot < 0 else TimestampOffset(*model[slot])


class TimeIndexMachine(RuleBasedStateMachine):
    """Random appends (kept or ignored), truncations, clean and crash reopens vs a list."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="time-index-"))
        self.model: list[tuple[int, int]] = []
        self.writable = True
        self.base_offset = 0
        self.capacity = MAX_ENTRIES

    @initialize(base_offset=st.sampled_from([0, 7, 2**40]))
    def open_index(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.index = TimeIndex(index_path(self.directory, base_offset), base_offset, MAX_BYTES)

    def teardown(self) -> None:
        if hasattr(self, "index"):
            self.index.close()
        shutil.rmtree(self.directory)

    @property
    def last(self) -> tuple[int, int]:
        return self.model[-1] if self.model else (NO_TIMESTAMP, self.base_offset)

    @precondition(lambda self: self.writable)
    @rule(
        # 0 repeats the last timestamp (ignored); from an empty index, 0 is -1 and 1 the epoch.
        timestamp_step=st.one_of(st.integers(0, 2), st.integers(0, 10**12)),
        offset_step=st.integers(0, 100),
        skip_full_check=st.booleans(),
    )
    def maybe_append(self, timestamp_step: int, offset_step: int, skip_full_check: bool) -> None:
        last_timestamp, last_offset = self.last
        timestamp, offset = last_timestamp + timestamp_step, last_offset + offset_step
        # Kafka's rule: full when only the slot kept for the roll is left.
        if not skip_full_check and len(self.model) >= self.capacity - 1:
            assert self.index.is_full
            with pytest.raises(UsageError, match="roll a new segment"):
                self.index.maybe_append(timestamp, offset, skip_full_check)
            return
        if timestamp <= last_timestamp:
            assert self.index.maybe_append(timestamp, offset, skip_full_check) is False
            return
        if len(self.model) >= self.capacity:
            with pytest.raises(UsageError, match="full"):
                self.index.maybe_append(timestamp, offset, skip_full_check)
            return
        assert self.index.maybe_append(timestamp, offset, skip_full_check) is True
        self.model.append((timestamp, offset))

    @precondition(lambda self: self.writable and len(self.model) > 0)
    @rule(back=st.integers(1, 100))
    def backwards_append_is_refused(self, back: int) -> None:
        last_timestamp, last_offset = self.last
        with pytest.raises(InvalidRecordError, match=f"{last_offset - back}.*{last_offset}"):
            self.index.maybe_append(last_timestamp + 1, last_offset - back, skip_full_check=True)
        bad_timestamp = last_timestamp - back
        with pytest.raises(InvalidRecordError, match=f"{bad_timestamp}.*{last_timestamp}"):
            self.index.maybe_append(bad_timestamp, last_offset, skip_full_check=True)

    @precondition(lambda self: self.writable)
    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        span = self.last[1] - self.base_offset
        offset = self.base_offset + data.draw(st.integers(-3, span + 3), label="relative")
        self.index.truncate_to(offset)
        self.model = [entry for entry in self.model if entry[1] < offset]

    @precondition(lambda self: self.writable)
    @rule()
    def truncate(self) -> None:
        self.index.truncate()
        self.model = []

    @precondition(lambda self: self.writable)
    @rule(extra_entries=st.integers(0, MAX_ENTRIES))
    def resize(self, extra_entries: int) -> None:
        self.capacity = len(self.model) + extra_entries
        self.index.resize(self.capacity * 12 + 5)
        assert self.index.path.stat().st_size == self.capacity * 12

    @precondition(lambda self: not self.writable)
    @rule()
    def read_only_refuses_changes(self) -> None:
        for change in (
            lambda: self.index.maybe_append(self.last[0] + 1, self.last[1], True),
            lambda: self.index.truncate_to(self.base_offset),
            self.index.truncate,
            lambda: self.index.resize(MAX_BYTES),
            self.index.trim_to_valid_size,
        ):
            with pytest.raises(UsageError, match="read-only"):
                change()

    @rule(writable=st.booleans())
    def close_and_reopen(self, writable: bool) -> None:
        was_writable = self.writable
        self.index.close()
        if was_writable:
            assert self.index.path.stat().st_size == 12 * len(self.model)
        self.reopen(writable)

    @rule(writable=st.booleans())
    def crash_and_reopen(self, writable: bool) -> None:
        restore_crash_image(self.index)
        self.reopen(writable)

    def reopen(self, writable: bool) -> None:
        self.index = TimeIndex(self.index.path, self.base_offset, MAX_BYTES, writable=writable)
        self.writable = writable
        self.capacity = self.index.path.stat().st_size // 12
        # The documented rule: a file of all-zero entries, e.g. just (0, base_offset), is empty.
        if self.model == [(0, self.base_offset)]:
            self.model = []

    @rule()
    def rename(self) -> None:
        new_path = self.index.path.with_name(self.index.path.name + ".x")
        self.index.rename(new_path)
        assert self.index.path == new_path

    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "index"):
            return
        index, model, base = self.index, self.model, self.base_offset
        assert index.entries == len(model)
        assert index.max_entries == self.capacity
        assert index.last_entry == self.last
        assert [index.entry(n) for n in range(index.entries)] == model
        targets = {-(2**63), -1, 0, 1, self.last[0] + 1, 2**63 - 1}
        for timestamp, _ in model:
            targets.update((timestamp - 1, timestamp, timestamp + 1))
        for target in targets:
            assert index.lookup(target) == model_lookup(model, base, target), target
        index.sanity_check()


TestTimeIndexModel = TimeIndexMachine.TestCase
# derandomize: the same examples on every run, so a failure reproduces without a seed.
TestTimeIndexModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, derandomize=True
)


# ---------------------------------------------------------------------------------------------
# Appends and lookups


def test_new_index_is_sparse_and_close_trims_it(tmp_path: Path) -> None:
    path = index_path(tmp_path, 10)
    index = TimeIndex(path, 10, max_index_size_bytes=100)
    assert path.stat().st_size == 96  # rounded down to 8 entries of 12 bytes
    assert path.stat().st_blocks == 0  # sparse: no disk blocks until entries come
    assert index.max_entries == 8
    assert index.maybe_append(1_000, 10)
    assert index.maybe_append(2_000, 15)
    index.close()
    assert path.read_bytes() == ENTRY.pack(1_000, 0) + ENTRY.pack(2_000, 5)


def test_max_size_below_one_entry_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"segment.index.bytes"):
        TimeIndex(index_path(tmp_path, 0), 0, max_index_size_bytes=11)


def test_maybe_append_only_appends_a_greater_timestamp(tmp_path: Path) -> None:
    with TimeIndex(index_path(tmp_path, 100), 100, MAX_BYTES) as index:
        assert index.last_entry == TimestampOffset(NO_TIMESTAMP, 100)
        assert index.maybe_append(-1, 100) is False  # no timestamp: never indexed
        assert index.maybe_append(-5, 100) is False
        assert index.maybe_append(500, 110) is True
        assert index.maybe_append(500, 120) is False  # same timestamp: ignored
        assert index.maybe_append(600, 110) is True  # same offset, greater timestamp: kept
        assert index.entries == 2
        assert index.last_entry == TimestampOffset(600, 110)


def test_maybe_append_refuses_going_backwards_naming_both_values(tmp_path: Path) -> None:
    with TimeIndex(index_path(tmp_path, 100), 100, MAX_BYTES) as index:
        index.maybe_append(500, 110)
        with pytest.raises(InvalidRecordError, match=r"offset 109 .* below .* offset 110"):
            index.maybe_append(700, 109)
        with pytest.raises(InvalidRecordError, match=r"timestamp 499 .* below .* timestamp 500"):
            index.maybe_append(499, 120)
        with pytest.raises(InvalidRecordError, match="int64"):
            index.maybe_append(2**63, 120)
        with pytest.raises(InvalidRecordError, match="roll a new segment"):
            index.maybe_append(800, 100 + 2**31)
        assert index.entries == 1


def test_offset_below_base_of_an_empty_index_is_refused(tmp_path: Path) -> None:
    with (
        TimeIndex(index_path(tmp_path, 100), 100, MAX_BYTES) as index,
        pytest.raises(InvalidRecordError, match="roll a new segment"),
    ):
        index.maybe_append(5, 99)


def test_last_slot_is_kept_for_the_roll(tmp_path: Path) -> None:
    with TimeIndex(index_path(tmp_path, 0), 0, max_index_size_bytes=4 * 12) as index:
        for n in range(3):
            assert not index.is_full
            index.maybe_append(10 * (n + 1), n)
        assert (index.entries, index.max_entries, index.is_full) == (3, 4, True)
        with pytest.raises(UsageError, match=r"kept for the roll.*roll a new segment"):
            index.maybe_append(100, 10)
        assert index.maybe_append(100, 10, skip_full_check=True) is True
        with pytest.raises(UsageError, match="full"):
            index.maybe_append(200, 20, skip_full_check=True)
        # A repeat of the last entry, as a close after a roll does, is a harmless no-op.
        assert index.maybe_append(100, 10, skip_full_check=True) is False
        assert index.entries == 4


def test_lookup_of_empty_index_and_below_first_entry(tmp_path: Path) -> None:
    with TimeIndex(index_path(tmp_path, 50), 50, MAX_BYTES) as index:
        assert index.lookup(10**12) == TimestampOffset(NO_TIMESTAMP, 50)
        index.maybe_append(1_000, 60)
        index.maybe_append(2_000, 70)
        assert index.lookup(999) == TimestampOffset(NO_TIMESTAMP, 50)
        assert index.lookup(1_000) == TimestampOffset(1_000, 60)
        assert index.lookup(1_999) == TimestampOffset(1_000, 60)
        assert index.lookup(2**63 - 1) == TimestampOffset(2_000, 70)


def test_truncate_to_drops_every_entry_at_or_past_the_offset(tmp_path: Path) -> None:
    with TimeIndex(index_path(tmp_path, 0), 0, MAX_BYTES) as index:
        for timestamp, offset in [(10, 1), (20, 5), (30, 5), (40, 5), (50, 9)]:
            index.maybe_append(timestamp, offset)
        index.truncate_to(6)
        assert index.entries == 4
        index.truncate_to(5)  # all three entries of offset 5 go
        assert [index.entry(n) for n in range(index.entries)] == [(10, 1)]
        assert index.last_entry == TimestampOffset(10, 1)
        index.truncate_to(100)
        assert index.entries == 1
        index.truncate()
        assert index.last_entry == TimestampOffset(NO_TIMESTAMP, 0)


def test_entry_out_of_range(tmp_path: Path) -> None:
    with (
        TimeIndex(index_path(tmp_path, 0), 0, MAX_BYTES) as index,
        pytest.raises(UsageError, match="0 entries"),
    ):
        index.entry(0)


# ---------------------------------------------------------------------------------------------
# Reopening


def test_reopen_of_untrimmed_preallocated_file_finds_the_entries(tmp_path: Path) -> None:
    path = index_path(tmp_path, 3)
    index = TimeIndex(path, 3, MAX_BYTES)
    for n in range(1, 6):
        index.maybe_append(n * 1_000, 3 + n)
    restore_crash_image(index)
    assert path.stat().st_size == MAX_ENTRIES * 12
    for writable in (False, True):
        with TimeIndex(path, 3, MAX_BYTES, writable=writable) as reopened:
            assert reopened.entries == 5
            assert reopened.last_entry == TimestampOffset(5_000, 8)
            assert reopened.lookup(2_500) == TimestampOffset(2_000, 5)
            reopened.sanity_check()


def test_epoch_first_entry_reads_as_empty_and_keeps_the_start_offset(tmp_path: Path) -> None:
    path = index_path(tmp_path, 40)
    index = TimeIndex(path, 40, MAX_BYTES)
    assert index.maybe_append(0, 40)
    assert index.lookup(5) == TimestampOffset(0, 40)
    restore_crash_image(index)
    with TimeIndex(path, 40, MAX_BYTES) as reopened:
        assert reopened.entries == 0
        # The documented cost: no timestamp instead of the epoch, at the same offset.
        assert reopened.lookup(5) == TimestampOffset(NO_TIMESTAMP, 40)
        reopened.maybe_append(0, 40)
        reopened.maybe_append(7, 41)
        restore_crash_image(reopened)
    with TimeIndex(path, 40, MAX_BYTES) as reopened:
        assert [reopened.entry(n) for n in range(reopened.entries)] == [(0, 40), (7, 41)]


def test_read_only_index(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    with TimeIndex(path, 0, MAX_BYTES) as index:
        index.maybe_append(10, 1)
    index = TimeIndex(path, 0, MAX_BYTES, writable=False)
    assert index.lookup(11) == TimestampOffset(10, 1)
    assert index.is_full  # a trimmed file has no free slot, let alone the reserved one
    with pytest.raises(UsageError, match="read-only"):
        index.maybe_append(20, 2, skip_full_check=True)
    index.close()
    assert path.stat().st_size == 12


# ---------------------------------------------------------------------------------------------
# Sanity check


@pytest.mark.parametrize(
    ("entries", "extra", "match"),
    [
        ([(10, 0)], b"\x00" * 5, "not a multiple of the entry size 12"),
        ([(10, 0), (30, 1), (20, 2)], b"", "entry 2 has timestamp 20, not above 30"),
        ([(10, 0), (10, 1)], b"", "entry 1 has timestamp 10"),
        ([(-7, 0), (10, 1)], b"", "negative timestamp -7"),
        ([(10, 5), (20, 4)], b"", "entry 1 has relative offset 4, below 5"),
        ([(10, -2), (20, 4)], b"", "negative relative offset -2"),
    ],
)
@pytest.mark.parametrize("writable", [False, True])
def test_sanity_check_detects_corruption(
    tmp_path: Path,
    entries: list[tuple[int, int]],
    extra: bytes,
    match: str,
    writable: bool,
) -> None:
    path = index_path(tmp_path, 0)
    write_entries(path, entries, extra)
    index = TimeIndex(path, 0, MAX_BYTES, writable=writable)
    with pytest.raises(CorruptIndexError, match=match) as info:
        index.sanity_check()
    assert info.value.path == str(path)
    assert index.delete()


def test_sanity_check_passes_with_repeated_offsets(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    write_entries(path, [(0, 0), (10, 3), (20, 3)])
    with TimeIndex(path, 0, MAX_BYTES, writable=False) as index:
        index.sanity_check()
        assert index.entries == 3


# ---------------------------------------------------------------------------------------------
# Rename, close, delete


def test_rename_keeps_the_index_working(tmp_path: Path) -> None:
    index = TimeIndex(index_path(tmp_path, 0), 0, MAX_BYTES)
    index.maybe_append(10, 1)
    new_path = tmp_path / f"{0:020d}.timeindex.deleted"
    index.rename(new_path)
    index.maybe_append(20, 2)
    assert index.lookup(25) == TimestampOffset(20, 2)
    index.close()
    assert new_path.stat().st_size == 24
    assert not index_path(tmp_path, 0).exists()


CLOSED_CALLS: list[Callable[[TimeIndex], object]] = [
    lambda index: index.maybe_append(10, 1),
    lambda index: index.lookup(0),
    lambda index: index.entry(0),
    lambda index: index.entries,
    lambda index: index.is_full,
    lambda index: index.last_entry,
    lambda index: index.truncate_to(0),
    lambda index: index.truncate(),
    lambda index: index.resize(120),
    lambda index: index.trim_to_valid_size(),
    lambda index: index.flush(),
    lambda index: index.sanity_check(),
    lambda index: index.rename(index.path.with_suffix(".x")),
    lambda index: index.delete(),
]


@pytest.mark.parametrize("call", CLOSED_CALLS)
@pytest.mark.parametrize("how", ["close", "delete"])
def test_every_call_after_close_raises_log_closed(
    tmp_path: Path, call: Callable[[TimeIndex], object], how: str
) -> None:
    index = TimeIndex(index_path(tmp_path, 0), 0, MAX_BYTES)
    index.maybe_append(5, 0)
    getattr(index, how)()
    with pytest.raises(LogClosedError, match=r"time index .* is closed"):
        call(index)
    index.close()  # closing again is harmless


def test_docstring_examples() -> None:
    failures, tried = doctest.testmod(time_index)
    assert tried > 0
    assert failures == 0
