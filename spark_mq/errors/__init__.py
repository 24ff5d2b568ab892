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

The classes live in one module per family (``base``, ``usage``, ``storage``, ``protocol``,
``client``, ``cluster``) and are imported from here, where each says it belongs
(``__module__``): tracebacks, pickles and ``repr`` name ``spark_mq.errors.<Class>``.
"""

from __future__ import annotations

from spark_mq.errors.base import (
    ProducerFatalError,
    RetriableError,
    SparkMQError,
    _rebuild_error,
)
from spark_mq.errors.client import (
    BufferExhaustedError,
    CommitFailedError,
    DeliveryTimeoutError,
    InvalidReplicaAssignmentError,
    NoOffsetForPartitionError,
    NoReassignmentInProgressError,
)
from spark_mq.errors.cluster import (
    BrokerAuthenticationError,
    BrokerIdInUseError,
    ClusterError,
    ControllerMovedError,
    CorruptZnodeError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InconsistentBrokerIdError,
    InconsistentClusterIdError,
    InvalidUpdateVersionError,
    LocalClusterError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    StateChangeFailedError,
    ZooKeeperConnectionError,
    ZooKeeperNotInstalledError,
    ZooKeeperStartError,
)
from spark_mq.errors.protocol import (
    BrokerNotAvailableError,
    ClusterAuthorizationError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptFrameError,
    DuplicateSequenceError,
    ExecutorEndpointError,
    FencedInstanceIdError,
    FencedLeaderEpochError,
    GroupAuthorizationError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    HalfMessageNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidProducerIdMappingError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidSessionTimeoutError,
    InvalidTransactionTimeoutError,
    KafkaStorageError,
    LeaderNotAvailableError,
    MemberIdRequiredError,
    NetworkError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetMetadataTooLargeError,
    OwnerInstanceConflictError,
    ProducerFencedError,
    ProtocolError,
    RebalanceInProgressError,
    RequestTimedOutError,
    ResourceNotFoundError,
    SecurityDisabledError,
    SslAuthenticationError,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionalIdAuthorizationError,
    TransactionalIdNotFoundError,
    UnacceptableCredentialError,
    UnknownLeaderEpochError,
    UnknownMemberIdError,
    UnknownProducerIdError,
    UnknownServerError,
    UnstableOffsetCommitError,
    UnsupportedVersionError,
)
from spark_mq.errors.storage import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    DataLossError,
    InvalidPartitionsError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    LogClosedError,
    LogDirectoryFullError,
    LogDirectoryLockedError,
    LogDirectoryNotFoundError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionOfflineError,
    ProducerStateError,
    RecordTooLargeError,
    StorageError,
    TopicExistsError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from spark_mq.errors.usage import (
    AuthenticationError,
    ConfigError,
    IllegalSaslStateError,
    InvalidTopicError,
    SinkSchemaError,
    UnsupportedSaslMechanismError,
    UsageError,
)

__all__ = [
    "AuthenticationError",
    "BrokerAuthenticationError",
    "BrokerIdInUseError",
    "BrokerNotAvailableError",
    "BufferExhaustedError",
    "ClusterAuthorizationError",
    "ClusterError",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "ConfigError",
    "ControllerMovedError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptCheckpointError",
    "CorruptFrameError",
    "CorruptIndexError",
    "CorruptRecordError",
    "CorruptZnodeError",
    "DataLossError",
    "DeliveryTimeoutError",
    "DuplicateSequenceError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "ExecutorEndpointError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "GroupAuthorizationError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "HalfMessageNotFoundError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "InconsistentBrokerIdError",
    "InconsistentClusterIdError",
    "InconsistentGroupProtocolError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "InvalidUpdateVersionError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "LocalClusterError",
    "LogClosedError",
    "LogDirectoryFullError",
    "LogDirectoryLockedError",
    "LogDirectoryNotFoundError",
    "MemberIdRequiredError",
    "NetworkError",
    "NoOffsetForPartitionError",
    "NoReassignmentInProgressError",
    "NonEmptyGroupError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "OwnerInstanceConflictError",
    "PartitionOfflineError",
    "PreferredLeaderNotAvailableError",
    "ProducerFatalError",
    "ProducerFencedError",
    "ProducerStateError",
    "ProtocolError",
    "RebalanceInProgressError",
    "RecordTooLargeError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "RetriableError",
    "SecurityDisabledError",
    "SinkSchemaError",
    "SparkMQError",
    "SslAuthenticationError",
    "StaleBrokerEpochError",
    "StaleControllerEpochError",
    "StateChangeFailedError",
    "StorageError",
    "TopicAuthorizationError",
    "TopicExistsError",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationError",
    "TransactionalIdNotFoundError",
    "UnacceptableCredentialError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownTopicOrPartitionError",
    "UnstableOffsetCommitError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "UsageError",
    "ZooKeeperConnectionError",
    "ZooKeeperNotInstalledError",
    "ZooKeeperStartError",
]

# What Python shows and pickles is the public path, whichever module defines the class.
for _cls in (*(globals()[name] for name in __all__), _rebuild_error):
    _cls.__module__ = __name__
del _cls
