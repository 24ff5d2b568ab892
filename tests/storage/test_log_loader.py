"""load_log: what opening a partition directory validates, recovers and cleans up.

The rules under test (``spark_mq/storage/log_loader.py``):

- after a clean shutdown no batch is validated on load, but the decoding reader still refuses
  a corrupt batch;
- after an unclean one, recovery starts at the segment holding the recovery point (and scans
  that segment from its start), cuts the log at the first invalid byte and removes every later
  segment;
- an empty (or missing) directory gets one segment at the log start offset;
- the log start offset is clamped into ``[first segment's base, log end]``;
- indexes that are missing or fail the sanity check are rebuilt; ``.deleted``, ``.tmp`` and
  orphan index files are removed.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.config import LONG_MAX
from spark_mq.errors import CorruptRecordError
from spark_mq.storage.batch_decoder import iter_batches
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_loader import LoadedLog, load_log
from spark_mq.storage.record_batch import BatchHeader, encode_batch
from spark_mq.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX

BASE_TIMESTAMP_MS = 1_700_000_000_000
CONFIG = LogConfig(
    segment_bytes=4096,
    segment_ms=LONG_MAX,  # The timestamps are old: only size may roll a segment.
    retention_ms=-1,
    index_interval_bytes=256,
    segment_index_bytes=1024,
)


def value_of(offset: int) -> bytes:
    return f"value-{offset}:".encode() * (1 + offset % 7)


def write_log(directory: Path, *, batches: int = 40, seed: int = 0) -> int:
    """A closed log of ``batches`` batches of 1..5 records, ``value_of(offset)`` each; its end."""
    rng = random.Random(seed)
    log = PartitionLog.open(directory, CONFIG, topic="t", partition=0)
    try:
        for _ in range(batches):
            first = log.log_end_offset
            offsets = range(first, first + rng.randint(1, 5))
            log.append(
                encode_batch(
                    pa.array([value_of(o) for o in offsets], pa.binary()),
                    timestamp=pa.array([BASE_TIMESTAMP_MS + o for o in offsets], pa.int64()),
                )
            )
        return log.log_end_offset
    finally:
        log.close()


def load(directory: Path, **kwargs: object) -> LoadedLog:
    args: dict[str, object] = {
        "recovery_point": 0,
        "log_start_offset": None,
        "had_clean_shutdown": False,
        "now_ms": BASE_TIMESTAMP_MS,
    }
    args.update(kwargs)
    return load_log(directory, CONFIG, **args)  # type: ignore[arg-type]


def close(loaded: LoadedLog) -> None:
    for segment in loaded.segments:
        segment.close()


def log_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{LOG_SUFFIX}"))


def base_of(path: Path) -> int:
    return int(path.name.split(".")[0])


def batches_in(path: Path) -> list[tuple[BatchHeader, int]]:
    return list(iter_batches(path.read_bytes()))


def corrupt_body(path: Path, index: int) -> BatchHeader:
    """Flip one bit inside the CRC-covered body of the ``index``-th batch of a ``.log`` file."""
    header, pos = batches_in(path)[index]
    data = bytearray(path.read_bytes())
    data[pos + header.size - 1] ^= 0x01
    path.write_bytes(bytes(data))
    return header


def open_log(directory: Path, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(directory, CONFIG, topic="t", partition=0, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def three_segments(tmp_path: Path) -> tuple[Path, int]:
    end = write_log(tmp_path, batches=40)
    assert len(log_paths(tmp_path)) >= 3
    return tmp_path, end


# ---------------------------------------------------------------------------------------------
# Clean shutdown


def test_clean_shutdown_skips_validation_but_the_reader_refuses_a_corrupt_batch(
    three_segments: tuple[Path, int],
) -> None:
    directory, end = three_segments
    target = log_paths(directory)[1]  # A full segment, flushed when the next one was rolled.
    assert len(batches_in(target)) >= 3
    size = target.stat().st_size
    bad = corrupt_body(target, 1)

    loaded = load(directory, had_clean_shutdown=True)
    try:
        # Not detected: nothing was read, nothing truncated.
        assert loaded.recovered_bytes_truncated == 0
        assert loaded.log_end_offset == end
        assert loaded.recovery_point == end
    finally:
        close(loaded)
    assert target.stat().st_size == size

    log = open_log(directory, had_clean_shutdown=True)
    try:
        assert log.log_end_offset == end
        with pytest.raises(CorruptRecordError):
            log.read_records(bad.base_offset, 1)
        # A read that starts before the bad batch and would run through it fails too: the
        # decoding reader never returns a corrupt batch, nor stops silently before it.
        with pytest.raises(CorruptRecordError):
            log.read_records(base_of(target), 1 << 20)
        # The batches around it read back intact.
        for offset in (base_of(target), bad.next_offset):
            table = log.read_records(offset, 1)
            offsets = table.column("offset").to_pylist()
            assert offsets[0] == offset
            assert table.column("value").to_pylist() == [value_of(o) for o in offsets]
    finally:
        log.close()

    # The same directory opened as after a crash is cut at the bad batch.
    loaded = load(directory, had_clean_shutdown=False, recovery_point=base_of(target))
    try:
        assert loaded.log_end_offset == bad.base_offset
        assert loaded.recovered_bytes_truncated > 0
        assert loaded.segments[-1].base_offset == base_of(target)
    finally:
        close(loaded)


# ---------------------------------------------------------------------------------------------
# Unclean shutdown: where recovery starts


@pytest.mark.parametrize("inside", [False, True], ids=["at_base", "inside"])
def test_recovery_starts_at_the_segment_holding_the_recovery_point(
    three_segments: tuple[Path, int], inside: bool
) -> None:
    directory, _ = three_segments
    paths = log_paths(directory)
    below, holding = paths[0], paths[2]
    below_size = below.stat().st_size
    corrupt_body(below, 1)
    # The first batch of the holding segment is bad: below the recovery point when the
    # recovery point is inside the segment, yet found, because the whole segment is scanned.
    assert len(batches_in(holding)) >= 2
    bad = corrupt_body(holding, 0)
    recovery_point = bad.next_offset if inside else base_of(holding)
    removed = sum(p.stat().st_size for p in paths[2:])

    loaded = load(directory, recovery_point=recovery_point)
    try:
        assert loaded.log_end_offset == bad.base_offset == base_of(holding)
        assert loaded.recovery_point == loaded.log_end_offset
        assert loaded.recovered_bytes_truncated == removed
        assert [s.base_offset for s in loaded.segments] == [base_of(p) for p in paths[:3]]
    finally:
        close(loaded)
    # The segment below the recovery point was not scanned: its bad batch is still there.
    assert below.stat().st_size == below_size
    assert [p.name for p in log_paths(directory)] == [p.name for p in paths[:3]]


def test_corruption_only_below_the_recovery_point_is_not_scanned(
    three_segments: tuple[Path, int],
) -> None:
    directory, end = three_segments
    paths = log_paths(directory)
    sizes = [p.stat().st_size for p in paths]
    bad = corrupt_body(paths[0], 0)
    loaded = load(directory, recovery_point=base_of(paths[1]))
    try:
        assert loaded.recovered_bytes_truncated == 0
        assert loaded.log_end_offset == end
    finally:
        close(loaded)
    assert [p.stat().st_size for p in log_paths(directory)] == sizes
    log = open_log(directory, recovery_point=end)
    try:
        with pytest.raises(CorruptRecordError):
            log.read_records(bad.base_offset, 1)
    finally:
        log.close()


@pytest.mark.parametrize("where", ["past_end", "below_first_segment"])
def test_recovery_point_outside_the_segments(tmp_path: Path, where: str) -> None:
    end = write_log(tmp_path, batches=40)
    paths = log_paths(tmp_path)
    if where == "below_first_segment":
        # Retention removed the first segment: recovery from 0 starts at the new first one.
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            paths[0].with_suffix(suffix).unlink()
        target, recovery_point = paths[1], 0
    else:
        # A recovery point past the end (a stale checkpoint) still scans the last segment.
        target, recovery_point = paths[-1], end + 100
    bad = corrupt_body(target, 0)
    loaded = load(tmp_path, recovery_point=recovery_point)
    try:
        assert loaded.log_end_offset == bad.base_offset
        assert loaded.segments[-1].base_offset == base_of(target)
    finally:
        close(loaded)


def test_torn_tail_is_cut_and_counted(tmp_path: Path) -> None:
    end = write_log(tmp_path, batches=10)
    last = log_paths(tmp_path)[-1]
    header, pos = batches_in(last)[-1]
    data = last.read_bytes()
    torn = data[: pos + header.size // 2]
    last.write_bytes(torn + b"\x00" * 17)
    loaded = load(tmp_path, recovery_point=header.base_offset)
    try:
        assert loaded.log_end_offset == header.base_offset < end
        assert loaded.recovered_bytes_truncated == len(torn) + 17 - pos
        assert loaded.recovery_point == header.base_offset
    finally:
        close(loaded)
    assert last.stat().st_size == pos


# ---------------------------------------------------------------------------------------------
# Empty directories and the log start offset


@pytest.mark.parametrize("log_start_offset", [None, 0, 42, -5])
@pytest.mark.parametrize("clean", [False, True])
def test_empty_directory_gets_one_segment_at_the_log_start_offset(
    tmp_path: Path, log_start_offset: int | None, clean: bool
) -> None:
    directory = tmp_path / "not" / "yet" / "there"
    loaded = load(directory, log_start_offset=log_start_offset, had_clean_shutdown=clean)
    base = max(log_start_offset or 0, 0)
    try:
        assert [s.base_offset for s in loaded.segments] == [base]
        assert loaded.log_start_offset == loaded.log_end_offset == loaded.recovery_point == base
        assert loaded.recovered_bytes_truncated == 0
    finally:
        close(loaded)
    assert sorted(p.name for p in directory.iterdir()) == [
        f"{base:020d}{suffix}" for suffix in (INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX)
    ]


def test_log_start_offset_is_clamped_to_the_segments(tmp_path: Path) -> None:
    end = write_log(tmp_path, batches=40)
    paths = log_paths(tmp_path)
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        paths[0].with_suffix(suffix).unlink()
    first = base_of(paths[1])
    cases = {None: first, 0: first, first - 1: first, first + 1: first + 1, end: end, end + 9: end}
    for given, expected in cases.items():
        loaded = load(tmp_path, log_start_offset=given, recovery_point=end)
        try:
            assert loaded.log_start_offset == expected, f"log_start_offset={given}"
            assert loaded.log_end_offset == end
        finally:
            close(loaded)


# ---------------------------------------------------------------------------------------------
# Indexes and leftovers


@pytest.mark.parametrize("clean", [False, True])
@pytest.mark.parametrize(
    "damage", ["missing_index", "missing_timeindex", "unaligned", "unordered", "past_end"]
)
def test_index_that_is_missing_or_fails_the_sanity_check_is_rebuilt(
    three_segments: tuple[Path, int], damage: str, clean: bool
) -> None:
    directory, end = three_segments
    target = log_paths(directory)[1]  # Below the recovery point: only the sanity check runs.
    originals = {p.name: p.read_bytes() for p in directory.glob("*index")}
    index = target.with_suffix(INDEX_SUFFIX)
    time_index = target.with_suffix(TIME_INDEX_SUFFIX)
    assert len(index.read_bytes()) >= 16, "the test needs two offset index entries"
    if damage == "missing_index":
        index.unlink()
    elif damage == "missing_timeindex":
        time_index.unlink()
    elif damage == "unaligned":
        time_index.write_bytes(time_index.read_bytes() + b"\x01\x02\x03")
    elif damage == "unordered":
        entries = index.read_bytes()
        index.write_bytes(entries[8:16] + entries[:8] + entries[16:])
    else:
        index.write_bytes(index.read_bytes() + struct.pack(">iI", 2**31 - 1, 10**6))

    loaded = load(directory, recovery_point=end, had_clean_shutdown=clean)
    try:
        assert loaded.log_end_offset == end
        assert loaded.recovered_bytes_truncated == 0
        segment = loaded.segments[1]
        for header, pos in batches_in(target):
            found = segment.translate_offset(header.last_offset)
            assert found is not None and found.position == pos
    finally:
        close(loaded)
    assert {p.name: p.read_bytes() for p in directory.glob("*index")} == originals


def test_deleted_tmp_and_orphan_index_files_are_removed(tmp_path: Path) -> None:
    end = write_log(tmp_path, batches=20)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    leftovers = [
        f"{0:020d}{LOG_SUFFIX}.deleted",
        f"{0:020d}{INDEX_SUFFIX}.deleted",
        f"{7:020d}{TIME_INDEX_SUFFIX}.deleted",
        f"{end:020d}{INDEX_SUFFIX}",  # An orphan where the next segment will be rolled.
        f"{end:020d}{TIME_INDEX_SUFFIX}",
        f"{10**6:020d}{INDEX_SUFFIX}",
        "partition.metadata.tmp",
    ]
    for name in leftovers:
        (tmp_path / name).write_bytes(b"\x00\x00\x00\x01\x00\x00\x00\x02")
    (tmp_path / "leader-epoch-checkpoint").write_bytes(b"0\n0\n")  # Not ours: left alone.
    loaded = load(tmp_path, recovery_point=0)
    try:
        assert loaded.log_end_offset == end
    finally:
        close(loaded)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after == {**before, "leader-epoch-checkpoint": b"0\n0\n"}


@pytest.mark.parametrize(
    ("shutdown", "where", "cut"),
    [
        ("clean", "middle", False),
        ("clean", "last", True),
        ("unclean_from_above", "middle", False),
        ("unclean_from_below", "middle", True),
    ],
)
def test_invalid_tail_found_by_an_index_rebuild(
    three_segments: tuple[Path, int], shutdown: str, where: str, cut: bool
) -> None:
    """A rebuild that finds bytes after the last whole batch cuts them only where recovery
    would (never leaving a hole: later segments go too), or at the very end of the log."""
    directory, end = three_segments
    paths = log_paths(directory)
    target = paths[1] if where == "middle" else paths[-1]
    size = target.stat().st_size
    healthy_end = batches_in(target)[-1][0].next_offset
    junk = bytes(100)  # A preallocated tail, never written.
    target.write_bytes(target.read_bytes() + junk)
    target.with_suffix(INDEX_SUFFIX).unlink()
    kwargs: dict[str, object] = {"had_clean_shutdown": shutdown == "clean", "recovery_point": end}
    if shutdown == "unclean_from_below":
        kwargs["recovery_point"] = base_of(target)
    removed_later = sum(p.stat().st_size for p in paths if p > target) if cut else 0

    loaded = load(directory, **kwargs)
    try:
        assert loaded.recovered_bytes_truncated == (len(junk) if cut else 0) + removed_later
        if cut and where == "middle":
            assert loaded.log_end_offset == base_of(paths[2])
            assert [s.base_offset for s in loaded.segments] == [base_of(p) for p in paths[:2]]
        else:
            assert loaded.log_end_offset == end
            assert len(loaded.segments) == len(paths)
        assert loaded.segments[paths.index(target)].next_offset() == healthy_end
    finally:
        close(loaded)
    assert target.stat().st_size == (size if cut else size + len(junk))
