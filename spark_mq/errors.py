"""The one exception hierarchy of spark_mq.

Every error raised on purpose by spark_mq derives from :class:`SparkMQError`. Errors carry
their context as attributes (topic, partition, offset, path, ...) and their message says what
went wrong and what to do about it. ``retriable`` tells a caller whether trying the same
operation again may succeed::

    SparkMQError
    ├── ConfigError                      a bad option: names the key, the value and what is accepted
    │   └── SinkSchemaError              a DataFrame column the Spark sink does not accept
    ├── UsageError                       the API was called in a way it does not support
    │   └── InvalidTopicError            a topic name Kafka would refuse
    ├── StorageError                     the local log directory
    │   ├── CorruptRecordError           a record batch failed a size, magic, CRC or body check
    │   ├── CorruptIndexError            an index file failed its sanity check (it gets rebuilt)
    │   ├── CorruptCheckpointError       a checkpoint or topic metadata file failed validation
    │   ├── OffsetOutOfRangeError        an offset below the log start or above the log end
    │   ├── DataLossError                records a reader needed are gone (deleted, topic recreated)
    │   ├── RecordTooLargeError          a batch over max.message.bytes
    │   ├── InvalidRecordError           a well-formed batch that breaks a rule (offsets, epochs)
    │   ├── LogDirectoryLockedError      another process owns the log directory
    │   ├── LogDirectoryNotFoundError    a reading client's path holds no log (or is a file)
    │   ├── UnknownTopicOrPartitionError a topic or partition that does not exist
    │   ├── TopicExistsError             create of a topic that already exists
    │   ├── InvalidPartitionsError       a partition count that is not allowed (e.g. a decrease)
    │   ├── LogDirectoryFullError        the disk is full: nothing past the failed write is kept
    │   ├── PartitionOfflineError        a partition the broker could not open at startup (56)
    │   ├── LogClosedError               use of a log after close()
    │   └── ProducerStateError           an idempotent or transactional write breaks a rule
    │       ├── OutOfOrderSequenceError        a sequence gap or reordering
    │       ├── InvalidProducerEpochError      a producer epoch older than the known one
    │       ├── TransactionCoordinatorFencedError  a marker from an older coordinator epoch
    │       └── InvalidTxnStateError           a non-transactional write inside a transaction
    └── ProtocolError                    the wire protocol and errors reported by a broker
        ├── UnknownServerError                 the broker failed unclassified (-1)
        ├── CorruptFrameError                  bytes that are not a valid frame (42)
        ├── InvalidRequestError                a request field that breaks a rule (42)
        ├── UnsupportedVersionError            an API key or version not implemented (35)
        ├── NetworkError  (retriable)          the connection failed mid-request (13)
        │   └── BrokerNotAvailableError        no broker reachable or startable (8)
        ├── RequestTimedOutError (retriable)   (7)
        ├── LeaderNotAvailableError, NotLeaderOrFollowerError,
        │   FencedLeaderEpochError, UnknownLeaderEpochError (retriable; 5, 6, 74, 75)
        ├── InvalidRequiredAcksError, InvalidReplicationFactorError (21, 38)
        ├── NotEnoughReplicasError, NotEnoughReplicasAfterAppendError (retriable; 19, 20)
        ├── KafkaStorageError (retriable)      the broker's disk failed (56)
        ├── DuplicateSequenceError, UnknownProducerIdError, ProducerFencedError,
        │   InvalidProducerIdMappingError, InvalidTransactionTimeoutError,
        │   ConcurrentTransactionsError        producers and transactions (46, 59, 90, 49, 50, 51)
        ├── OwnerInstanceConflictError         a two-phase owner bound to another instance (1000)
        ├── ClusterAuthorizationError          an inter-broker API sent by a client (31)
        ├── Coordinator and group errors       (12, 14, 15, 16, 22-27, 68, 69, 79, 81, 82, 88)
        └── InvalidReplicaAssignmentError      a replica assignment that cannot be made (39)

    SparkMQError
    └── ClusterError                     ZooKeeper, its client and the controller
        ├── ZooKeeperNotInstalledError         Java or Debian's zookeeper package is missing
        ├── ZooKeeperStartError                the server did not start or answer in time
        ├── ZooKeeperConnectionError (retriable)  no connection, or the session was lost
        ├── CorruptZnodeError                  a znode whose data fails validation
        ├── BrokerIdInUseError                 /brokers/ids/<id> belongs to another session
        ├── ControllerMovedError               a controller write refused by the epoch check (41)
        └── StateChangeFailedError             a move a controller state machine does not allow

Every class has ``error_code``, Kafka's numeric code for the same concept (-1 when there is
none); storage errors that a broker reports keep their class on the client side.

Lower-layer errors (``OSError``, codec errors) are mapped to the most specific of these with
``raise ... from exc`` so the original cause stays attached.
"""

from __future__ import annotations

from typing import ClassVar


class SparkMQError(Exception):
    """Root of every error spark_mq raises on purpose."""

    retriable: ClassVar[bool] = False
    #: Kafka's error code for the concept, carried in broker responses; -1 is
    #: UNKNOWN_SERVER_ERROR, used for errors that have no wire equivalent.
    error_code: ClassVar[int] = -1

    def __reduce__(self) -> tuple[object, ...]:
        # Errors travel between processes (Spark executors to the driver, brokers to the
        # CLI); the default reduce calls __init__ with the message only, which fails for
        # subclasses with required keyword arguments, so rebuild from the attributes.
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(
    cls: type[SparkMQError], args: tuple[object, ...], state: dict[str, object]
) -> SparkMQError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc


# ---------------------------------------------------------------------------------------------
# Configuration and usage


class ConfigError(SparkMQError, ValueError):
    """A configuration key or value that is not accepted.

    ``key`` is the user-facing (Kafka-style) key, ``value`` what was given.
    """

    error_code: ClassVar[int] = 40

    def __init__(self, message: str, *, key: str | None = None, value: object = None) -> None:
        super().__init__(message)
        self.key = key
        self.value = value


class UsageError(SparkMQError):
    """An API used in a way it does not support (for example a closed object)."""


class InvalidTopicError(UsageError, ValueError):
    """A topic name that Kafka would refuse: ``[a-zA-Z0-9._-]``, 1-249 chars, not ``.``/``..``."""

    error_code: ClassVar[int] = 17

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


class SinkSchemaError(ConfigError):
    """A DataFrame written to the spark_mq sink lacks ``value``, has an accepted column of
    the wrong type, or two columns whose names differ only in case; ``column`` names it and
    the message lists every accepted column."""

    def __init__(self, message: str, *, column: str) -> None:
        super().__init__(message, key=column)
        self.column = column


# ---------------------------------------------------------------------------------------------
# Storage


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


class UnknownTopicOrPartitionError(StorageError):
    """A topic or partition that does not exist in this log directory."""

    error_code: ClassVar[int] = 3

    retriable = True  # Kafka treats it as retriable: metadata may simply be stale.

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


class LogDirectoryFullError(StorageError):
    """A write failed because the disk is full (ENOSPC or EDQUOT).

    The log is rolled back to the last complete batch before this error is raised, so no torn
    batch is left behind; free space and retry.
    """

    error_code: ClassVar[int] = 56

    retriable = True

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


class InvalidProducerEpochError(ProducerStateError):
    """A batch or marker from an epoch older than the partition knows: a newer incarnation of
    the producer exists (Kafka's INVALID_PRODUCER_EPOCH / producer fenced)."""

    error_code: ClassVar[int] = 47


class TransactionCoordinatorFencedError(ProducerStateError):
    """A transaction marker written with an older coordinator epoch than one already seen."""

    error_code: ClassVar[int] = 52


class InvalidTxnStateError(ProducerStateError):
    """A write that does not fit the producer's transaction state, such as a
    non-transactional batch while its transaction is open."""

    error_code: ClassVar[int] = 48


# ---------------------------------------------------------------------------------------------
# Protocol and broker responses


class ProtocolError(SparkMQError):
    """Base of wire-protocol errors and of errors a broker reports in a response.

    Errors whose concept already exists in the storage family (offset out of range, unknown
    topic, record too large, ...) are raised as that same class whether the log is local or
    behind a broker, so one ``except`` clause serves both. ``spark_mq.protocol.error_codes``
    maps every code to its class.
    """

    error_code: ClassVar[int] = -1


class UnknownServerError(ProtocolError):
    """The broker failed in a way it could not classify (code -1); its log has the details."""


class CorruptFrameError(ProtocolError):
    """Bytes on a connection that do not form a valid frame: a bad length, a truncated or
    undecodable body, or records whose sizes do not add up. The connection is closed."""

    error_code = 42  # INVALID_REQUEST


class InvalidRequestError(ProtocolError):
    """A well-formed request the broker refuses because a field breaks a rule."""

    error_code = 42


class UnsupportedVersionError(ProtocolError):
    """An API key or version the broker does not implement."""

    error_code = 35


class NetworkError(ProtocolError):
    """The connection to a broker failed or closed mid-request; the broker may be restarting."""

    retriable = True
    error_code = 13


class BrokerNotAvailableError(NetworkError):
    """No broker could be reached at the configured address (or started for a directory)."""

    error_code = 8


class RequestTimedOutError(ProtocolError):
    """A request did not complete within its timeout."""

    retriable = True
    error_code = 7


class LeaderNotAvailableError(ProtocolError):
    """The partition has no leader right now (an election is in progress)."""

    retriable = True
    error_code = 5


class NotLeaderOrFollowerError(ProtocolError):
    """The broker asked is not the partition's leader: refresh metadata and retry."""

    retriable = True
    error_code = 6


class InvalidRequiredAcksError(ProtocolError):
    """``acks`` other than 0, 1 or -1 (all)."""

    error_code = 21


class InvalidReplicationFactorError(ProtocolError):
    """A replication factor larger than the number of live brokers, or below 1."""

    error_code = 38


class NotEnoughReplicasError(ProtocolError):
    """Fewer in-sync replicas than ``min.insync.replicas``: the write was refused."""

    retriable = True
    error_code = 19


class NotEnoughReplicasAfterAppendError(ProtocolError):
    """The write was appended by the leader but the in-sync set shrank before it was
    replicated: it may or may not be kept."""

    retriable = True
    error_code = 20


class KafkaStorageError(ProtocolError):
    """The broker could not read or write its log directory (I/O error)."""

    retriable = True
    error_code = 56


class DuplicateSequenceError(ProtocolError):
    """The broker saw this batch's sequence numbers already (the write is a duplicate)."""

    error_code = 46


class UnknownProducerIdError(ProtocolError):
    """The broker no longer knows the producer id (its state expired): re-initialize."""

    error_code = 59


class ProducerFencedError(ProtocolError):
    """A newer producer with the same transactional id exists: this one must close."""

    error_code = 90


class InvalidProducerIdMappingError(ProtocolError):
    """The producer id does not belong to the transactional id given."""

    error_code = 49


class InvalidTransactionTimeoutError(ProtocolError):
    """A transaction timeout above ``transaction.max.timeout.ms`` or below 1."""

    error_code = 50


class ConcurrentTransactionsError(ProtocolError):
    """The previous transaction of this transactional id is still completing: retry."""

    retriable = True
    error_code = 51


class OwnerInstanceConflictError(ProtocolError):
    """A two-phase decision for an owner that is bound to another instance of it: for the
    Spark sink, a streaming query from a new checkpoint that reuses another checkpoint's
    ``sink.id``. Its batch ids restart at 0, so its commits would be taken as replays of the
    first query's batches and dropped; nothing is committed. Give each checkpoint its own
    sink id. spark_mq's own code (1000 and up), like the two-phase APIs it belongs to."""

    error_code = 1000


class ClusterAuthorizationError(ProtocolError):
    """The request needs the rights of a broker of the cluster (Kafka's ClusterAction):
    an inter-broker API such as WriteTxnMarkers, sent by a client. Nothing was changed; a
    client ends its transactions with EndTxn (``commit_transaction()`` /
    ``abort_transaction()``)."""

    error_code = 31


class TransactionalIdNotFoundError(ProtocolError):
    """The transaction coordinator knows no such transactional id (never used, or expired
    after ``transactional.id.expiration.ms``)."""

    error_code = 105


class TransactionAbortableError(ProtocolError):
    """The current transaction cannot commit (a send failed, or the coordinator aborted it
    on timeout): call ``abort_transaction()`` and start a new one."""

    error_code = 120


class CoordinatorNotAvailableError(ProtocolError):
    """The group or transaction coordinator is not available yet."""

    retriable = True
    error_code = 15


class NotCoordinatorError(ProtocolError):
    """The broker asked is not the coordinator for the group or transactional id."""

    retriable = True
    error_code = 16


class CoordinatorLoadInProgressError(ProtocolError):
    """The coordinator is still loading its state: retry shortly."""

    retriable = True
    error_code = 14


class IllegalGenerationError(ProtocolError):
    """A group request from an older generation: the member must rejoin."""

    error_code = 22


class InconsistentGroupProtocolError(ProtocolError):
    """A member's protocol type or assignors do not match the group's."""

    error_code = 23


class InvalidGroupIdError(ProtocolError):
    """An empty or otherwise invalid ``group.id``."""

    error_code = 24


class UnknownMemberIdError(ProtocolError):
    """The group does not know this member id (it was removed): rejoin."""

    error_code = 25


class InvalidSessionTimeoutError(ProtocolError):
    """A ``session.timeout.ms`` outside the broker's allowed range."""

    error_code = 26


class RebalanceInProgressError(ProtocolError):
    """The group is rebalancing: rejoin."""

    error_code = 27


class MemberIdRequiredError(ProtocolError):
    """The first join of a dynamic member: rejoin with the member id the broker assigned."""

    error_code = 79


class FencedInstanceIdError(ProtocolError):
    """Another member joined with the same ``group.instance.id``: this one is fenced."""

    error_code = 82


class GroupMaxSizeReachedError(ProtocolError):
    """The group already has ``group.max.size`` members: this one cannot join. Stop a member,
    or raise the broker's ``group.max.size``."""

    error_code = 81


class OffsetMetadataTooLargeError(ProtocolError):
    """A committed offset's metadata string is longer than the broker's
    ``offset.metadata.max.bytes``: commit a shorter one."""

    error_code = 12


class UnstableOffsetCommitError(ProtocolError):
    """A transactional offset commit for the partition is still pending: retry once the
    transaction completes (Kafka's KIP-447)."""

    retriable = True
    error_code = 88


class GroupIdNotFoundError(ProtocolError):
    """The group does not exist."""

    error_code = 69


class NonEmptyGroupError(ProtocolError):
    """A group with active members cannot be deleted."""

    error_code = 68


class FencedLeaderEpochError(ProtocolError):
    """The leader epoch in the request is older than the broker's: refresh metadata."""

    retriable = True
    error_code = 74


class UnknownLeaderEpochError(ProtocolError):
    """The leader epoch in the request is newer than the broker's: retry."""

    retriable = True
    error_code = 75


class InvalidReplicaAssignmentError(ProtocolError):
    """A replica assignment that cannot be made: brokers with and without ``broker.rack``
    mixed, duplicate replicas, or an unknown broker."""

    error_code = 39


# ---------------------------------------------------------------------------------------------
# Cluster: ZooKeeper, its client and the controller


class ClusterError(SparkMQError):
    """Base of every error from the cluster layer (ZooKeeper, its client, the controller)."""


class ZooKeeperNotInstalledError(ClusterError):
    """Java or Debian's ``zookeeper`` package is missing; ``missing`` names which one and the
    message says how to install it."""

    def __init__(self, message: str, *, missing: str) -> None:
        super().__init__(message)
        self.missing = missing


class ZooKeeperStartError(ClusterError):
    """A ZooKeeper server that exited or did not answer ``ruok`` in time; ``log_path`` holds
    its output."""

    def __init__(self, message: str, *, log_path: str) -> None:
        super().__init__(message)
        self.log_path = log_path


class ZooKeeperConnectionError(ClusterError):
    """No usable ZooKeeper session: not connected, connection suspended, or session expired.

    Retriable: the client reconnects by itself, and a broker re-registers on a new session.
    """

    retriable = True


class CorruptZnodeError(ClusterError):
    """A znode whose data is not the JSON Kafka writes there; ``path`` names the znode."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class BrokerIdInUseError(ClusterError):
    """``/brokers/ids/<id>`` is held by another live session: two brokers share a
    ``broker.id``."""

    def __init__(self, message: str, *, broker_id: str) -> None:
        super().__init__(message)
        self.broker_id = broker_id


class ControllerMovedError(ClusterError):
    """A controller write refused because ``/controller_epoch`` moved on: another broker is
    controller now, so this one must stop acting as controller (Kafka's
    ControllerMovedException, NOT_CONTROLLER)."""

    error_code = 41


class StateChangeFailedError(ClusterError):
    """A partition or replica state change that the controller's transition table refuses."""
