"""Errors of the local log directory (:class:`StorageError`): corrupt data, offsets out of
range, topics and partitions, the rules of idempotent and transactional writes. A broker
reports them by code and a client raises the same class. The tree: :mod:`spark_mq.errors`.
"""

from __future__ import annotations

from typing import ClassVar

from spark_mq.errors.base import ProducerFatalError, RetriableError, SparkMQError


class StorageError(SparkMQError):
    """Base of every error from the local log directory."""


class CorruptRecordError(StorageError):
    """A record batch failed a size, magic-byte, CRC or body check.

    ``path`` and ``position`` locate the bad bytes when they came from a file; ``topic`` and
    ``partition`` name the partition when the reader knows it; ``offset`` is the batch's base
    offset; ``next_offset``, when known, is the offset after the batch, where a reader that
    gives up its records may go on (``consumer.seek(tp, next_offset)``).
    """

    error_code: ClassVar[int] = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        position: int | None = None,
        offset: int | None = None,
        topic: str | None = None,
        partition: int | None = None,
        next_offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.position = position
        self.offset = offset
        self.topic = topic
        self.partition = partition
        self.next_offset = next_offset


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

    error_code: ClassVar[int] = 1

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


class DataLossError(StorageError):
    """Records a reader was to read are gone: deleted by retention or ``delete_records``
    before being read, or their topic was deleted or recreated. ``start_offset`` and
    ``end_offset`` bound the missing range (``end_offset`` -1 when unknown). The Spark source
    raises it with ``failOnDataLoss=true``; set ``failOnDataLoss=false`` to skip the range."""

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        start_offset: int,
        end_offset: int,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = end_offset


class RecordTooLargeError(StorageError):
    """A batch larger than ``max.message.bytes`` (or a producer's ``max.request.size``)."""

    error_code: ClassVar[int] = 10

    def __init__(self, message: str, *, size_bytes: int, max_bytes: int) -> None:
        super().__init__(message)
        self.size_bytes = size_bytes
        self.max_bytes = max_bytes


class InvalidRecordError(StorageError):
    """A well-formed batch that breaks a rule of the log (for example offsets going backwards)."""

    error_code: ClassVar[int] = 87


class LogDirectoryLockedError(StorageError):
    """Another process holds the exclusive lock on a log directory."""

    def __init__(self, message: str, *, path: str, owner: str | None) -> None:
        super().__init__(message)
        self.path = path
        self.owner = owner


class LogDirectoryNotFoundError(StorageError):
    """A path given as a log directory that holds no log: it does not exist, is a file, or is
    a directory no broker ever used. Clients that only read (consumers, listing and
    describing) refuse it instead of starting a broker that would create an empty log, so a
    mistyped path is reported rather than read as empty. ``path`` is the absolute path."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class UnknownTopicOrPartitionError(RetriableError, StorageError):
    """A topic or partition that does not exist in this log directory."""

    error_code: ClassVar[int] = 3

    def __init__(self, message: str, *, topic: str, partition: int | None = None) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition


class TopicExistsError(StorageError):
    """Creation of a topic that already exists."""

    error_code: ClassVar[int] = 36

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


class InvalidPartitionsError(StorageError):
    """A partition count that is not allowed (zero, negative, or a decrease)."""

    error_code: ClassVar[int] = 37

    def __init__(self, message: str, *, topic: str, current: int | None, requested: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.current = current
        self.requested = requested


class LogDirectoryFullError(RetriableError, StorageError):
    """A write failed because the disk is full (ENOSPC or EDQUOT).

    The log is rolled back to the last complete batch before this error is raised, so no torn
    batch is left behind; free space and retry.
    """

    error_code: ClassVar[int] = 56
    shares_code = True

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class PartitionOfflineError(StorageError):
    """A partition whose log could not be opened when the log directory was (an unreadable
    or corrupt file, no room for a file it needs): the rest of the directory is served, this
    partition is not until the cause is fixed and the broker restarted.

    ``reason`` is the error that stopped it. Brokers answer it as KAFKA_STORAGE_ERROR (56).
    """

    error_code: ClassVar[int] = 56
    shares_code = True

    def __init__(self, message: str, *, topic: str, partition: int, reason: str) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.reason = reason


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

    error_code: ClassVar[int] = 45


class InvalidProducerEpochError(ProducerFatalError, ProducerStateError):
    """A batch or marker from an epoch older than the partition knows: a newer incarnation of
    the producer exists (Kafka's INVALID_PRODUCER_EPOCH / producer fenced)."""

    error_code: ClassVar[int] = 47


class TransactionCoordinatorFencedError(ProducerFatalError, ProducerStateError):
    """A transaction marker written with an older coordinator epoch than one already seen."""

    error_code: ClassVar[int] = 52


class InvalidTxnStateError(ProducerStateError):
    """A write that does not fit the producer's transaction state, such as a
    non-transactional batch while its transaction is open."""

    error_code: ClassVar[int] = 48
