"""RateLimitedLog: the first occurrence of a key in full, repeats counted per interval and
summarised once, with a clock the tests move."""

from __future__ import annotations

import doctest
import errno
import logging
import threading

import pytest

from spark_mq import rate_limited_log
from spark_mq.errors import LogDirectoryFullError
from spark_mq.rate_limited_log import RateLimitedLog, failure_kind, flush_all, is_world_failure

LOGGER = logging.getLogger("tests.rate_limited_log")


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    out = [r.getMessage() for r in caplog.records if r.name == LOGGER.name]
    caplog.clear()
    return out


def make(clock: Clock, **kw: int) -> RateLimitedLog:
    return RateLimitedLog(
        LOGGER, interval_ms=kw.pop("interval_ms", 10_000), monotonic_ms=clock, **kw
    )


def test_a_burst_is_one_line_and_one_summary(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = make(clock)
    logged = [log.log("full", logging.ERROR, "produce to t-%d failed", p % 4) for p in range(453)]
    assert logged == [True] + [False] * 452
    assert messages(caplog) == ["produce to t-0 failed"]
    clock.now_ms += 9_999
    assert log.flush() == 0  # the interval is not over yet
    clock.now_ms += 1
    assert log.flush() == 1
    assert messages(caplog) == [
        "produce to t-0 failed [repeated 452 more times in the last 10 s]"  # the last one's
    ]
    # A quiet interval forgets the key: the next occurrence is logged in full again.
    clock.now_ms += 10_000
    assert log.flush() == 0
    assert log.log("full", logging.ERROR, "produce to t-2 failed")
    assert messages(caplog) == ["produce to t-2 failed"]


def test_a_lasting_failure_gets_one_summary_per_interval(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = make(clock)
    # 25 s of one failure every 100 ms, and no flush: the occurrences write the summaries.
    for _ in range(250):
        log.log(("OSError", 28), logging.ERROR, "disk full")
        clock.now_ms += 100
    # The occurrence that ends an interval is counted in the next one.
    assert messages(caplog) == [
        "disk full",
        "disk full [repeated 99 more times in the last 10 s]",
        "disk full [repeated 100 more times in the last 10 s]",
    ]
    assert log.flush(force=True) == 1
    assert messages(caplog) == ["disk full [repeated 50 more times in the last 5 s]"]
    assert log.flush(force=True) == 0


def test_keys_are_counted_apart_and_a_single_repeat_says_time(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = make(clock)
    assert log.log("a", logging.WARNING, "a %s", "one")
    assert log.log("b", logging.ERROR, "b")
    assert not log.log("a", logging.WARNING, "a %s", "two")
    clock.now_ms += 10_000
    assert log.flush() == 1
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "a one"),
        (logging.ERROR, "b"),
        (logging.WARNING, "a two [repeated 1 more time in the last 10 s]"),
    ]


def test_the_traceback_goes_with_the_full_line_only(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = make(clock)
    try:
        raise KeyError("bug")
    except KeyError as exc:
        for _ in range(3):
            log.log(("KeyError", "x.py:1"), logging.ERROR, "failed: %r", exc, exc_info=exc)
    log.flush(force=True)
    assert [r.exc_info is not None and r.exc_info[0] is KeyError for r in caplog.records] == [
        True,
        False,
    ]


def test_at_most_max_keys_are_followed(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = make(clock, max_keys=2)
    log.log(1, logging.ERROR, "one")
    log.log(1, logging.ERROR, "one")
    log.log(2, logging.ERROR, "two")
    log.log(3, logging.ERROR, "three")  # pushes out key 1, whose count is written first
    assert messages(caplog) == [
        "one",
        "two",
        "one [repeated 1 more time in the last 1 s]",
        "three",
    ]
    assert not log.log(3, logging.ERROR, "three")
    assert log.log(1, logging.ERROR, "one")  # forgotten, so logged in full again


def test_threads_lose_no_count(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = make(clock)
    threads = [
        threading.Thread(target=lambda: [log.log("k", logging.ERROR, "x") for _ in range(500)])
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.flush(force=True)
    assert messages(caplog) == ["x", "x [repeated 1999 more times in the last 1 s]"]


@pytest.mark.parametrize("kw", [{"interval_ms": 0}, {"max_keys": 0}])
def test_limits_must_be_positive(clock: Clock, kw: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        make(clock, **kw)


def test_the_docstring_example_runs() -> None:
    assert doctest.testmod(rate_limited_log).failed == 0


def test_failures_of_the_world_have_no_traceback_and_bugs_do(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = make(clock)
    full = LogDirectoryFullError("disk full while appending", path="/d")
    full.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    read_only = OSError(errno.EROFS, "Read-only file system")
    for exc in (full, read_only, full, read_only):
        log.failure(exc, "produce to t-0 failed: %s", exc)

    def bug() -> None:
        raise KeyError("partition")

    for _ in range(2):
        try:
            bug()
        except KeyError as exc:
            log.failure(exc, "produce to t-0 failed: %r", exc)
    bad_fd = OSError(errno.EBADF, "Bad file descriptor")  # no errno of the world: a bug
    log.failure(bad_fd, "produce failed: %s", bad_fd)
    log.flush(force=True)
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("produce to t-0 failed: disk full while appending", False),
        ("produce to t-0 failed: [Errno 30] Read-only file system", False),
        ("produce to t-0 failed: KeyError('partition')", True),
        ("produce failed: [Errno 9] Bad file descriptor", True),
        (
            "produce to t-0 failed: disk full while appending [repeated 1 more time in the "
            "last 1 s]",
            False,
        ),
        (
            "produce to t-0 failed: [Errno 30] Read-only file system [repeated 1 more time in "
            "the last 1 s]",
            False,
        ),
        (
            "produce to t-0 failed: KeyError('partition') [repeated 1 more time in the last 1 s]",
            False,
        ),
    ]
    assert failure_kind(full) == ("world", "LogDirectoryFullError", errno.ENOSPC)
    assert is_world_failure(read_only) and not is_world_failure(bad_fd)


def test_flush_all_reaches_every_instance(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    first, second = make(clock), make(clock)
    for log in (first, second, first, second):
        log.log("k", logging.ERROR, "x")
    assert flush_all(force=True) >= 2
    assert messages(caplog).count("x [repeated 1 more time in the last 1 s]") == 2
