"""The records of ``__transaction_state``: one per transactional id, one per two-phase owner,
one per anonymous two-phase decision.

The topic is compacted: the newest record per key is the truth and a null value (a
tombstone) deletes the key. Keys are fixed binary layouts (never MessagePack, so one key is
always the same bytes), big-endian, told apart by their leading version as in Kafka::

    transaction key (version 0)   owner key (version 1)       decision key (version 2)
    +0  int16  version = 0        +0  int16  version = 1      +0  int16  version = 2
    +2  int16  n = len(id)        +2  int16  n = len(owner)   +2  int16  n = len(id)
    +4  n      transactional id   +4  n      owner (UTF-8)    +4  n      decision id

Values are MessagePack arrays whose first element is the value's version; later versions
only append elements and readers ignore trailing ones::

    transaction value v0  [0, producer_id, last_producer_id, producer_epoch,
                           last_producer_epoch, timeout_ms, state (name), partitions,
                           txn_start_ms, prepared_ms, last_update_ms, txn_number]
        partitions        [[topic, [partition, ...]], ...]
    decision value v0     [0, sequence, timestamp_ms, entries, closed_prefix, instance]
                          (owner and decision keys; closed_prefix and instance may be
                          absent, in records written before they existed: None)
        entry             [transactional_id, producer_id, producer_epoch, txn_number, commit]

A decision value is the commit point of a CommitPreparedTxns request (or of an AbortTxns that
closes its scope): one append that lists every transaction of the decision (``commit`` True
for the committed ones, False for those its scope aborts). Under an owner key it also
records the owner's newest ``sequence`` (compaction keeps the newest per owner); a decision
without an owner gets a decision key of its own, with ``sequence`` -1, tombstoned once its
markers are written.
``closed_prefix`` is set once the owner was closed (``scope.close``): from then on no
transaction whose id starts with it may begin, grow or be prepared; every later record of
the owner carries it on, so compaction never reopens the owner.
Nothing here is checksummed: the record batch's CRC covers it. Writer: the coordinator, on
the event loop thread; reader: the broker at startup. A key or value that does not decode
raises :class:`~spark_mq.errors.CorruptRecordError`; an unknown key version decodes to None.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Final

import msgspec

from spark_mq.broker.txn.state import TxnMetadata, TxnState
from spark_mq.errors import CorruptRecordError, InvalidRequestError

TXN_KEY_VERSION: Final = 0
OWNER_KEY_VERSION: Final = 1
DECISION_KEY_VERSION: Final = 2
VALUE_VERSION: Final = 0

_INT16 = struct.Struct(">h")
_MAX_STRING_BYTES: Final = 32767


@dataclasses.dataclass(frozen=True, slots=True)
class TxnKey:
    transactional_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class OwnerKey:
    owner: str


@dataclasses.dataclass(frozen=True, slots=True)
class DecisionKey:
    decision_id: str


class DecisionEntry(msgspec.Struct, array_like=True, frozen=True):
    """One transaction of a two-phase decision."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_number: int
    commit: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """A decision value: the owner's sequence (-1: none), the transactions it decided,
    once the owner is closed, the transactional id prefix it closed, and the instance the
    owner is bound to (None: not bound)."""

    sequence: int
    timestamp_ms: int
    entries: tuple[DecisionEntry, ...]
    closed_prefix: str | None = None
    instance: str | None = None


class _TxnValueV0(msgspec.Struct, array_like=True, frozen=True):
    version: int
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: str
    partitions: list[tuple[str, list[int]]]
    txn_start_ms: int
    prepared_ms: int
    last_update_ms: int
    txn_number: int
    owner_prefix: str | None = None  # absent in records written before prepares named one


class _DecisionValueV0(msgspec.Struct, array_like=True, frozen=True):
    version: int
    sequence: int
    timestamp_ms: int
    entries: list[DecisionEntry]
    closed_prefix: str | None = None
    instance: str | None = None  # absent in records written before owners had instances


_ENCODER = msgspec.msgpack.Encoder()
_TXN_DECODER = msgspec.msgpack.Decoder(_TxnValueV0)
_DECISION_DECODER = msgspec.msgpack.Decoder(_DecisionValueV0)
_STATES_BY_NAME: Final = {s.value: s for s in TxnState}


def _key(version: int, text: str, what: str) -> bytes:
    data = text.encode("utf-8")
    if not data or len(data) > _MAX_STRING_BYTES:
        raise InvalidRequestError(
            f"{what} must be 1 to {_MAX_STRING_BYTES} bytes of UTF-8, got {len(data)}"
        )
    return _INT16.pack(version) + _INT16.pack(len(data)) + data


def txn_key(transactional_id: str) -> bytes:
    return _key(TXN_KEY_VERSION, transactional_id, "transactional.id")


def owner_key(owner: str) -> bytes:
    return _key(OWNER_KEY_VERSION, owner, "owner")


def decision_key(decision_id: str) -> bytes:
    return _key(DECISION_KEY_VERSION, decision_id, "decision id")


def decode_key(key: bytes) -> TxnKey | OwnerKey | DecisionKey | None:
    """The key's meaning; None for a key version this broker does not know."""
    if len(key) < 4:
        raise CorruptRecordError(f"__transaction_state key of {len(key)} bytes: {key!r}")
    version, length = _INT16.unpack_from(key, 0)[0], _INT16.unpack_from(key, 2)[0]
    if version not in (TXN_KEY_VERSION, OWNER_KEY_VERSION, DECISION_KEY_VERSION):
        return None
    if length < 0 or 4 + length != len(key):
        raise CorruptRecordError(f"__transaction_state key has a bad length: {key!r}")
    try:
        text = key[4:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"__transaction_state key is not UTF-8: {key!r}") from exc
    if version == TXN_KEY_VERSION:
        return TxnKey(text)
    if version == OWNER_KEY_VERSION:
        return OwnerKey(text)
    return DecisionKey(text)


def encode_txn_value(txn: TxnMetadata) -> bytes:
    return _ENCODER.encode(
        _TxnValueV0(
            VALUE_VERSION,
            txn.producer_id,
            txn.last_producer_id,
            txn.producer_epoch,
            txn.last_producer_epoch,
            txn.timeout_ms,
            txn.state.value,
            [(topic, parts) for topic, parts in txn.topics().items()],
            txn.txn_start_ms,
            txn.prepared_ms,
            txn.last_update_ms,
            txn.txn_number,
            txn.owner_prefix,
        )
    )


def decode_txn_value(transactional_id: str, value: bytes) -> TxnMetadata:
    try:
        v = _TXN_DECODER.decode(value)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(
            f"__transaction_state value of {transactional_id!r} does not decode: {exc}"
        ) from exc
    state = _STATES_BY_NAME.get(v.state)
    if v.version < 0 or state is None:
        raise CorruptRecordError(
            f"__transaction_state value of {transactional_id!r}: version {v.version}, state "
            f"{v.state!r}"
        )
    return TxnMetadata(
        transactional_id,
        producer_id=v.producer_id,
        producer_epoch=v.producer_epoch,
        timeout_ms=v.timeout_ms,
        state=state,
        last_producer_id=v.last_producer_id,
        last_producer_epoch=v.last_producer_epoch,
        partitions=frozenset((topic, p) for topic, parts in v.partitions for p in parts),
        txn_start_ms=v.txn_start_ms,
        prepared_ms=v.prepared_ms,
        last_update_ms=v.last_update_ms,
        txn_number=v.txn_number,
        owner_prefix=v.owner_prefix or None,
    )


def encode_decision(decision: Decision) -> bytes:
    return _ENCODER.encode(
        _DecisionValueV0(
            VALUE_VERSION,
            decision.sequence,
            decision.timestamp_ms,
            list(decision.entries),
            decision.closed_prefix,
            decision.instance,
        )
    )


def decode_decision(value: bytes) -> Decision:
    try:
        v = _DECISION_DECODER.decode(value)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"__transaction_state decision does not decode: {exc}") from exc
    if v.version < 0:
        raise CorruptRecordError(f"__transaction_state decision of version {v.version}")
    return Decision(
        v.sequence, v.timestamp_ms, tuple(v.entries), v.closed_prefix or None, v.instance or None
    )
