"""Turning exceptions into per-partition ``error_code`` / ``error_message`` pairs, and
logging the failures that are the broker's, once per kind.

Errors the client caused (an unknown topic, a bad config) go back to it and are not logged.
The broker's own failures, UNKNOWN_SERVER_ERROR and KAFKA_STORAGE_ERROR, are logged at ERROR
through :data:`REPEATED`, a :class:`~spark_mq.rate_limited_log.RateLimitedLog`: while the
disk is full every produce fails the same way, so the first failure of a kind is logged and
the next ones of the same kind are counted and summarised once per
:data:`~spark_mq.rate_limited_log.DEFAULT_INTERVAL_MS` ("... [repeated 452 more times in
the last 30 s]"). The kind is what tells failures apart, not the partition they hit
(:func:`~spark_mq.rate_limited_log.failure_kind`): a failure of the world (a full or
read-only disk, no file descriptors left, an I/O error) is logged without a traceback, since
its message says what happened; anything else is a bug in the broker, logged with its
traceback.

Errors are answered once, by :func:`answer`, which the connection calls for every request:
a handler raises, and the API's spec builds the error response
(:attr:`~spark_mq.protocol.api.ApiSpec.error_response`). A typed :class:`~spark_mq.errors.
SparkMQError` becomes its code; anything else is a bug, logged with its traceback and
answered UNKNOWN_SERVER_ERROR, which is not retriable, so a client does not retry a bug
forever. Handlers catch only where a request's parts succeed or fail apart (a partition of a
produce, a topic of a create): there a part's error goes into its own entry through
:func:`error_of`, and the parts done before it are reported as done.

The broker runs :func:`report_repeated` while it serves: it writes the counts of every
RateLimitedLog of the process every interval and, when cancelled at shutdown, the last ones.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from spark_mq.broker.context import Handler, RequestContext, Response
from spark_mq.errors import CorruptFrameError, PartitionOfflineError, SparkMQError
from spark_mq.protocol.api import ApiSpec
from spark_mq.protocol.error_codes import ErrorCode, code_for
from spark_mq.rate_limited_log import DEFAULT_INTERVAL_MS, RateLimitedLog, flush_all

logger = logging.getLogger("spark_mq.broker.handlers")

#: Repeated failures and refusals of the request handlers, logged once per kind and counted.
REPEATED: Final = RateLimitedLog(logger)

#: What is answered with a code of its own: the errors spark_mq raises on purpose, and the
#: world's (an OSError is the disk failing, sent as KAFKA_STORAGE_ERROR). Anything else is a
#: bug. Handlers that answer a part of a request apart catch these and nothing wider.
TYPED_ERRORS: Final = (SparkMQError, OSError)


def error_of(exc: BaseException, what: str) -> tuple[int, str]:
    """The code and message to answer for ``exc`` raised while doing ``what``.

    Errors we raise on purpose carry a message a person can act on and go back as they are.
    A failure of the broker itself (UNKNOWN_SERVER_ERROR, KAFKA_STORAGE_ERROR) is logged once
    per kind, with a traceback only if it is a bug (see the module docstring), and the client
    gets a message pointing at the broker's log. An offline partition
    (:class:`~spark_mq.errors.PartitionOfflineError`) goes back as it is, unlogged: the broker
    logged it when it opened its log directory.
    """
    code = code_for(exc)
    if isinstance(exc, PartitionOfflineError):
        # Logged once, when the broker found the partition could not be opened; every
        # request for it would otherwise log it again.
        return int(code), str(exc)
    if code is ErrorCode.UNKNOWN_SERVER_ERROR or code is ErrorCode.KAFKA_STORAGE_ERROR:
        REPEATED.failure(exc, "%s failed: %s", what, exc)
        detail = f"{type(exc).__name__}: {exc}"
        return int(code), f"{what} failed on the broker ({detail}); see the broker's log"
    return int(code), str(exc)


class UnanswerableError(Exception):
    """A request failed and its API's response cannot carry the error (a Metadata request
    for all topics): the connection answers with a frame error instead."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


async def answer(
    spec: ApiSpec[Any, Any],
    handler: Handler,
    ctx: RequestContext,
    request: Any,
    records: memoryview,
) -> Response | None:
    """Run ``handler`` and answer what it raises, once: a SparkMQError (or an OSError) with
    its code (see :func:`error_of`), anything else with UNKNOWN_SERVER_ERROR and its
    traceback in the log. A :class:`~spark_mq.errors.CorruptFrameError` (a records section
    that does not add up) is the connection's to answer, as a frame error; so is a failure
    the response cannot carry (:class:`UnanswerableError`)."""
    name = spec.key.name
    try:
        return await handler(ctx, request, records)
    except CorruptFrameError:
        raise
    except TYPED_ERRORS as exc:
        code, message = error_of(exc, name)
    except Exception as exc:
        # A bug: logged every time with its traceback, and not retriable, so that a client
        # reports it instead of retrying it until its timeout.
        logger.exception("%s from %s failed", name, ctx.peer)
        code = int(ErrorCode.UNKNOWN_SERVER_ERROR)
        message = f"{name} failed on the broker ({type(exc).__name__}: {exc}); see its log"
    body = spec.error_response(request, code, message)
    if body is None:
        raise UnanswerableError(code, message)
    return Response(body)


async def report_repeated() -> None:
    """Write the counts of repeated failures every interval until cancelled, and then all
    that are left (run by the broker while it serves)."""
    try:
        while True:
            await asyncio.sleep(DEFAULT_INTERVAL_MS / 1000)
            flush_all()
    finally:
        flush_all(force=True)
