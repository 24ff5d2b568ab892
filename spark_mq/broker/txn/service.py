"""The transaction coordinator on the broker's event loop: loading, recovery, periodic jobs.

:class:`TransactionService` owns the broker's
:class:`~spark_mq.broker.txn.coordinator.TransactionCoordinator` and gives it:

- **loading and recovery** at startup (:meth:`TransactionService.start`): once the group
  coordinator has loaded ``__consumer_offsets`` (markers written there publish pending
  transactional offsets, which must be loaded first), ``__transaction_state`` is read on an
  executor thread and installed, Ongoing transactions are aborted and decided ones finished
  (``TransactionCoordinator.recover``). Transactional requests wait for that
  (:meth:`ready`); a load that fails is logged and retried by the next request, which
  answers COORDINATOR_NOT_AVAILABLE (retriable) meanwhile.
- **the topic**, created on the first transactional request if it does not exist.
- **time** (wall clock: transaction start times are reported to clients and survive
  restarts).
- **periodic jobs** on the event loop (the coordinator is not thread-safe, so unlike the
  storage jobs of ``Scheduler`` they do not run on executor threads): every
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` timed-out transactions are
  aborted (and pending marker writes retried); every
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` expired ids are forgotten.

Threads: everything runs on the event loop thread except the blocking load and topic
creation it hands to the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from spark_mq.broker.group.service import GroupService, RunBlocking
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.retried_step import RetriedStep
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.broker.txn.coordinator import TransactionCoordinator
from spark_mq.broker.txn.markers import MarkerWriter
from spark_mq.broker.txn.state_topic import TransactionStateTopic
from spark_mq.errors import CoordinatorNotAvailableError, LogClosedError

logger = logging.getLogger("spark_mq.broker.txn")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionService:
    """The broker's transaction coordinator, bound to the running event loop."""

    def __init__(
        self,
        config: TxnConfig,
        replicas: ReplicaManager,
        run_blocking: RunBlocking,
        groups: GroupService,
        *,
        coordinator_epoch: int,
        new_producer_id: Callable[[], int],
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self._run_blocking = run_blocking
        #: Markers written to __consumer_offsets publish the groups' pending offsets.
        self._groups = groups
        self.topic = TransactionStateTopic(replicas, config)
        self.markers = MarkerWriter(
            replicas, coordinator_epoch=coordinator_epoch, on_offsets_marker=self._offsets_marker
        )
        self.coordinator = TransactionCoordinator(
            config,
            self.topic,
            self.markers,
            new_producer_id=new_producer_id,
        )
        self._clock = clock
        self._loading = RetriedStep(
            self._load, what="loading __transaction_state", owner="transaction coordinator"
        )
        self._creating = RetriedStep(
            lambda: self._run_blocking(self.topic.ensure),
            what="creating __transaction_state",
            owner="transaction coordinator",
        )
        self._jobs: list[asyncio.Task[None]] = []
        self._closed = False

    def _offsets_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        self._groups.complete_transaction(producer_id, committed=committed, partition=partition)

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def start(self) -> None:
        """Begin loading and recovery, and start the periodic jobs (on the loop)."""
        self._loading.start()
        if not self._jobs:
            cfg = self.config
            self._jobs = [
                asyncio.create_task(
                    self._every(
                        "txn-timeouts",
                        cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                        lambda c, now: c.abort_timed_out(now),
                    ),
                    name="txn-timeouts",
                ),
                asyncio.create_task(
                    self._every(
                        "txn-expiry",
                        cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
                        lambda c, now: c.expire_ids(now),
                    ),
                    name="txn-expiry",
                ),
            ]

    def close(self) -> None:
        """Stop the periodic jobs; later requests answer COORDINATOR_NOT_AVAILABLE."""
        self._closed = True
        for job in self._jobs:
            job.cancel()

    async def wait_closed(self) -> None:
        for job in self._jobs:
            with contextlib.suppress(asyncio.CancelledError):
                await job

    async def ready(self) -> TransactionCoordinator:
        """The coordinator once loaded, recovered, and ``__transaction_state`` exists."""
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        await self._loading.wait()
        await self._creating.wait()
        return self.coordinator

    async def loaded(self) -> TransactionCoordinator:
        """The coordinator once loaded (without creating the topic): for checks of requests
        that only read its state (produce, TxnOffsetCommit)."""
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        await self._loading.wait()
        return self.coordinator

    def now_ms(self) -> int:
        return self._clock()

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of ``transactional_id``."""
        return self.topic.partition_for(transactional_id)

    async def _load(self) -> None:
        started = time.monotonic()
        try:
            # Markers written by the recovery publish pending transactional offsets: the
            # groups must be loaded first.
            await self._groups.loaded()
            loaded = await self._run_blocking(self.topic.load)
            self.coordinator.load(loaded, self._clock())
            if self.topic.ready:
                self.coordinator.recover(self._clock())
        except Exception:
            logger.exception(
                "loading __transaction_state failed; the next transactional request retries"
            )
            raise
        logger.info("transaction coordinator ready in %.0f ms", (time.monotonic() - started) * 1000)

    async def _every(
        self, name: str, interval_ms: int, fn: Callable[[TransactionCoordinator, int], int]
    ) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            if not self._loading.succeeded:
                continue
            if not self.topic.ready:
                continue  # no transactional request yet: nothing to do
            try:
                count = fn(self.coordinator, self._clock())
            except LogClosedError:
                return
            except Exception:
                logger.exception("%s failed; retrying at the next interval", name)
                continue
            if count:
                logger.info("%s: %d", name, count)
