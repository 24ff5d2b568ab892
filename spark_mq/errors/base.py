"""The root of the hierarchy and the families named by what a caller does: retry
(:class:`RetriableError`) or close the producer (:class:`ProducerFatalError`). The tree and
what each error means: :mod:`spark_mq.errors`.
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
