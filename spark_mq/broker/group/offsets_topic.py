"""``__consumer_offsets``: where groups and their committed offsets are kept, and which of its
partitions coordinates a group.

A group belongs to partition ``abs(hash(group_id)) % partitions`` (Java's ``String.hashCode``
and Kafka's ``Utils.abs``, so a group lands on the same partition number as in Kafka), and
the leader of that partition is the group's coordinator: on one node, this broker. Every
record of the group (its metadata and its offsets, see :mod:`~spark_mq.broker.group.records`)
goes to that partition, so loading one partition rebuilds every group it coordinates.

The topic is created on the first group request, compacted (``cleanup.policy=compact``) with
``offsets.topic.num.partitions`` partitions and ``offsets.topic.segment.bytes`` segments; an
existing topic keeps the partition count it has (changing it would move groups). Metadata
reports it as internal.

Threads: :meth:`OffsetsTopic.ensure` and :meth:`OffsetsTopic.load` block (topic creation
fsyncs, loading reads the whole topic) and run on an executor thread;
:meth:`OffsetsTopic.append` runs on the event loop (one small batch, page cache only, as the
produce path appends small requests), never at the same time as a load.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

from spark_mq.broker.coordinator_topic import CoordinatorTopic, Record, coordinator_partition
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.records import (
    GroupKey,
    GroupRecord,
    OffsetEntry,
    OffsetKey,
    TopicPartitionKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    publish_committed,
)
from spark_mq.broker.internal_topics import INTERNAL_TOPICS, OFFSETS_TOPIC
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn.log_reader import read_batches
from spark_mq.errors import CorruptRecordError
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_read import FetchIsolation
from spark_mq.storage.record_batch import ControlType, encode_batch

logger = logging.getLogger("spark_mq.broker.group")

# OFFSETS_TOPIC and INTERNAL_TOPICS live in spark_mq.broker.internal_topics (shared with the
# transaction coordinator); they are re-exported here for the group code and its tests.
__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "GroupStore", "LoadedGroups", "OffsetsTopic"]

#: How much of a partition one read returns while loading (Kafka's offsets.load.buffer.size).
LOAD_BUFFER_BYTES: Final = 5 * 1024 * 1024


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group."""
    return coordinator_partition(group_id, partitions)


class GroupStore(Protocol):
    """What the coordinator writes through (the real one is :class:`OffsetsTopic`)."""

    def append(self, group_id: str, records: Sequence[Record], now_ms: int) -> None: ...

    def append_transactional(
        self,
        group_id: str,
        records: Sequence[Record],
        *,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> None: ...

    def partition_for(self, group_id: str) -> int: ...


@dataclasses.dataclass
class LoadedGroups:
    """Everything ``__consumer_offsets`` holds: the newest record per key, tombstones
    applied."""

    groups: dict[str, GroupRecord] = dataclasses.field(default_factory=dict)
    offsets: dict[str, dict[TopicPartitionKey, OffsetEntry]] = dataclasses.field(
        default_factory=dict
    )
    #: Transactional offset commits whose transaction has no marker yet: group -> producer
    #: id -> offsets (a tombstone in a transaction is not supported and is skipped).
    pending: dict[str, dict[int, dict[TopicPartitionKey, OffsetEntry]]] = dataclasses.field(
        default_factory=dict
    )
    records: int = 0
    #: Records that did not decode, or of a key version this broker does not know.
    skipped: int = 0

    def apply_transactional(self, producer_id: int, key: bytes, value: bytes | None) -> None:
        """An offset record of producer ``producer_id``'s open transaction: kept aside until
        its marker (:meth:`apply_marker`)."""
        self.records += 1
        try:
            decoded = decode_key(key)
            if not isinstance(decoded, OffsetKey) or value is None:
                self.skipped += 1
                return
            tp = (decoded.topic, decoded.partition)
            by_producer = self.pending.setdefault(decoded.group_id, {})
            by_producer.setdefault(producer_id, {})[tp] = decode_offset_value(value)
        except CorruptRecordError as exc:
            self.skipped += 1
            logger.error("skipping a transactional __consumer_offsets record: %s", exc)

    def apply_marker(self, producer_id: int, committed: bool) -> None:
        """The marker of ``producer_id``'s transaction: publish (commit) or drop (abort) the
        offsets it committed (each only over an offset written before it)."""
        for group_id in list(self.pending):
            staged = self.pending[group_id].pop(producer_id, None)
            if not self.pending[group_id]:
                del self.pending[group_id]
            if staged and committed:
                publish_committed(self.offsets.setdefault(group_id, {}), staged)

    def apply(self, key: bytes, value: bytes | None) -> None:
        self.records += 1
        try:
            decoded = decode_key(key)
            if isinstance(decoded, OffsetKey):
                tp = (decoded.topic, decoded.partition)
                if value is not None:
                    entry = decode_offset_value(value)
                    self.offsets.setdefault(decoded.group_id, {})[tp] = entry
                elif decoded.group_id in self.offsets:
                    per_group = self.offsets[decoded.group_id]
                    per_group.pop(tp, None)
                    if not per_group:
                        del self.offsets[decoded.group_id]
            elif isinstance(decoded, GroupKey):
                if value is None:
                    self.groups.pop(decoded.group_id, None)
                else:
                    self.groups[decoded.group_id] = decode_group_value(value)
            else:
                self.skipped += 1
                logger.warning("skipping a __consumer_offsets record of an unknown key version")
        except CorruptRecordError as exc:
            # One bad record must not keep every group of the partition from loading; the
            # next commit of that key rewrites it.
            self.skipped += 1
            logger.error("skipping a __consumer_offsets record that does not decode: %s", exc)


class _ToLogEnd:
    """A partition's log seen up to its log end instead of its high watermark: a broker
    that just became the partition's leader loads everything it has (Kafka's loader reads
    to the log end), because its high watermark may still lag the old leader's, which
    already covered commits it acknowledged."""

    def __init__(self, log: PartitionLog) -> None:
        self._log = log

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._log.log_end_offset

    def read(self, position: int, max_bytes: int) -> Any:
        return self._log.read(position, max_bytes, isolation=FetchIsolation.LOG_END)

    def read_records_with_next(self, position: int, max_bytes: int) -> Any:
        return self._log.read_records_with_next(
            position, max_bytes, isolation=FetchIsolation.LOG_END
        )


class OffsetsTopic(CoordinatorTopic):
    """``__consumer_offsets``, through the broker's partitions.

    On a cluster broker (``cluster_partition_count`` given) the topic is the controller's:
    its partition count is the cluster's (as the broker's metadata knows it), it is never
    created here, and records are appended as acks=all appends are (refused while the ISR
    is below ``min.insync.replicas``); the service waits for the high watermark.
    """

    def __init__(
        self,
        replicas: ReplicaManager,
        config: GroupConfig,
        *,
        cluster_partition_count: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(
            replicas,
            OFFSETS_TOPIC,
            num_partitions=config.offsets_topic_num_partitions,
            segment_bytes=config.offsets_topic_segment_bytes,
        )
        self.config = config
        self._cluster_partition_count = cluster_partition_count

    @property
    def partition_count(self) -> int:
        if self._cluster_partition_count is not None:
            return self._cluster_partition_count()
        return super().partition_count

    def append(self, key: str, records: Sequence[Record], now_ms: int) -> None:
        if self._cluster_partition_count is None:
            super().append(key, records, now_ms)
            return
        if not records:
            return
        part = self.replicas.partition(OFFSETS_TOPIC, self.partition_for(key))
        keys = binary_array([k for k, _ in records])
        values = binary_array([v for _, v in records])
        part.append(encode_batch(values, key=keys, now_ms=now_ms), required_acks=-1)
        self.replicas.notify([part])

    def append_transactional(
        self,
        group_id: str,
        records: Sequence[Record],
        *,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> None:
        """Append offset ``records`` as one *transactional* batch of the producer (Kafka's
        TxnOffsetCommit): invisible until the transaction's marker is written to this
        partition, dropped by an abort marker, replayed that way on load."""
        if not records:
            return
        part = self.replicas.partition(OFFSETS_TOPIC, self.partition_for(group_id))
        keys = binary_array([k for k, _ in records])
        values = binary_array([v for _, v in records])
        batch = encode_batch(
            values,
            key=keys,
            now_ms=now_ms,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
        )
        part.append(batch, required_acks=-1 if self._cluster_partition_count else 1)
        self.replicas.notify([part])

    def load(self) -> LoadedGroups:
        """Read every partition from its start to its high watermark. Blocking."""
        loaded = LoadedGroups()
        if not self.logs.topic_exists(OFFSETS_TOPIC):
            return loaded
        self.ensure()
        for index in range(self.partition_count):
            _read_into(loaded, self.logs.get_log(OFFSETS_TOPIC, index))
        return loaded

    def load_partition(self, index: int) -> LoadedGroups:
        """Read one partition from its start to its log end (a cluster broker that became
        its leader). Blocking."""
        loaded = LoadedGroups()
        _read_into(loaded, _ToLogEnd(self.logs.get_log(OFFSETS_TOPIC, index)))
        return loaded


def _read_into(loaded: LoadedGroups, log: Any) -> None:
    # Batch by batch, headers included: transactional offset commits are kept aside until
    # their producer's marker publishes or drops them.
    for batch in read_batches(log, LOAD_BUFFER_BYTES):
        header = batch.header
        if batch.marker is not None:
            loaded.apply_marker(header.producer_id, batch.marker.type is ControlType.COMMIT)
            continue
        for key, value in batch.records:
            if key is None:
                loaded.skipped += 1
            elif header.is_transactional:
                loaded.apply_transactional(header.producer_id, key, value)
            else:
                loaded.apply(key, value)
