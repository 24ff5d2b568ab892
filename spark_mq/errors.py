"""The one exception hierarchy of spark_mq.

Every error raised on purpose by spark_mq derives from :class:`SparkMQError`. Errors carry
their context as attributes (topic, partition, offset, path, ...) and their message says what
went wrong and what to do about it. ``retriable`` tells a caller whether trying the same
operation again may succeed::

    SparkMQError
    ├── ConfigError                      a bad option: names the key, the value and what is accepted
    ├── UsageError                       the API was called in a way it does not support
    │   └── InvalidTopicError            a topic name Kafka would refuse
    ├── StorageError                     the local log directory
    │   ├── CorruptRecordError           a record batch failed a size, magic or CRC check
    │   ├── CorruptIndexError            an index file failed its sanity check (it gets rebuilt)
    │   ├── CorruptCheckpointError       a checkpoint or topic metadata file failed validation
    │   ├── OffsetOutOfRangeError        an offset below the log start or above the log end
    │   ├── RecordTooLargeError          a batch over max.message.bytes
    │   ├── InvalidRecordError           a well-formed batch that breaks a rule (offsets, epochs)
    │   ├── LogDirectoryLockedError      another process owns the log directory
    │   ├── UnknownTopicOrPartitionError a topic or partition that does not exist
    │   ├── TopicExistsError             create of a topic that already exists
    │   ├── InvalidPartitionsError       a partition count that is not allowed (e.g. a decrease)
    │   ├── LogDirectoryFullError        the disk is full: nothing past the failed write is kept
    │   ├── LogClosedError               use of a log after close()
    │   └── ProducerStateError           an idempotent or transactional write breaks a rule
    │       ├── OutOfOrderSequenceError        a sequence gap or reordering
    │       ├── InvalidProducerEpochError      a producer epoch older than the known one
    │       ├── TransactionCoordinatorFencedError  a marker from an older coordinator epoch
    │       └── InvalidTxnStateError           a non-transactional write inside a transaction
    └── ProtocolError                    reserved for the wire protocol and broker responses

Lower-layer errors (``OSError``, codec errors) are mapped to the most specific of these with
``raise ... from exc`` so the original cause stays attached.
"""

from __future__ import annotations

from typing import ClassVar


class SparkMQError(Exception):
    """Root of every error spark_mq raises on purpose."""

    retriable: ClassVar[bool] = False


# ---------------------------------------------------------------------------------------------
# Configuration and usage


class ConfigError(SparkMQError, ValueError):
    """A configuration key or value that is not accepted.

    ``key`` is the user-facing (Kafka-style) key, ``value`` what was given.
    """

    def __init__(self, message: str, *, key: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.key = key
        self.value = value


class UsageError(SparkMQError):
    """An API used in a way it does not support (for example a closed object)."""


class InvalidTopicError(UsageError, ValueError):
    """A topic name that Kafka would refuse: ``[a-zA-Z0-9._-]``, 1-249 chars, not ``.``/``..``."""

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


# ---------------------------------------------------------------------------------------------
# Storage


class StorageError(SparkMQError):
    """Base of every error from the local log directory."""


class CorruptRecordError(StorageError):
    """A record batch failed a size, magic-byte or CRC check.

    ``path`` and ``position`` locate the bad bytes when they came from a file.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.position = position
        self.offset = offset


class CorruptIndexError(StorageError):
    """An offset, time or transaction index failed its sanity check: it is rebuilt from the log."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class CorruptCheckpointError(StorageError):
    """A checkpoint file (or a topic metadata file) that fails validation on read.

    ``path`` names the file and ``line`` the 1-based line that failed, when the failure is
    tied to one line.
    """

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class OffsetOutOfRangeError(StorageError):
    """A read or truncation at an offset outside ``[log_start_offset, log_end_offset]``."""

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int,
        log_start_offset: int,
        log_end_offset: int,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(StorageError):
    """A batch larger than ``max.message.bytes`` (or a producer's ``max.request.size``)."""

    def __init__(self, message: str, *, size_bytes: int, max_bytes: int) -> None:
        super().__init__(message)
        self.size_bytes = size_bytes
        self.max_bytes = max_bytes


class InvalidRecordError(StorageError):
    """A well-formed batch that breaks a rule of the log (for example offsets going backwards)."""


class LogDirectoryLockedError(StorageError):
    """Another process holds the exclusive lock on a log directory."""

    def __init__(self, message: str, *, path: str, owner: str | None) -> None:
        super().__init__(message)
        self.path = path
        self.owner = owner


class UnknownTopicOrPartitionError(StorageError):
    """A topic or partition that does not exist in this log directory."""

    retriable = True  # Kafka treats it as retriable: metadata may simply be stale.

    def __init__(self, message: str, *, topic: str, partition: int | None = None) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition


class TopicExistsError(StorageError):
    """Creation of a topic that already exists."""

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


class InvalidPartitionsError(StorageError):
    """A partition count that is not allowed (zero, negative, or a decrease)."""

    def __init__(self, message: str, *, topic: str, current: int | None, requested: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.current = current
        self.requested = requested


class LogDirectoryFullError(StorageError):
    """A write failed because the disk is full (ENOSPC or EDQUOT).

    The log is rolled back to the last complete batch before this error is raised, so no torn
    batch is left behind; free space and retry.
    """

    retriable = True

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class LogClosedError(StorageError):
    """An operation on a log, segment or index after it was closed."""


class ProducerStateError(StorageError):
    """An idempotent or transactional batch that the partition's producer state rejects.

    ``producer_id`` and ``producer_epoch`` name the producer; nothing of the append was written.
    """

    def __init__(self, message: str, *, producer_id: int, producer_epoch: int) -> None:
        super().__init__(message)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch


class OutOfOrderSequenceError(ProducerStateError):
    """A batch whose first sequence does not follow the producer's last one (Kafka's
    OUT_OF_ORDER_SEQUENCE_NUMBER): a batch was lost or reordered in flight."""


class InvalidProducerEpochError(ProducerStateError):
    """A batch or marker from an epoch older than the partition knows: a newer incarnation of
    the producer exists (Kafka's INVALID_PRODUCER_EPOCH / producer fenced)."""


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker written with an older coordinator epoch than one already seen."""


class InvalidTxnStateError(ProducerStateError):
    """A write that does not fit the producer's transaction state, such as a
    non-transactional batch while its transaction is open."""


# ---------------------------------------------------------------------------------------------
# Protocol


class ProtocolError(SparkMQError):
    """Base of wire-protocol errors and of errors reported by a broker in a response.

    Subclasses set ``error_code`` (Kafka's numbering where the concept is the same).
    """

    error_code: ClassVar[int] = -1
