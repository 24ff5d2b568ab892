"""The topics a consumer group subscribes to, read from its members' JoinGroup metadata.

The coordinator treats protocol metadata as opaque bytes, except for one purpose: expiring
the committed offsets of topics a Stable consumer group no longer subscribes to (Kafka's
KIP-496, :meth:`~spark_mq.broker.group.offsets.OffsetManager.expire`). For that it reads the
``topics`` of each member's subscription, for the protocol the group chose.

The bytes are the consumer's subscription, written by
:func:`spark_mq.client.assignors.metadata.encode_subscription` (the layout is documented
there and in ``docs/groups.md``)::

    subscription    [version, topics, owned, generation, user_data]   (MessagePack array)

Only the first two fields are read here, and trailing fields are ignored, so any version of
the format (versions only append fields) decodes. This module deliberately does not import
the client package: the broker must not depend on client code, and it needs only the topics.

Anything that does not decode (a member of another client, a protocol type other than
``consumer``) means the coordinator does not know the group's subscriptions, and then it
expires nothing by subscription, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final

import msgspec

#: The protocol type consumers join with (Kafka's ``ConsumerProtocol.PROTOCOL_TYPE``); other
#: types (Kafka Connect's "connect", ...) carry metadata this module cannot read.
CONSUMER_PROTOCOL_TYPE: Final = "consumer"


class _SubscriptionTopics(msgspec.Struct, array_like=True, frozen=True):
    """The leading fields of every subscription version; the rest are ignored."""

    version: Annotated[int, msgspec.Meta(ge=0)]
    topics: list[str]


_decoder = msgspec.msgpack.Decoder(_SubscriptionTopics)


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics one member's subscription names; None if the bytes do not decode."""
    try:
        return frozenset(_decoder.decode(metadata).topics)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def subscribed_topics(
    protocol_type: str | None, metadata: Iterable[bytes]
) -> frozenset[str] | None:
    """The union of the members' subscribed topics, or None when it is not known: a group
    that is not a consumer group, or a member whose metadata does not decode."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    topics: set[str] = set()
    for data in metadata:
        one = subscription_topics(data)
        if one is None:
            return None
        topics |= one
    return frozenset(topics)
