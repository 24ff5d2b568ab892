"""spark_mq: a Kafka-style partitioned commit log in Python, with a PySpark source and sink.

The storage engine is usable on its own::

    >>> import tempfile, pyarrow as pa
    >>> from spark_mq import LogManager, encode_batch
    >>> with LogManager(tempfile.mkdtemp()) as logs:
    ...     _ = logs.create_topic("events", partitions=2, config={"retention.ms": 3_600_000})
    ...     log = logs.get_log("events", 0)
    ...     batch = encode_batch(pa.array([b"hello", b"world"]), key=pa.array([b"k1", b"k2"]))
    ...     _ = log.append(batch)
    ...     log.read_records(0).column("value").to_pylist()
    [b'hello', b'world']

The broker, clients and Spark integration build on this layer (see ``docs/``).
"""

import importlib
from typing import TYPE_CHECKING

from spark_mq.version import __version__

if TYPE_CHECKING:
    from spark_mq.client import (
        CONSUMER_SCHEMA,
        Admin,
        AdminConfig,
        BatchMetadata,
        BufferExhaustedError,
        CommitFailedError,
        CompletionResult,
        Consumer,
        ConsumerConfig,
        ConsumerGroupMetadata,
        ConsumerRebalanceListener,
        ConsumerRecord,
        DeliveryTimeoutError,
        FutureBatchMetadata,
        FutureRecordMetadata,
        GroupDescription,
        GroupListing,
        MemberDescription,
        NoOffsetForPartitionError,
        OffsetAndMetadata,
        OffsetAndTimestamp,
        PartitionDescription,
        PartitionLag,
        PreparedTransaction,
        Producer,
        ProducerConfig,
        ProducerRecord,
        RecordMetadata,
        TopicDescription,
        TopicPartition,
        TransactionDescription,
        TransactionListing,
    )
    from spark_mq.client.half_messages import (
        LocalTransactionState,
        TransactionalMessage,
        TransactionalMessageProducer,
        TransactionListener,
        TransactionSendResult,
    )
    from spark_mq.client.quota_admin import ClientQuotaAlteration, ClientQuotaEntity
    from spark_mq.client.scram_users import (
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    from spark_mq.errors import (
        AuthenticationError,
        ConfigError,
        CorruptCheckpointError,
        CorruptIndexError,
        CorruptRecordError,
        InvalidPartitionsError,
        InvalidProducerEpochError,
        InvalidRecordError,
        InvalidTopicError,
        InvalidTxnStateError,
        LogClosedError,
        LogDirectoryFullError,
        LogDirectoryLockedError,
        LogDirectoryNotFoundError,
        OffsetOutOfRangeError,
        OutOfOrderSequenceError,
        OwnerInstanceConflictError,
        ProducerFencedError,
        ProducerStateError,
        ProtocolError,
        RecordTooLargeError,
        SparkMQError,
        StorageError,
        TopicExistsError,
        TransactionAbortableError,
        TransactionalIdNotFoundError,
        TransactionCoordinatorFencedError,
        UnknownTopicOrPartitionError,
        UsageError,
    )
    from spark_mq.storage.batch_decoder import decode_records
    from spark_mq.storage.log import FetchDataInfo, FetchIsolation, LogAppendInfo, PartitionLog
    from spark_mq.storage.log_cleaner import CleanerStats, LogCleaner
    from spark_mq.storage.log_config import LogConfig
    from spark_mq.storage.log_manager import LogManager
    from spark_mq.storage.record_batch import (
        RECORD_SCHEMA,
        ControlType,
        TimestampType,
        encode_batch,
        encode_control_batch,
    )

#: The module each public name comes from, imported when the name is first used (PEP 562).
#: ``import spark_mq`` imports nothing else, so the broker, which runs this file first like
#: every module of the package, does not load the clients just by being imported, nor does a
#: client load the log cleaner. ``tests/test_public_api.py`` checks this table against the
#: imports above (read by type checkers) and ``__all__``.
_HOMES: dict[str, str] = {
    "LocalTransactionState": "spark_mq.client.half_messages",
    "TransactionListener": "spark_mq.client.half_messages",
    "TransactionSendResult": "spark_mq.client.half_messages",
    "TransactionalMessage": "spark_mq.client.half_messages",
    "TransactionalMessageProducer": "spark_mq.client.half_messages",
    # SASL users and authentication.
    "AuthenticationError": "spark_mq.errors",
    "UserScramCredentialDeletion": "spark_mq.client.scram_users",
    "UserScramCredentialUpsertion": "spark_mq.client.scram_users",
    # Client quotas.
    "ClientQuotaAlteration": "spark_mq.client.quota_admin",
    "ClientQuotaEntity": "spark_mq.client.quota_admin",
    "Admin": "spark_mq.client",
    "AdminConfig": "spark_mq.client",
    "BatchMetadata": "spark_mq.client",
    "BufferExhaustedError": "spark_mq.client",
    "CONSUMER_SCHEMA": "spark_mq.client",
    "CleanerStats": "spark_mq.storage.log_cleaner",
    "CommitFailedError": "spark_mq.client",
    "CompletionResult": "spark_mq.client",
    "ConfigError": "spark_mq.errors",
    "Consumer": "spark_mq.client",
    "ConsumerConfig": "spark_mq.client",
    "ConsumerGroupMetadata": "spark_mq.client",
    "ConsumerRebalanceListener": "spark_mq.client",
    "ConsumerRecord": "spark_mq.client",
    "ControlType": "spark_mq.storage.record_batch",
    "CorruptCheckpointError": "spark_mq.errors",
    "CorruptIndexError": "spark_mq.errors",
    "CorruptRecordError": "spark_mq.errors",
    "DeliveryTimeoutError": "spark_mq.client",
    "FetchDataInfo": "spark_mq.storage.log",
    "FetchIsolation": "spark_mq.storage.log",
    "FutureBatchMetadata": "spark_mq.client",
    "FutureRecordMetadata": "spark_mq.client",
    "GroupDescription": "spark_mq.client",
    "GroupListing": "spark_mq.client",
    "InvalidPartitionsError": "spark_mq.errors",
    "InvalidProducerEpochError": "spark_mq.errors",
    "InvalidRecordError": "spark_mq.errors",
    "InvalidTopicError": "spark_mq.errors",
    "InvalidTxnStateError": "spark_mq.errors",
    "LogAppendInfo": "spark_mq.storage.log",
    "LogCleaner": "spark_mq.storage.log_cleaner",
    "LogClosedError": "spark_mq.errors",
    "LogConfig": "spark_mq.storage.log_config",
    "LogDirectoryFullError": "spark_mq.errors",
    "LogDirectoryLockedError": "spark_mq.errors",
    "LogDirectoryNotFoundError": "spark_mq.errors",
    "LogManager": "spark_mq.storage.log_manager",
    "MemberDescription": "spark_mq.client",
    "NoOffsetForPartitionError": "spark_mq.client",
    "OffsetAndMetadata": "spark_mq.client",
    "OffsetAndTimestamp": "spark_mq.client",
    "OffsetOutOfRangeError": "spark_mq.errors",
    "OutOfOrderSequenceError": "spark_mq.errors",
    "OwnerInstanceConflictError": "spark_mq.errors",
    "PartitionDescription": "spark_mq.client",
    "PartitionLag": "spark_mq.client",
    "PartitionLog": "spark_mq.storage.log",
    "PreparedTransaction": "spark_mq.client",
    "Producer": "spark_mq.client",
    "ProducerConfig": "spark_mq.client",
    "ProducerFencedError": "spark_mq.errors",
    "ProducerRecord": "spark_mq.client",
    "ProducerStateError": "spark_mq.errors",
    "ProtocolError": "spark_mq.errors",
    "RECORD_SCHEMA": "spark_mq.storage.record_batch",
    "RecordMetadata": "spark_mq.client",
    "RecordTooLargeError": "spark_mq.errors",
    "SparkMQError": "spark_mq.errors",
    "StorageError": "spark_mq.errors",
    "TimestampType": "spark_mq.storage.record_batch",
    "TopicDescription": "spark_mq.client",
    "TopicExistsError": "spark_mq.errors",
    "TopicPartition": "spark_mq.client",
    "TransactionAbortableError": "spark_mq.errors",
    "TransactionCoordinatorFencedError": "spark_mq.errors",
    "TransactionDescription": "spark_mq.client",
    "TransactionListing": "spark_mq.client",
    "TransactionalIdNotFoundError": "spark_mq.errors",
    "UnknownTopicOrPartitionError": "spark_mq.errors",
    "UsageError": "spark_mq.errors",
    "decode_records": "spark_mq.storage.batch_decoder",
    "encode_batch": "spark_mq.storage.record_batch",
    "encode_control_batch": "spark_mq.storage.record_batch",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'spark_mq' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later uses find it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


def register(spark: object) -> None:
    """Register the ``spark_mq`` format with a SparkSession (``spark.dataSource.register``).

    Not needed when this package is installed: Spark 4 finds the format through the
    top-level module ``pyspark_spark_mq``. pyspark is imported only here, so ``import
    spark_mq`` works without it.
    """
    from spark_mq.datasource import SparkMQDataSource  # noqa: PLC0415 (keeps pyspark optional)

    spark.dataSource.register(SparkMQDataSource)  # type: ignore[attr-defined]


__all__ = [
    "CONSUMER_SCHEMA",
    "RECORD_SCHEMA",
    "Admin",
    "AdminConfig",
    "AuthenticationError",
    "BatchMetadata",
    "BufferExhaustedError",
    "CleanerStats",
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "CommitFailedError",
    "CompletionResult",
    "ConfigError",
    "Consumer",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ControlType",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptRecordError",
    "DeliveryTimeoutError",
    "FetchDataInfo",
    "FetchIsolation",
    "FutureBatchMetadata",
    "FutureRecordMetadata",
    "GroupDescription",
    "GroupListing",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTopicError",
    "InvalidTxnStateError",
    "LocalTransactionState",
    "LogAppendInfo",
    "LogCleaner",
    "LogClosedError",
    "LogConfig",
    "LogDirectoryFullError",
    "LogDirectoryLockedError",
    "LogDirectoryNotFoundError",
    "LogManager",
    "MemberDescription",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "OwnerInstanceConflictError",
    "PartitionDescription",
    "PartitionLag",
    "PartitionLog",
    "PreparedTransaction",
    "Producer",
    "ProducerConfig",
    "ProducerFencedError",
    "ProducerRecord",
    "ProducerStateError",
    "ProtocolError",
    "RecordMetadata",
    "RecordTooLargeError",
    "SparkMQError",
    "StorageError",
    "TimestampType",
    "TopicDescription",
    "TopicExistsError",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TransactionDescription",
    "TransactionListener",
    "TransactionListing",
    "TransactionSendResult",
    "TransactionalIdNotFoundError",
    "TransactionalMessage",
    "TransactionalMessageProducer",
    "UnknownTopicOrPartitionError",
    "UsageError",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "__version__",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "register",
]
