"""Tests for spark_mq.protocol.error_codes: every code has one class, classes agree with their
codes (except the documented shared ones), ``retriable`` agrees with Kafka for the common
codes, and exceptions survive the trip broker -> code -> client.
"""

from __future__ import annotations

import errno
import inspect

import pytest

from spark_mq import errors as e
from spark_mq.protocol.error_codes import (
    _CLASS_BY_CODE,
    ErrorCode,
    code_for,
    error_from_code,
    exception_class,
)

CODES = [code for code in ErrorCode if code is not ErrorCode.NONE]

#: Codes that more than one class carries, and the class the client raises for each. The
#: other classes are what the broker sees; docs/protocol.md names them in its error table.
SHARED_CODES: dict[int, tuple[type[e.SparkMQError], set[type[e.SparkMQError]]]] = {
    # SinkSchemaError is raised on the Spark driver only; on the wire it would be a config
    # error like any other.
    40: (e.ConfigError, {e.ConfigError, e.SinkSchemaError}),
    42: (e.InvalidRequestError, {e.InvalidRequestError, e.CorruptFrameError}),
    56: (
        e.KafkaStorageError,
        {e.KafkaStorageError, e.LogDirectoryFullError, e.PartitionOfflineError},
    ),
    # A failed SASL exchange and a wrong inter-broker secret (AuthenticateBroker).
    58: (e.AuthenticationError, {e.AuthenticationError, e.BrokerAuthenticationError}),
}

#: Client-side refinements of a code's class: raised by the clients only (never sent), they
#: inherit their parent's code and are not second owners of it.
CLIENT_REFINEMENTS = {
    e.NoOffsetForPartitionError,
    e.DeliveryTimeoutError,
    e.BufferExhaustedError,
    e.ExecutorEndpointError,
}

#: Kafka's ``retriable`` for the codes a client meets most (its exception classes extend
#: RetriableException or not).
KAFKA_RETRIABLE = [3, 5, 6, 7, 13, 14, 15, 16, 19, 20, 56, 74, 75]
KAFKA_NOT_RETRIABLE = [-1, 1, 10, 17, 21, 22, 25, 27, 35, 36, 37, 38, 40, 42, 45, 46, 47, 59, 90]
#: Where spark_mq deliberately differs, as docs/protocol.md explains: code -> retriable here.
DEVIATIONS = {2: False, 8: True, 51: True}


def all_error_classes() -> list[type[e.SparkMQError]]:
    return [
        cls for _, cls in inspect.getmembers(e, inspect.isclass) if issubclass(cls, e.SparkMQError)
    ]


def keyword_attributes(cls: type[e.SparkMQError]) -> list[str]:
    return [
        name
        for name, param in inspect.signature(cls.__init__).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    ]


# ---------------------------------------------------------------------------------------------
# The table


def test_every_code_has_a_class() -> None:
    assert set(_CLASS_BY_CODE) == set(CODES)
    for code in CODES:
        assert exception_class(code) is _CLASS_BY_CODE[code]
        assert exception_class(int(code)) is _CLASS_BY_CODE[code]


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_class_carries_its_code(code: ErrorCode) -> None:
    assert _CLASS_BY_CODE[code].error_code == code


def test_shared_codes_are_exactly_the_documented_ones() -> None:
    by_code: dict[int, set[type[e.SparkMQError]]] = {}
    for cls in all_error_classes():
        if cls.error_code != ErrorCode.UNKNOWN_SERVER_ERROR and cls not in CLIENT_REFINEMENTS:
            by_code.setdefault(cls.error_code, set()).add(cls)
    shared = {code: classes for code, classes in by_code.items() if len(classes) > 1}
    assert shared == {code: classes for code, (_, classes) in SHARED_CODES.items()}
    for code, (client_class, _) in SHARED_CODES.items():
        assert _CLASS_BY_CODE[ErrorCode(code)] is client_class


def test_shares_code_marks_the_classes_a_client_does_not_raise() -> None:
    for cls in all_error_classes():
        owns = "error_code" in vars(cls) and cls.error_code != ErrorCode.UNKNOWN_SERVER_ERROR
        if owns:
            assert cls.shares_code is (_CLASS_BY_CODE[ErrorCode(cls.error_code)] is not cls), cls


def test_every_class_code_is_a_known_code() -> None:
    known = {int(code) for code in ErrorCode}
    for cls in all_error_classes():
        assert cls.error_code in known, cls


def test_classes_without_a_wire_code_are_not_in_the_table() -> None:
    mapped = set(_CLASS_BY_CODE.values())
    for cls in all_error_classes():
        if cls.error_code == ErrorCode.UNKNOWN_SERVER_ERROR:
            assert cls not in mapped or cls is e.UnknownServerError, cls


@pytest.mark.parametrize("code", [0, 4, 9, 43, 999, 1005, -2, 2**15 - 1])
def test_unknown_codes_map_to_unknown_server_error(code: int) -> None:
    assert exception_class(code) is e.UnknownServerError


# ---------------------------------------------------------------------------------------------
# retriable


@pytest.mark.parametrize("code", KAFKA_RETRIABLE)
def test_retriable_like_kafka(code: int) -> None:
    assert ErrorCode(code).retriable
    assert exception_class(code).retriable


@pytest.mark.parametrize("code", KAFKA_NOT_RETRIABLE)
def test_not_retriable_like_kafka(code: int) -> None:
    assert not ErrorCode(code).retriable
    assert not exception_class(code).retriable


@pytest.mark.parametrize(("code", "retriable"), sorted(DEVIATIONS.items()))
def test_documented_deviations_from_kafka(code: int, retriable: bool) -> None:
    assert ErrorCode(code).retriable is retriable


def test_none_is_not_retriable() -> None:
    assert ErrorCode.NONE.retriable is False


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_code_retriable_is_its_class_retriable(code: ErrorCode) -> None:
    assert code.retriable is _CLASS_BY_CODE[code].retriable


# ---------------------------------------------------------------------------------------------
# error_from_code


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_error_from_code_builds_the_class(code: ErrorCode) -> None:
    exc = error_from_code(code, "what happened", topic="t", partition=3)
    cls = _CLASS_BY_CODE[code]
    assert type(exc) is cls
    assert str(exc) == "what happened"
    assert exc.retriable is cls.retriable
    assert exc.error_code == code
    attributes = keyword_attributes(cls)
    for name in attributes:
        if name not in ("topic", "partition"):
            assert getattr(exc, name) is None, name
    if "topic" in attributes:
        assert exc.topic == "t"  # type: ignore[attr-defined]
    if "partition" in attributes:
        assert exc.partition == 3  # type: ignore[attr-defined]
    if "topic" not in attributes:
        assert not hasattr(exc, "topic")


def test_error_from_code_offset_out_of_range() -> None:
    exc = error_from_code(1, topic="t", partition=2)
    assert isinstance(exc, e.OffsetOutOfRangeError)
    assert isinstance(exc, e.StorageError)  # caught the same way as a local log's error
    assert (exc.topic, exc.partition) == ("t", 2)
    assert exc.offset is None
    assert exc.log_start_offset is None
    assert exc.log_end_offset is None


def test_error_from_code_unknown_topic_is_retriable() -> None:
    exc = error_from_code(3, "unknown topic 'x'", topic="x")
    assert isinstance(exc, e.UnknownTopicOrPartitionError)
    assert exc.retriable
    assert (exc.topic, exc.partition) == ("x", None)


def test_error_from_code_config_error_has_no_key() -> None:
    exc = error_from_code(40, "bad retention.ms")
    assert isinstance(exc, e.ConfigError)
    assert (exc.key, exc.value) == (None, None)


def test_error_from_code_default_message_names_the_code() -> None:
    assert str(error_from_code(7)) == "broker returned REQUEST_TIMED_OUT"
    unknown = error_from_code(12345)
    assert type(unknown) is e.UnknownServerError
    assert "12345" in str(unknown)


def test_error_from_code_broker_not_available_is_a_network_error() -> None:
    exc = error_from_code(8)
    assert isinstance(exc, e.BrokerNotAvailableError)
    assert isinstance(exc, e.NetworkError)
    assert exc.retriable


# ---------------------------------------------------------------------------------------------
# code_for


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_code_for_inverts_error_from_code(code: ErrorCode) -> None:
    assert code_for(error_from_code(code)) is code


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EIO, "Input/output error"),
        PermissionError(errno.EACCES, "Permission denied"),
        FileNotFoundError(errno.ENOENT, "No such file"),
        e.LogDirectoryFullError("disk full", path="/data"),
        e.CorruptIndexError("bad index", path="/data/t-0/0.index"),
        e.CorruptCheckpointError("bad checkpoint", path="/data/recovery-point-offset-checkpoint"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_code_for_storage_failures(exc: BaseException) -> None:
    assert code_for(exc) is ErrorCode.KAFKA_STORAGE_ERROR


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("bug"),
        ValueError("bug"),
        KeyError("bug"),
        e.LogDirectoryLockedError("locked", path="/data", owner=None),
        e.LogClosedError("closed"),
        e.UsageError("closed producer"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_code_for_unclassified(exc: BaseException) -> None:
    assert code_for(exc) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_code_for_classes_with_codes() -> None:
    assert code_for(e.CorruptFrameError("garbage")) is ErrorCode.INVALID_REQUEST
    assert code_for(e.ConfigError("bad", key="retention.ms")) is ErrorCode.INVALID_CONFIG
    assert code_for(e.InvalidTopicError("bad name", topic="a b")) is (
        ErrorCode.INVALID_TOPIC_EXCEPTION
    )
    too_large = e.RecordTooLargeError("too big", size_bytes=10, max_bytes=5)
    assert code_for(too_large) is ErrorCode.MESSAGE_TOO_LARGE
    out_of_order = e.OutOfOrderSequenceError("gap", producer_id=1, producer_epoch=0)
    assert code_for(out_of_order) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
