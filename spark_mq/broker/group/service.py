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

On a cluster broker (``replicas.cluster``) there is no start-up load and no topic creation
here (the controller creates ``__consumer_offsets``; FindCoordinator asks it to). Instead the
service listens to the replica manager's leadership changes of ``__consumer_offsets``
(:mod:`~spark_mq.broker.coordinator_leadership`): an elected partition is loaded by a task of
its own (its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile; a failed read is retried
while the partition is still this broker's), a resigned one is unloaded at once (its waiting
members answered NOT_COORDINATOR). The bookkeeping is :mod:`~spark_mq.broker.group.ownership`.
Writes are answered once replicated (:meth:`GroupService.replicated`,
:mod:`~spark_mq.broker.group.replication`).

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

from spark_mq.broker.coordinator_leadership import LeadershipChange
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.coordinator import GroupCoordinator
from spark_mq.broker.group.offsets_topic import OFFSETS_TOPIC, LoadedGroups, OffsetsTopic
from spark_mq.broker.group.ownership import PartitionOwnership
from spark_mq.broker.group.replication import APPEND_ERRORS, coordinator_error, wait_replicated
from spark_mq.broker.metadata_cache import MetadataCache
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.retried_step import RetriedStep
from spark_mq.errors import CoordinatorNotAvailableError, LogClosedError, SparkMQError

logger = logging.getLogger("spark_mq.broker.group")

T = TypeVar("T")

#: Runs a blocking call on the broker's executor: ``await run_blocking(fn, *args)``.
RunBlocking = Callable[..., Awaitable[Any]]

#: Pause before reading a partition again after its load failed (a cluster broker).
LOAD_RETRY_BACKOFF_S = 1.0


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
        metadata_cache: MetadataCache | None = None,
    ) -> None:
        self.config = config
        self._run_blocking = run_blocking
        self._replicas = replicas
        self._metadata_cache = metadata_cache
        #: A cluster broker: partitions come and go with their leadership.
        self.cluster = replicas.cluster
        if self.cluster:
            self.ownership = PartitionOwnership()
            self.topic = OffsetsTopic(
                replicas, config, cluster_partition_count=self._cluster_partition_count
            )
            # Registered now, before the controller's first LeaderAndIsr can arrive.
            replicas.add_leadership_listener(OFFSETS_TOPIC, self)
        else:
            self.ownership = PartitionOwnership.everything()
            self.topic = OffsetsTopic(replicas, config)
        self.coordinator = GroupCoordinator(self.config, self.topic, ownership=self.ownership)
        self._loads: set[asyncio.Task[None]] = set()
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
        """Begin loading ``__consumer_offsets`` (a single node) and start the expiry job (on
        the loop)."""
        if not self.cluster:
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
        for task in list(self._loads):
            task.cancel()
        self.coordinator.shutdown()

    async def ready(self) -> GroupCoordinator:
        """The coordinator once loaded and ``__consumer_offsets`` exists; raises
        CoordinatorNotAvailableError (retriable) if either cannot be done now."""
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        if self.cluster:
            # Each group's partition says whether it is served here (ownership.py).
            return self.coordinator
        await self._loading.wait()
        await self._creating.wait()
        return self.coordinator

    async def loaded(self) -> GroupCoordinator:
        """The coordinator once ``__consumer_offsets`` is loaded, without creating the topic
        (the transaction coordinator waits for this before writing markers to it). A
        cluster broker loads partition by partition: there is nothing to wait for here."""
        if not self.cluster:
            await self._loading.wait()
        return self.coordinator

    # -----------------------------------------------------------------------------------------
    # A cluster broker: partitions that come and go

    def _cluster_partition_count(self) -> int:
        """The partition count of ``__consumer_offsets`` as this broker's metadata knows it;
        before it knows the topic, the count it is created with (as Kafka falls back to
        ``offsets.topic.num.partitions``)."""
        if self._metadata_cache is not None:
            partitions = self._metadata_cache.snapshot.partitions(OFFSETS_TOPIC)
            if partitions:
                return max(partitions) + 1
        return self.config.offsets_topic_num_partitions

    def on_leadership_change(self, change: LeadershipChange) -> None:
        """The replica manager's news (event loop): unload what resigned, start loading what
        was elected."""
        now = self._clock()
        for partition in change.resigned:
            self.coordinator.unload_partition(partition, now)
        for partition, epoch in change.elected:
            token = self.ownership.elect(partition, epoch)
            if token is None:
                continue
            logger.info(
                "__consumer_offsets-%d: elected leader with coordinator epoch %d; loading its "
                "groups",
                partition,
                epoch,
            )
            task = asyncio.get_running_loop().create_task(
                self._load_partition(partition, token), name=f"group-load-{partition}"
            )
            self._loads.add(task)
            task.add_done_callback(self._loads.discard)
        self._rearm()

    async def _load_partition(self, partition: int, token: int) -> None:
        started = time.monotonic()
        while True:
            try:
                loaded: LoadedGroups = await self._run_blocking(
                    self.topic.load_partition, partition
                )
                break
            except (SparkMQError, OSError) as exc:
                if self._closed or not self.ownership.is_current_load(partition, token):
                    return
                logger.error(
                    "__consumer_offsets-%d: loading failed (%s); retrying in %.0f s",
                    partition,
                    exc,
                    LOAD_RETRY_BACKOFF_S,
                )
                await asyncio.sleep(LOAD_RETRY_BACKOFF_S)
            if self._closed or not self.ownership.is_current_load(partition, token):
                return
        if self._closed:
            return
        if self.coordinator.load_partition(partition, token, loaded, self._clock()):
            self._rearm()
            logger.info(
                "__consumer_offsets-%d: groups ready in %.0f ms",
                partition,
                (time.monotonic() - started) * 1000,
            )

    async def replicated(self, group_id: str, what: str, *, sync_group: bool = False) -> None:
        """A cluster broker: wait until what was written for ``group_id`` is on every
        in-sync replica of its partition (``offsets.commit.timeout.ms`` at most); raise the
        group request's error otherwise (replication.py). Nothing to wait for on one node."""
        if not self.cluster:
            return
        try:
            await wait_replicated(
                self._replicas,
                self.partition_for(group_id),
                self.config.offsets_commit_timeout_ms / 1000,
            )
        except APPEND_ERRORS as exc:
            raise coordinator_error(exc, what, sync_group=sync_group) from exc

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
            if not self.cluster and not self._loading.succeeded:
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
