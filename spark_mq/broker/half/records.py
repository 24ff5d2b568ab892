"""The records of ``__half_messages`` and ``__half_ops``.

Both topics are compacted and keyed by the half message's id (UTF-8), one partition each.
Values are MessagePack arrays whose first element is the record's version (0):

- ``__half_messages``: :class:`HalfRecord`, written once by SendHalfMessage; a tombstone
  (null value) once the message is committed or rolled back, so compaction removes it. A
  discarded message keeps its record (the listing of discarded messages reads it) until its
  outcome expires.
- ``__half_ops``: :class:`HalfOp`, the newest state of the message: PENDING with a check
  count (each check whose answer was due and did not come), then one of COMMITTED (with the
  real record's offset), ROLLED_BACK or DISCARDED, so that a repeated end of a finished
  message answers what the first end did. A tombstone once the outcome is
  ``transaction.half.op.retention.ms`` old (written after the half record's tombstone), so
  compaction removes it too.

Who writes: only the broker's half-message service, on the event loop. What a crash leaves:
the last append may be missing (never torn: a batch is checked by its CRC on recovery);
the service's order of appends makes every such prefix a valid state (see
:mod:`~spark_mq.broker.half.service`).

    >>> op = HalfOp(0, "m-1", 1, 0, 42, 1_700_000_000_000)
    >>> decode_op(encode_op(op)) == op
    True
"""

from __future__ import annotations

from typing import Final

import msgspec

from spark_mq.errors import CorruptRecordError
from spark_mq.protocol.half_messages import HalfHeader

#: The one record version written and read.
VERSION: Final = 0


class HalfRecord(msgspec.Struct, array_like=True, frozen=True):
    """A half message as stored: where it goes, what it holds, who answers for it."""

    version: int
    message_id: str
    producer_group: str
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: list[HalfHeader]
    created_ms: int
    #: When the first check is due after ``created_ms``.
    check_immunity_ms: int
    #: The broker's producer id for this message's real (or discard) record, written with
    #: epoch 0 and sequence 0: a second append of it is a duplicate the log recognises, so
    #: an end retried after a crash cannot write the record twice.
    producer_id: int


class HalfOp(msgspec.Struct, array_like=True, frozen=True):
    """The newest state of a half message (``state``: a ``HalfState``)."""

    version: int
    message_id: str
    state: int
    check_count: int
    #: The real record's offset when COMMITTED, else -1.
    offset: int = -1
    #: The service's clock (wall-clock ms) when it wrote this op: for a final op, when the
    #: message ended, from which its outcome expires. -1 in ops written before the field
    #: existed (the trailing field is optional, so they still decode as version 0).
    time_ms: int = -1


_ENCODER = msgspec.msgpack.Encoder()
_RECORD_DECODER = msgspec.msgpack.Decoder(HalfRecord)
_OP_DECODER = msgspec.msgpack.Decoder(HalfOp)


def encode_record(record: HalfRecord) -> bytes:
    return _ENCODER.encode(record)


def encode_op(op: HalfOp) -> bytes:
    return _ENCODER.encode(op)


def decode_record(data: bytes) -> HalfRecord:
    """A ``__half_messages`` value; CorruptRecordError if it is not one."""
    try:
        record = _RECORD_DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"__half_messages record: {exc}") from exc
    _check_version(record.version, "__half_messages")
    return record


def decode_op(data: bytes) -> HalfOp:
    """A ``__half_ops`` value; CorruptRecordError if it is not one."""
    try:
        op = _OP_DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"__half_ops record: {exc}") from exc
    _check_version(op.version, "__half_ops")
    return op


def _check_version(version: int, topic: str) -> None:
    if version != VERSION:
        raise CorruptRecordError(
            f"{topic} record version {version} is not known to this broker (it reads "
            f"{VERSION}); a newer spark_mq wrote it: run that version"
        )
