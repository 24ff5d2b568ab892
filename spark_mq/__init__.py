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
from spark_mq.errors import (
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
from spark_mq.version import __version__


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
    "BatchMetadata",
    "BufferExhaustedError",
    "CleanerStats",
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
    "TransactionListing",
    "TransactionalIdNotFoundError",
    "UnknownTopicOrPartitionError",
    "UsageError",
    "__version__",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "register",
]
