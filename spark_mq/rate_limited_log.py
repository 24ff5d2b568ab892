"""Logging an event that repeats: the first occurrence in full, then how often it came back.

A broker whose disk is full refuses every produce, and logging each refusal (with its
traceback) buried the log under hundreds of identical entries a second, 453 in 25 s in one
test. :class:`RateLimitedLog` logs the first occurrence of each kind of event, named by a
*key* the caller chooses (for a failure: the exception class and errno, never the partition
or offset, which change from one occurrence to the next), and only counts the occurrences
of that key in the next ``interval_ms``. When the interval is over, one line says how many
there were, with the last one's message::

    ERROR produce to t-0 failed: disk full while appending 50040 bytes to ...
    ERROR produce to t-3 failed: disk full ... [repeated 452 more times in the last 30 s]

A key that keeps repeating gets one such summary per interval; a key whose interval passes
with no repeat is forgotten, so that its next occurrence is logged in full again.

Summaries are written by the next occurrence of the key after its interval and by
:meth:`RateLimitedLog.flush`, which the process calls periodically (so that the count of a
failure that stopped is not held back until the next one) and with ``force=True`` at
shutdown (so that no count is lost); :func:`flush_all` flushes every instance, which is what
the broker does. At most ``max_keys`` keys are followed at once: a new key beyond that first
writes out and forgets the oldest one.

:meth:`RateLimitedLog.failure` logs an exception with a key and a traceback chosen for it: a
failure of the world (a :class:`~spark_mq.errors.SparkMQError` raised on purpose, whose
message says what happened, or an ``OSError`` with one of :data:`WORLD_ERRNOS`: a full or
read-only disk, no descriptors left) has no traceback and its kind is its class and the errno
behind it; anything else is a bug, logged with its traceback, its kind the class and the line
that raised it.

The clock is injected (monotonic milliseconds), so tests move time instead of sleeping.
Threads: any; one lock guards the counts, and lines are logged outside it.

    >>> import logging
    >>> now = [0]
    >>> log = RateLimitedLog(
    ...     logging.getLogger("doc"), interval_ms=1000, monotonic_ms=lambda: now[0]
    ... )
    >>> [log.log("disk full", logging.ERROR, "produce to t-%d failed", p) for p in range(3)]
    [True, False, False]
    >>> now[0] = 1000
    >>> log.flush()
    1
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Hashable
from typing import Final

from spark_mq.errors import SparkMQError

#: How long repeats of one key are counted before a summary line, by default.
DEFAULT_INTERVAL_MS: Final = 30_000
#: How many keys are followed at once, by default.
DEFAULT_MAX_KEYS: Final = 256


#: errnos that describe the machine, not a mistake of the program: out of space, read-only,
#: out of descriptors or memory, I/O errors, permissions changed underneath.
WORLD_ERRNOS: Final = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.EIO,
        errno.EACCES,
        errno.EPERM,
        errno.ESTALE,
    }
)

#: Every live instance, for :func:`flush_all`.
_INSTANCES: weakref.WeakSet[RateLimitedLog] = weakref.WeakSet()


def flush_all(*, force: bool = False) -> int:
    """:meth:`RateLimitedLog.flush` every instance of the process; the summary lines written."""
    return sum(log.flush(force=force) for log in list(_INSTANCES))


def is_world_failure(exc: BaseException) -> bool:
    """Whether ``exc`` reports the world (see the module docstring) rather than a bug."""
    if isinstance(exc, SparkMQError):
        return True
    return isinstance(exc, OSError) and exc.errno in WORLD_ERRNOS


def failure_kind(exc: BaseException) -> Hashable:
    """What tells ``exc`` apart from other failures, and not from its own repeats: class and
    errno for a failure of the world, class and raising line for a bug."""
    if is_world_failure(exc):
        cause: BaseException | None = exc
        for _ in range(10):  # the OSError it was raised from, if any
            if cause is None or isinstance(cause, OSError):
                break
            cause = cause.__cause__
        code = cause.errno if isinstance(cause, OSError) else None
        return ("world", type(exc).__name__, code)
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None
    return ("bug", type(exc).__name__, where)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclasses.dataclass(slots=True)
class _Window:
    """One key's current interval: when it began, and the repeats counted since."""

    start_ms: int
    level: int
    repeats: int
    last_msg: str
    last_args: tuple[object, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class _Line:
    level: int
    msg: str
    args: tuple[object, ...]
    exc_info: BaseException | None = None


class RateLimitedLog:
    """Logs each key's first occurrence and then a count of its repeats per interval."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        max_keys: int = DEFAULT_MAX_KEYS,
        monotonic_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        if interval_ms <= 0 or max_keys <= 0:
            raise ValueError(
                f"interval_ms and max_keys must be positive, got {interval_ms} and {max_keys}"
            )
        self.logger = logger
        self.interval_ms = interval_ms
        self.max_keys = max_keys
        self._clock = monotonic_ms
        self._lock = threading.Lock()
        #: In first-seen order, so the oldest key is the first one.
        self._windows: dict[Hashable, _Window] = {}
        _INSTANCES.add(self)

    def failure(
        self, exc: BaseException, msg: str, *args: object, level: int = logging.ERROR
    ) -> bool:
        """:meth:`log` ``exc`` under its :func:`failure_kind`, with its traceback only if it
        is a bug."""
        world = is_world_failure(exc)
        return self.log(failure_kind(exc), level, msg, *args, exc_info=None if world else exc)

    def log(
        self,
        key: Hashable,
        level: int,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> bool:
        """Log ``msg % args`` at ``level`` if ``key`` is not repeating, else count it.

        Returns True if the message was logged in full. ``exc_info`` (a traceback, for
        failures that are bugs) goes with the full message only, never with a summary.
        """
        lines: list[_Line] = []
        with self._lock:
            now = self._clock()
            window = self._windows.get(key)
            if window is not None and now - window.start_ms >= self.interval_ms:
                if window.repeats:
                    # Still repeating: report the interval that ended; this occurrence is
                    # the first repeat counted in the next one.
                    lines.append(self._summary(window, now))
                    window.start_ms, window.repeats = now, 0
                else:
                    del self._windows[key]
                    window = None
            if window is None:
                if len(self._windows) >= self.max_keys:
                    dropped = self._windows.pop(next(iter(self._windows)))
                    if dropped.repeats:
                        lines.append(self._summary(dropped, now))
                self._windows[key] = _Window(now, level, 0, msg, args)
                lines.append(_Line(level, msg, args, exc_info))
            else:
                window.repeats += 1
                window.level, window.last_msg, window.last_args = level, msg, args
        self._emit(lines)
        return window is None

    def flush(self, *, force: bool = False) -> int:
        """Write the summary of every key whose interval is over (of every key, with
        ``force``); returns how many summary lines were written."""
        lines: list[_Line] = []
        with self._lock:
            now = self._clock()
            for key, window in list(self._windows.items()):
                if not force and now - window.start_ms < self.interval_ms:
                    continue
                if window.repeats:
                    lines.append(self._summary(window, now))
                if force or not window.repeats:
                    del self._windows[key]
                else:
                    # Keep following it: if it goes on, the next summary counts from here.
                    window.start_ms, window.repeats = now, 0
        self._emit(lines)
        return len(lines)

    def _summary(self, window: _Window, now_ms: int) -> _Line:
        text = window.last_msg % window.last_args if window.last_args else window.last_msg
        seconds = max(1, round((now_ms - window.start_ms) / 1000))
        times = "time" if window.repeats == 1 else "times"
        return _Line(
            window.level,
            "%s [repeated %d more %s in the last %d s]",
            (text, window.repeats, times, seconds),
        )

    def _emit(self, lines: list[_Line]) -> None:
        for line in lines:
            self.logger.log(line.level, line.msg, *line.args, exc_info=line.exc_info)
