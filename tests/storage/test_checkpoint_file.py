"""OffsetCheckpointFile: Kafka's text format, atomic replacement, strict validation on read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mq.errors import CorruptCheckpointError, InvalidTopicError, UsageError
from spark_mq.storage.checkpoint_file import OffsetCheckpointFile, atomic_write_bytes

TOPICS = st.from_regex(r"[a-zA-Z0-9._-]{1,30}", fullmatch=True).filter(
    lambda n: n not in (".", "..")
)
MAPPINGS = st.dictionaries(
    st.tuples(TOPICS, st.integers(0, 2**31 - 1)), st.integers(0, 2**63 - 1), max_size=20
)


def test_file_format_is_kafkas(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "ckpt")
    f.write({("b", 1): 5, ("a", 0): 7, ("a", 10): 0})
    assert (tmp_path / "ckpt").read_bytes() == b"0\n3\na 0 7\na 10 0\nb 1 5\n"


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "nothing").read() == {}


def test_empty_mapping_round_trips(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "ckpt")
    f.write({})
    assert (tmp_path / "ckpt").read_bytes() == b"0\n0\n"
    assert f.read() == {}


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)
@given(MAPPINGS)
def test_round_trip(tmp_path: Path, mapping: dict[tuple[str, int], int]) -> None:
    f = OffsetCheckpointFile(tmp_path / "ckpt")
    f.write(mapping)
    assert f.read() == mapping
    assert not (tmp_path / "ckpt.tmp").exists()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=30)
@given(MAPPINGS, st.data())
def test_every_truncation_is_detected(
    tmp_path: Path, mapping: dict[tuple[str, int], int], data: st.DataObject
) -> None:
    """A torn file must never read as a (wrong) checkpoint, whatever the cut."""
    path = tmp_path / "ckpt"
    OffsetCheckpointFile(path).write(mapping)
    full = path.read_bytes()
    cut = data.draw(st.integers(0, len(full) - 1), label="cut")
    path.write_bytes(full[:cut])
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpointFile(path).read()


def test_leftover_tmp_is_ignored_and_then_replaced(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "ckpt")
    f.write({("a", 0): 1})
    (tmp_path / "ckpt.tmp").write_bytes(b"0\n5\ntorn wri")  # a crash mid-write left this
    assert f.read() == {("a", 0): 1}
    f.write({("a", 0): 2})
    assert f.read() == {("a", 0): 2}
    assert not (tmp_path / "ckpt.tmp").exists()


def test_crash_before_the_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = OffsetCheckpointFile(tmp_path / "ckpt")
    f.write({("a", 0): 1})

    def crash(src: object, dst: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        f.write({("a", 0): 2, ("b", 0): 3})
    monkeypatch.undo()
    assert f.read() == {("a", 0): 1}


def test_atomic_write_fsyncs_file_then_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    atomic_write_bytes(tmp_path / "f", b"data")
    assert events == ["fsync-file", "rename", "fsync-dir"]
    assert (tmp_path / "f").read_bytes() == b"data"


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        (b"", 1, "empty"),
        (b"1\n0\n", 1, "unsupported version"),
        (b"00\n0\n", 1, "unsupported version"),
        (b"0\n", 2, "missing the entry count"),
        (b"0\nx\n", 2, "not a non-negative integer"),
        (b"0\n-1\n", 2, "not a non-negative integer"),
        (b"0\n2\na 0 1\n", 2, "announces 2 entries but the file has 1"),
        (b"0\n1\na 0 1\nb 0 2\n", 4, "announces 1 entries but the file has 2"),
        (b"0\n1\na 0\n", 3, "'topic partition offset'"),
        (b"0\n1\na  0 1\n", 3, "'topic partition offset'"),
        (b"0\n1\na 0 1 9\n", 3, "'topic partition offset'"),
        (b"0\n1\na 0 -1\n", 3, "offset '-1'"),
        (b"0\n1\na 0 01\n", 3, "offset '01'"),
        (b"0\n1\na 0 9223372036854775808\n", 3, "offset"),
        (b"0\n1\na b 1\n", 3, "partition 'b'"),
        (b"0\n1\na 2147483648 1\n", 3, "partition"),
        (b"0\n1\na/b 0 1\n", 3, "contains '/'"),
        (b"0\n1\na 0 1\r\n", 3, "offset '1\\r'"),
        (b"0\n2\na 0 1\na 0 2\n", 4, "duplicate entry for 'a' partition 0"),
        (b"0\n1\na 0 12", 3, "no newline (truncated file)"),
        (b"0\n1\n\xff 0 1\n", 3, "non-ASCII"),
    ],
)
def test_corrupt_files_name_the_file_and_line(
    tmp_path: Path, content: bytes, line: int, fragment: str
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert f"{path} line {line}" in str(err)
    assert fragment in str(err)


def test_write_validates_before_writing(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(tmp_path / "ckpt")
    f.write({("a", 0): 1})
    with pytest.raises(InvalidTopicError):
        f.write({("a b", 0): 1})
    with pytest.raises(UsageError, match="the offset must be an int"):
        f.write({("a", 0): -1})
    with pytest.raises(UsageError, match="the partition must be an int"):
        f.write({("a", True): 1})
    assert f.read() == {("a", 0): 1}  # nothing was written by the refused calls
