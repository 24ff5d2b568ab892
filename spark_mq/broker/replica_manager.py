"""The partitions this broker hosts, over the storage's LogManager.

It hands out :class:`~spark_mq.broker.partition.Partition` objects (one per live partition
log, made on first use), creates topics on demand when ``auto.create.topics.enable`` allows,
and lets fetches wait for appends to any of a set of partitions without polling.

Threads: :meth:`partition` and the topic operations may run on any thread (LogManager and
PartitionLog are thread-safe; the partition table has its own lock). :meth:`wait_for_append`
and :meth:`notify` run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

from spark_mq.broker.partition import Partition, ReplicaState
from spark_mq.errors import TopicExistsError, UnknownTopicOrPartitionError
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.topic_metadata import TopicInfo
from spark_mq.storage.topic_names import validate_topic_name


class ReplicaManager:
    """Partitions of one log directory, led by this broker."""

    def __init__(
        self,
        logs: LogManager,
        *,
        node_id: int,
        leader_epoch: int,
        num_partitions: int,
        auto_create_topics: bool,
    ) -> None:
        self.logs = logs
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.num_partitions = num_partitions
        self.auto_create_topics = auto_create_topics
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._lock = threading.Lock()
        self._waiting: set[asyncio.Future[None]] = set()
        self._closing = False

    def partition(self, topic: str, index: int) -> Partition:
        """The partition, or UnknownTopicOrPartitionError naming what does not exist, or
        PartitionOfflineError for one whose log could not be opened at startup."""
        log = self.logs.get_log(topic, index)
        key = (topic, index)
        part = self._partitions.get(key)
        if part is not None and part.log is log:
            return part
        with self._lock:
            part = self._partitions.get(key)
            # A different log object means the topic was deleted and made again.
            if part is None or part.log is not log:
                if part is not None and part.state is not ReplicaState.OFFLINE:
                    part.transition_to(ReplicaState.OFFLINE)
                part = Partition(log, leader_epoch=self.leader_epoch, node_id=self.node_id)
                self._partitions[key] = part
            return part

    def cached(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    # -----------------------------------------------------------------------------------------
    # Topics (blocking: call from an executor thread)

    def ensure_topic(self, topic: str, *, allow_create: bool) -> bool:
        """Whether ``topic`` exists, creating it with the defaults when allowed.

        Creation needs both ``allow_create`` (the request asks for it) and the broker's
        ``auto.create.topics.enable``. An invalid name raises InvalidTopicError.
        """
        if self.logs.topic_exists(topic):
            return True
        if not (allow_create and self.auto_create_topics):
            return False
        validate_topic_name(topic)
        # Another request may create it first, which is just as good.
        with contextlib.suppress(TopicExistsError):
            self.logs.create_topic(topic, self.num_partitions)
        return True

    def require_topic(self, topic: str, *, allow_create: bool) -> None:
        if not self.ensure_topic(topic, allow_create=allow_create):
            hint = (
                "create it first (spark-mq topics create, or Admin.create_topic)"
                if not self.auto_create_topics
                else "create it first, or produce to it (auto.create.topics.enable is on)"
            )
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist; {hint}", topic=topic
            )

    def auto_create(self, topic: str) -> None:
        """:meth:`require_topic` with creation allowed (for producers)."""
        self.require_topic(topic, allow_create=True)

    def delete_topic(self, topic: str) -> list[Partition]:
        """Delete ``topic``; returns its partitions (now offline) so waiters can be woken."""
        gone = [p for (t, _), p in list(self._partitions.items()) if t == topic]
        self.logs.delete_topic(topic)
        with self._lock:
            for part in gone:
                if self._partitions.get((topic, part.index)) is part:
                    del self._partitions[(topic, part.index)]
                if part.state is not ReplicaState.OFFLINE:
                    part.transition_to(ReplicaState.OFFLINE)
        return gone

    def describe(self, topic: str) -> TopicInfo:
        return self.logs.describe_topic(topic)

    # -----------------------------------------------------------------------------------------
    # Waiting for appends (event loop thread)

    async def wait_for_append(self, partitions: Iterable[Partition], timeout_s: float) -> None:
        """Return when any of ``partitions`` is appended to (or goes away), when the broker
        starts shutting down (:meth:`wake_all`), or after ``timeout_s``: whichever is first."""
        if timeout_s <= 0 or self._closing:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        parts = list(partitions)
        for part in parts:
            part.add_waiter(waiter)
        self._waiting.add(waiter)
        handle = loop.call_later(timeout_s, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self._waiting.discard(waiter)
            for part in parts:
                part.remove_waiter(waiter)

    @property
    def closing(self) -> bool:
        """Whether :meth:`wake_all` was called: waits return at once from then on."""
        return self._closing

    def wake_all(self) -> None:
        """Shutdown: end every wait now and make later waits return at once."""
        self._closing = True
        for waiter in list(self._waiting):
            _resolve(waiter)

    @staticmethod
    def notify(partitions: Iterable[Partition]) -> None:
        for part in partitions:
            part.notify_waiters()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
