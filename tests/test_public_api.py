"""The public API is pinned: adding or removing a name must be a deliberate change here."""

import ast
import doctest
import subprocess
import sys
from pathlib import Path

import spark_mq
import spark_mq.client.admin
import spark_mq.client.config
import spark_mq.client.consumer
import spark_mq.client.futures
import spark_mq.client.group.heartbeat
import spark_mq.client.group.listener
import spark_mq.client.group.member_state
import spark_mq.client.group.offsets
import spark_mq.client.half_messages
import spark_mq.client.interceptors
import spark_mq.client.partitioner
import spark_mq.client.producer
import spark_mq.client.records
import spark_mq.client.subscription_state
import spark_mq.client.transactions
import spark_mq.config
import spark_mq.storage.batch_decoder
import spark_mq.storage.codecs
import spark_mq.storage.log
import spark_mq.storage.log_config
import spark_mq.storage.record_batch

EXPECTED = {
    "LocalTransactionState",
    "TransactionListener",
    "TransactionSendResult",
    "TransactionalMessage",
    "TransactionalMessageProducer",
    # SASL users and authentication.
    "AuthenticationError",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    # Client quotas.
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "CompletionResult",
    "PreparedTransaction",
    "ProducerFencedError",
    "TransactionAbortableError",
    "TransactionDescription",
    "TransactionListing",
    "TransactionalIdNotFoundError",
    "OwnerInstanceConflictError",
    "Admin",
    "AdminConfig",
    "BatchMetadata",
    "BufferExhaustedError",
    "CommitFailedError",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "OffsetAndMetadata",
    "PartitionLag",
    "CONSUMER_SCHEMA",
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
    "CleanerStats",
    "LogCleaner",
    "CorruptCheckpointError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "ProducerStateError",
    "TransactionCoordinatorFencedError",
    "RECORD_SCHEMA",
    "ConfigError",
    "ControlType",
    "CorruptIndexError",
    "CorruptRecordError",
    "FetchDataInfo",
    "FetchIsolation",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LogAppendInfo",
    "LogClosedError",
    "LogConfig",
    "LogDirectoryFullError",
    "LogDirectoryLockedError",
    "LogDirectoryNotFoundError",
    "LogManager",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ProtocolError",
    "RecordTooLargeError",
    "SparkMQError",
    "StorageError",
    "TimestampType",
    "TopicExistsError",
    "UnknownTopicOrPartitionError",
    "UsageError",
    "__version__",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "register",
}


def test_all_is_pinned() -> None:
    assert set(spark_mq.__all__) == EXPECTED
    for name in spark_mq.__all__:
        assert hasattr(spark_mq, name), name


def test_every_error_derives_from_the_root() -> None:
    for name in spark_mq.__all__:
        obj = getattr(spark_mq, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, spark_mq.SparkMQError), name


def test_docstring_examples_run() -> None:
    for module in (
        spark_mq,
        spark_mq.config,
        spark_mq.storage.codecs,
        spark_mq.storage.log,
        spark_mq.storage.log_config,
        spark_mq.storage.record_batch,
        spark_mq.storage.batch_decoder,
        spark_mq.client.admin,
        spark_mq.client.config,
        spark_mq.client.consumer,
        spark_mq.client.futures,
        spark_mq.client.group.heartbeat,
        spark_mq.client.group.listener,
        spark_mq.client.group.member_state,
        spark_mq.client.group.offsets,
        spark_mq.client.half_messages,
        spark_mq.client.interceptors,
        spark_mq.client.partitioner,
        spark_mq.client.producer,
        spark_mq.client.records,
        spark_mq.client.subscription_state,
        spark_mq.client.transactions,
    ):
        result = doctest.testmod(module)
        assert result.failed == 0, module.__name__


def test_lazy_names_come_from_the_imports_type_checkers_read() -> None:
    """``spark_mq._HOMES`` (where ``__getattr__`` finds each name) agrees with the imports
    under ``TYPE_CHECKING`` and with ``__all__``."""
    tree = ast.parse(Path(spark_mq.__file__).read_text(encoding="utf-8"))
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    imported = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == spark_mq._HOMES
    assert set(spark_mq._HOMES) | {"__version__", "register"} == set(spark_mq.__all__)


def test_importing_the_broker_loads_no_client_module() -> None:
    """The broker runs the package's ``__init__`` first; it must not pull in the clients."""
    code = (
        "import sys, spark_mq.broker.main, spark_mq.broker.core\n"
        "print(sorted(m for m in sys.modules if m.startswith('spark_mq.client')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    assert out.strip() == "[]"
