"""Half messages (RocketMQ-style transactional messages): SendHalfMessage (1005),
EndHalfMessage (1006), CheckHalfMessages (1007) and ListHalfMessages (1008), spark_mq's own
APIs (docs/half_messages.md, docs/protocol.md).

A producer of a *producer group* sends a half message (SendHalfMessage): the broker keeps it
in ``__half_messages``, where no consumer of its real topic sees it. The producer runs its
local transaction and ends the message (EndHalfMessage): COMMIT writes the real record to its
topic (its offset is assigned then), ROLLBACK drops it; either is recorded in ``__half_ops``.
Both are idempotent: a repeated end of the same message answers what the first one did.

The check-back stays client-driven, as every spark_mq (and Kafka) API is: each producer of a
group keeps one CheckHalfMessages request outstanding on its own connection (a long poll,
like a Fetch with ``max_wait_ms``). The broker answers it with the group's half messages
whose outcome it needs to ask about, or with none when ``max_wait_ms`` passes; the producer
asks its listener and answers each with EndHalfMessage (``from_check`` True), or with nothing
for UNKNOWN. A producer that is not polling is not live: its group's checks go to another
producer of the group that is.

    >>> r = SendHalfMessageRequest("orders", "m-1", "payments", 0, b"k", b"v")
    >>> r.partition, r.check_immunity_ms
    (0, -1)
"""

from __future__ import annotations

import enum

import msgspec


class HalfAction(enum.IntEnum):
    """How a producer ends a half message (RocketMQ's ``LocalTransactionState``)."""

    COMMIT = 1
    ROLLBACK = 2


class HalfState(enum.IntEnum):
    """Where a half message stands, as ListHalfMessages and EndHalfMessage report it."""

    PENDING = 0
    COMMITTED = 1
    ROLLED_BACK = 2
    DISCARDED = 3


class HalfHeader(msgspec.Struct, array_like=True, frozen=True):
    """One record header (Kafka's: a string key, a bytes value)."""

    key: str
    value: bytes


class HalfMessage(msgspec.Struct, array_like=True):
    """A half message as the broker hands it back for a check or a listing."""

    message_id: str
    producer_group: str
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[HalfHeader]
    #: Wall-clock ms when the broker stored it.
    created_ms: int
    #: How many times its state was asked of a producer so far.
    check_count: int
    state: int = 0


# -- SendHalfMessage (1005) ------------------------------------------------------------------


class SendHalfMessageRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Store a half message. ``message_id`` is the producer's (a UUID): a retried send of
    the same id stores nothing more. ``partition`` is the real record's partition, chosen by
    the producer's partitioner when it sends (the broker refuses -1); it is fixed from then
    on, so a committed record lands where its key's other records do. ``check_immunity_ms``
    -1 takes the
    broker's ``transaction.half.timeout.ms`` (RocketMQ's ``transactionTimeOut``); a value
    overrides it for this message (RocketMQ's ``CHECK_IMMUNITY_TIME_IN_SECONDS``)."""

    producer_group: str
    message_id: str
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[HalfHeader] = []
    check_immunity_ms: int = -1


class SendHalfMessageResponse(msgspec.Struct, array_like=True):
    error_code: int
    partition: int = -1
    error_message: str | None = None
    throttle_time_ms: int = 0


def send_half_message_error(
    _: SendHalfMessageRequest, code: int, message: str
) -> SendHalfMessageResponse:
    """SendHalfMessage failed with ``code``."""
    return SendHalfMessageResponse(code, error_message=message)


# -- EndHalfMessage (1006) -------------------------------------------------------------------


class EndHalfMessageRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """End a half message with ``action`` (:class:`HalfAction`). ``from_check`` says the
    answer comes from ``check_local_transaction`` (the broker logs it apart)."""

    producer_group: str
    message_id: str
    action: int
    from_check: bool = False


class EndHalfMessageResponse(msgspec.Struct, array_like=True):
    """``state`` is the message's outcome (:class:`HalfState`), the first end's on a
    repeat; ``offset`` the real record's offset once committed (-1 otherwise). An end that
    contradicts the recorded outcome (COMMIT after ROLLBACK, or any end of a discarded
    message) answers INVALID_TXN_STATE with that outcome in ``state``."""

    error_code: int
    state: int = 0
    offset: int = -1
    error_message: str | None = None
    throttle_time_ms: int = 0


def end_half_message_error(
    _: EndHalfMessageRequest, code: int, message: str
) -> EndHalfMessageResponse:
    """EndHalfMessage failed with ``code``."""
    return EndHalfMessageResponse(code, error_message=message)


# -- CheckHalfMessages (1007) ----------------------------------------------------------------


class CheckHalfMessagesRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A live producer of ``producer_group`` offers to answer checks: the broker answers at
    once with up to ``max_messages`` half messages due for a check, or waits up to
    ``max_wait_ms`` for some and answers with none."""

    producer_group: str
    max_wait_ms: int = 5_000
    max_messages: int = 100


class CheckHalfMessagesResponse(msgspec.Struct, array_like=True):
    error_code: int
    messages: list[HalfMessage] = []
    error_message: str | None = None
    throttle_time_ms: int = 0


def check_half_messages_error(
    _: CheckHalfMessagesRequest, code: int, message: str
) -> CheckHalfMessagesResponse:
    """CheckHalfMessages failed with ``code``."""
    return CheckHalfMessagesResponse(code, error_message=message)


# -- ListHalfMessages (1008) -----------------------------------------------------------------


class ListHalfMessagesRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The pending half messages (``discarded`` False) or the discarded ones (True), of
    ``producer_group`` or of every group (None)."""

    discarded: bool = False
    producer_group: str | None = None


class ListHalfMessagesResponse(msgspec.Struct, array_like=True):
    error_code: int
    messages: list[HalfMessage] = []
    #: Messages moved to the discard topic since the broker's log began.
    discarded_count: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0


def list_half_messages_error(
    _: ListHalfMessagesRequest, code: int, message: str
) -> ListHalfMessagesResponse:
    """ListHalfMessages failed with ``code``."""
    return ListHalfMessagesResponse(code, error_message=message)
