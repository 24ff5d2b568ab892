"""``__transaction_state``: where the transaction coordinator keeps its state.

A transactional id belongs to partition ``abs(hash(transactional_id)) % partitions`` (Java's
``String.hashCode``, as Kafka places it), an owner of two-phase decisions to
``abs(hash(owner)) % partitions``. The topic is compacted, created on the first
transactional request with ``transaction.state.log.num.partitions`` partitions and
``transaction.state.log.segment.bytes`` segments; an existing topic keeps its partition count.
Records: :mod:`~spark_mq.broker.txn.records`.

Every change of a transaction's state is appended here before it takes effect
(:meth:`TransactionStateTopic.append` raises if it cannot be written, and the coordinator then
changes nothing). On one node an append is acknowledged once it is in the log (the page
cache), as the group coordinator's are: a killed broker process loses nothing, a power cut
what the OS had not written, as with ``acks=1`` in Kafka.

In a cluster an append is ``acks=all``, as Kafka's: refused while the partition's ISR is
below ``min.insync.replicas``, and a request is answered only once the high watermark passed
what it appended (:meth:`TransactionStateTopic.wait_replicated`); :meth:`durable` tells the
coordinator whether a transaction's last record is replicated yet (its markers wait for
that, so that no marker is written for a decision a new leader might not have). Each
partition is loaded alone when this broker becomes its leader (:meth:`load_partition`).

Threads: :meth:`ensure` and :meth:`load` block (topic creation fsyncs, loading reads the
whole topic) and run on an executor thread; :meth:`append` runs on the event loop, never at
the same time as a load.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Final

from spark_mq.broker.coordinator_topic import CoordinatorTopic, Record, coordinator_partition
from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.broker.txn.log_reader import read_batches
from spark_mq.broker.txn.records import (
    Decision,
    DecisionKey,
    OwnerKey,
    TxnKey,
    decode_decision,
    decode_key,
    decode_txn_value,
)
from spark_mq.broker.txn.state import TxnMetadata
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    CorruptRecordError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.record_batch import encode_batch

logger = logging.getLogger("spark_mq.broker.txn")

#: How much of a partition one read returns while loading (Kafka's
#: transaction.state.log.load.buffer.size).
LOAD_BUFFER_BYTES: Final = 5 * 1024 * 1024


def partition_for(key: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (or of an owner)."""
    return coordinator_partition(key, partitions)


@dataclasses.dataclass
class LoadedTransactions:
    """Everything ``__transaction_state`` holds: the newest record per key."""

    txns: dict[str, TxnMetadata] = dataclasses.field(default_factory=dict)
    owners: dict[str, Decision] = dataclasses.field(default_factory=dict)
    decisions: dict[str, Decision] = dataclasses.field(default_factory=dict)
    records: int = 0
    #: Records that did not decode, or of a key version this broker does not know.
    skipped: int = 0

    def apply(self, key: bytes, value: bytes | None) -> None:
        self.records += 1
        try:
            decoded = decode_key(key)
            if isinstance(decoded, TxnKey):
                if value is None:
                    self.txns.pop(decoded.transactional_id, None)
                else:
                    tid = decoded.transactional_id
                    self.txns[tid] = decode_txn_value(tid, value)
            elif isinstance(decoded, OwnerKey | DecisionKey):
                table = self.owners if isinstance(decoded, OwnerKey) else self.decisions
                name = decoded.owner if isinstance(decoded, OwnerKey) else decoded.decision_id
                if value is None:
                    table.pop(name, None)
                else:
                    table[name] = decode_decision(value)
            else:
                self.skipped += 1
                logger.warning("skipping a __transaction_state record of an unknown key version")
        except CorruptRecordError as exc:
            # One bad record must not keep every other transactional id from loading.
            self.skipped += 1
            logger.error("skipping a __transaction_state record that does not decode: %s", exc)


class TransactionStateTopic(CoordinatorTopic):
    """``__transaction_state``, through the broker's partitions."""

    def __init__(
        self,
        replicas: ReplicaManager,
        config: TxnConfig,
        *,
        partition_count: Callable[[], int | None] | None = None,
    ) -> None:
        super().__init__(
            replicas,
            TRANSACTION_STATE_TOPIC,
            num_partitions=config.transaction_state_log_num_partitions,
            segment_bytes=config.transaction_state_log_segment_bytes,
        )
        self.config = config
        #: A cluster's partition count of the topic (the controller's metadata), None
        #: while unknown; None on one node, where :meth:`ensure` finds it.
        self._cluster_count = partition_count if replicas.cluster else None
        #: The offset after the last record this broker appended, per partition: what the
        #: high watermark must pass before that record counts as written (acks=all).
        self.appended_end: dict[int, int] = {}

    @property
    def ready(self) -> bool:
        if self.replicas.cluster:
            return True  # the controller creates the topic; a partition is loaded alone
        return super().ready

    @property
    def partition_count(self) -> int:
        if not self.replicas.cluster:
            return super().partition_count
        known = self._cluster_count() if self._cluster_count is not None else None
        # As Kafka's getTransactionTopicPartitionCount: the topic's count when the cluster
        # knows it, else the count the topic is created with.
        return known or self.config.transaction_state_log_num_partitions

    def append(self, key: str, records: Sequence[Record], now_ms: int) -> None:
        """Append ``records`` as one batch to the partition of ``key`` (all or nothing); in a
        cluster refused unless this broker leads it with ``min.insync.replicas`` in sync.
        The batch's end is kept for :meth:`durable` and :meth:`wait_replicated`."""
        if not records:
            return
        index = self.partition_for(key)
        part = self.replicas.partition(self.name, index)
        keys = binary_array([k for k, _ in records])
        values = binary_array([v for _, v in records])
        acks = -1 if self.replicas.cluster else 1
        info = part.append(encode_batch(values, key=keys, now_ms=now_ms), required_acks=acks)
        self.appended_end[index] = info.last_offset + 1
        self.replicas.notify([part])

    def durable(self, key: str) -> bool:
        """Whether every record this broker appended to the partition of ``key`` is below
        its high watermark (on one node, always: the high watermark follows each append)."""
        index = self.partition_for(key)
        end = self.appended_end.get(index)
        if end is None:
            return True
        part = self.replicas.cached(self.name, index)
        return part is not None and part.high_watermark >= end

    async def wait_replicated(self, index: int, timeout_s: float) -> None:
        """Return once the high watermark of partition ``index`` passed every record this
        broker appended to it; the errors as Kafka's TransactionStateManager maps them:
        NOT_COORDINATOR when this broker no longer leads the partition,
        COORDINATOR_NOT_AVAILABLE when the in-sync replicas did not all get the records
        in time (both retriable: the client finds the coordinator again and retries)."""
        end = self.appended_end.get(index)
        if end is None:
            return
        try:
            part = self.replicas.partition(self.name, index)
            if part.high_watermark < end:
                await self.replicas.purgatory.wait((self.name, index), end, timeout_s)
            part.check_enough_replicas(after_append=True)
        except NotLeaderOrFollowerError as exc:
            raise NotCoordinatorError(
                f"this broker no longer leads {self.name}-{index}, where the transaction's "
                f"state was written ({exc}); find the coordinator again and retry"
            ) from exc
        except (
            UnknownTopicOrPartitionError,
            RequestTimedOutError,
            NotEnoughReplicasError,
            NotEnoughReplicasAfterAppendError,
        ) as exc:
            raise CoordinatorNotAvailableError(
                f"the transaction's state written to {self.name}-{index} is not on every "
                f"in-sync replica yet ({exc}); retry"
            ) from exc

    def load(self) -> LoadedTransactions:
        """Read every partition from its start to its high watermark. Blocking."""
        loaded = LoadedTransactions()
        if not self.logs.topic_exists(TRANSACTION_STATE_TOPIC):
            return loaded
        self.ensure()
        for index in range(self.partition_count):
            log = self.logs.get_log(TRANSACTION_STATE_TOPIC, index)
            for batch in read_batches(log, LOAD_BUFFER_BYTES):
                for key, value in batch.records:
                    if key is None:
                        loaded.skipped += 1
                        continue
                    loaded.apply(key, value)
        return loaded

    def load_partition(self, index: int) -> LoadedTransactions:
        """Read partition ``index`` from its start to its log end (a newly elected leader's
        log is what its followers truncate to, even past the high watermark). Blocking."""
        loaded = LoadedTransactions()
        log = self.logs.get_log(TRANSACTION_STATE_TOPIC, index)
        self.appended_end[index] = log.log_end_offset
        for batch in read_batches(log, LOAD_BUFFER_BYTES, to_log_end=True):
            for key, value in batch.records:
                if key is None:
                    loaded.skipped += 1
                    continue
                loaded.apply(key, value)
        return loaded
