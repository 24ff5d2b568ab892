"""Where the half-message service keeps its records: the layout of one node and of a cluster.

One node (docs/half_messages.md, "Where it is kept"): the half records in ``__half_messages``
and their ops in ``__half_ops``, one partition each, created on the first half message.

A cluster ("On a cluster"): ``__half_messages`` only, partitioned by producer group
(``abs(hashCode(group)) % partitions``, as ``__consumer_offsets`` by consumer group), created
by the first FindCoordinator of key type 2. A message's op is kept in the same partition as
its record, under :data:`OP_KEY_PREFIX` and the message id, so that one leader holds a
group's whole state and one log orders its writes (two topics would have two leaders, which
the controller may elect on different brokers). Appends go to the partition this broker
leads; :meth:`HalfLog.replicated` waits until they are on every in-sync replica (acks=all).

:class:`HalfLog` hides the difference from the service: it appends records and ops, reads a
partition back (to its log end on a cluster: a newly elected leader's high watermark may lag
what its in-sync replicas all have), and waits for replication.

Threads: appends and waits on the event loop; ``*_blocking`` and :meth:`HalfLog.read` on an
executor thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Final

from spark_mq.broker.coordinator_topic import CoordinatorTopic, coordinator_partition
from spark_mq.broker.half.config import HalfMessageConfig
from spark_mq.broker.half.expiry import tombstone_batches
from spark_mq.broker.half.records import HalfOp, HalfRecord, decode_op, decode_record
from spark_mq.broker.internal_topics import HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC
from spark_mq.broker.metadata_cache import MetadataSnapshot
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn.log_reader import read_batches
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.record_batch import encode_batch

#: Where messages go after their last check went unanswered (RocketMQ's
#: ``TRANS_CHECK_MAX_TIME_TOPIC``). An ordinary topic, kept until an operator deletes it.
DISCARD_TOPIC: Final = "__half_discarded"
#: On a cluster, a message's op is kept in its record's ``__half_messages`` partition, under
#: this prefix and the message id.
OP_KEY_PREFIX: Final = "op:"
#: How much of a partition one read returns while loading.
LOAD_BUFFER_BYTES: Final = 5 * 1024 * 1024
#: How long a cluster write waits for every in-sync replica (Kafka's request.timeout.ms).
REPLICATION_TIMEOUT_S: Final = 30.0


@dataclasses.dataclass
class LoadedHalfMessages:
    """What the two topics hold, newest value per key; ``ops`` in the order of their newest
    op (so ended messages come in the order they ended)."""

    records: dict[str, HalfRecord] = dataclasses.field(default_factory=dict)
    ops: dict[str, HalfOp] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class LoadedPartition:
    """One ``__half_messages`` partition as a cluster broker read it, and its log end."""

    messages: LoadedHalfMessages
    log_end: int


class HalfLog:
    """The service's topics on one node or a cluster (see the module docstring)."""

    def __init__(
        self,
        config: HalfMessageConfig,
        replicas: ReplicaManager,
        metadata: Callable[[], MetadataSnapshot] | None,
    ) -> None:
        self.replicas = replicas
        self.cluster = replicas.cluster
        self._metadata = metadata
        segment = config.transaction_half_log_segment_bytes
        self.halves = CoordinatorTopic(
            replicas, HALF_MESSAGES_TOPIC, num_partitions=1, segment_bytes=segment
        )
        self.ops = CoordinatorTopic(
            replicas, HALF_OPS_TOPIC, num_partitions=1, segment_bytes=segment
        )
        #: Per __half_messages partition: the end of what this broker appended (cluster).
        self.appended_end: dict[int, int] = {}

    def create_blocking(self) -> None:
        """Create the service's three topics (on the first half message, as the group and
        transaction coordinators create theirs on first use). Blocking."""
        for topic in (self.halves, self.ops):
            topic.ensure()
        self.ensure_discard_topic()

    def load_blocking(self) -> LoadedHalfMessages:
        loaded = LoadedHalfMessages()
        if not self.replicas.logs.topic_exists(HALF_MESSAGES_TOPIC):
            return loaded  # no half message was ever sent here
        self.create_blocking()
        # Batch by batch, keeping only the newest value of each key: memory is the live set.
        for record_key, value in self.read(HALF_MESSAGES_TOPIC):
            if value is None:
                loaded.records.pop(record_key, None)
            else:
                loaded.records[record_key] = decode_record(value)
        for record_key, value in self.read(HALF_OPS_TOPIC):
            # Moved to the end: the dict's order is that of each message's newest op.
            loaded.ops.pop(record_key, None)
            if value is not None:
                loaded.ops[record_key] = decode_op(value)
        return loaded

    def read(self, topic: str, index: int = 0) -> Iterator[tuple[str, bytes | None]]:
        log = self.replicas.logs.get_log(topic, index)
        # A newly elected leader reads to its log end: its high watermark may lag what its
        # in-sync replicas all have (as the group and transaction coordinators load).
        for batch in read_batches(log, LOAD_BUFFER_BYTES, to_log_end=self.cluster):
            for record_key, value in batch.records:
                if record_key is not None:
                    yield record_key.decode(), value

    def ensure_discard_topic(self) -> None:
        logs = self.replicas.logs
        if not logs.topic_exists(DISCARD_TOPIC):
            with contextlib.suppress(TopicExistsError):
                logs.create_topic(DISCARD_TOPIC, 1, {"retention.ms": "-1", "retention.bytes": "-1"})

    def index_of(self, group: str) -> int:
        """The ``__half_messages`` partition of ``group`` (0 on one node)."""
        if not self.cluster:
            return 0
        partitions = self._metadata().partitions(HALF_MESSAGES_TOPIC) if self._metadata else {}
        if not partitions:
            raise CoordinatorNotAvailableError(
                f"{HALF_MESSAGES_TOPIC} is not known to this broker yet (it is created on the "
                "first FindCoordinator with key type 2); retry"
            )
        return coordinator_partition(group, max(partitions) + 1)

    def load_partition_blocking(self, index: int) -> LoadedPartition:
        """Read partition ``index``: records under message ids, ops under OP_KEY_PREFIX."""
        loaded = LoadedHalfMessages()
        end = int(self.replicas.logs.get_log(HALF_MESSAGES_TOPIC, index).log_end_offset)
        for record_key, value in self.read(HALF_MESSAGES_TOPIC, index):
            if record_key.startswith(OP_KEY_PREFIX):
                message_id = record_key[len(OP_KEY_PREFIX) :]
                loaded.ops.pop(message_id, None)
                if value is not None:
                    loaded.ops[message_id] = decode_op(value)
            elif value is None:
                loaded.records.pop(record_key, None)
            else:
                loaded.records[record_key] = decode_record(value)
        return LoadedPartition(loaded, end)

    def append_record(self, group: str, message_id: str, value: bytes | None, now: int) -> None:
        """Append a half record (or its tombstone) where the message lives."""
        if not self.cluster:
            self.halves.append(message_id, [(message_id.encode(), value)], now)
            return
        self.append_here(self.index_of(group), [(message_id.encode(), value)], now)

    def append_op(self, group: str, message_id: str, value: bytes | None, now: int) -> None:
        """Append an op (or its tombstone): ``__half_ops`` on one node, the message's own
        ``__half_messages`` partition (under OP_KEY_PREFIX) on a cluster."""
        if not self.cluster:
            self.ops.append(message_id, [(message_id.encode(), value)], now)
            return
        key = (OP_KEY_PREFIX + message_id).encode()
        self.append_here(self.index_of(group), [(key, value)], now)

    def append_here(self, index: int, records: list[tuple[bytes, bytes | None]], now: int) -> None:
        part = self.replicas.partition(HALF_MESSAGES_TOPIC, index)
        keys = binary_array([k for k, _ in records])
        values = binary_array([v for _, v in records])
        info = part.append(encode_batch(values, key=keys, now_ms=now), required_acks=-1)
        self.replicas.notify([part])
        self.appended_end[index] = int(info.last_offset) + 1

    async def replicated(self, group: str) -> None:
        """On a cluster: return once every record this broker appended to the partition of
        ``group`` is on every in-sync replica (acks=all); NOT_COORDINATOR when this broker
        no longer leads it, COORDINATOR_NOT_AVAILABLE when the replicas did not all get it in
        time (both retriable: the producer finds the coordinator again and retries)."""
        if not self.cluster:
            return
        index = self.index_of(group)
        end = self.appended_end.get(index)
        if end is None:
            return
        try:
            part = self.replicas.partition(HALF_MESSAGES_TOPIC, index)
            if part.high_watermark < end:
                await self.replicas.purgatory.wait(
                    (HALF_MESSAGES_TOPIC, index), end, REPLICATION_TIMEOUT_S
                )
            part.check_enough_replicas(after_append=True)
        except NotLeaderOrFollowerError as exc:
            raise NotCoordinatorError(
                f"this broker no longer leads {HALF_MESSAGES_TOPIC}-{index}, where producer "
                f"group {group!r}'s half messages are kept ({exc}); find the coordinator again "
                "and retry"
            ) from exc
        except (
            UnknownTopicOrPartitionError,
            RequestTimedOutError,
            NotEnoughReplicasError,
            NotEnoughReplicasAfterAppendError,
        ) as exc:
            raise CoordinatorNotAvailableError(
                f"what was written to {HALF_MESSAGES_TOPIC}-{index} for producer group "
                f"{group!r} is not on every in-sync replica yet ({exc}); retry"
            ) from exc

    def tombstone_here(self, index: int, message_ids: list[str], now: int) -> None:
        """A cluster's expiry of ``message_ids`` in partition ``index``: their records'
        tombstones, then their ops'. One log orders them, so an op is never gone while its
        record is live (one node needs an fsync between its two topics for the same)."""
        segment_bytes = self.replicas.logs.get_log(HALF_MESSAGES_TOPIC, index).config.segment_bytes
        for batch in tombstone_batches(message_ids, segment_bytes):
            self.append_here(index, list(batch), now)
        op_keys = [OP_KEY_PREFIX + m for m in message_ids]
        for batch in tombstone_batches(op_keys, segment_bytes):
            self.append_here(index, list(batch), now)
