"""DirLock: one owner per log directory, across processes and within one."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import spark_mq
from spark_mq.errors import LogDirectoryLockedError, StorageError
from spark_mq.storage.dir_lock import LOCK_FILE_NAME, DirLock, LockOwner, read_owner

REPO_ROOT = str(Path(spark_mq.__file__).resolve().parent.parent)

# A child that takes the lock, reports its pid on stdout, and holds the lock until its stdin
# closes or it is killed: the parent synchronises on the line it prints, never on a sleep.
HOLDER = textwrap.dedent(
    """
    import os, sys
    from spark_mq.storage.dir_lock import DirLock
    lock = DirLock(sys.argv[1], owner="child holder")
    print("locked", os.getpid(), flush=True)
    sys.stdin.read()
    lock.release()
    """
)

# A child that tries once and reports what happened.
TRIER = textwrap.dedent(
    """
    import sys
    from spark_mq.errors import LogDirectoryLockedError
    from spark_mq.storage.dir_lock import DirLock
    try:
        DirLock(sys.argv[1]).release()
    except LogDirectoryLockedError as exc:
        print("refused:", exc, flush=True)
    else:
        print("acquired", flush=True)
    """
)


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO_ROOT}


def run_trier(root: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", TRIER, str(root)],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_child_env(),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("locked"), (line, proc.stderr.read() if proc.stderr else "")
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_lock_records_the_owner(tmp_path: Path) -> None:
    with DirLock(tmp_path, owner="broker 1", time_ms=lambda: 1_700_000_000_000) as lock:
        assert lock.locked
        owner = read_owner(tmp_path)
        assert owner == LockOwner(
            pid=os.getpid(),
            hostname=socket.gethostname(),
            start_time_ms=1_700_000_000_000,
            owner="broker 1",
        )
        assert lock.info == owner
        record = json.loads((tmp_path / LOCK_FILE_NAME).read_text())
        assert record["pid"] == os.getpid()
        assert record["owner"] == "broker 1"
    assert not lock.locked


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    # flock belongs to the open file description, so a second open() conflicts like another
    # process would: the lock is not re-entrant.
    with DirLock(tmp_path, owner="first"):
        with pytest.raises(LogDirectoryLockedError) as info:
            DirLock(tmp_path)
        message = str(info.value)
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in message
        assert "owner 'first'" in message
        assert "this process" in message
        assert info.value.path == str(tmp_path)
        assert info.value.owner is not None and str(os.getpid()) in info.value.owner


def test_release_frees_the_directory_and_empties_the_record(tmp_path: Path) -> None:
    lock = DirLock(tmp_path)
    lock.release()
    lock.release()  # idempotent
    assert read_owner(tmp_path) is None
    # The file stays: deleting it would race with openers (see the module docstring).
    assert (tmp_path / LOCK_FILE_NAME).exists()
    DirLock(tmp_path).release()


def test_lost_tells_a_deleted_or_replaced_directory_from_a_present_one(tmp_path: Path) -> None:
    root = tmp_path / "mq"
    root.mkdir()
    lock = DirLock(root)
    assert lock.lost() is None
    # Deleted (or moved away): the lock file went with it.
    shutil.rmtree(root)
    assert "is gone" in (lock.lost() or "")
    # Replaced: a new directory at the path, locked by someone else meanwhile (flock locks
    # the file, so the new lock file is free).
    root.mkdir()
    successor = DirLock(root)
    assert "not the file this process locked" in (lock.lost() or "")
    assert successor.lost() is None
    lock.release()
    assert lock.lost() is None  # released: nothing held, nothing lost
    successor.release()


def test_read_owner_of_missing_or_garbled_files(tmp_path: Path) -> None:
    assert read_owner(tmp_path) is None
    lock_file = tmp_path / LOCK_FILE_NAME
    for garbage in (b"", b'{"version": 0, "pid": 1', b"[]", b'{"version": 9}', b"\xff\xfe"):
        lock_file.write_bytes(garbage)
        assert read_owner(tmp_path) is None, garbage
    lock_file.write_bytes(
        b'{"version": 0, "pid": "1", "hostname": "h", "start_time_ms": 0, "owner": null}'
    )
    assert read_owner(tmp_path) is None  # a pid that is not an int is not ours


def test_lock_over_a_file_with_stale_content(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE_NAME).write_text("left over by an older owner, much longer" * 10)
    with DirLock(tmp_path, owner="new"):
        owner = read_owner(tmp_path)
        assert owner is not None and owner.owner == "new"


def test_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open lock file"):
        DirLock(tmp_path / "does-not-exist")


def test_refusal_without_a_recorded_owner(tmp_path: Path) -> None:
    with DirLock(tmp_path):
        # As seen during the instant between another owner's flock and its record.
        os.truncate(tmp_path / LOCK_FILE_NAME, 0)
        with pytest.raises(LogDirectoryLockedError, match="has not recorded its pid yet"):
            DirLock(tmp_path)


@pytest.mark.slow
def test_another_process_is_refused_while_we_hold_it(tmp_path: Path) -> None:
    with DirLock(tmp_path, owner="parent"):
        out = run_trier(tmp_path)
    assert out.startswith("refused:")
    assert f"pid {os.getpid()} on host" in out
    assert "owner 'parent'" in out
    assert "stop the owner" in out
    assert run_trier(tmp_path).startswith("acquired")


@pytest.mark.slow
def test_we_are_refused_while_another_process_holds_it(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(LogDirectoryLockedError) as info:
        DirLock(tmp_path)
    assert f"pid {holder.pid} on host {socket.gethostname()}" in str(info.value)
    assert "owner 'child holder'" in str(info.value)
    assert "this process" not in str(info.value)


@pytest.mark.slow
def test_lock_is_released_when_the_owner_is_killed(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(LogDirectoryLockedError):
        DirLock(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    # The dead owner's record is still there (nobody emptied it) but the kernel lock is gone.
    stale = read_owner(tmp_path)
    assert stale is not None and stale.pid == holder.pid
    with DirLock(tmp_path, owner="successor"):
        owner = read_owner(tmp_path)
        assert owner is not None and owner.pid == os.getpid()


@pytest.mark.slow
def test_lock_is_released_when_the_owner_exits_cleanly(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    assert holder.stdin is not None
    holder.stdin.close()  # the holder releases and exits
    assert holder.wait(timeout=60) == 0
    assert read_owner(tmp_path) is None
    DirLock(tmp_path).release()
