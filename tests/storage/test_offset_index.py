"""OffsetIndex: a sorted-list reference model, crash images, corruption and misuse."""

from __future__ import annotations

import doctest
import errno
import os
import shutil
import struct
import tempfile
import threading
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
    LogDirectoryFullError,
    UsageError,
)
from spark_mq.storage import offset_index
from spark_mq.storage.offset_index import OffsetIndex, OffsetPosition

ENTRY = struct.Struct(">iI")
MAX_ENTRIES = 16
# Not a multiple of the entry size, so every test also exercises the rounding down.
MAX_BYTES = MAX_ENTRIES * 8 + 5


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.index"


def crash_image(index: OffsetIndex) -> bytes:
    """The file as a process crash would leave it: whatever the shared mapping holds now."""
    return index.path.read_bytes()


def restore_crash_image(index: OffsetIndex, image: bytes) -> None:
    """Close ``index`` (which trims it) and put the untrimmed bytes of the crash back."""
    index.close()
    index.path.write_bytes(image)


def write_entries(path: Path, entries: list[tuple[int, int]], extra: bytes = b"") -> None:
    path.write_bytes(b"".join(ENTRY.pack(rel, pos) for rel, pos in entries) + extra)


# ---------------------------------------------------------------------------------------------
# Reference model


def model_lookup(model: list[tuple[int, int]], base_offset: int, target: int) -> OffsetPosition:
    slot = bisect_right([offset for offset, _ in model], target) - 1
    return OffsetPosition(base_offset, 0) if slot < 0 else OffsetPosition(*model[slot])


class OffsetIndexMachine(RuleBasedStateMachine):
    """Random appends, truncations, renames, resizes, clean and crash reopens vs a list."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="offset-index-"))
        self.model: list[tuple[int, int]] = []
        self.writable = True
        self.base_offset = 0
        self.capacity = MAX_ENTRIES  # entries the file has room for
        self.renames = 0

    @initialize(base_offset=st.sampled_from([0, 1, 1_000, 2**40]))
    def open_index(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.index = OffsetIndex(index_path(self.directory, base_offset), base_offset, MAX_BYTES)

    def teardown(self) -> None:
        if hasattr(self, "index"):
            self.index.close()
        shutil.rmtree(self.directory)

    @property
    def last(self) -> tuple[int, int]:
        return self.model[-1] if self.model else (self.base_offset - 1, 0)

    @precondition(lambda self: self.writable)
    @rule(
        offset_gap=st.integers(1, 1_000),
        position_step=st.one_of(st.just(0), st.integers(0, 10_000)),
    )
    def append(self, offset_gap: int, position_step: int) -> None:
        last_offset, last_position = self.last
        offset, position = last_offset + offset_gap, last_position + position_step
        if len(self.model) >= self.capacity:
            assert self.index.is_full
            with pytest.raises(UsageError, match="roll a new segment"):
                self.index.append(offset, position)
            return
        assert not self.index.is_full
        self.index.append(offset, position)
        self.model.append((offset, position))

    @precondition(lambda self: self.writable and 0 < len(self.model) < self.capacity)
    @rule(offset_back=st.integers(0, 50), position_back=st.integers(1, 50))
    def append_out_of_order(self, offset_back: int, position_back: int) -> None:
        last_offset, last_position = self.last
        with pytest.raises(InvalidRecordError, match=f"{last_offset - offset_back}.*{last_offset}"):
            self.index.append(last_offset - offset_back, last_position + 1)
        if last_position >= position_back:
            bad_position = last_position - position_back
            with pytest.raises(InvalidRecordError, match=f"{bad_position}.*{last_position}"):
                self.index.append(last_offset + 1, bad_position)

    @precondition(lambda self: self.writable)
    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        span = self.last[0] - self.base_offset
        offset = self.base_offset + data.draw(st.integers(-5, span + 5), label="relative")
        self.index.truncate_to(offset)
        self.model = [entry for entry in self.model if entry[0] < offset]

    @precondition(lambda self: self.writable)
    @rule()
    def truncate(self) -> None:
        self.index.truncate()
        self.model = []

    @precondition(lambda self: self.writable)
    @rule(extra_entries=st.integers(0, MAX_ENTRIES), extra_bytes=st.integers(0, 7))
    def resize(self, extra_entries: int, extra_bytes: int) -> None:
        new_capacity = len(self.model) + extra_entries
        assert self.index.resize(new_capacity * 8 + extra_bytes) == (new_capacity != self.capacity)
        assert self.index.max_entries == new_capacity
        assert self.index.path.stat().st_size == new_capacity * 8
        self.capacity = new_capacity

    @precondition(lambda self: self.writable and len(self.model) > 0)
    @rule()
    def resize_below_entries_is_refused(self) -> None:
        with pytest.raises(UsageError, match="truncate it first"):
            self.index.resize(len(self.model) * 8 - 1)

    @precondition(lambda self: not self.writable)
    @rule()
    def read_only_refuses_changes(self) -> None:
        for change in (
            lambda: self.index.append(self.last[0] + 1, self.last[1]),
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
            assert self.index.path.stat().st_size == 8 * len(self.model)
        self.index = OffsetIndex(self.index.path, self.base_offset, MAX_BYTES, writable=writable)
        self.writable = writable
        # An existing file keeps its size: a trimmed index reopens full.
        self.capacity = self.index.path.stat().st_size // 8
        self.apply_open_rule()

    @rule(writable=st.booleans())
    def crash_and_reopen(self, writable: bool) -> None:
        image = crash_image(self.index)
        restore_crash_image(self.index, image)
        self.index = OffsetIndex(self.index.path, self.base_offset, MAX_BYTES, writable=writable)
        self.writable = writable
        self.capacity = len(image) // 8
        self.apply_open_rule()

    def apply_open_rule(self) -> None:
        """The documented rule: a file of all-zero entries, e.g. just (base_offset, 0), is empty."""
        if self.model == [(self.base_offset, 0)]:
            self.model = []

    @rule()
    def rename(self) -> None:
        self.renames += 1
        old_path = self.index.path
        new_path = self.directory / f"{self.base_offset:020d}.index.{self.renames}"
        self.index.rename(new_path)
        assert self.index.path == new_path
        assert not old_path.exists()

    @rule()
    def flush(self) -> None:
        self.index.flush()

    @invariant()
    def matches_model(self) -> None:
        if not hasattr(self, "index"):
            return
        index, model, base = self.index, self.model, self.base_offset
        assert index.entries == len(model)
        assert index.max_entries == self.capacity
        assert index.last_offset == (model[-1][0] if model else base)
        assert [index.entry(n) for n in range(index.entries)] == model
        targets = {base - 1, base, base + 1, self.last[0] + 1, self.last[0] + 10_000}
        for offset, _ in model:
            targets.update((offset - 1, offset, offset + 1))
        for target in targets:
            assert index.lookup(target) == model_lookup(model, base, target), target
        index.sanity_check()


TestOffsetIndexModel = OffsetIndexMachine.TestCase
# derandomize: the same examples on every run, so a failure reproduces without a seed.
TestOffsetIndexModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, derandomize=True
)


# ---------------------------------------------------------------------------------------------
# Files and sizes


def test_new_index_is_sparse_and_close_trims_it(tmp_path: Path) -> None:
    path = index_path(tmp_path, 50)
    index = OffsetIndex(path, 50, max_index_size_bytes=1_000)
    assert path.stat().st_size == 1_000  # already a multiple of 8
    assert path.stat().st_blocks == 0  # sparse: no disk blocks until entries come
    assert index.max_entries == 125
    assert index.length_bytes == 1_000
    index.append(50, 0)
    index.append(60, 4_096)
    assert index.size_bytes == 16
    index.close()
    assert path.read_bytes() == ENTRY.pack(0, 0) + ENTRY.pack(10, 4_096)


def test_default_size_is_kafka_segment_index_bytes(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 0), 0) as index:
        assert index.length_bytes == 10 * 1024 * 1024
        assert index.max_entries == 10 * 1024 * 1024 // 8


def test_max_size_is_rounded_down_to_whole_entries(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 0), 0, max_index_size_bytes=8 * 3 + 7) as index:
        assert index.max_entries == 3
        assert index.path.stat().st_size == 24


def test_max_size_below_one_entry_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        OffsetIndex(index_path(tmp_path, 0), 0, max_index_size_bytes=7)
    assert info.value.key == "segment.index.bytes"
    assert info.value.value == 7


def test_negative_base_offset_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="-1"):
        OffsetIndex(tmp_path / "x.index", -1)


def test_reopened_trimmed_index_is_full_until_resized(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    with OffsetIndex(path, 0, MAX_BYTES) as index:
        index.append(1, 0)
    assert path.stat().st_size == 8
    with OffsetIndex(path, 0, MAX_BYTES) as reopened:
        assert (reopened.entries, reopened.max_entries, reopened.is_full) == (1, 1, True)
        assert reopened.resize(MAX_BYTES) is True
        assert reopened.max_entries == MAX_ENTRIES
        reopened.append(2, 10)
    assert path.stat().st_size == 16


def test_empty_file_maps_nothing(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    OffsetIndex(path, 0, MAX_BYTES).close()
    assert path.stat().st_size == 0
    for writable in (False, True):
        index = OffsetIndex(path, 0, MAX_BYTES, writable=writable)
        assert (index.entries, index.max_entries, index.is_full) == (0, 0, True)
        assert index.lookup(5) == OffsetPosition(0, 0)
        assert index.fetch_upper_bound_position(OffsetPosition(0, 0), 10) is None
        index.sanity_check()
        index.flush()
        index.close()
    with OffsetIndex(path, 0, MAX_BYTES) as index:
        index.reset()
        assert index.max_entries == MAX_ENTRIES
        index.append(3, 0)


def test_full_disk_when_reserving_blocks_fails_the_append_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    path = index_path(tmp_path, 0)
    with OffsetIndex(path, 0, MAX_BYTES) as index:
        with monkeypatch.context() as patch:
            patch.setattr(os, "posix_fallocate", no_space)
            with pytest.raises(LogDirectoryFullError, match="free space") as info:
                index.append(0, 0)
            assert info.value.path == str(path)
            assert (index.entries, index.reserved_bytes) == (0, 0)
        # Room again: the same index takes the entry.
        index.append(0, 10)
        assert index.entry(0) == OffsetPosition(0, 10)


def test_file_system_without_fallocate_gets_blocks_by_writing_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    path = index_path(tmp_path, 0)
    with OffsetIndex(path, 0, MAX_BYTES) as index:
        assert index.max_entries == MAX_ENTRIES
        index.append(0, 0)
        index.append(5, 100)
        assert index.reserved_bytes == index.length_bytes
        assert path.stat().st_blocks > 0
        assert [index.entry(i) for i in range(2)] == [
            OffsetPosition(0, 0),
            OffsetPosition(5, 100),
        ]


# ---------------------------------------------------------------------------------------------
# Appends and lookups


def test_lookup_of_empty_index_and_below_first_entry(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 100), 100, MAX_BYTES) as index:
        assert index.lookup(0) == OffsetPosition(100, 0)
        assert index.lookup(100) == OffsetPosition(100, 0)
        assert index.last_offset == 100
        index.append(110, 500)
        assert index.lookup(109) == OffsetPosition(100, 0)
        assert index.lookup(99) == OffsetPosition(100, 0)
        assert index.lookup(110) == OffsetPosition(110, 500)
        assert index.lookup(2**62) == OffsetPosition(110, 500)


def test_full_index_refuses_appends_and_says_to_roll(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 0), 0, max_index_size_bytes=3 * 8) as index:
        for n in range(3):
            assert not index.is_full
            index.append(n * 10, n * 100)
        assert index.is_full
        with pytest.raises(UsageError, match=r"full.*roll a new segment"):
            index.append(100, 1_000)
        assert index.entries == 3


@pytest.mark.parametrize(
    ("offset", "position", "named"),
    [
        (20, 300, ("20", "20")),  # same offset
        (19, 300, ("19", "20")),  # lower offset
        (21, 199, ("199", "200")),  # position going backwards
    ],
)
def test_out_of_order_appends_are_refused_naming_both_values(
    tmp_path: Path, offset: int, position: int, named: tuple[str, str]
) -> None:
    with OffsetIndex(index_path(tmp_path, 10), 10, MAX_BYTES) as index:
        index.append(20, 200)
        with pytest.raises(InvalidRecordError) as info:
            index.append(offset, position)
        message = str(info.value)
        assert all(value in message for value in named), message
        assert index.entries == 1


def test_equal_positions_are_allowed(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 0), 0, MAX_BYTES) as index:
        index.append(1, 64)
        index.append(2, 64)
        assert index.lookup(5) == OffsetPosition(2, 64)


@pytest.mark.parametrize(
    ("offset", "position", "match"),
    [
        (9, 0, "roll a new segment"),  # below the base offset
        (10 + 2**31, 0, "roll a new segment"),  # relative offset overflows int32
        (11, -1, "uint32"),
        (11, 2**32, "uint32"),
    ],
)
def test_offsets_and_positions_that_do_not_fit_are_refused(
    tmp_path: Path, offset: int, position: int, match: str
) -> None:
    with OffsetIndex(index_path(tmp_path, 10), 10, MAX_BYTES) as index:
        with pytest.raises(InvalidRecordError, match=match):
            index.append(offset, position)
        assert index.entries == 0


def test_largest_relative_offset_and_position_fit(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 10), 10, MAX_BYTES) as index:
        index.append(10 + 2**31 - 1, 2**32 - 1)
        assert index.lookup(2**40) == OffsetPosition(10 + 2**31 - 1, 2**32 - 1)


def test_entry_out_of_range(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 0), 0, MAX_BYTES) as index:
        index.append(5, 0)
        assert index.entry(0) == OffsetPosition(5, 0)
        for n in (-1, 1):
            with pytest.raises(UsageError, match="1 entries"):
                index.entry(n)


def test_fetch_upper_bound_position(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 0), 0, MAX_BYTES) as index:
        for offset, position in [(0, 0), (10, 100), (20, 200), (30, 300)]:
            index.append(offset, position)
        start = index.lookup(12)
        assert index.fetch_upper_bound_position(start, 150) == OffsetPosition(30, 300)
        assert index.fetch_upper_bound_position(start, 100) == OffsetPosition(20, 200)
        assert index.fetch_upper_bound_position(start, 201) is None


def test_lookups_on_another_thread_during_appends_see_whole_entries(tmp_path: Path) -> None:
    appends = 2_000
    with OffsetIndex(index_path(tmp_path, 0), 0, max_index_size_bytes=appends * 8) as index:
        done = threading.Event()
        bad: list[tuple[int, OffsetPosition]] = []

        def read() -> None:
            target = 0
            while not done.is_set():
                target = (target + 7) % (2 * appends)
                found = index.lookup(target)
                # Every entry is (2n, 3n): a torn or unwritten slot breaks the relation.
                if found.offset > target or found.position * 2 != found.offset * 3:
                    bad.append((target, found))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for n in range(appends):
                index.append(2 * n, 3 * n)
        finally:
            done.set()
            reader.join()
        assert bad == []


# ---------------------------------------------------------------------------------------------
# Reopening


def test_reopen_of_untrimmed_preallocated_file_finds_the_entries(tmp_path: Path) -> None:
    path = index_path(tmp_path, 7)
    index = OffsetIndex(path, 7, MAX_BYTES)
    for n in range(5):
        index.append(7 + 3 * n, 40 * n)
    image = crash_image(index)
    assert len(image) == MAX_ENTRIES * 8
    restore_crash_image(index, image)
    for writable in (False, True):
        with OffsetIndex(path, 7, MAX_BYTES, writable=writable) as reopened:
            assert reopened.entries == 5
            assert reopened.lookup(14) == OffsetPosition(13, 80)
            reopened.sanity_check()


def test_all_zero_first_entry_reads_as_empty_without_changing_lookups(tmp_path: Path) -> None:
    path = index_path(tmp_path, 1_000)
    index = OffsetIndex(path, 1_000, MAX_BYTES)
    index.append(1_000, 0)
    before = [index.lookup(t) for t in (0, 1_000, 5_000)]
    restore_crash_image(index, crash_image(index))
    with OffsetIndex(path, 1_000, MAX_BYTES) as reopened:
        assert reopened.entries == 0
        assert [reopened.lookup(t) for t in (0, 1_000, 5_000)] == before
        # Followed by another entry, the zero entry is a real one and is kept.
        reopened.append(1_000, 0)
        reopened.append(1_010, 0)
        restore_crash_image(reopened, crash_image(reopened))
    with OffsetIndex(path, 1_000, MAX_BYTES) as reopened:
        assert [reopened.entry(n) for n in range(reopened.entries)] == [(1_000, 0), (1_010, 0)]


def test_truncation_zeroes_freed_slots_so_a_crash_does_not_revive_them(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0, MAX_BYTES)
    for n in range(1, 9):
        index.append(n, n * 10)
    index.truncate_to(4)
    restore_crash_image(index, crash_image(index))
    with OffsetIndex(path, 0, MAX_BYTES) as reopened:
        assert reopened.entries == 3
        assert reopened.last_offset == 3


def test_read_only_index(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    with OffsetIndex(path, 0, MAX_BYTES) as index:
        index.append(2, 0)
        index.append(4, 100)
    size = path.stat().st_size
    index = OffsetIndex(path, 0, MAX_BYTES, writable=False)
    assert not index.writable
    assert index.lookup(3) == OffsetPosition(2, 0)
    with pytest.raises(UsageError, match="read-only"):
        index.append(6, 200)
    index.flush()  # nothing to write: allowed
    index.close()
    assert path.stat().st_size == size  # a read-only close does not trim or grow


def test_read_only_open_of_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        OffsetIndex(index_path(tmp_path, 0), 0, writable=False)


# ---------------------------------------------------------------------------------------------
# Sanity check


@pytest.mark.parametrize("writable", [False, True])
def test_sanity_check_passes_on_healthy_files(tmp_path: Path, writable: bool) -> None:
    path = index_path(tmp_path, 5)
    write_entries(path, [(0, 0), (3, 10), (9, 10)])
    with OffsetIndex(path, 5, MAX_BYTES, writable=writable) as index:
        index.sanity_check()
        assert index.entries == 3


@pytest.mark.parametrize(
    ("entries", "extra", "match"),
    [
        ([(0, 0), (3, 10)], b"\x01\x02\x03", "not a multiple of the entry size 8"),
        ([(0, 0), (5, 10), (4, 20)], b"", "entry 2 has relative offset 4, not above 5"),
        ([(0, 0), (5, 10), (5, 20)], b"", "entry 2 has relative offset 5"),
        ([(-3, 0), (5, 10)], b"", "negative relative offset -3"),
        ([(1, 50), (2, 40)], b"", "entry 1 has position 40, below 50"),
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
    size = path.stat().st_size
    index = OffsetIndex(path, 0, MAX_BYTES, writable=writable)
    with pytest.raises(CorruptIndexError, match=match) as info:
        index.sanity_check()
    assert info.value.path == str(path)
    # The caller rebuilds the index: deleting it right after the error must work.
    assert index.delete()
    if extra:
        assert size % 8 != 0  # a writable open did not pad the bad length away


# ---------------------------------------------------------------------------------------------
# Rename, resize, close, delete


def test_rename_keeps_the_index_working(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0, MAX_BYTES)
    index.append(1, 10)
    new_path = tmp_path / "renamed" / f"{0:020d}.index.deleted"
    new_path.parent.mkdir()
    index.rename(new_path)
    assert index.path == new_path
    assert not path.exists()
    index.append(2, 20)
    assert index.lookup(5) == OffsetPosition(2, 20)
    index.close()
    assert new_path.stat().st_size == 16


def test_resize(tmp_path: Path) -> None:
    with OffsetIndex(index_path(tmp_path, 0), 0, max_index_size_bytes=64) as index:
        for n in range(3):
            index.append(n, n)
        assert index.resize(64) is False
        assert index.resize(30) is True  # rounded down to 24
        assert (index.length_bytes, index.max_entries, index.is_full) == (24, 3, True)
        with pytest.raises(UsageError, match="truncate it first"):
            index.resize(16)
        assert index.resize(800) is True
        assert index.lookup(9) == OffsetPosition(2, 2)
        index.trim_to_valid_size()
        assert index.path.stat().st_size == 24
        index.reset()
        assert (index.entries, index.length_bytes) == (0, 64)


def test_close_twice_is_harmless(tmp_path: Path) -> None:
    index = OffsetIndex(index_path(tmp_path, 0), 0, MAX_BYTES)
    index.close()
    index.close()


def test_delete(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0, MAX_BYTES)
    assert index.delete() is True
    assert not path.exists()
    with pytest.raises(LogClosedError):
        index.lookup(0)


def test_delete_of_a_file_already_gone(tmp_path: Path) -> None:
    path = index_path(tmp_path, 0)
    index = OffsetIndex(path, 0, MAX_BYTES)
    path.unlink()
    assert index.delete() is False


CLOSED_CALLS: list[Callable[[OffsetIndex], object]] = [
    lambda index: index.append(10, 10),
    lambda index: index.lookup(0),
    lambda index: index.entry(0),
    lambda index: index.entries,
    lambda index: index.max_entries,
    lambda index: index.is_full,
    lambda index: index.last_offset,
    lambda index: index.size_bytes,
    lambda index: index.writable,
    lambda index: index.truncate_to(0),
    lambda index: index.truncate(),
    lambda index: index.reset(),
    lambda index: index.resize(64),
    lambda index: index.trim_to_valid_size(),
    lambda index: index.flush(),
    lambda index: index.sanity_check(),
    lambda index: index.rename(index.path.with_suffix(".x")),
    lambda index: index.delete(),
    lambda index: index.fetch_upper_bound_position(OffsetPosition(0, 0), 10),
]


@pytest.mark.parametrize("call", CLOSED_CALLS)
def test_every_call_after_close_raises_log_closed(
    tmp_path: Path, call: Callable[[OffsetIndex], object]
) -> None:
    index = OffsetIndex(index_path(tmp_path, 0), 0, MAX_BYTES)
    index.append(1, 1)
    index.close()
    with pytest.raises(LogClosedError, match=r"offset index .* is closed"):
        call(index)
    assert index.base_offset == 0  # identity stays readable
    assert "closed" in repr(index)


def test_docstring_examples() -> None:
    failures, tried = doctest.testmod(offset_index)
    assert tried > 0
    assert failures == 0
