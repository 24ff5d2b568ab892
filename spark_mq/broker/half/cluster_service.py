"""The half-message service of a cluster broker: the partitions of ``__half_messages`` it leads.

A producer group's half messages and their ops live in the group's partition of
``__half_messages`` (:mod:`~spark_mq.broker.half.half_log`); the service of that partition
runs on its leader (docs/half_messages.md, "On a cluster"). Nothing is loaded at startup:

- **elected** (:mod:`~spark_mq.broker.coordinator_leadership`), the broker reads the
  partition to its log end on an executor thread (its groups answer
  COORDINATOR_LOAD_IN_PROGRESS meanwhile), installs its messages, and wakes their pollers:
  the checks of what the previous leader had pending are handed out here now;
- **resigned**, it forgets the partition's messages and wakes their pollers, who hear
  NOT_COORDINATOR and find the new leader (FindCoordinator key type 2). The load states
  are :mod:`~spark_mq.broker.half.placement`'s.

What differs from one node, besides placement:

- every write is answered once on every in-sync replica (acks=all);
- a COMMIT's real record and a discarded record go to their partitions' leaders, wherever
  they are (:mod:`~spark_mq.broker.half.replicated_writes`). The write is awaited, so one
  end of a message runs at a time (a lock per message): a COMMIT waiting for its record
  never meets a ROLLBACK. The commit point is the COMMITTED op replicated: before it, the
  next leader loads the message as pending, and its next COMMIT writes the real record
  again, which the destination answers as a duplicate of the first (the message's own
  producer id, epoch 0, sequence 0) with the first offset;
- expiry tombstones a message's record, then its op, in the one partition that holds both,
  so no fsync between two topics is needed to keep their order.

Threads: the event loop, except loading (executor) and remote writes (the writer's pool).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from spark_mq.broker.coordinator_leadership import LeadershipChange
from spark_mq.broker.half.config import HalfMessageConfig
from spark_mq.broker.half.half_log import DISCARD_TOPIC
from spark_mq.broker.half.pending import PendingMessage, log_discard
from spark_mq.broker.half.placement import HalfPlacement
from spark_mq.broker.half.real_record import real_batch
from spark_mq.broker.half.records import HalfRecord
from spark_mq.broker.half.service import (
    HalfMessageService,
    RunBlocking,
    wall_clock_ms,
)
from spark_mq.broker.internal_topics import HALF_MESSAGES_TOPIC
from spark_mq.broker.metadata_cache import MetadataSnapshot
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.errors import CoordinatorNotAvailableError, UnknownTopicOrPartitionError
from spark_mq.protocol.half_messages import EndHalfMessageRequest, HalfState

if TYPE_CHECKING:
    # A client connection: imported by the server only when it joins a cluster, so that
    # the broker's import loads no client module.
    from spark_mq.broker.half.replicated_writes import ReplicatedWriter

logger = logging.getLogger("spark_mq.broker.half")

#: How long a cluster broker waits before reading a partition again after a failed load.
LOAD_RETRY_S: Final = 1.0


class ClusterHalfMessageService(HalfMessageService):
    """The half-message service of a cluster broker (see the module docstring)."""

    def __init__(
        self,
        config: HalfMessageConfig,
        replicas: ReplicaManager,
        run_blocking: RunBlocking,
        *,
        new_producer_id: Callable[[], int],
        metadata: Callable[[], MetadataSnapshot],
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        super().__init__(
            config,
            replicas,
            run_blocking,
            new_producer_id=new_producer_id,
            clock=clock,
            metadata=metadata,
        )
        self._metadata = metadata
        self.placement = HalfPlacement()
        #: The acks=all writes to partitions other brokers may lead (attached by the server
        #: once its cluster session is up).
        self.writer: ReplicatedWriter | None = None
        self._partition_loads: dict[int, asyncio.Task[None]] = {}
        #: One end of a message at a time (its real write is awaited).
        self._ending: dict[str, asyncio.Lock] = {}
        replicas.add_leadership_listener(HALF_MESSAGES_TOPIC, self)

    # -- lifecycle and placement ------------------------------------------------------------

    def start(self) -> None:
        """Start the check job; a partition is loaded when this broker becomes its leader."""
        self._start_job()

    def close(self) -> None:
        for task in self._partition_loads.values():
            task.cancel()
        super().close()

    async def ready(self) -> HalfMessageService:
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        return self

    async def serving(self, group: str) -> HalfMessageService:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (retriable) unless this broker
        leads ``group``'s partition of ``__half_messages`` and has loaded it."""
        await self.ready()
        self._still_serving(group)
        return self

    def _still_serving(self, group: str) -> None:
        self.placement.check(self.log.index_of(group), group)

    def _loaded(self) -> bool:
        return True  # each partition is loaded when led; the job sees only loaded ones

    def _partitions_served(self) -> int:
        return sum(1 for index in self.placement.led if self.placement.loaded(index))

    def _finish(self, pending: PendingMessage, state: HalfState, offset: int) -> None:
        super()._finish(pending, state, offset)
        self._ending.pop(pending.record.message_id, None)

    def on_leadership_change(self, change: LeadershipChange) -> None:
        """Load the partitions of ``__half_messages`` this broker now leads, unload those it
        no longer leads (called on the event loop; loading is a task of its own)."""
        for index in change.resigned:
            task = self._partition_loads.pop(index, None)
            if task is not None:
                task.cancel()
            if self.placement.end(index):
                self._unload(index)
        for index, epoch in change.elected:
            if self._closed:
                continue
            reloading = self.placement.state_of(index) is not None
            if not self.placement.begin(index, epoch):
                continue
            if reloading:
                self._unload(index)
            previous = self._partition_loads.pop(index, None)
            if previous is not None:
                previous.cancel()
            self._partition_loads[index] = asyncio.create_task(
                self._load_partition(index, epoch), name=f"half-load-{index}"
            )

    async def _load_partition(self, index: int, epoch: int) -> None:
        started = time.monotonic()
        while True:
            try:
                loaded = await self._run_blocking(self.log.load_partition_blocking, index)
                break
            except Exception:
                # A read error may pass: retried while this broker still leads the
                # partition; its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile.
                logger.exception(
                    "loading %s-%d failed; retrying in %.0f s",
                    HALF_MESSAGES_TOPIC,
                    index,
                    LOAD_RETRY_S,
                )
                await asyncio.sleep(LOAD_RETRY_S)
        if not self.placement.finish(index, epoch):
            return  # resigned or re-elected meanwhile: the read is stale
        self.log.appended_end[index] = loaded.log_end
        self._install(loaded.messages, index)
        logger.info(
            "serving the half messages of %s-%d (leader epoch %d), loaded in %.0f ms",
            HALF_MESSAGES_TOPIC,
            index,
            epoch,
            (time.monotonic() - started) * 1000,
        )
        # Their checks are due again at once: wake this partition's pollers.
        self._wake({p.record.producer_group for p in self.pending.values()})

    def _unload(self, index: int) -> None:
        """Forget the messages of partition ``index`` (this broker no longer serves it) and
        wake their pollers, who then hear NOT_COORDINATOR and look for the new leader."""
        groups = {p.record.producer_group for p in self.pending.values()}
        for table in (self.pending, self.discarded):
            for message_id in [m for m, p in table.items() if self._index_of_record(p) == index]:
                del table[message_id]
                self._ending.pop(message_id, None)
        for message_id in [m for m, o in self.ended.items() if o.index == index]:
            del self.ended[message_id]
        self.log.appended_end.pop(index, None)
        self._wake(groups)
        logger.info("no longer serving the half messages of %s-%d", HALF_MESSAGES_TOPIC, index)

    def _index_of_record(self, pending: PendingMessage) -> int:
        try:
            return self.log.index_of(pending.record.producer_group)
        except CoordinatorNotAvailableError:
            return -1

    async def _end_pending(
        self, pending: PendingMessage, request: EndHalfMessageRequest, wanted: HalfState
    ) -> tuple[HalfState, int]:
        """End a message on a cluster, where the real record may go to another broker.

        One end of a message at a time (a COMMIT awaiting its real write must not meet a
        ROLLBACK finishing meanwhile). The commit point is the COMMITTED op on every in-sync
        replica of the message's partition: before it, the message loads as pending on the
        next leader, and its next COMMIT writes the real record again, which the destination
        answers as a duplicate of the first (the message's own producer id and sequence)."""
        message_id, group = request.message_id, request.producer_group
        lock = self._ending.setdefault(message_id, asyncio.Lock())
        async with lock:
            found = self._to_end(request, wanted)
            if not isinstance(found, PendingMessage):
                return found
            offset = -1
            if wanted is HalfState.COMMITTED:
                offset = await self._write_elsewhere(found.record)
                # Meanwhile this broker may have stopped serving the group, or reloaded it.
                self.placement.check(self.log.index_of(group), group)
                if self.pending.get(message_id) is not found:
                    raise CoordinatorNotAvailableError(
                        f"half message {message_id!r} was reloaded while its record was "
                        "written; retry (the record is not written twice)"
                    )
            self._finish(found, wanted, offset)
        await self.log.replicated(group)
        return wanted, offset

    async def _write_elsewhere(self, record: HalfRecord, *, topic: str | None = None) -> int:
        """A cluster's :meth:`_write_real`: acks=all, wherever the partition's leader is."""
        if self.writer is None:
            raise CoordinatorNotAvailableError(
                "this broker is still joining the cluster (no inter-broker writes yet); retry"
            )
        target, partition, batch = real_batch(record, topic, self._clock())
        return await self.writer.write(target, partition, batch)

    async def _check_real_partition(self, topic: str, partition: int) -> None:
        """The real topic of a half message must exist in the cluster with ``partition``
        (the producer's metadata request created it when auto-creation is on)."""
        if partition not in self._metadata().partitions(topic):
            raise UnknownTopicOrPartitionError(
                f"{topic}-{partition} is not in the cluster's metadata: create the topic (or "
                "let the producer's metadata request create it), then send again",
                topic=topic,
            )

    async def _run_checks_once(self) -> None:
        """A cluster's discards: the record to ``__half_discarded`` (acks=all, wherever its
        leader is), then the DISCARDED op; one end of a message at a time, as COMMIT."""
        for pending in self._sweep(self._clock()):
            message_id = pending.record.message_id
            lock = self._ending.setdefault(message_id, asyncio.Lock())
            async with lock:
                if self.pending.get(message_id) is not pending:
                    continue  # ended, or unloaded, while the lock was waited for
                await self._write_elsewhere(pending.record, topic=DISCARD_TOPIC)
                if self.pending.get(message_id) is not pending:
                    continue  # unloaded meanwhile: the next leader discards it again
                self._finish(pending, HalfState.DISCARDED, -1)
            log_discard(pending)
            await self.log.replicated(pending.record.producer_group)

    async def _forget(self, expired: list[str], now: int) -> None:
        """A cluster's expiry: in each message's own partition, the tombstone of its record,
        then that of its op. One log orders them, so the op is never gone while the record
        is live (one node needs an fsync between two topics for the same)."""
        by_index: dict[int, list[str]] = {}
        for message_id in expired:
            by_index.setdefault(self.ended[message_id].index, []).append(message_id)
        for index, ids in by_index.items():
            self.log.tombstone_here(index, ids, now)
        for message_id in expired:
            self.ended.pop(message_id, None)
            self.discarded.pop(message_id, None)
