"""The bytes a subscription, an assignment and the sticky assignors' user data travel as.

A member puts an encoded subscription in the ``metadata`` of each protocol it offers in
JoinGroup; the leader puts an encoded assignment per member in SyncGroup. Both are opaque to
the coordinator, which only stores and forwards them. Each is one MessagePack array (msgspec)
whose first element is a format version::

    subscription    [version=0, topics, owned, generation, user_data]
    assignment      [version=0, partitions, user_data]
    sticky data     [version=0, owned, generation]

    topics          array of str
    owned           array of [topic: str, partitions: array of int >= 0], one entry per topic
    partitions      same shape as owned
    generation      int >= -1 (-1: the member has never completed a rebalance)
    user_data       bin, the assignor's own bytes (sticky data for the sticky assignors)

Partitions are grouped by topic, as in Kafka's ConsumerProtocol, so a topic name is written
once. Versions only ever append fields: a decoder ignores trailing elements it does not know,
so an older member reads a newer member's bytes and gets the fields it understands. Nothing is
checksummed here (the frame that carries the bytes is); bytes that are not a valid array of
the right shape raise :class:`InvalidGroupMetadataError`, which a leader must treat as a member
speaking a different protocol.

>>> from spark_mq.client.assignors import Subscription
>>> data = encode_subscription(Subscription(["t"], [("t", 0)], generation=3))
>>> decode_subscription(data).owned_partitions
(TopicPartition(topic='t', partition=0),)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Final

import msgspec

from spark_mq.client.assignors.assignor import DEFAULT_GENERATION, Assignment, Subscription
from spark_mq.client.records import TopicPartition
from spark_mq.errors import InconsistentGroupProtocolError

#: The version this module writes; it reads any version >= 0.
METADATA_VERSION: Final = 0

_Partition = Annotated[int, msgspec.Meta(ge=0)]
_Generation = Annotated[int, msgspec.Meta(ge=DEFAULT_GENERATION)]
_Version = Annotated[int, msgspec.Meta(ge=0)]


class InvalidGroupMetadataError(InconsistentGroupProtocolError):
    """Subscription, assignment or sticky user-data bytes that do not decode.

    ``kind`` says which of the three it was. The member that sent them runs an incompatible
    client: remove it from the group or upgrade it.
    """

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class _TopicPartitions(msgspec.Struct, array_like=True, frozen=True):
    topic: str
    partitions: list[_Partition]


class _SubscriptionV0(msgspec.Struct, array_like=True, frozen=True):
    version: _Version
    topics: list[str]
    owned: list[_TopicPartitions]
    generation: _Generation
    user_data: bytes


class _AssignmentV0(msgspec.Struct, array_like=True, frozen=True):
    version: _Version
    partitions: list[_TopicPartitions]
    user_data: bytes


class _StickyDataV0(msgspec.Struct, array_like=True, frozen=True):
    version: _Version
    owned: list[_TopicPartitions]
    generation: _Generation


@dataclass(frozen=True, slots=True)
class StickyUserData:
    """What the sticky assignors carry in ``Subscription.user_data``: the partitions the
    member held after its last rebalance and the generation it got them in."""

    owned_partitions: tuple[TopicPartition, ...]
    generation: int = DEFAULT_GENERATION


_ENCODER: Final = msgspec.msgpack.Encoder()
_SUBSCRIPTION_DECODER: Final = msgspec.msgpack.Decoder(_SubscriptionV0)
_ASSIGNMENT_DECODER: Final = msgspec.msgpack.Decoder(_AssignmentV0)
_STICKY_DECODER: Final = msgspec.msgpack.Decoder(_StickyDataV0)
# msgspec reports invalid UTF-8 in a str as UnicodeDecodeError rather than DecodeError.
_DECODE_ERRORS: Final = (msgspec.DecodeError, UnicodeDecodeError)


def _group(partitions: Iterable[tuple[str, int]]) -> list[_TopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [_TopicPartitions(t, sorted(ps)) for t, ps in sorted(by_topic.items())]


def _ungroup(groups: list[_TopicPartitions]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(g.topic, p) for g in groups for p in g.partitions)


def encode_subscription(subscription: Subscription) -> bytes:
    """The JoinGroup metadata bytes of ``subscription`` (its ``group_instance_id`` travels in
    the JoinGroup request itself and is not included)."""
    return _ENCODER.encode(
        _SubscriptionV0(
            METADATA_VERSION,
            list(subscription.topics),
            _group(subscription.owned_partitions),
            subscription.generation,
            subscription.user_data,
        )
    )


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """Read a member's JoinGroup metadata; ``group_instance_id`` comes from its JoinGroup entry."""
    try:
        wire = _SUBSCRIPTION_DECODER.decode(data)
    except _DECODE_ERRORS as exc:
        raise InvalidGroupMetadataError(
            f"subscription metadata does not decode ({exc}); the member runs an "
            "incompatible client",
            kind="subscription",
        ) from exc
    return Subscription(
        wire.topics,
        _ungroup(wire.owned),
        wire.generation,
        group_instance_id,
        wire.user_data,
    )


def encode_assignment(assignment: Assignment) -> bytes:
    """The SyncGroup bytes of one member's ``assignment``."""
    return _ENCODER.encode(
        _AssignmentV0(METADATA_VERSION, _group(assignment.partitions), assignment.user_data)
    )


def decode_assignment(data: bytes) -> Assignment:
    """Read the assignment bytes a member received in SyncGroup.

    Kafka's coordinator sends empty bytes to a member the leader assigned nothing; that reads
    as an empty assignment.
    """
    if not data:
        return Assignment(())
    try:
        wire = _ASSIGNMENT_DECODER.decode(data)
    except _DECODE_ERRORS as exc:
        raise InvalidGroupMetadataError(
            f"assignment metadata does not decode ({exc}); the leader runs an incompatible client",
            kind="assignment",
        ) from exc
    return Assignment(tuple(sorted(_ungroup(wire.partitions))), wire.user_data)


def encode_sticky_user_data(data: StickyUserData) -> bytes:
    """The ``user_data`` bytes of the sticky assignors."""
    return _ENCODER.encode(
        _StickyDataV0(METADATA_VERSION, _group(data.owned_partitions), data.generation)
    )


def decode_sticky_user_data(data: bytes) -> StickyUserData:
    """Read the sticky assignors' ``user_data``; a member that sent none owns nothing."""
    if not data:
        return StickyUserData(())
    try:
        wire = _STICKY_DECODER.decode(data)
    except _DECODE_ERRORS as exc:
        raise InvalidGroupMetadataError(
            f"sticky assignor user data does not decode ({exc}); the member runs an "
            "incompatible client",
            kind="sticky user data",
        ) from exc
    return StickyUserData(_ungroup(wire.owned), wire.generation)
