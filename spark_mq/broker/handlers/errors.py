"""Turning exceptions into per-partition ``error_code`` / ``error_message`` pairs, and
logging the failures that are the broker's, once per kind.

Errors the client caused (an unknown topic, a bad config) go back to it and are not logged.
The broker's own failures, UNKNOWN_SERVER_ERROR and KAFKA_STORAGE_ERROR, are logged at ERROR
through :data:`REPEATED`, a :class:`~spark_mq.rate_limited_log.RateLimitedLog`: while the
disk is full every produce fails the same way, so the first failure of a kind is logged and
the next ones of the same kind are counted and summarised once per
:data:`~spark_mq.rate_limited_log.DEFAULT_INTERVAL_MS` ("... [repeated 452 more times in
the last 30 s]"). The kind is what tells failures apart, not the partition they hit:

- a failure of the world (a full or read-only disk, no file descriptors left, an I/O
  error): a :class:`~spark_mq.errors.SparkMQError` the broker raised on purpose, or an
  ``OSError`` with one of :data:`WORLD_ERRNOS`. Its message says what happened, so it is
  logged without a traceback; its kind is the class and the errno behind it.
- anything else is a bug in the broker: logged with its traceback (the first time), its kind
  the class and the line that raised it.

The broker runs :func:`report_repeated` while it serves: it writes the counts every interval
and, when cancelled at shutdown, the last ones.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import traceback
from collections.abc import Hashable
from typing import Final

from spark_mq.errors import SparkMQError
from spark_mq.protocol.error_codes import ErrorCode, code_for
from spark_mq.rate_limited_log import RateLimitedLog

logger = logging.getLogger("spark_mq.broker.handlers")

#: Repeated failures and refusals of the request handlers, logged once per kind and counted.
REPEATED: Final = RateLimitedLog(logger)

#: errnos that describe the machine, not a mistake of the broker: out of space, read-only,
#: out of descriptors or memory, I/O errors, permissions changed under the broker.
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


def _os_cause(exc: BaseException) -> OSError | None:
    """The OSError ``exc`` is or was raised from, if any (following ``__cause__``)."""
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 10:
        if isinstance(cause, OSError):
            return cause
        cause = cause.__cause__
        seen += 1
    return None


def _is_world_failure(exc: BaseException) -> bool:
    if isinstance(exc, SparkMQError):
        return True
    return isinstance(exc, OSError) and exc.errno in WORLD_ERRNOS


def _kind(exc: BaseException, world: bool) -> Hashable:
    if world:
        cause = _os_cause(exc)
        return ("world", type(exc).__name__, cause.errno if cause is not None else None)
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None
    return ("bug", type(exc).__name__, where)


def error_of(exc: BaseException, what: str) -> tuple[int, str]:
    """The code and message to answer for ``exc`` raised while doing ``what``.

    Errors we raise on purpose carry a message a person can act on and go back as they are.
    A failure of the broker itself (UNKNOWN_SERVER_ERROR, KAFKA_STORAGE_ERROR) is logged once
    per kind, with a traceback only if it is a bug (see the module docstring), and the client
    gets a message pointing at the broker's log.
    """
    code = code_for(exc)
    if code is ErrorCode.UNKNOWN_SERVER_ERROR or code is ErrorCode.KAFKA_STORAGE_ERROR:
        world = _is_world_failure(exc)
        REPEATED.log(
            _kind(exc, world),
            logging.ERROR,
            "%s failed: %s",
            what,
            exc,
            exc_info=None if world else exc,
        )
        detail = f"{type(exc).__name__}: {exc}"
        return int(code), f"{what} failed on the broker ({detail}); see the broker's log"
    return int(code), str(exc)


def flush_repeated(*, force: bool = False) -> int:
    """Write the counts of repeated failures whose interval is over (all, with ``force``)."""
    return REPEATED.flush(force=force)


async def report_repeated() -> None:
    """Write the counts of repeated failures every interval until cancelled, and then all
    that are left (run by the broker while it serves)."""
    try:
        while True:
            await asyncio.sleep(REPEATED.interval_ms / 1000)
            flush_repeated()
    finally:
        flush_repeated(force=True)
