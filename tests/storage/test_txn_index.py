"""TxnIndex: a list reference model, the documented layout, torn files, corruption and misuse."""

from __future__ import annotations

import doctest
import errno
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from spark_mq.errors import (
    CorruptIndexError,
    InvalidRecordError,
    LogClosedError,
    LogDirectoryFullError,
    UsageError,
)
from spark_mq.storage import txn_index
from spark_mq.storage.txn_index import AbortedTxn, TxnIndex, TxnIndexSearchResult

FORMAT_DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
# Written from the table in docs/format.md, not taken from the module under test.
ENTRY = struct.Struct(">hqqqq")
INT64_MAX = 2**63 - 1


def txn_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.txnindex"


def encode(txns: list[AbortedTxn], version: int = 0) -> bytes:
    return b"".join(ENTRY.pack(version, *txn) for txn in txns)


def model_collect(model: list[AbortedTxn], fetch: int, upper: int) -> TxnIndexSearchResult:
    """Kafka's rule, written out independently of the code under test."""
    found = []
    for txn in model:
        if txn.last_offset >= fetch and txn.first_offset < upper:
            found.append(txn)
        if txn.last_stable_offset >= upper:
            return TxnIndexSearchResult(found, True)
    return TxnIndexSearchResult(found, False)


# ---------------------------------------------------------------------------------------------
# Reference model


class TxnIndexMachine(RuleBasedStateMachine):
    """Random appends, truncations, resets, searches, renames, clean and crash reopens vs a list."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="txn-index-"))
        self.model: list[AbortedTxn] = []
        self.base_offset = 0
        self.renames = 0

    @initialize(base_offset=st.sampled_from([0, 1, 1_000, 2**40]))
    def open_index(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self.index = TxnIndex(txn_path(self.directory, base_offset), base_offset)

    def teardown(self) -> None:
        if hasattr(self, "index"):
            self.index.close()
        shutil.rmtree(self.directory)

    @property
    def last_offset(self) -> int:
        return self.model[-1].last_offset if self.model else self.base_offset - 1

    @rule(
        producer_id=st.integers(0, 5),
        gap=st.integers(1, 50),
        span=st.integers(0, 120),
        lso_back=st.integers(0, 150),
    )
    def append(self, producer_id: int, gap: int, span: int, lso_back: int) -> None:
        last = self.last_offset + gap
        txn = AbortedTxn(producer_id, max(0, last - span), last, max(0, last + 1 - lso_back))
        self.index.append(txn)
        self.model.append(txn)

    @precondition(lambda self: bool(self.model))
    @rule(back=st.integers(0, 30))
    def append_out_of_order(self, back: int) -> None:
        # Stay at or above the base offset, so that the order is the only rule broken.
        last = max(self.base_offset, self.last_offset - back)
        with pytest.raises(InvalidRecordError, match=f"{last} is not above .*{self.last_offset}"):
            self.index.append(AbortedTxn(1, max(0, last - 1), last, last + 1))

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.base_offset - 3, self.last_offset + 3), label="to")
        self.index.truncate_to(offset)
        self.model = [txn for txn in self.model if txn.last_offset < offset]

    @rule()
    def reset(self) -> None:
        self.index.reset()
        self.model = []

    @rule(data=st.data())
    def collect(self, data: st.DataObject) -> None:
        low, high = max(0, self.base_offset - 200), self.last_offset + 200
        fetch = data.draw(st.integers(low, high), label="fetch")
        upper = data.draw(st.integers(fetch, high + 1), label="upper")
        assert self.index.collect_aborted_txns(fetch, upper) == model_collect(
            self.model, fetch, upper
        )

    @rule()
    def close_and_reopen(self) -> None:
        self.index.close()
        self.index = TxnIndex(self.index.path, self.base_offset)

    @rule()
    def crash_and_reopen(self) -> None:
        # Appends are plain writes with no user-space buffer, so the file a killed process
        # leaves is the file as it is now: a second object reads it without closing the first.
        crashed = self.index
        self.index = TxnIndex(crashed.path, self.base_offset)
        self.index.sanity_check()
        crashed.close()

    @rule()
    def rename(self) -> None:
        self.renames += 1
        old_path = self.index.path
        new_path = self.directory / f"{self.base_offset:020d}.txnindex.{self.renames}"
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
        assert self.index.all_aborted_txns() == self.model
        path = self.index.path
        assert (path.read_bytes() if path.exists() else b"") == encode(self.model)
        # A second reader of the same file agrees, and the file passes the check.
        other = TxnIndex(path, self.base_offset)
        other.sanity_check()
        assert other.all_aborted_txns() == self.model
        other.close()


TestTxnIndexModel = TxnIndexMachine.TestCase
# derandomize: the same examples on every run, so a failure reproduces without a seed.
TestTxnIndexModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, derandomize=True
)


# ---------------------------------------------------------------------------------------------
# Layout


def test_layout_table_in_format_doc_matches_the_file(tmp_path: Path) -> None:
    """docs/format.md is the single source of truth: build an entry from its table."""
    text = FORMAT_DOC.read_text(encoding="utf-8")
    section = re.search(r"^## Transaction index \(\.txnindex\)\n(.*?)^## ", text, re.S | re.M)
    assert section is not None, "docs/format.md lost its .txnindex section"
    rows = re.findall(r"^\| (\d+) \| (\d+) \| `(\w+)` \| (int\d+) \|", section.group(1), re.M)
    assert [name for _o, _s, name, _t in rows] == [
        "version",
        "producerId",
        "firstOffset",
        "lastOffset",
        "lastStableOffset",
    ]
    values = {
        "version": 0,
        "producerId": 0x0102030405060708,
        "firstOffset": 90,
        "lastOffset": 120,
        "lastStableOffset": 100,
    }
    expected = bytearray()
    for offset, size, name, kind in rows:
        assert int(offset) == len(expected), name
        assert int(size) * 8 == int(kind.removeprefix("int")), name
        expected += values[name].to_bytes(int(size), "big", signed=True)
    assert len(expected) == TxnIndex.ENTRY_SIZE == 34

    path = txn_path(tmp_path, 100)
    with TxnIndex(path, 100) as index:
        index.append(AbortedTxn(0x0102030405060708, 90, 120, 100))
    assert path.read_bytes() == bytes(expected)


def test_docstring_examples() -> None:
    failures, tried = doctest.testmod(txn_index)
    assert tried > 0
    assert failures == 0


# ---------------------------------------------------------------------------------------------
# Files


def test_nothing_is_created_until_the_first_append(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 0)
    with TxnIndex(path, 0) as index:
        assert index.all_aborted_txns() == []
        assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult([], False)
        index.sanity_check()
        index.truncate_to(0)
        index.reset()
        index.flush()
        index.rename(tmp_path / "moved.txnindex")
        assert not path.exists()
        assert not (tmp_path / "moved.txnindex").exists()
        index.append(AbortedTxn(1, 0, 5, 6))
        assert index.path.stat().st_size == 34
        assert index.delete() is True
    assert list(tmp_path.iterdir()) == []


def test_delete_of_a_missing_file(tmp_path: Path) -> None:
    index = TxnIndex(txn_path(tmp_path, 0), 0)
    assert index.delete() is False
    with pytest.raises(LogClosedError):
        index.delete()


def test_reopen_reads_the_entries_back(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 10)
    txns = [AbortedTxn(1, 3, 10, 11), AbortedTxn(2, 11, 15, 12), AbortedTxn(1, 16, 30, 31)]
    with TxnIndex(path, 10) as index:
        for txn in txns:
            index.append(txn)
        index.flush()
    with TxnIndex(path, 10) as reopened:
        assert reopened.all_aborted_txns() == txns
        reopened.append(AbortedTxn(3, 31, 40, 41))
    assert path.read_bytes() == encode([*txns, AbortedTxn(3, 31, 40, 41)])


def test_flush_fsyncs_the_directory_once_after_creating_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(txn_index, "fsync_directory", synced.append)
    path = txn_path(tmp_path, 0)
    with TxnIndex(path, 0) as index:
        index.flush()
        assert synced == []  # no file yet
        index.append(AbortedTxn(1, 0, 1, 2))
        index.flush()
        index.append(AbortedTxn(1, 2, 3, 4))
        index.flush()
        assert synced == [tmp_path]
    with TxnIndex(path, 0) as reopened:
        reopened.append(AbortedTxn(1, 4, 5, 6))
        reopened.flush()
        assert synced == [tmp_path]  # it did not create the file


def test_returned_lists_are_the_callers(tmp_path: Path) -> None:
    with TxnIndex(txn_path(tmp_path, 0), 0) as index:
        index.append(AbortedTxn(1, 0, 1, 2))
        index.all_aborted_txns().clear()
        index.collect_aborted_txns(0, 10).aborted_txns.clear()
        held = index.all_aborted_txns()
        index.truncate_to(0)
        assert held == [AbortedTxn(1, 0, 1, 2)]
        assert index.all_aborted_txns() == []


def test_numpy_integers_are_stored_as_ints(tmp_path: Path) -> None:
    with TxnIndex(txn_path(tmp_path, 0), 0) as index:
        # Offsets often come out of Arrow arrays as numpy scalars.
        index.append(AbortedTxn(*(np.int64(v) for v in (7, 1, 2, 3))))  # type: ignore[arg-type]
        [stored] = index.all_aborted_txns()
        assert all(type(field) is int for field in stored)
        assert stored == AbortedTxn(7, 1, 2, 3)


# ---------------------------------------------------------------------------------------------
# Appends


@pytest.mark.parametrize(
    ("txn", "match"),
    [
        (AbortedTxn(1, 0, 20, 21), "last offset 20 is not above the last offset 20"),
        (AbortedTxn(1, 0, 19, 20), "last offset 19 is not above the last offset 20"),
        (AbortedTxn(-1, 21, 22, 23), "producer id -1"),
        (AbortedTxn(2**63, 21, 22, 23), "producer id"),
        (AbortedTxn(1, 30, 25, 26), "first offset 30 and last offset 25"),
        (AbortedTxn(1, -1, 25, 26), "first offset -1"),
        (AbortedTxn(1, 21, 2**63, 0), "last offset 9223372036854775808"),
        (AbortedTxn(1, 21, 25, 27), "last stable offset 27 is not in .*26"),
        (AbortedTxn(1, 21, 25, -1), "last stable offset -1"),
    ],
)
def test_invalid_appends_are_refused_and_change_nothing(
    tmp_path: Path, txn: AbortedTxn, match: str
) -> None:
    path = txn_path(tmp_path, 10)
    with TxnIndex(path, 10) as index:
        index.append(AbortedTxn(1, 5, 20, 21))
        with pytest.raises(InvalidRecordError, match=match) as info:
            index.append(txn)
        assert str(path) in str(info.value)
        assert index.all_aborted_txns() == [AbortedTxn(1, 5, 20, 21)]
    assert path.read_bytes() == encode([AbortedTxn(1, 5, 20, 21)])


def test_marker_below_the_base_offset_is_refused(tmp_path: Path) -> None:
    with TxnIndex(txn_path(tmp_path, 100), 100) as index:
        with pytest.raises(InvalidRecordError, match=r"last offset 99 .* base offset 100"):
            index.append(AbortedTxn(1, 50, 99, 100))
        # The transaction's data may start in an earlier segment; only its marker is here.
        index.append(AbortedTxn(1, 50, 100, 101))


def test_extreme_values_fit(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 0)
    txn = AbortedTxn(INT64_MAX, 0, INT64_MAX, INT64_MAX)
    with TxnIndex(path, 0) as index:
        index.append(txn)
    with TxnIndex(path, 0) as reopened:
        reopened.sanity_check()
        assert reopened.all_aborted_txns() == [txn]


def test_negative_base_offset_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="-1"):
        TxnIndex(tmp_path / "x.txnindex", -1)


def _failing_write(written_bytes: int, error: int) -> Callable[[int, object], int]:
    real_write = os.write

    def write(fd: int, data: object) -> int:
        view = memoryview(data)  # type: ignore[arg-type]
        real_write(fd, view[:written_bytes])
        raise OSError(error, os.strerror(error))

    return write


@pytest.mark.parametrize("written_bytes", [0, 1, 33])
def test_full_disk_during_append_leaves_no_torn_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written_bytes: int
) -> None:
    path = txn_path(tmp_path, 0)
    with TxnIndex(path, 0) as index:
        index.append(AbortedTxn(1, 0, 1, 2))
        monkeypatch.setattr(os, "write", _failing_write(written_bytes, errno.ENOSPC))
        with pytest.raises(LogDirectoryFullError) as info:
            index.append(AbortedTxn(1, 2, 3, 4))
        monkeypatch.undo()
        assert info.value.path == str(path)
        assert isinstance(info.value.__cause__, OSError)
        assert path.read_bytes() == encode([AbortedTxn(1, 0, 1, 2)])
        index.append(AbortedTxn(1, 2, 3, 4))  # the disk has room again
    with TxnIndex(path, 0) as reopened:
        assert reopened.all_aborted_txns() == [AbortedTxn(1, 0, 1, 2), AbortedTxn(1, 2, 3, 4)]


def test_other_write_errors_propagate_after_the_roll_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = txn_path(tmp_path, 0)
    with TxnIndex(path, 0) as index:
        monkeypatch.setattr(os, "write", _failing_write(10, errno.EIO))
        with pytest.raises(OSError) as info:
            index.append(AbortedTxn(1, 0, 1, 2))
        monkeypatch.undo()
        assert info.value.errno == errno.EIO
        assert path.read_bytes() == b""
        assert index.all_aborted_txns() == []


def test_failed_roll_back_makes_the_next_read_report_corruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = txn_path(tmp_path, 0)
    with TxnIndex(path, 0) as index:
        index.append(AbortedTxn(1, 0, 1, 2))

        def no_truncate(fd: int, length: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "write", _failing_write(5, errno.ENOSPC))
        monkeypatch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(LogDirectoryFullError) as info:
            index.append(AbortedTxn(1, 2, 3, 4))
        monkeypatch.undo()
        assert any("also failed" in note for note in info.value.__cause__.__notes__)  # type: ignore[union-attr]
        assert path.stat().st_size == 34 + 5
        with pytest.raises(CorruptIndexError, match="not a multiple"):
            index.all_aborted_txns()
        # The way out is the rebuild: reset never reads the file.
        index.reset()
        index.append(AbortedTxn(1, 0, 1, 2))
    assert path.read_bytes() == encode([AbortedTxn(1, 0, 1, 2)])


# ---------------------------------------------------------------------------------------------
# Searches and truncation

# A partition where producer 1's transaction [5, 20] was aborted while producer 2's starting
# at 8 was open (LSO 8), producer 2's [8, 30] while producer 3's starting at 12 was open
# (LSO 12), and producer 4's [40, 45] when nothing else was open (LSO 46).
SCENARIO = [
    AbortedTxn(1, 5, 20, 8),
    AbortedTxn(2, 8, 30, 12),
    AbortedTxn(4, 40, 45, 46),
]


@pytest.mark.parametrize(
    ("fetch", "upper", "expected", "complete"),
    [
        (0, 5, [], True),  # the first entry's LSO 8 >= 5: nothing later can overlap
        (0, 6, [SCENARIO[0]], True),
        (0, 10, SCENARIO[:2], True),  # stops at entry 1 (LSO 12 >= 10)
        (21, 25, [SCENARIO[1]], True),
        (0, 13, SCENARIO[:2], True),  # stops at entry 2 (LSO 46 >= 13), which is after 13
        (31, 41, [SCENARIO[2]], True),
        (0, 47, SCENARIO, False),  # a later segment may hold an abort overlapping [46, 47)
        (46, 100, [], False),
        (20, 21, SCENARIO[:2], True),
    ],
)
def test_collect_aborted_txns(
    tmp_path: Path, fetch: int, upper: int, expected: list[AbortedTxn], complete: bool
) -> None:
    with TxnIndex(txn_path(tmp_path, 0), 0) as index:
        for txn in SCENARIO:
            index.append(txn)
        assert index.collect_aborted_txns(fetch, upper) == TxnIndexSearchResult(expected, complete)


@pytest.mark.parametrize(
    ("offset", "kept"),
    [(0, 0), (20, 0), (21, 1), (30, 1), (31, 2), (45, 2), (46, 3), (1_000, 3)],
)
def test_truncate_to_drops_entries_from_the_marker_on(
    tmp_path: Path, offset: int, kept: int
) -> None:
    path = txn_path(tmp_path, 0)
    with TxnIndex(path, 0) as index:
        for txn in SCENARIO:
            index.append(txn)
        index.truncate_to(offset)
        assert index.all_aborted_txns() == SCENARIO[:kept]
        assert path.stat().st_size == 34 * kept
        if kept < len(SCENARIO):
            index.append(SCENARIO[kept])  # appending again after the cut works
    assert path.read_bytes() == encode(SCENARIO[: kept + 1])


def test_truncate_to_of_a_file_never_appended_to_in_this_process(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 0)
    path.write_bytes(encode(SCENARIO))
    with TxnIndex(path, 0) as index:
        index.truncate_to(30)
        assert index.all_aborted_txns() == SCENARIO[:1]
    assert path.read_bytes() == encode(SCENARIO[:1])


def test_reset_keeps_an_empty_file(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 0)
    path.write_bytes(encode(SCENARIO))
    with TxnIndex(path, 0) as index:
        index.reset()
        assert index.all_aborted_txns() == []
        assert path.read_bytes() == b""
        index.append(SCENARIO[0])
    assert path.read_bytes() == encode(SCENARIO[:1])


# ---------------------------------------------------------------------------------------------
# Crashes and corruption


def test_every_torn_tail_is_detected(tmp_path: Path) -> None:
    """Cut a three-entry file at every byte: whole prefixes read back, torn ones are refused."""
    data = encode(SCENARIO)
    path = txn_path(tmp_path, 0)
    for size in range(len(data) + 1):
        path.write_bytes(data[:size])
        index = TxnIndex(path, 0)
        if size % 34 == 0:
            index.sanity_check()
            assert index.all_aborted_txns() == SCENARIO[: size // 34]
        else:
            with pytest.raises(CorruptIndexError, match=f"size {size} bytes") as info:
                index.sanity_check()
            assert info.value.path == str(path)
            # A fresh object hits the same check on its first read, whatever the call.
            with pytest.raises(CorruptIndexError):
                TxnIndex(path, 0).collect_aborted_txns(0, 100)
        index.close()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (encode(SCENARIO[:1]) + encode(SCENARIO[1:2], version=1), "entry 1 has version 1"),
        (encode(SCENARIO[:1], version=-1), "entry 0 has version -1"),
        (encode([AbortedTxn(1, 21, 20, 21)]), "entry 0: .*first offset 21 and last offset 20"),
        (encode([AbortedTxn(1, 5, 9, 10)]), "entry 0: last offset 9 .* base offset 10"),
        (encode([AbortedTxn(-1, 5, 20, 21)]), "entry 0: producer id -1"),
        (encode([AbortedTxn(1, 5, 20, 22)]), "entry 0: last stable offset 22"),
        (encode([SCENARIO[1], SCENARIO[0]]), "entry 1: last offset 20 is not above"),
        (encode([SCENARIO[0], SCENARIO[0]]), "entry 1: last offset 20 is not above"),
    ],
)
def test_sanity_check_detects_corruption(tmp_path: Path, data: bytes, match: str) -> None:
    path = txn_path(tmp_path, 10)
    path.write_bytes(data)
    index = TxnIndex(path, 10)
    with pytest.raises(CorruptIndexError, match=match) as info:
        index.sanity_check()
    assert info.value.path == str(path)
    assert "rebuild it from the log" in str(info.value)
    with pytest.raises(CorruptIndexError, match=match):
        index.append(AbortedTxn(1, 100, 100, 101))
    assert path.read_bytes() == data  # nothing was appended to a corrupt file
    # The rebuild the log does: reset without reading, then append again.
    index.reset()
    index.append(AbortedTxn(1, 10, 20, 21))
    index.sanity_check()
    assert index.delete() is True


def test_sanity_check_re_reads_the_file(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 0)
    with TxnIndex(path, 0) as index:
        index.append(SCENARIO[0])
        index.sanity_check()
        with path.open("ab") as f:
            f.write(b"\x00\x00\x00")  # someone else's damage, after the first read
        with pytest.raises(CorruptIndexError, match="size 37 bytes"):
            index.sanity_check()


# ---------------------------------------------------------------------------------------------
# Rename, close, delete


def test_rename_keeps_the_index_working(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 0)
    index = TxnIndex(path, 0)
    index.append(SCENARIO[0])
    new_path = tmp_path / (path.name + ".deleted")
    index.rename(new_path)
    assert index.path == new_path
    assert not path.exists()
    index.append(SCENARIO[1])  # the open descriptor follows the file
    index.truncate_to(21)
    index.append(SCENARIO[1])
    index.flush()
    assert new_path.read_bytes() == encode(SCENARIO[:2])
    assert index.delete() is True
    assert not new_path.exists()


def test_rename_of_a_file_removed_under_an_open_index_is_an_error(tmp_path: Path) -> None:
    path = txn_path(tmp_path, 0)
    index = TxnIndex(path, 0)
    index.append(SCENARIO[0])
    path.unlink()
    with pytest.raises(FileNotFoundError):
        index.rename(tmp_path / "elsewhere")
    assert index.path == path
    index.close()


def test_close_twice_and_repr(tmp_path: Path) -> None:
    index = TxnIndex(txn_path(tmp_path, 7), 7)
    assert "not loaded" in repr(index)
    index.append(AbortedTxn(1, 7, 8, 9))
    assert "entries=1" in repr(index)
    index.close()
    index.close()
    assert "closed" in repr(index)
    assert index.base_offset == 7  # identity stays readable
    assert index.path == txn_path(tmp_path, 7)


CLOSED_CALLS: list[Callable[[TxnIndex], object]] = [
    lambda index: index.append(AbortedTxn(1, 10, 10, 11)),
    lambda index: index.all_aborted_txns(),
    lambda index: index.collect_aborted_txns(0, 10),
    lambda index: index.truncate_to(0),
    lambda index: index.reset(),
    lambda index: index.flush(),
    lambda index: index.sanity_check(),
    lambda index: index.rename(index.path.with_suffix(".x")),
    lambda index: index.delete(),
    lambda index: index.__enter__(),
]


@pytest.mark.parametrize("call", CLOSED_CALLS)
@pytest.mark.parametrize("how", ["close", "delete"])
def test_every_call_after_close_raises_log_closed(
    tmp_path: Path, call: Callable[[TxnIndex], object], how: str
) -> None:
    index = TxnIndex(txn_path(tmp_path, 0), 0)
    index.append(AbortedTxn(1, 0, 1, 2))
    getattr(index, how)()
    with pytest.raises(LogClosedError, match=r"transaction index .* is closed"):
        call(index)
