"""Metadata (key 3): brokers, topics, partitions and their leaders."""

from __future__ import annotations

import msgspec


class MetadataRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``topics`` None asks for every topic; an empty list for none (brokers only)."""

    topics: list[str] | None = None
    allow_auto_topic_creation: bool = False


class BrokerMetadata(msgspec.Struct, array_like=True):
    """A broker and where to reach it. ``host`` may be ``unix:/path`` for a local socket,
    in which case ``port`` is 0."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionMetadata(msgspec.Struct, array_like=True):
    error_code: int
    partition: int
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = []
    #: Why ``error_code`` is not 0, when the broker says (an offline partition's reason).
    error_message: str | None = None


class TopicMetadata(msgspec.Struct, array_like=True):
    error_code: int
    name: str
    partitions: list[PartitionMetadata]
    is_internal: bool = False
    error_message: str | None = None
    #: The topic's id ("": not known to the answering broker).
    topic_id: str = ""


class MetadataResponse(msgspec.Struct, array_like=True):
    brokers: list[BrokerMetadata]
    cluster_id: str
    controller_id: int
    topics: list[TopicMetadata]
    throttle_time_ms: int = 0


def metadata_error(request: MetadataRequest, code: int, message: str) -> MetadataResponse | None:
    """Every requested topic with ``code``; None for a request of all topics, whose answer
    has no place for an error (an empty list would read as "no topics")."""
    if request.topics is None:
        return None
    topics = [TopicMetadata(code, name, [], error_message=message) for name in request.topics]
    return MetadataResponse([], "", -1, topics)
