"""What holds a log, and the check of reading and creating entry points
(``spark_mq.broker.log_dir``), on real directories."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from spark_mq.broker import log_dir
from spark_mq.broker.log_dir import LOG_MARKERS, holds_log, require_log_dir
from spark_mq.errors import LogDirectoryNotFoundError


def test_a_missing_path_is_refused_for_reading_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "mq"
    with pytest.raises(LogDirectoryNotFoundError) as caught:
        require_log_dir(missing, create=False)
    assert caught.value.path == str(missing)
    assert f"no log directory at {missing} (it does not exist)" in str(caught.value)
    assert f"spark-mq topics create TOPIC --path {missing}" in str(caught.value)
    assert not (tmp_path / "typo").exists()


def test_an_empty_or_foreign_directory_is_refused_for_reading(tmp_path: Path) -> None:
    with pytest.raises(LogDirectoryNotFoundError, match="holds no spark_mq log"):
        require_log_dir(tmp_path, create=False)
    (tmp_path / "notes.txt").write_text("not a log")
    with pytest.raises(LogDirectoryNotFoundError, match="holds no spark_mq log"):
        require_log_dir(tmp_path, create=False)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("marker", LOG_MARKERS)
def test_any_marker_makes_a_log(tmp_path: Path, marker: str) -> None:
    (tmp_path / marker).write_bytes(b"")
    assert holds_log(tmp_path)
    require_log_dir(tmp_path, create=False)


def test_creating_makes_the_directory_and_its_parents(tmp_path: Path) -> None:
    new = tmp_path / "a" / "b"
    require_log_dir(new, create=True)
    assert new.is_dir()


@pytest.mark.parametrize("create", [False, True])
def test_a_file_is_refused_either_way(tmp_path: Path, create: bool) -> None:
    file = tmp_path / "mq"
    file.write_text("x")
    with pytest.raises(LogDirectoryNotFoundError, match=f"{file} is a file, not a log directory"):
        require_log_dir(file, create=create)


def test_a_path_under_a_file_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(LogDirectoryNotFoundError, match="cannot create the log directory"):
        require_log_dir(tmp_path / "f" / "mq", create=True)


def test_the_module_example_runs() -> None:
    assert doctest.testmod(log_dir, optionflags=doctest.ELLIPSIS).failed == 0
