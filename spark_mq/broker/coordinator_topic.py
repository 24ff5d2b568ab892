"""What the coordinators' internal topics share: which partition a key belongs to, creating
the compacted topic on first use, and appending a coordinator's records as one batch.

``__consumer_offsets`` (:class:`~spark_mq.broker.group.offsets_topic.OffsetsTopic`) and
``__transaction_state`` (:class:`~spark_mq.broker.txn.state_topic.TransactionStateTopic`)
subclass :class:`CoordinatorTopic` and add their own loading. A key (group id, transactional
id) belongs to partition ``abs(hash(key)) % partitions`` with Java's ``String.hashCode`` and
Kafka's ``Utils.abs``, so it lands on the same partition number as in Kafka; the leader of
that partition is the key's coordinator (on one node, this broker).

Threads: :meth:`CoordinatorTopic.ensure` blocks (topic creation fsyncs) and runs on an
executor thread; :meth:`CoordinatorTopic.append` runs on the event loop (one small batch,
page cache only), never at the same time as a load.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.errors import CoordinatorNotAvailableError, TopicExistsError
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.record_batch import encode_batch

logger = logging.getLogger(__name__)

#: (key, value) of one record; a None value is a tombstone.
Record = tuple[bytes, bytes | None]


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    in 32-bit two's complement."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Integer.MIN_VALUE`` maps to 0 (Java's ``Math.abs`` would
    leave it negative)."""
    return 0 if n == -(2**31) else abs(n)


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of a coordinator topic that ``key`` belongs to."""
    return kafka_abs(java_string_hashcode(key)) % partitions


class CoordinatorTopic:
    """A compacted internal topic, through the broker's partitions (so appends move the high
    watermark and wake fetches, as any append does)."""

    def __init__(
        self, replicas: ReplicaManager, name: str, *, num_partitions: int, segment_bytes: int
    ) -> None:
        self.replicas = replicas
        self.logs = replicas.logs
        self.name = name
        self._num_partitions = num_partitions
        self._segment_bytes = segment_bytes
        self._partitions: int | None = None

    @property
    def ready(self) -> bool:
        return self._partitions is not None

    @property
    def partition_count(self) -> int:
        if self._partitions is None:
            raise CoordinatorNotAvailableError(
                f"{self.name} is not ready yet (the coordinator is starting); retry"
            )
        return self._partitions

    def partition_for(self, key: str) -> int:
        return coordinator_partition(key, self.partition_count)

    def ensure(self) -> int:
        """Create the topic if it does not exist; its partition count. An existing topic
        keeps the partition count it has (changing it would move keys). Blocking."""
        if not self.logs.topic_exists(self.name):
            configs = {
                "cleanup.policy": "compact",
                "segment.bytes": str(self._segment_bytes),
                "compression.type": "producer",
            }
            # A racing creator (there is none on one node, but it would be as good) wins.
            with contextlib.suppress(TopicExistsError):
                self.logs.create_topic(self.name, self._num_partitions, configs)
                logger.info("created %s with %d partitions", self.name, self._num_partitions)
        info = self.logs.describe_topic(self.name)
        if info.config.cleanup_policy != ("compact",) and self._partitions is None:
            # Someone made it by hand (or by auto-creation) before the coordinator did, or
            # gave it 'delete' before the broker refused that.
            logger.warning(
                "%s has cleanup.policy=%s instead of compact: retention may delete the "
                "coordinator's live records; set it with: spark-mq topics alter %s "
                "--config cleanup.policy=compact",
                self.name,
                ",".join(info.config.cleanup_policy),
                self.name,
            )
        self._partitions = info.partition_count
        return self._partitions

    def append(self, key: str, records: Sequence[Record], now_ms: int) -> None:
        """Append ``records`` as one batch to the partition of ``key`` (all or nothing)."""
        if not records:
            return
        part = self.replicas.partition(self.name, self.partition_for(key))
        keys = binary_array([k for k, _ in records])
        values = binary_array([v for _, v in records])
        part.append(encode_batch(values, key=keys, now_ms=now_ms))
        self.replicas.notify([part])
