"""The leader epoch cache: Kafka's rules, its checkpoint file, and how the log keeps it in step."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from log_testing import START_MS, OpenLog

from spark_mq.errors import CorruptCheckpointError, FencedLeaderEpochError, StorageError
from spark_mq.storage import checkpoint_file
from spark_mq.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT,
    UNDEFINED_EPOCH,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochFileCache,
)
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import encode_batch

UNDEFINED = EpochEndOffset(-1, -1)


def cache_in(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(tmp_path / LEADER_EPOCH_CHECKPOINT)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def batch(n: int = 2, *, epoch: int = -1, base_offset: int = 0) -> bytes:
    return encode_batch(
        pa.array([b"v%d" % i for i in range(n)]),
        timestamp=pa.array([START_MS] * n, type=pa.int64()),
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


# ---------------------------------------------------------------------------------------------
# Rules


def test_assign_keeps_the_first_offset_of_each_epoch(tmp_path: Path) -> None:
    cache = cache_in(tmp_path)
    assert cache.assign(0, 0)
    assert not cache.assign(0, 5)  # every later append of the same epoch: nothing to do
    assert cache.assign(2, 10)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 10))
    assert cache.latest_epoch == 2


def test_assign_removes_entries_it_contradicts(tmp_path: Path) -> None:
    # A new epoch that starts at or before an existing entry supersedes it (Kafka's
    # maybeTruncateNonMonotonicEntries), and so does an older epoch starting earlier.
    cache = cache_in(tmp_path, (0, 0), (2, 10), (3, 20))
    assert cache.assign(4, 10)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(4, 10))
    assert cache.assign(4, 7)  # the latest epoch, at a smaller offset
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(4, 7))
    assert cache.assign(1, 3)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(1, 3))


def test_assign_refuses_negative_values(tmp_path: Path) -> None:
    cache = cache_in(tmp_path)
    with pytest.raises(StorageError, match="non-negative"):
        cache.assign(-1, 0)
    with pytest.raises(StorageError, match="non-negative"):
        cache.assign(0, -1)


def test_end_offset_for_answers_as_offsets_for_leader_epoch(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, (1, 5), (3, 10), (6, 20))
    log_end = 25
    assert cache.end_offset_for(6, log_end) == (6, 25)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, log_end) == (3, 20)  # where the next epoch starts
    assert cache.end_offset_for(4, log_end) == (3, 20)  # unknown: the largest known below
    assert cache.end_offset_for(0, log_end) == (0, 5)  # older than all: the first start
    assert cache.end_offset_for(7, log_end) == UNDEFINED  # newer than all
    assert cache.end_offset_for(UNDEFINED_EPOCH, log_end) == UNDEFINED
    assert cache_in(tmp_path).end_offset_for(0, log_end) == UNDEFINED  # empty cache


@settings(max_examples=200, deadline=None)
@given(
    epochs=st.lists(st.integers(0, 30), min_size=0, max_size=8, unique=True).map(sorted),
    gaps=st.lists(st.integers(1, 10), min_size=8, max_size=8),
    requested=st.integers(-1, 32),
)
def test_end_offset_for_matches_a_reference_model(
    tmp_path_factory: pytest.TempPathFactory, epochs: list[int], gaps: list[int], requested: int
) -> None:
    starts, offset = [], 0
    for gap in gaps[: len(epochs)]:
        offset += gap
        starts.append(offset)
    log_end = offset + 3
    cache = LeaderEpochFileCache(
        tmp_path_factory.mktemp("c") / "f", zip(epochs, starts, strict=True)
    )
    # Reference: a linear search over a plain list, written from Kafka's javadoc.
    if requested < 0 or not epochs:
        expected = UNDEFINED
    elif requested == epochs[-1]:
        expected = EpochEndOffset(requested, log_end)
    elif requested > epochs[-1]:
        expected = UNDEFINED
    else:
        higher = next(i for i, e in enumerate(epochs) if e > requested)
        lower = [e for e in epochs if e <= requested]
        expected = EpochEndOffset(lower[-1] if lower else requested, starts[higher])
    assert cache.end_offset_for(requested, log_end) == expected


def test_truncate_from_end_drops_entries_at_or_past_the_new_end(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, (0, 0), (2, 10), (3, 20))
    cache.truncate_from_end(20)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 10))
    cache.truncate_from_end(11)
    assert cache.entries == (EpochEntry(0, 0), EpochEntry(2, 10))
    cache.truncate_from_end(0)
    assert cache.entries == ()


def test_truncate_from_start_moves_the_first_entry_to_the_new_start(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, (0, 0), (2, 10), (3, 20))
    cache.truncate_from_start(15)
    assert cache.entries == (EpochEntry(2, 15), EpochEntry(3, 20))
    cache.truncate_from_start(20)
    assert cache.entries == (EpochEntry(3, 20),)
    cache.truncate_from_start(5)  # behind the first entry: nothing to forget
    assert cache.entries == (EpochEntry(3, 20),)
    assert cache.epoch_for_offset(19) is None
    assert cache.epoch_for_offset(25) == 3


# ---------------------------------------------------------------------------------------------
# The file


def test_file_has_kafkas_text_format_and_reads_back(tmp_path: Path) -> None:
    cache = cache_in(tmp_path, (0, 0), (3, 1042))
    assert cache.path.read_bytes() == b"0\n2\n0 0\n3 1042\n"
    again = LeaderEpochFileCache.read(cache.path)
    assert again is not None and again.entries == cache.entries
    assert LeaderEpochFileCache.read(tmp_path / "missing") is None
    cache.clear()
    assert cache.path.read_bytes() == b"0\n0\n"


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"", 1),
        (b"1\n0\n", 1),
        (b"0\n2\n0 0\n", 2),
        (b"0\n1\n0 0", 3),  # torn: no final newline
        (b"0\n1\n0  0\n", 3),
        (b"0\n1\n-1 0\n", 3),
        (b"0\n2\n3 10\n2 20\n", 4),  # epochs going back
        (b"0\n2\n2 10\n3 10\n", 4),  # two epochs starting at one offset
        (b"0\n1\n2147483648 0\n", 3),
    ],
)
def test_a_corrupt_file_is_refused_naming_the_line(
    tmp_path: Path, content: bytes, line: int
) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        LeaderEpochFileCache.read(path)
    assert info.value.line == line and info.value.path == str(path)


def test_a_failed_write_changes_neither_the_file_nor_the_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = cache_in(tmp_path, (0, 0))
    before = cache.path.read_bytes()

    def crash(*args: object) -> None:
        raise OSError(5, "simulated I/O error before the rename")

    monkeypatch.setattr(checkpoint_file.os, "replace", crash)
    with pytest.raises(StorageError, match="simulated"):
        cache.assign(1, 10)
    assert cache.path.read_bytes() == before
    assert cache.entries == (EpochEntry(0, 0),)


# ---------------------------------------------------------------------------------------------
# Kept in step with the log


def epoch_file(log_dir: Path) -> bytes:
    return (log_dir / LEADER_EPOCH_CHECKPOINT).read_bytes()


def test_appends_assign_their_epochs_and_survive_a_reopen(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch())  # no epoch (-1): nothing to record
    assert log.leader_epoch_cache.entries == ()
    log.append(batch(), leader_epoch=0)
    log.append(batch(), leader_epoch=0)
    log.append(batch(), leader_epoch=2)
    assert log.leader_epoch_cache.entries == ((0, 2), (2, 6))
    assert log.end_offset_for_epoch(1) == (0, 6)
    log.close()
    reopened = open_log(had_clean_shutdown=True)
    assert reopened.leader_epoch_cache.entries == ((0, 2), (2, 6))
    assert epoch_file(reopened.directory) == b"0\n2\n0 2\n2 6\n"


def test_a_stale_leader_epoch_is_fenced_and_writes_nothing(open_log: OpenLog) -> None:
    log = open_log()
    log.append(batch(), leader_epoch=3)
    with pytest.raises(FencedLeaderEpochError, match=r"epoch 2 .* after epoch 3"):
        log.append(batch(), leader_epoch=2)
    assert log.log_end_offset == 2


def test_truncation_retention_and_delete_records_keep_the_cache_in_step(
    open_log: OpenLog,
) -> None:
    log = open_log(LogConfig(segment_bytes=1024))
    for epoch in (0, 0, 1, 1, 2, 2):
        log.append(batch(), leader_epoch=epoch)
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 4), (2, 8))
    log.truncate_to(8)
    assert log.leader_epoch_cache.entries == ((0, 0), (1, 4))
    log.delete_records_before(5)
    assert log.leader_epoch_cache.entries == ((1, 5),)
    assert epoch_file(log.directory) == b"0\n1\n1 5\n"
    log.truncate_to(2)  # below the log start: the log restarts empty, the cache with it
    assert log.leader_epoch_cache.entries == ()


def test_follower_append_keeps_the_leaders_offsets_and_epochs(open_log: OpenLog) -> None:
    follower = open_log()  # the leader's batches are built by hand
    follower.append_as_follower(batch(2, epoch=0, base_offset=0) + batch(2, epoch=4, base_offset=2))
    follower.append_as_follower(batch(1, epoch=4, base_offset=4))
    assert follower.leader_epoch_cache.entries == ((0, 0), (4, 2))
    assert [h.partition_leader_epoch for h, _ in follower.active_segment.records.headers()] == [
        0,
        4,
        4,
    ]
    # Epochs going back, within one append or against the log, are refused whole.
    with pytest.raises(FencedLeaderEpochError):
        follower.append_as_follower(
            batch(1, epoch=5, base_offset=5) + batch(1, epoch=3, base_offset=6)
        )
    with pytest.raises(FencedLeaderEpochError):
        follower.append_as_follower(batch(1, epoch=3, base_offset=5))
    assert follower.log_end_offset == 5
    assert follower.leader_epoch_cache.entries == ((0, 0), (4, 2))


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_file_is_rebuilt_from_the_batches(
    open_log: OpenLog, damage: str
) -> None:
    log = open_log(LogConfig(segment_bytes=1024))
    for epoch in (0, 1, 1, 5, 5):
        log.append(batch(), leader_epoch=epoch)
    log.delete_records_before(3)
    expected = log.leader_epoch_cache.entries
    assert expected == ((1, 3), (5, 6))
    log.close()
    path = log.directory / LEADER_EPOCH_CHECKPOINT
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(b"0\n2\n1 3\n")
    reopened = open_log(had_clean_shutdown=True, log_start_offset=3)
    assert reopened.leader_epoch_cache.entries == expected
    assert epoch_file(reopened.directory) == b"0\n2\n1 3\n5 6\n"


def test_recovery_drops_entries_past_the_log_end_and_learns_recovered_epochs(
    open_log: OpenLog, tmp_path: Path
) -> None:
    log = open_log()
    log.append(batch(), leader_epoch=0)
    log.append(batch(), leader_epoch=1)
    segment = log.active_segment.log_path
    size = os.path.getsize(segment)
    log.append(batch(), leader_epoch=2)
    log.close()
    # A crash after epoch 2's entry was written but before its batch was: cut the batch off.
    os.truncate(segment, size)
    # And a file that missed epoch 1 (as one from before the batches were stamped might).
    (log.directory / LEADER_EPOCH_CHECKPOINT).write_bytes(b"0\n2\n0 0\n2 4\n")
    reopened = open_log(had_clean_shutdown=False, recovery_point=2)
    assert reopened.log_end_offset == 4
    assert reopened.leader_epoch_cache.entries == ((0, 0), (1, 2))


def test_retention_moves_the_first_entry_to_the_new_log_start(open_log: OpenLog) -> None:
    log = open_log(LogConfig(segment_bytes=1024, retention_bytes=1))
    for epoch in (0, 0, 1, 1, 2):
        log.append(batch(), leader_epoch=epoch)
    assert log.num_segments > 2
    assert log.apply_retention() > 0
    start = log.log_start_offset
    assert start > 4  # every segment of epoch 0 went
    assert log.leader_epoch_cache.entries[0].start_offset == start
    assert epoch_file(log.directory).splitlines()[2].endswith(b" %d" % start)
