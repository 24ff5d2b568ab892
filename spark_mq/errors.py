"""The one exception hierarchy of spark_mq.

Every error raised on purpose by spark_mq derives from :class:`SparkMQError`. Errors carry
their context as attributes (topic, partition, offset, path, ...) and their message says what
went wrong and what to do about it.

The tree is grouped by what a caller does about an error, as Kafka's (``RetriableException``)
and aiokafka's (``retriable``) are: retry it (:class:`RetriableError`; ``retriable`` is True on
exactly these), close the producer (:class:`ProducerFatalError`), or fix the call or the
configuration (:class:`UsageError`, :class:`ConfigError`). Everything else is refused and
reported: retrying the same operation gives the same answer. ``[storage]`` and ``[protocol]``
mark the second family of a class, the layer that raises it, :class:`StorageError` (the local
log directory) or :class:`ProtocolError` (the wire and a broker's answers); both stay
catchable, and an error a broker reports arrives as the same class as the local log raises,
so one ``except`` serves both. The number is the class's ``error_code`` (Kafka's numbering;
-1 when the concept has no code), ``*`` marks a code a client raises as another class::

    SparkMQError
    ├── RetriableError                           try again after a backoff
    │   ├── UnknownTopicOrPartitionError         [storage] (3) metadata may be stale
    │   ├── LogDirectoryFullError                [storage] (56*) disk full; nothing torn kept
    │   ├── NetworkError                         [protocol] (13) the connection failed
    │   │   └── BrokerNotAvailableError          (8) no broker reachable or startable
    │   │       └── ExecutorEndpointError        a Spark executor cannot reach the driver's broker
    │   ├── RequestTimedOutError                 [protocol] (7)
    │   │   ├── DeliveryTimeoutError             not acknowledged within delivery.timeout.ms
    │   │   └── BufferExhaustedError             send() waited max.block.ms for buffer.memory
    │   ├── LeaderNotAvailableError              [protocol] (5)
    │   ├── NotLeaderOrFollowerError             [protocol] (6)
    │   ├── FencedLeaderEpochError               [protocol] (74)
    │   ├── UnknownLeaderEpochError              [protocol] (75)
    │   ├── NotEnoughReplicasError               [protocol] (19)
    │   ├── NotEnoughReplicasAfterAppendError    [protocol] (20)
    │   ├── KafkaStorageError                    [protocol] (56) the broker's disk failed
    │   ├── ConcurrentTransactionsError          [protocol] (51) the last one is completing
    │   ├── CoordinatorLoadInProgressError       [protocol] (14)
    │   ├── CoordinatorNotAvailableError         [protocol] (15)
    │   ├── NotCoordinatorError                  [protocol] (16)
    │   ├── UnstableOffsetCommitError            [protocol] (88) a transaction is pending
    │   ├── ZooKeeperConnectionError             ClusterError: not connected or session lost
    │   ├── PreferredLeaderNotAvailableError     ClusterError (80): preferred replica cannot lead
    │   └── EligibleLeadersNotAvailableError     ClusterError (83): no live replica to elect
    ├── ProducerFatalError                       close the producer: a newer one took over
    │   ├── ProducerFencedError                  [protocol] (90)
    │   ├── InvalidProducerEpochError            [storage] ProducerStateError (47)
    │   └── TransactionCoordinatorFencedError    [storage] ProducerStateError (52)
    ├── AuthenticationError                      (58) fix the credentials; never retried
    │   ├── UnsupportedSaslMechanismError        (33) the listener does not enable it
    │   └── IllegalSaslStateError                (34) a SASL request out of order
    ├── UsageError                               fix the call
    │   └── InvalidTopicError                    (17) a topic name Kafka would refuse
    ├── ConfigError                              (40) fix the option it names
    │   └── SinkSchemaError                      a DataFrame column the Spark sink refuses
    ├── ClusterError                             ZooKeeper, its client and the controller
    │   ├── ZooKeeperNotInstalledError           Java or Debian's zookeeper is missing
    │   ├── ZooKeeperStartError                  the server did not start or answer in time
    │   ├── CorruptZnodeError                    a znode whose data fails validation
    │   ├── BrokerIdInUseError                   /brokers/ids/<id> is another session's
    │   ├── ControllerMovedError                 (41) a controller write the epoch refused
    │   ├── StaleControllerEpochError            (11) a request from an ex-controller
    │   ├── StaleBrokerEpochError                (77) a request for an earlier life of a broker
    │   ├── InvalidUpdateVersionError            (95) a partition change at an old epoch
    │   ├── BrokerAuthenticationError            (58*) a wrong inter-broker secret
    │   ├── StateChangeFailedError               a move a state machine does not allow
    │   ├── ElectionNotNeededError               (84) the partition has the leader asked for
    │   ├── InconsistentClusterIdError           the log directory served another cluster
    │   ├── InconsistentBrokerIdError            the log directory served another broker.id
    │   └── LocalClusterError                    a local cluster's process did not start or stop
    ├── StorageError                             refused by the local log directory
    │   ├── CorruptRecordError                   (2) a batch failed a size, magic or CRC check
    │   ├── CorruptIndexError                    an index failed its check (it gets rebuilt)
    │   ├── CorruptCheckpointError               a checkpoint or metadata file is invalid
    │   ├── OffsetOutOfRangeError                (1) outside [log start, log end]
    │   │   └── NoOffsetForPartitionError        no position and auto.offset.reset=none
    │   ├── DataLossError                        records a reader needed are gone
    │   ├── RecordTooLargeError                  (10) a batch over max.message.bytes
    │   ├── InvalidRecordError                   (87) a batch that breaks a rule of the log
    │   ├── LogDirectoryLockedError              another process owns the log directory
    │   ├── LogDirectoryNotFoundError            a reading client's path holds no log
    │   ├── TopicExistsError                     (36)
    │   ├── InvalidPartitionsError               (37) e.g. a decrease
    │   ├── PartitionOfflineError                (56*) could not be opened at startup
    │   ├── LogClosedError                       use of a log after close()
    │   └── ProducerStateError                   an idempotent or transactional write rule
    │       ├── OutOfOrderSequenceError          (45) a sequence gap or reordering
    │       └── InvalidTxnStateError             (48) a write that does not fit the state
    └── ProtocolError                            refused by the wire protocol or a broker
        ├── UnknownServerError                   (-1) the broker failed; see its log
        ├── CorruptFrameError                    (42*) bytes that are not a valid frame
        ├── InvalidRequestError                  (42) a request field that breaks a rule
        ├── UnsupportedVersionError              (35)
        ├── InvalidRequiredAcksError             (21)
        ├── InvalidReplicationFactorError        (38)
        ├── InvalidReplicaAssignmentError        (39) an assignment that cannot be made
        ├── NoReassignmentInProgressError        (85) cancelling a reassignment that is not there
        ├── ClusterAuthorizationError            (31) an inter-broker API sent by a client
        ├── TopicAuthorizationError              (29) no ACL allows the operation on a topic
        ├── GroupAuthorizationError              (30) no ACL allows the operation on a group
        ├── TransactionalIdAuthorizationError    (53) nor on a transactional id
        ├── SecurityDisabledError                (54) ACL APIs on a broker with no authorizer
        ├── SslAuthenticationError               a TLS handshake refused: certificate, CA, host
        ├── DuplicateSequenceError               (46)
        ├── UnknownProducerIdError               (59)
        ├── InvalidProducerIdMappingError        (49)
        ├── InvalidTransactionTimeoutError       (50)
        ├── TransactionalIdNotFoundError         (105)
        ├── TransactionAbortableError            (120) abort the transaction, start another
        ├── OwnerInstanceConflictError           (1000) a two-phase owner of another instance
        ├── HalfMessageNotFoundError             (1001) never sent, or ended and forgotten
        ├── OffsetMetadataTooLargeError          (12)
        ├── IllegalGenerationError               (22)
        ├── InconsistentGroupProtocolError       (23)
        ├── InvalidGroupIdError                  (24)
        ├── UnknownMemberIdError                 (25)
        ├── InvalidSessionTimeoutError           (26)
        ├── RebalanceInProgressError             (27)
        ├── NonEmptyGroupError                   (68)
        ├── GroupIdNotFoundError                 (69)
        ├── MemberIdRequiredError                (79)
        ├── GroupMaxSizeReachedError             (81)
        ├── FencedInstanceIdError                (82)
        ├── ResourceNotFoundError                (91) e.g. a user with no SCRAM credential
        ├── UnacceptableCredentialError          (93) a SCRAM credential the broker refuses
        └── CommitFailedError                    the group refused a commit: poll() rejoins

``tests/test_errors.py`` checks that this tree lists every class, under its first base, with
its layer and code. ``spark_mq.protocol.error_codes`` builds the table of codes from the
classes; storage errors that a broker reports keep their class on the client side.

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
    #: True on a class whose ``error_code`` belongs to another class: a broker sends the
    #: code for it, and a client raises the other class (``protocol.error_codes`` builds its
    #: table from the classes that set ``error_code`` themselves and do not share it).
    shares_code: ClassVar[bool] = False

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
# The families by what a caller does


class RetriableError(SparkMQError):
    """Trying the same operation again may succeed: after a backoff, and after refreshing
    metadata when the error is about who leads or coordinates what. Clients retry these
    within their timeouts (``retries``, ``delivery.timeout.ms``, ``default.api.timeout.ms``)
    and raise them only when the time is up."""

    retriable: ClassVar[bool] = True


class ProducerFatalError(SparkMQError):
    """The producer can do nothing more: a newer instance with the same transactional id,
    or a newer coordinator, took over. Close it; its open transaction is aborted. Retrying
    or aborting cannot help, unlike a :class:`TransactionAbortableError`."""


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


class AuthenticationError(SparkMQError):
    """A connection could not prove who it is (SASL, Kafka's
    ``SaslAuthenticationException``): an unknown user, a wrong password, or a mechanism the
    broker does not enable. The broker closed the connection. Not retriable: the same
    credentials fail again; fix ``sasl.username`` / ``sasl.password`` (or
    ``sasl.jaas.config``) and ``sasl.mechanism``. The message names the mechanism and the
    user, never the secret."""

    error_code: ClassVar[int] = 58

    def __init__(
        self, message: str, *, mechanism: str | None = None, user: str | None = None
    ) -> None:
        super().__init__(message)
        self.mechanism = mechanism
        self.user = user


class UnsupportedSaslMechanismError(AuthenticationError):
    """The client asked for a SASL mechanism the listener does not enable
    (``sasl.enabled.mechanisms``); the broker's answer lists those it does."""

    error_code: ClassVar[int] = 33


class IllegalSaslStateError(AuthenticationError):
    """A SASL request out of order: SaslAuthenticate before SaslHandshake, a second
    handshake, or an exchange continued after it ended."""

    error_code: ClassVar[int] = 34


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


# ---------------------------------------------------------------------------------------------
# Protocol and broker responses


class ProtocolError(SparkMQError):
    """Base of wire-protocol errors and of errors a broker reports in a response.

    Errors whose concept already exists in the storage family (offset out of range, unknown
    topic, record too large, ...) are raised as that same class whether the log is local or
    behind a broker, so one ``except`` clause serves both. ``spark_mq.protocol.error_codes``
    maps every code to its class.
    """


class UnknownServerError(ProtocolError):
    """The broker failed in a way it could not classify (code -1); its log has the details."""


class CorruptFrameError(ProtocolError):
    """Bytes on a connection that do not form a valid frame: a bad length, a truncated or
    undecodable body, or records whose sizes do not add up. The connection is closed."""

    error_code = 42  # INVALID_REQUEST
    shares_code = True


class InvalidRequestError(ProtocolError):
    """A well-formed request the broker refuses because a field breaks a rule."""

    error_code = 42


class UnsupportedVersionError(ProtocolError):
    """An API key or version the broker does not implement."""

    error_code = 35


class NetworkError(RetriableError, ProtocolError):
    """The connection to a broker failed or closed mid-request; the broker may be restarting."""

    error_code = 13


class BrokerNotAvailableError(NetworkError):
    """No broker could be reached at the configured address (or started for a directory)."""

    error_code = 8


class ExecutorEndpointError(BrokerNotAvailableError):
    """A Spark executor cannot reach the embedded broker the driver resolved ``path`` to
    (its Unix socket, or its token listener: docs/spark_source.md, "Running on a Spark
    cluster"). An executor never starts a broker of its own: the task fails with this,
    naming each ``address`` tried and why, and ``log_dir``."""

    def __init__(self, message: str, *, log_dir: str, addresses: tuple[str, ...]) -> None:
        super().__init__(message)
        self.log_dir = log_dir
        self.addresses = addresses


class RequestTimedOutError(RetriableError, ProtocolError):
    """A request did not complete within its timeout."""

    error_code = 7


class LeaderNotAvailableError(RetriableError, ProtocolError):
    """The partition has no leader right now (an election is in progress)."""

    error_code = 5


class NotLeaderOrFollowerError(RetriableError, ProtocolError):
    """The broker asked is not the partition's leader: refresh metadata and retry."""

    error_code = 6


class InvalidRequiredAcksError(ProtocolError):
    """``acks`` other than 0, 1 or -1 (all)."""

    error_code = 21


class InvalidReplicationFactorError(ProtocolError):
    """A replication factor larger than the number of live brokers, or below 1."""

    error_code = 38


class NotEnoughReplicasError(RetriableError, ProtocolError):
    """Fewer in-sync replicas than ``min.insync.replicas``: the write was refused."""

    error_code = 19


class NotEnoughReplicasAfterAppendError(RetriableError, ProtocolError):
    """The write was appended by the leader but the in-sync set shrank before it was
    replicated: it may or may not be kept."""

    error_code = 20


class KafkaStorageError(RetriableError, ProtocolError):
    """The broker could not read or write its log directory (I/O error)."""

    error_code = 56


class DuplicateSequenceError(ProtocolError):
    """The broker saw this batch's sequence numbers already (the write is a duplicate)."""

    error_code = 46


class UnknownProducerIdError(ProtocolError):
    """The broker no longer knows the producer id (its state expired): re-initialize."""

    error_code = 59


class ProducerFencedError(ProducerFatalError, ProtocolError):
    """A newer producer with the same transactional id exists: this one must close."""

    error_code = 90


class InvalidProducerIdMappingError(ProtocolError):
    """The producer id does not belong to the transactional id given."""

    error_code = 49


class InvalidTransactionTimeoutError(ProtocolError):
    """A transaction timeout above ``transaction.max.timeout.ms`` or below 1."""

    error_code = 50


class ConcurrentTransactionsError(RetriableError, ProtocolError):
    """The previous transaction of this transactional id is still completing: retry."""

    error_code = 51


class OwnerInstanceConflictError(ProtocolError):
    """A two-phase decision for an owner that is bound to another instance of it: for the
    Spark sink, a streaming query from a new checkpoint that reuses another checkpoint's
    ``sink.id``. Its batch ids restart at 0, so its commits would be taken as replays of the
    first query's batches and dropped; nothing is committed. Give each checkpoint its own
    sink id. spark_mq's own code (1000 and up), like the two-phase APIs it belongs to."""

    error_code = 1000


class ResourceNotFoundError(ProtocolError):
    """The resource a request names does not exist: DescribeUserScramCredentials of a user
    with no SCRAM credential."""

    error_code = 91


class UnacceptableCredentialError(ProtocolError):
    """AlterUserScramCredentials refused a credential: an empty user name, a mechanism that
    is not SCRAM-SHA-256/512, an iteration count under 4096 (Kafka's minimum) or a
    deletion of a credential the user does not have. Nothing was changed."""

    error_code = 93


class HalfMessageNotFoundError(ProtocolError):
    """An EndHalfMessage for a half message the broker does not know: it was never sent to
    this broker, or it ended more than ``transaction.half.op.retention.ms`` ago and its
    outcome was forgotten. Nothing was written (a late COMMIT writes no second record);
    the end that counted was the first one. spark_mq's own code, as the half-message APIs
    are (docs/half_messages.md)."""

    error_code = 1001


class ClusterAuthorizationError(ProtocolError):
    """The request needs the rights of a broker of the cluster (Kafka's ClusterAction):
    an inter-broker API such as WriteTxnMarkers, sent by a client. Nothing was changed; a
    client ends its transactions with EndTxn (``commit_transaction()`` /
    ``abort_transaction()``)."""

    error_code = 31


# Authorization (ACLs): the broker's message names the principal, the operation, the
# resource and the kafka-acls command that would allow it.


class TopicAuthorizationError(ProtocolError):
    """The principal may not do this to the topic: no ACL allows it, or one denies it
    (Kafka's TOPIC_AUTHORIZATION_FAILED). Nothing was changed; the message says which
    ACL an administrator would add (``spark-mq acls add``)."""

    error_code = 29


class GroupAuthorizationError(ProtocolError):
    """The principal may not use the consumer group (Kafka's GROUP_AUTHORIZATION_FAILED);
    the message says which ACL would allow it."""

    error_code = 30


class TransactionalIdAuthorizationError(ProtocolError):
    """The principal may not use the transactional id (Kafka's
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED); the message says which ACL would allow it."""

    error_code = 53


class SecurityDisabledError(ProtocolError):
    """An ACL request to a broker with no authorizer: set ``authorizer.class.name`` on the
    brokers first (Kafka's SECURITY_DISABLED)."""

    error_code = 54


class SslAuthenticationError(ProtocolError):
    """A TLS handshake with a broker was refused: its certificate expired, is signed by a CA
    this client does not trust, or does not name the host; or the broker refused this
    client's certificate (or wanted one). Not retried: the same handshake fails the same
    way until the certificates or the ``ssl.*`` settings change. Kafka's
    SslAuthenticationException. ``broker`` is the address connected to."""

    def __init__(self, message: str, *, broker: str = "") -> None:
        super().__init__(message)
        self.broker = broker


class TransactionalIdNotFoundError(ProtocolError):
    """The transaction coordinator knows no such transactional id (never used, or expired
    after ``transactional.id.expiration.ms``)."""

    error_code = 105


class TransactionAbortableError(ProtocolError):
    """The current transaction cannot commit (a send failed, or the coordinator aborted it
    on timeout): call ``abort_transaction()`` and start a new one."""

    error_code = 120


class CoordinatorNotAvailableError(RetriableError, ProtocolError):
    """The group or transaction coordinator is not available yet."""

    error_code = 15


class NotCoordinatorError(RetriableError, ProtocolError):
    """The broker asked is not the coordinator for the group or transactional id."""

    error_code = 16


class CoordinatorLoadInProgressError(RetriableError, ProtocolError):
    """The coordinator is still loading its state: retry shortly."""

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


class UnstableOffsetCommitError(RetriableError, ProtocolError):
    """A transactional offset commit for the partition is still pending: retry once the
    transaction completes (Kafka's KIP-447)."""

    error_code = 88


class GroupIdNotFoundError(ProtocolError):
    """The group does not exist."""

    error_code = 69


class NonEmptyGroupError(ProtocolError):
    """A group with active members cannot be deleted."""

    error_code = 68


class FencedLeaderEpochError(RetriableError, ProtocolError):
    """The leader epoch in the request is older than the broker's: refresh metadata."""

    error_code = 74


class UnknownLeaderEpochError(RetriableError, ProtocolError):
    """The leader epoch in the request is newer than the broker's: retry."""

    error_code = 75


# ---------------------------------------------------------------------------------------------
# Raised by the clients only (they were spark_mq.client.errors, which re-exports them)


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """A consumer has no position for a partition and ``auto.offset.reset`` is ``none``:
    call ``seek``, ``seek_to_beginning`` or ``seek_to_end`` first."""

    def __init__(self, message: str, *, topic: str, partition: int) -> None:
        super().__init__(
            message,
            topic=topic,
            partition=partition,
            offset=-1,
            log_start_offset=-1,
            log_end_offset=-1,
        )


class DeliveryTimeoutError(RequestTimedOutError):
    """Records that were not acknowledged within ``delivery.timeout.ms`` of ``send()``;
    ``topic``/``partition`` name where they were going and ``record_count`` how many."""

    def __init__(self, message: str, *, topic: str, partition: int, record_count: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.record_count = record_count


class BufferExhaustedError(RequestTimedOutError):
    """``send()`` waited ``max.block.ms`` for room in ``buffer.memory``: the producer makes
    records faster than the broker takes them. Slow down, or raise either setting."""

    def __init__(self, message: str, *, buffer_memory: int, max_block_ms: int) -> None:
        super().__init__(message)
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms


class CommitFailedError(ProtocolError):
    """The group coordinator refused an offset commit because the committing member is no
    longer part of the generation that owns the partitions: it was removed (a session or
    poll timeout), or the group rebalanced and the partitions may now belong to another
    member. Nothing was committed. The records since the last successful commit will be
    delivered again, to this member or another; call ``poll()`` to rejoin.

    ``group_id``, ``generation_id`` and ``member_id`` are what the commit was sent with
    (``generation_id`` -1 when the member had already lost its generation); ``reason`` is
    the broker's error name (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``,
    ``REBALANCE_IN_PROGRESS``, ``FENCED_INSTANCE_ID``) or ``NOT_IN_GROUP``.
    """

    def __init__(
        self, message: str, *, group_id: str, generation_id: int, member_id: str, reason: str
    ) -> None:
        super().__init__(message)
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.reason = reason


class InvalidReplicaAssignmentError(ProtocolError):
    """A replica assignment that cannot be made: brokers with and without ``broker.rack``
    mixed, duplicate replicas, or an unknown broker."""

    error_code = 39


class NoReassignmentInProgressError(ProtocolError):
    """A partition reassignment cancelled (its target replicas null) while none is in
    progress for that partition: nothing to revert."""

    error_code = 85


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


class ZooKeeperConnectionError(RetriableError, ClusterError):
    """No usable ZooKeeper session: not connected, connection suspended, or session expired.

    Retriable: the client reconnects by itself, and a broker re-registers on a new session.
    """


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


class StaleControllerEpochError(ClusterError):
    """A request from a controller whose epoch is older than one this broker has already
    seen: it comes from an ex-controller that has not noticed yet (paused, partitioned, or
    its ZooKeeper session expired). Refused whole; nothing was changed."""

    error_code = 11


class StaleBrokerEpochError(ClusterError):
    """A controller request meant for an earlier life of this broker (its broker epoch, the
    czxid of ``/brokers/ids/<id>``, is older than this broker's registration). Refused whole;
    the controller sends again once it sees the new registration."""

    error_code = 77


class InvalidUpdateVersionError(ClusterError):
    """A partition change proposed at a partition epoch that is no longer current: the
    partition's state changed since the proposer read it. Read the new state and decide
    again."""

    error_code = 95


class BrokerAuthenticationError(ClusterError):
    """A connection claimed to be a broker of the cluster without the cluster's inter-broker
    secret (AuthenticateBroker). The connection stays a client's; inter-broker APIs on it are
    refused. Its code is SASL authentication's, which a client raises as
    :class:`AuthenticationError`."""

    error_code = 58
    shares_code = True


class StateChangeFailedError(ClusterError):
    """A partition or replica state change that the controller's transition table refuses."""


class PreferredLeaderNotAvailableError(RetriableError, ClusterError):
    """A preferred leader election (ElectLeaders, PREFERRED) found the partition's preferred
    replica (the first of its assignment) dead or out of the ISR: leadership stays where it
    is. Retriable: once that replica is back in the ISR, elect again."""

    error_code = 80


class EligibleLeadersNotAvailableError(RetriableError, ClusterError):
    """An unclean leader election (ElectLeaders, UNCLEAN) found no live replica to lead the
    partition. Retriable: start a broker that holds a replica, then elect again."""

    error_code = 83


class ElectionNotNeededError(ClusterError):
    """ElectLeaders found the partition already led by the replica it would elect (its
    preferred replica, or for UNCLEAN a live leader): nothing was changed. Not a failure of
    the election; nothing to retry."""

    error_code = 84


class InconsistentClusterIdError(ClusterError):
    """A broker whose log directory served a cluster with another ``/cluster/id`` (Kafka's
    InconsistentClusterIdException); ``directory`` names it."""

    def __init__(self, message: str, *, directory: str) -> None:
        super().__init__(message)
        self.directory = directory


class InconsistentBrokerIdError(ClusterError):
    """A broker whose log directory served another ``broker.id`` of its cluster (Kafka's
    InconsistentBrokerIdException); ``directory`` names it."""

    def __init__(self, message: str, *, directory: str) -> None:
        super().__init__(message)
        self.directory = directory


class LocalClusterError(ClusterError):
    """A local cluster (``spark-mq cluster``, ``LocalCluster``) whose broker or ZooKeeper did
    not start, register or stop in time, or a cluster directory in the wrong state;
    ``log_path`` names the output that says why, when there is one."""

    def __init__(self, message: str, *, log_path: str | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path
