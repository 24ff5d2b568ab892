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

In a **cluster** (``replicas.cluster``) nothing is loaded at startup and nothing created
(the controller creates ``__transaction_state`` on the first FindCoordinator): the service
listens for the leadership of ``__transaction_state``'s partitions
(:meth:`TransactionService.on_leadership_change`). A partition this broker starts leading is
loaded alone, with its leader epoch as coordinator epoch
(:class:`~spark_mq.broker.txn.placement.TxnPlacement`); then what the previous coordinator
left decided (PrepareCommit / PrepareAbort) is completed once the loaded log is replicated.
Ongoing transactions keep running (their ``transaction.timeout.ms`` still aborts them) and
Prepared ones stay prepared. A partition it stops leading is unloaded. Every request names
its transactional id (:meth:`TransactionService.coordinator_for`: NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS otherwise) and is answered once what it wrote is on every
in-sync replica (:meth:`TransactionService.settle`).

Threads: everything runs on the event loop thread except the blocking load and topic
creation it hands to the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from spark_mq.broker.coordinator_leadership import LeadershipChange
from spark_mq.broker.group.service import GroupService, RunBlocking
from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.retried_step import RetriedStep
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.broker.txn.coordinator import TransactionCoordinator
from spark_mq.broker.txn.markers import MarkerWriter
from spark_mq.broker.txn.placement import TxnPlacement
from spark_mq.broker.txn.state_topic import TransactionStateTopic
from spark_mq.errors import CoordinatorNotAvailableError, LogClosedError, SparkMQError

if TYPE_CHECKING:
    from spark_mq.broker.txn.participants import TxnPeers

logger = logging.getLogger("spark_mq.broker.txn")

#: How long a request waits for its state records to reach every in-sync replica when its
#: transactional id has no transaction timeout yet (Kafka bounds the append by the
#: transaction's ``transaction.timeout.ms``; this is the producer's default).
STATE_APPEND_TIMEOUT_S: Final = 60.0
#: How long a cluster broker waits before reading a partition again after a failed load.
LOAD_RETRY_S: Final = 1.0


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
        partition_count: Callable[[], int | None] | None = None,
    ) -> None:
        self.config = config
        self._run_blocking = run_blocking
        #: Markers written to __consumer_offsets publish the groups' pending offsets.
        self._groups = groups
        #: A cluster broker coordinates the partitions of __transaction_state it leads.
        self.cluster = replicas.cluster
        self.topic = TransactionStateTopic(replicas, config, partition_count=partition_count)
        self.markers = MarkerWriter(
            replicas, coordinator_epoch=coordinator_epoch, on_offsets_marker=self._offsets_marker
        )
        self.coordinator = TransactionCoordinator(
            config,
            self.topic,
            self.markers,
            new_producer_id=new_producer_id,
            durable=self.topic.durable,
        )
        self.placement = TxnPlacement(self.coordinator, self.topic.partition_for)
        self._partition_loads: dict[int, asyncio.Task[None]] = {}
        if self.cluster:
            replicas.add_leadership_listener(TRANSACTION_STATE_TOPIC, self)
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
        #: A cluster broker's two-phase requests to the other coordinators (attached by the
        #: server once the broker is registered); None on one node.
        self.peers: TxnPeers | None = None

    def _timeouts(self, coordinator: TransactionCoordinator, now_ms: int) -> int:
        """The periodic check: timed-out transactions, and in a cluster the two-phase
        decisions whose participants were not all told yet."""
        aborted = coordinator.abort_timed_out(now_ms)
        return aborted + (self.peers.redrive_pending() if self.peers is not None else 0)

    def _offsets_marker(self, partition: int, producer_id: int, committed: bool) -> None:
        self._groups.complete_transaction(producer_id, committed=committed, partition=partition)

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def start(self) -> None:
        """Begin loading and recovery (one node; a cluster broker loads a partition when
        it becomes its leader), and start the periodic jobs (on the loop)."""
        if not self.cluster:
            self._loading.start()
        if not self._jobs:
            cfg = self.config
            self._jobs = [
                asyncio.create_task(
                    self._every(
                        "txn-timeouts",
                        cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                        self._timeouts,
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
        for job in [*self._jobs, *self._partition_loads.values()]:
            job.cancel()

    async def wait_closed(self) -> None:
        for job in [*self._jobs, *self._partition_loads.values()]:
            with contextlib.suppress(asyncio.CancelledError):
                await job

    async def ready(self) -> TransactionCoordinator:
        """The coordinator once loaded, recovered, and ``__transaction_state`` exists."""
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        if self.cluster:
            return self.coordinator  # each partition is loaded when this broker leads it
        await self._loading.wait()
        await self._creating.wait()
        return self.coordinator

    async def loaded(self) -> TransactionCoordinator:
        """The coordinator once loaded (without creating the topic): for checks of requests
        that only read its state (produce, TxnOffsetCommit)."""
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        if not self.cluster:
            await self._loading.wait()
        return self.coordinator

    async def coordinator_for(self, *keys: str) -> TransactionCoordinator:
        """The coordinator, ready, once it is checked that this broker coordinates every
        one of ``keys`` (transactional ids, two-phase owners): NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS (retriable) otherwise."""
        coordinator = await self.ready()
        if self.cluster:
            for key in keys:
                if key:
                    self.placement.check(key)
        return coordinator

    def coordinates(self, key: str) -> bool:
        """Whether this broker coordinates ``key`` now (on one node: always)."""
        return not self.cluster or self.placement.coordinates(key)

    async def settle(self, keys: Iterable[str], *, every: bool = False) -> None:
        """In a cluster: wait until every state record this broker wrote to the partitions
        of ``keys`` is on every in-sync replica (acks=all), then complete the transactions
        of ``keys`` (``every``: all transactions) whose decision was waiting for that.
        Nothing to do on one node."""
        if not self.cluster:
            return
        keys = [k for k in keys if k]
        partitions = sorted({self.topic.partition_for(k) for k in keys})
        # As Kafka: the append waits up to the transaction's own timeout.
        timeouts = [t.timeout_ms / 1000 for k in keys if (t := self.coordinator.txns.get(k))]
        timeout_s = min(timeouts) if timeouts else STATE_APPEND_TIMEOUT_S
        for index in partitions:
            await self.topic.wait_replicated(index, timeout_s)
        now = self._clock()
        if every:
            self.coordinator.retry_pending(now)
            return
        # Only the request's own transactions: a request must not pay for every loaded id.
        for key in keys:
            txn = self.coordinator.txns.get(key)
            if txn is not None and txn.state.is_decided:
                self.coordinator.complete(txn, now)

    # -----------------------------------------------------------------------------------------
    # Leadership of __transaction_state's partitions (a cluster)

    def on_leadership_change(self, change: LeadershipChange) -> None:
        """Load the partitions this broker now leads, unload those it no longer leads."""
        for index in change.resigned:
            task = self._partition_loads.pop(index, None)
            if task is not None:
                task.cancel()
            self.placement.resign(index)
            self.topic.appended_end.pop(index, None)
        for index, epoch in change.elected:
            if self._closed or not self.placement.elect(index, epoch):
                continue
            previous = self._partition_loads.pop(index, None)
            if previous is not None:
                previous.cancel()
            self._partition_loads[index] = asyncio.create_task(
                self._load_partition(index, epoch), name=f"txn-load-{index}"
            )

    async def _load_partition(self, index: int, epoch: int) -> None:
        started = time.monotonic()
        while True:
            try:
                loaded = await self._run_blocking(self.topic.load_partition, index)
                break
            except Exception:
                # A read error (a damaged segment, a full disk) may pass: retried while this
                # broker still leads the partition; its ids answer LOAD_IN_PROGRESS meanwhile.
                logger.exception(
                    "loading __transaction_state-%d failed; retrying in %.0f s",
                    index,
                    LOAD_RETRY_S,
                )
                await asyncio.sleep(LOAD_RETRY_S)
        if not self.placement.install(index, epoch, loaded, self._clock()):
            return
        logger.info(
            "__transaction_state-%d loaded in %.0f ms", index, (time.monotonic() - started) * 1000
        )
        # What the previous coordinator decided is finished once the loaded log is on every
        # in-sync replica (the markers must not publish a decision a later leader lacks);
        # the periodic job retries whatever fails here.
        try:
            await self.topic.wait_replicated(index, STATE_APPEND_TIMEOUT_S)
            finished = self.coordinator.retry_pending(self._clock())
            if self.peers is not None:
                # The decisions whose participants elsewhere were not all told yet.
                redriven = self.peers.redrive(index)
                if redriven:
                    logger.info(
                        "__transaction_state-%d: delivering %d two-phase decisions to their "
                        "participants again",
                        index,
                        redriven,
                    )
        except (SparkMQError, LogClosedError) as exc:
            logger.warning(
                "__transaction_state-%d: completing the decided transactions waits (%s); "
                "the periodic job retries",
                index,
                exc,
            )
            return
        if finished:
            logger.info(
                "__transaction_state-%d: completed %d transactions the previous coordinator "
                "had decided",
                index,
                finished,
            )

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
            if not self.cluster and not self._loading.succeeded:
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
