"""The group coordinator on the broker's event loop: loading, time, and the expiry job.

:class:`GroupService` owns the broker's :class:`~spark_mq.broker.group.coordinator.
GroupCoordinator` and gives it what its synchronous core lacks:

- **loading**: at startup (:meth:`GroupService.start`), ``__consumer_offsets`` is read on an
  executor thread (every partition, start to high watermark) and installed; group requests
  wait for that (:meth:`GroupService.ready`). A load that fails is logged and retried by the
  next group request, which answers COORDINATOR_NOT_AVAILABLE (retriable) meanwhile.
- **the topic**, created on the first group request if it does not exist (on the executor:
  creation fsyncs). It is never created just because the broker started.
- **time**: every call into the coordinator goes through :meth:`GroupService.call`, which
  passes the clock's ``now_ms`` and then arms one asyncio timer at the coordinator's
  earliest deadline; when it fires, the due deadlines run. Nothing polls.
- **expiry**: every ``offsets.retention.check.interval.ms``, expired offsets and dead groups
  are removed (``GroupCoordinator.expire_offsets``).
- **shutdown** (:meth:`GroupService.close`): JoinGroup and SyncGroup requests still waiting
  are answered with COORDINATOR_NOT_AVAILABLE, so that their connections finish at once.

Threads: everything here runs on the event loop thread, except the blocking load and topic
creation it hands to the executor (which touch storage only, never the coordinator).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.coordinator import GroupCoordinator
from spark_mq.broker.group.offsets_topic import LoadedGroups, OffsetsTopic
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.retried_step import RetriedStep
from spark_mq.errors import CoordinatorNotAvailableError, LogClosedError

logger = logging.getLogger("spark_mq.broker.group")

T = TypeVar("T")

#: Runs a blocking call on the broker's executor: ``await run_blocking(fn, *args)``.
RunBlocking = Callable[..., Awaitable[Any]]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupService:
    """The broker's group coordinator, bound to the running event loop."""

    def __init__(
        self,
        config: GroupConfig,
        replicas: ReplicaManager,
        run_blocking: RunBlocking,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self._run_blocking = run_blocking
        self.topic = OffsetsTopic(replicas, config)
        self.coordinator = GroupCoordinator(self.config, self.topic)
        self._clock = clock
        self._loading = RetriedStep(
            self._load, what="loading __consumer_offsets", owner="group coordinator"
        )
        self._creating = RetriedStep(
            lambda: self._run_blocking(self.topic.ensure),
            what="creating __consumer_offsets",
            owner="group coordinator",
        )
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline_ms: int | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._closed = False

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def start(self) -> None:
        """Begin loading ``__consumer_offsets`` and start the expiry job (on the loop)."""
        self._loading.start()
        if self._expiry is None:
            self._expiry = asyncio.create_task(self._expire_periodically(), name="group-expiry")

    def close(self) -> None:
        """Stop timers and the expiry job; answer every waiting JoinGroup and SyncGroup."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._expiry is not None:
            self._expiry.cancel()
        self.coordinator.shutdown()

    async def ready(self) -> GroupCoordinator:
        """The coordinator once loaded and ``__consumer_offsets`` exists; raises
        CoordinatorNotAvailableError (retriable) if either cannot be done now."""
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        await self._loading.wait()
        await self._creating.wait()
        return self.coordinator

    async def loaded(self) -> GroupCoordinator:
        """The coordinator once ``__consumer_offsets`` is loaded, without creating the topic
        (the transaction coordinator waits for this before writing markers to it)."""
        await self._loading.wait()
        return self.coordinator

    async def _load(self) -> None:
        started = time.monotonic()
        try:
            loaded: LoadedGroups = await self._run_blocking(self.topic.load)
        except Exception:
            logger.exception("loading __consumer_offsets failed; the next group request retries")
            raise
        self.coordinator.load(loaded, self._clock())
        self._rearm()
        logger.info("group coordinator ready in %.0f ms", (time.monotonic() - started) * 1000)

    # -----------------------------------------------------------------------------------------
    # Calling the coordinator

    def now_ms(self) -> int:
        return self._clock()

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of ``group_id``."""
        return self.topic.partition_for(group_id)

    def complete_transaction(self, producer_id: int, *, committed: bool, partition: int) -> None:
        """Publish (``committed``) or drop the pending transactional offsets of
        ``producer_id`` in ``partition``: its marker was written there."""
        self.coordinator.offsets.complete_transaction(
            producer_id, committed=committed, partition=partition
        )

    def call(self, fn: Callable[[GroupCoordinator, int], T]) -> T:
        """``fn(coordinator, now_ms)``, then re-arm the timer for the earliest deadline."""
        try:
            return fn(self.coordinator, self._clock())
        finally:
            self._rearm()

    def _rearm(self) -> None:
        if self._closed:
            return
        deadline = self.coordinator.next_deadline_ms()
        if deadline == self._timer_deadline_ms and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline_ms = deadline
        if deadline is not None:
            delay_s = max(deadline - self._clock(), 0) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._fire)

    def _fire(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_deadline_ms = None
        try:
            self.coordinator.advance(self._clock())
        except Exception:
            # A bug in a deadline's action; the others must still run.
            logger.exception("a group coordinator deadline failed")
        self._rearm()

    async def _expire_periodically(self) -> None:
        interval_s = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            if not self._loading.succeeded:
                continue
            try:
                removed = self.call(lambda c, now: c.expire_offsets(now))
            except LogClosedError:
                return
            except Exception:
                logger.exception("offset expiry failed; retrying at the next interval")
                continue
            if removed:
                logger.info("offset expiry removed %d committed offsets", removed)

    async def wait_closed(self) -> None:
        """Wait for the expiry job to end after :meth:`close` (for tidy shutdowns)."""
        if self._expiry is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
