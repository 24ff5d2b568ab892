"""A coordinator's start-up step (loading its internal topic, creating it) that runs once,
and again only after it failed.

The group and transaction coordinators load their topic in the background from start-up and
create it on the first request that needs it. Every request waits for the same run of the
step; when it fails, the error is logged where it happens, each waiting request answers
COORDINATOR_NOT_AVAILABLE (retriable), and the next request starts the step again. Only the
world's failures (a typed spark_mq error, an OSError) become that retriable error: a bug is
raised as it is, so the request that met it is answered UNKNOWN_SERVER_ERROR, which a client
does not retry forever (the next request still runs the step again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from spark_mq.errors import CoordinatorNotAvailableError, SparkMQError

T = TypeVar("T")


class RetriedStep(Generic[T]):
    """``step`` run at most once at a time, kept when it succeeds, retried after a failure.

    ``what`` ("loading __consumer_offsets") and ``owner`` ("group coordinator") name it in
    the error a waiting request gets.
    """

    def __init__(self, step: Callable[[], Awaitable[T]], *, what: str, owner: str) -> None:
        self._step = step
        self._what = what
        self._owner = owner
        self._future: asyncio.Future[T] | None = None

    @property
    def succeeded(self) -> bool:
        future = self._future
        return future is not None and future.done() and not _failed(future)

    def start(self) -> asyncio.Future[T]:
        """The current run, or a new one if there was none or the last one failed."""
        if self._future is None or _failed(self._future):
            future = asyncio.ensure_future(self._step())
            # Mark a failure retrieved: it is logged where it happens, and the next request
            # retries, so asyncio need not warn about it.
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._future = future
        return self._future

    async def wait(self) -> T:
        """The step's result, starting it if needed; a failure raises
        CoordinatorNotAvailableError. A cancelled waiter does not cancel the step."""
        try:
            return await asyncio.shield(self.start())
        except (asyncio.CancelledError, CoordinatorNotAvailableError):
            raise
        except (SparkMQError, OSError) as exc:
            raise CoordinatorNotAvailableError(
                f"the {self._owner} failed {self._what} ({type(exc).__name__}: {exc}); it is "
                "retried with the next request, see the broker's log"
            ) from exc


def _failed(future: asyncio.Future[T]) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)
