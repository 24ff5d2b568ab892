"""The Python clients: :class:`Producer`, :class:`Consumer` and :class:`Admin`.

Modules, one concept each: ``records`` (value types), ``config`` (settings), ``connection``
(one broker connection), ``cluster`` (metadata and routing), ``partitioner``,
``accumulator`` / ``sender`` / ``futures`` / ``interceptors`` (the producer's parts),
``transactions`` / ``txn_manager`` (transactions: types, state machine, coordinator
requests), ``subscription_state`` / ``fetcher`` / ``offset_lookup`` (the consumer's parts),
``group/`` (consumer groups: membership, heartbeats, rebalances, commits), ``assignors/``,
``admin`` (with ``txn_admin``) and ``errors``. ``docs/clients.md`` describes settings,
threads and guarantees.
"""

from spark_mq.client.admin import Admin
from spark_mq.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from spark_mq.client.consumer import Consumer
from spark_mq.client.descriptions import PartitionDescription, TopicDescription
from spark_mq.client.errors import (
    BufferExhaustedError,
    CommitFailedError,
    DeliveryTimeoutError,
    NoOffsetForPartitionError,
)
from spark_mq.client.futures import BatchMetadata, FutureBatchMetadata, FutureRecordMetadata
from spark_mq.client.group import (
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    OffsetAndMetadata,
)
from spark_mq.client.group.admin_groups import (
    GroupDescription,
    GroupListing,
    MemberDescription,
    PartitionLag,
)
from spark_mq.client.interceptors import ProducerRecord
from spark_mq.client.producer import Producer
from spark_mq.client.records import (
    CONSUMER_SCHEMA,
    ConsumerRecord,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)
from spark_mq.client.transactions import (
    CompletionResult,
    PreparedTransaction,
    TransactionDescription,
    TransactionListing,
    TxnState,
)

__all__ = [
    "CONSUMER_SCHEMA",
    "Admin",
    "AdminConfig",
    "BatchMetadata",
    "BufferExhaustedError",
    "CommitFailedError",
    "CompletionResult",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "DeliveryTimeoutError",
    "FutureBatchMetadata",
    "FutureRecordMetadata",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionDescription",
    "PartitionLag",
    "PreparedTransaction",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "TxnState",
]
