"""The records of ``__consumer_offsets``: committed offsets and group metadata.

The topic is compacted, so a record's key says what it is about and the newest record per
key is the truth; a record with a null value (a tombstone) deletes the key. Two kinds of key,
told apart by their first two bytes (the key version, as in Kafka, whose versions 0-1 are
offset keys and 2 the group key). Keys are fixed binary layouts, never MessagePack, so that
the same key is always the same bytes (compaction compares bytes), big-endian::

    offset key (version 1)                     group key (version 2)
    +0      int16  version = 1                 +0   int16  version = 2
    +2      int16  g = len(group id, UTF-8)    +2   int16  g = len(group id, UTF-8)
    +4      g      group id                    +4   g      group id
    +4+g    int16  t = len(topic, UTF-8)
    +6+g    t      topic
    +6+g+t  int32  partition

Values are MessagePack arrays whose first element is the value's version; later versions
only append elements, and readers ignore trailing elements they do not know (the wire
protocol's compatibility rule)::

    offset value v0  [0, offset, leader_epoch, metadata (str | nil), commit_timestamp_ms]
    group value v0   [0, protocol_type, generation_id, protocol_name (str | nil),
                      leader_id (str | nil), state_timestamp_ms, members]
    member           [member_id, group_instance_id (str | nil), client_id, client_host,
                      rebalance_timeout_ms, session_timeout_ms, subscription (bin),
                      assignment (bin)]

``state_timestamp_ms`` is when the group entered its current state (for an Empty group, when
it became empty: offsets expire from there); ``subscription`` is the member's metadata of
the group's protocol. Nothing here is checksummed: the record batch's CRC covers it. Who
writes: the coordinator, on the event loop thread, through ``store.OffsetsTopic``; who reads:
the broker at startup (``OffsetsTopic.load``). A key or value that does not decode raises
:class:`~spark_mq.errors.CorruptRecordError`; a key of an unknown version gives None (a newer
broker's record, skipped).
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from typing import Final

import msgspec

from spark_mq.errors import CorruptRecordError, InvalidRequestError

OFFSET_KEY_VERSION: Final = 1
GROUP_KEY_VERSION: Final = 2
VALUE_VERSION: Final = 0

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_MAX_STRING_BYTES: Final = 32767

#: (topic, partition): the key of a committed offset within its group.
TopicPartitionKey = tuple[str, int]


#: Append order of offset records in this process: live commits and loaded records alike
#: draw from it, in the order their records stand in ``__consumer_offsets`` (a group's
#: records all go to one partition, which loads in log order before it takes commits).
next_position = itertools.count().__next__


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetEntry:
    """A committed offset: the next offset to consume, as the consumer committed it.

    ``position`` (not stored, not compared) is where its record stands among the group's
    offset records (:data:`next_position`): when a transaction commits, its offset for a
    partition replaces the current one only if written after it, as Kafka decides, so a
    plain commit made while a transactional one was pending is not overwritten, and memory
    agrees with what compaction keeps (the newer record of a key).
    """

    offset: int
    leader_epoch: int = -1
    metadata: str | None = None
    commit_timestamp_ms: int = -1
    position: int = dataclasses.field(default=-1, compare=False)


def publish_committed(
    offsets: dict[TopicPartitionKey, OffsetEntry], staged: dict[TopicPartitionKey, OffsetEntry]
) -> int:
    """Publish a committed transaction's ``staged`` offsets into ``offsets``: each one that
    was written after the partition's current offset (or where there is none). How many."""
    published = 0
    for tp, entry in staged.items():
        current = offsets.get(tp)
        if current is None or current.position < entry.position:
            offsets[tp] = entry
            published += 1
    return published


class MemberRecord(msgspec.Struct, array_like=True, frozen=True):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class GroupRecord(msgspec.Struct, array_like=True, frozen=True):
    """What a group's metadata record holds (without its leading version)."""

    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: list[MemberRecord]


class _OffsetValueV0(msgspec.Struct, array_like=True, frozen=True):
    version: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp_ms: int


class _GroupValueV0(msgspec.Struct, array_like=True, frozen=True):
    version: int
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: list[MemberRecord]


_ENCODER = msgspec.msgpack.Encoder()
_OFFSET_DECODER = msgspec.msgpack.Decoder(_OffsetValueV0)
_GROUP_DECODER = msgspec.msgpack.Decoder(_GroupValueV0)


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


# ---------------------------------------------------------------------------------------------
# Keys


def _string(text: str, what: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > _MAX_STRING_BYTES:
        raise InvalidRequestError(
            f"{what} is {len(data)} bytes in UTF-8; at most {_MAX_STRING_BYTES} can be stored"
        )
    return _INT16.pack(len(data)) + data


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return b"".join(
        (
            _INT16.pack(OFFSET_KEY_VERSION),
            _string(group_id, "group id"),
            _string(topic, "topic"),
            _INT32.pack(partition),
        )
    )


def group_key(group_id: str) -> bytes:
    return _INT16.pack(GROUP_KEY_VERSION) + _string(group_id, "group id")


def _read_string(key: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(key):
        raise CorruptRecordError(f"__consumer_offsets key cut short at byte {pos}: {key!r}")
    (length,) = _INT16.unpack_from(key, pos)
    end = pos + 2 + length
    if length < 0 or end > len(key):
        raise CorruptRecordError(f"__consumer_offsets key has a bad string length: {key!r}")
    try:
        return key[pos + 2 : end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"__consumer_offsets key is not UTF-8: {key!r}") from exc


def decode_key(key: bytes) -> OffsetKey | GroupKey | None:
    """The key's meaning; None for a key version this broker does not know."""
    if len(key) < 2:
        raise CorruptRecordError(f"__consumer_offsets key of {len(key)} bytes: {key!r}")
    (version,) = _INT16.unpack_from(key, 0)
    if version in (0, OFFSET_KEY_VERSION):
        group_id, pos = _read_string(key, 2)
        topic, pos = _read_string(key, pos)
        if pos + 4 != len(key):
            raise CorruptRecordError(f"__consumer_offsets offset key has a bad size: {key!r}")
        (partition,) = _INT32.unpack_from(key, pos)
        return OffsetKey(group_id, topic, partition)
    if version == GROUP_KEY_VERSION:
        group_id, pos = _read_string(key, 2)
        if pos != len(key):
            raise CorruptRecordError(f"__consumer_offsets group key has a bad size: {key!r}")
        return GroupKey(group_id)
    return None


# ---------------------------------------------------------------------------------------------
# Values


def encode_offset_value(entry: OffsetEntry) -> bytes:
    return _ENCODER.encode(
        _OffsetValueV0(
            VALUE_VERSION,
            entry.offset,
            entry.leader_epoch,
            entry.metadata,
            entry.commit_timestamp_ms,
        )
    )


def decode_offset_value(value: bytes) -> OffsetEntry:
    try:
        v = _OFFSET_DECODER.decode(value)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"__consumer_offsets offset value does not decode: {exc}") from exc
    if v.version < 0:
        raise CorruptRecordError(f"__consumer_offsets offset value of version {v.version}")
    return OffsetEntry(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms, next_position())


def encode_group_value(record: GroupRecord) -> bytes:
    return _ENCODER.encode(
        _GroupValueV0(
            VALUE_VERSION,
            record.protocol_type,
            record.generation_id,
            record.protocol_name,
            record.leader_id,
            record.state_timestamp_ms,
            record.members,
        )
    )


def decode_group_value(value: bytes) -> GroupRecord:
    try:
        v = _GROUP_DECODER.decode(value)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"__consumer_offsets group value does not decode: {exc}") from exc
    if v.version < 0:
        raise CorruptRecordError(f"__consumer_offsets group value of version {v.version}")
    return GroupRecord(
        v.protocol_type,
        v.generation_id,
        v.protocol_name,
        v.leader_id,
        v.state_timestamp_ms,
        v.members,
    )
