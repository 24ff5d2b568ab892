"""Error codes on the wire: Kafka's numbering, each mapped to one exception class.

A response carries ``error_code`` (an ``int16``; 0 means success) and an optional
``error_message``. The broker turns an exception into a code with :func:`code_for`; a client
turns a code back into the same exception class with :func:`error_from_code`, so code that
catches :class:`~spark_mq.errors.OffsetOutOfRangeError` works the same whether the log is
local or behind a broker.

>>> from spark_mq.errors import UnknownTopicOrPartitionError
>>> exc = error_from_code(3, "unknown topic 'x'", topic="x", partition=0)
>>> isinstance(exc, UnknownTopicOrPartitionError), exc.retriable, exc.topic
(True, True, 'x')
>>> ErrorCode(3).name
'UNKNOWN_TOPIC_OR_PARTITION'
"""

from __future__ import annotations

import enum
import inspect

import spark_mq.errors as e


class ErrorCode(enum.IntEnum):
    """Kafka's error codes for the concepts spark_mq shares with Kafka, and (1000 and up)
    spark_mq's own for its own APIs."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    NO_REASSIGNMENT_IN_PROGRESS = 85
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    UNACCEPTABLE_CREDENTIAL = 93
    INVALID_UPDATE_VERSION = 95
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120
    #: spark_mq's own codes start at 1000, as its own API keys do.
    OWNER_INSTANCE_CONFLICT = 1000
    HALF_MESSAGE_NOT_FOUND = 1001

    @property
    def retriable(self) -> bool:
        """Whether a client may retry the same request after this error."""
        return self is not ErrorCode.NONE and _CLASS_BY_CODE[self].retriable


def _class_by_code() -> dict[ErrorCode, type[e.SparkMQError]]:
    """The class a client raises for each code, from the classes of :mod:`spark_mq.errors`:
    those that set ``error_code`` themselves. A subclass that inherits its parent's code is
    sent as that code and raised as the parent; a class that shares another's code says so
    with ``shares_code`` (42 is both a corrupt frame and an invalid request: a client raises
    InvalidRequestError)."""
    table: dict[ErrorCode, type[e.SparkMQError]] = {}
    for cls in vars(e).values():
        if not (isinstance(cls, type) and issubclass(cls, e.SparkMQError)):
            continue
        if "error_code" not in vars(cls) or cls.shares_code:
            continue
        code = ErrorCode(cls.error_code)  # every class's code has a name: ValueError if not
        if code in table:
            raise TypeError(
                f"{cls.__name__} and {table[code].__name__} both own error code {code.name}: "
                "mark one of them shares_code"
            )
        table[code] = cls
    table[ErrorCode.UNKNOWN_SERVER_ERROR] = e.UnknownServerError
    return table


_CLASS_BY_CODE: dict[ErrorCode, type[e.SparkMQError]] = _class_by_code()


def exception_class(code: int) -> type[e.SparkMQError]:
    """The class a client raises for ``code``; unknown codes map to UnknownServerError."""
    try:
        return _CLASS_BY_CODE[ErrorCode(code)]
    except (ValueError, KeyError):
        return e.UnknownServerError


def code_for(exc: BaseException) -> ErrorCode:
    """The code a broker sends for ``exc``.

    Storage failures that are not the client's fault (an I/O error, a full disk, a corrupt
    index) become KAFKA_STORAGE_ERROR; anything unclassified is UNKNOWN_SERVER_ERROR.
    """
    if isinstance(exc, e.LogDirectoryFullError | e.CorruptIndexError | e.CorruptCheckpointError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    if isinstance(exc, e.SparkMQError):
        try:
            return ErrorCode(exc.error_code)
        except ValueError:
            return ErrorCode.UNKNOWN_SERVER_ERROR
    if isinstance(exc, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_from_code(
    code: int,
    message: str | None = None,
    *,
    topic: str | None = None,
    partition: int | None = None,
) -> e.SparkMQError:
    """Build the exception a client raises for a response's ``error_code``.

    The exception's keyword attributes that the response does not carry (for example
    ``log_end_offset`` of an out-of-range error) are set to None; ``topic`` and
    ``partition`` are filled in when the class has them.
    """
    cls = exception_class(code)
    if message is None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error code {code}"
        message = f"broker returned {name}"
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            setattr(exc, name, None)
    if hasattr(exc, "topic"):
        exc.topic = topic
    if hasattr(exc, "partition"):
        exc.partition = partition
    return exc
