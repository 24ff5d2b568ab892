"""Errors a caller fixes in its call, its configuration or its credentials: configuration
(:class:`ConfigError`), usage (:class:`UsageError`) and authentication
(:class:`AuthenticationError`). The tree: :mod:`spark_mq.errors`.
"""

from __future__ import annotations

from typing import ClassVar

from spark_mq.errors.base import SparkMQError


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
