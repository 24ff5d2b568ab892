"""Errors of the wire protocol and a broker's answers (:class:`ProtocolError`): requests,
connections, leaders, producers and transactions, authorization, consumer groups. The
tree: :mod:`spark_mq.errors`.
"""

from __future__ import annotations

from spark_mq.errors.base import ProducerFatalError, RetriableError, SparkMQError


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
