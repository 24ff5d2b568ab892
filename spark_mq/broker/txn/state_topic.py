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

Threads: :meth:`ensure` and :meth:`load` block (topic creation fsyncs, loading reads the
whole topic) and run on an executor thread; :meth:`append` runs on the event loop, never at
the same time as a load.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Final

from spark_mq.broker.coordinator_topic import CoordinatorTopic, coordinator_partition
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
from spark_mq.errors import CorruptRecordError

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

    def __init__(self, replicas: ReplicaManager, config: TxnConfig) -> None:
        super().__init__(
            replicas,
            TRANSACTION_STATE_TOPIC,
            num_partitions=config.transaction_state_log_num_partitions,
            segment_bytes=config.transaction_state_log_segment_bytes,
        )
        self.config = config

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
