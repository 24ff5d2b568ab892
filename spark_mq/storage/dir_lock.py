"""The exclusive lock that makes one process the owner of a log directory.

Exactly one process may write a log directory (see the design's "one owner per log
directory"). It proves ownership by holding ``flock(LOCK_EX | LOCK_NB)`` on ``<root>/.lock``
for as long as it runs. The kernel drops the lock when the owner's file descriptor is closed,
including when the process dies for any reason (``SIGKILL``, OOM killer, a crash): a dead owner
can never leave the directory locked, and there is no stale-lock detection to get wrong.

File format of ``.lock``: one JSON object, written by the owner right after it takes the lock
and emptied when it releases it, so that a refused opener can say who holds the directory::

    {"version": 0, "pid": 4242, "hostname": "worker-7", "start_time_ms": 1732190000000,
     "owner": "broker 1"}

``owner`` is a free-form label (or ``null``). The content is informational only; the kernel
lock is the truth. A reader can see it empty or half-written while a new owner starts up, and
after an owner is killed it still names that dead owner until the next one takes over;
:func:`read_owner` returns ``None`` for anything it cannot parse.

Why the file is never deleted: removing a lock file races with openers. A process that opened
the old file before the unlink would lock an orphaned inode while a later opener locks a new
file, and both would believe they own the directory. So the file stays, and is only truncated.

Semantics worth knowing:

- ``flock`` locks belong to an *open file description*: a second ``open()`` of ``.lock`` in
  the same process conflicts with the first, exactly as another process would. The lock is
  not re-entrant.
- The descriptor is close-on-exec, so programs the owner ``exec``\\ s do not inherit the lock,
  but a child made by a bare ``fork()`` shares the description and keeps the directory locked
  until it exits too.
- On NFS, Linux emulates ``flock`` with byte-range locks held by the server; this works with
  NFSv4 but not with ``nolock`` mounts. Prefer local disks for log directories.

Thread safety: a :class:`DirLock` is meant to be owned by one object (the log manager);
``release()`` is idempotent but not synchronised against concurrent callers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from spark_mq.errors import LogDirectoryLockedError, StorageError

LOCK_FILE_NAME: Final = ".lock"
LOCK_FILE_VERSION: Final = 0
#: The lock file holds a few hundred bytes; anything larger is not ours and is not parsed.
MAX_LOCK_FILE_BYTES: Final = 64 * 1024


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(frozen=True)
class LockOwner:
    """Who holds (or last held) a log directory, as recorded in its ``.lock`` file."""

    pid: int
    hostname: str
    start_time_ms: int
    owner: str | None = None

    def describe(self) -> str:
        """``pid 4242 on host worker-7 (owner 'broker 1', since 2024-11-21T12:00:00Z)``."""
        since = datetime.datetime.fromtimestamp(self.start_time_ms / 1000, tz=datetime.UTC)
        label = f"owner {self.owner!r}, " if self.owner else ""
        return (
            f"pid {self.pid} on host {self.hostname} "
            f"({label}since {since.isoformat(timespec='seconds').replace('+00:00', 'Z')})"
        )

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": LOCK_FILE_VERSION,
                "pid": self.pid,
                "hostname": self.hostname,
                "start_time_ms": self.start_time_ms,
                "owner": self.owner,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LockOwner | None:
        """The owner recorded in ``data``, or ``None`` if it is empty, partial or not ours."""
        try:
            obj: Any = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(obj, dict) or obj.get("version") != LOCK_FILE_VERSION:
            return None
        pid, hostname, start, owner = (
            obj.get("pid"),
            obj.get("hostname"),
            obj.get("start_time_ms"),
            obj.get("owner"),
        )
        if not (
            type(pid) is int
            and isinstance(hostname, str)
            and type(start) is int
            and (owner is None or isinstance(owner, str))
        ):
            return None
        return cls(pid=pid, hostname=hostname, start_time_ms=start, owner=owner)


def read_owner(root: str | os.PathLike[str]) -> LockOwner | None:
    """The owner recorded in ``<root>/.lock``, read without taking the lock.

    ``None`` if there is no lock file, it is empty (nobody holds the directory, or an owner is
    just starting) or it cannot be parsed. The record may name an owner that has since died:
    only opening the directory tells for sure.
    """
    try:
        with open(Path(root) / LOCK_FILE_NAME, "rb") as f:
            data = f.read(MAX_LOCK_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_LOCK_FILE_BYTES:
        return None
    return LockOwner.from_json(data)


def _locked_message(path: Path, holder: LockOwner | None) -> str:
    if holder is None:
        who = "another process, which has not recorded its pid yet (it may be starting up)"
    else:
        who = holder.describe()
        if holder.pid == os.getpid() and holder.hostname == socket.gethostname():
            who += ", which is this process: the directory is already open here; use that "
            who += "instance or close it first"
        elif holder.hostname != socket.gethostname():
            who += ", another host: the directory seems to be on a shared filesystem"
    return (
        f"log directory {path.parent} is locked by {who}. Only one process may own a log "
        "directory: stop the owner or talk to it instead of opening the directory. A dead "
        "owner does not keep the lock (the operating system frees it), so if that process is "
        "gone, simply try again."
    )


class DirLock:
    """An exclusive, non-blocking lock on a log directory, taken on construction.

    Raises :class:`LogDirectoryLockedError` (naming the holder) if another process, or another
    ``DirLock`` in this process, holds it. Release with :meth:`release` or a ``with`` block::

        >>> import tempfile
        >>> root = tempfile.mkdtemp()
        >>> with DirLock(root, owner="doctest") as lock:
        ...     read_owner(root).owner
        'doctest'
        >>> read_owner(root) is None
        True
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        owner: str | None = None,
        time_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.root = Path(root)
        self.path = self.root / LOCK_FILE_NAME
        self._fd: int | None = None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open lock file {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                holder = read_owner(self.root)
                raise LogDirectoryLockedError(
                    _locked_message(self.path, holder),
                    path=str(self.root),
                    owner=holder.describe() if holder else None,
                ) from None
            raise StorageError(f"cannot lock {self.path}: {exc}") from exc
        self._fd = fd
        self.info = LockOwner(
            pid=os.getpid(), hostname=socket.gethostname(), start_time_ms=time_ms(), owner=owner
        )
        try:
            # Truncate first and then write: a concurrent reader sees an empty file or a prefix,
            # and no JSON prefix parses, so it never mistakes leftovers for the new owner.
            os.ftruncate(fd, 0)
            os.pwrite(fd, self.info.to_json(), 0)
        except OSError as exc:
            self.release()
            raise StorageError(f"cannot record the owner in {self.path}: {exc}") from exc

    @property
    def locked(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def lost(self) -> str | None:
        """Why the lock file at :attr:`path` is no longer the file this lock holds, None
        while it is (or once released).

        ``flock`` locks a file, not a path: if the directory is deleted (or moved) the lock
        file goes with it, and if a new directory is made at the same path another process
        can lock a new lock file there while this one still holds the old. Either way the
        directory this lock protected is not at :attr:`path` any more. Two ``stat`` calls."""
        fd = self._fd
        if fd is None:
            return None
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return f"its lock file {self.path} is gone (the directory was deleted or moved)"
        except OSError as exc:
            return f"its lock file {self.path} cannot be read ({exc})"
        try:
            held = os.fstat(fd)
        except OSError:
            return None  # released meanwhile (by another thread): nothing held any more
        if (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
            return (
                f"its lock file {self.path} is not the file this process locked (the directory "
                "was replaced by another at the same path)"
            )
        return None

    def release(self) -> None:
        """Give up the lock (and empty the owner record). Calling it again does nothing."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # Emptied while still locked, so no new owner's record can be wiped by accident.
            # Failing to empty it is harmless (the record is informational), and the lock must
            # be released regardless, so the error is deliberately ignored.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the last descriptor of the description drops the flock

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "locked" if self.locked else "released"
        return f"DirLock({str(self.root)!r}, {state})"
