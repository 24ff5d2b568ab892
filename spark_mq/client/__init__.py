"""The Python clients: :class:`Producer`, :class:`Consumer` and :class:`Admin`.

Modules, one concept each: ``records`` (value types), ``config`` (settings), ``connection``
(one broker connection), ``cluster`` (metadata and routing), ``partitioner``,
``accumulator`` / ``sender`` / ``futures`` / ``interceptors`` (the producer's parts),
``subscription_state`` / ``fetcher`` / ``offset_lookup`` (the consumer's parts), ``admin``
and ``errors``. ``docs/clients.md`` describes settings, threads and guarantees.
"""

from spark_mq.client.admin import Admin, PartitionDescription, TopicDescription
from spark_mq.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from spark_mq.client.consumer import Consumer
from spark_mq.client.errors import (
    BufferExhaustedError,
    DeliveryTimeoutError,
    NoOffsetForPartitionError,
)
from spark_mq.client.futures import BatchMetadata, FutureBatchMetadata, FutureRecordMetadata
from spark_mq.client.interceptors import ProducerRecord
from spark_mq.client.producer import Producer
from spark_mq.client.records import (
    CONSUMER_SCHEMA,
    ConsumerRecord,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "CONSUMER_SCHEMA",
    "Admin",
    "AdminConfig",
    "BatchMetadata",
    "BufferExhaustedError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "DeliveryTimeoutError",
    "FutureBatchMetadata",
    "FutureRecordMetadata",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "PartitionDescription",
    "Producer",
    "ProducerConfig",
    "ProducerRecord",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]
