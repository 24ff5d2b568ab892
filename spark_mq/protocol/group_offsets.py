"""Committed offsets: OffsetCommit (8) and OffsetFetch (9).

Offsets of a group live in the compacted internal topic ``__consumer_offsets`` (see
docs/groups.md). A commit names the member and generation; the coordinator refuses it with
ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID when they are stale (a fenced consumer cannot
overwrite the new owner's progress). ``generation_id`` -1 with ``member_id`` "" is a commit
from outside the group protocol (a consumer using ``assign``), allowed only while the group
has no members.
"""

from __future__ import annotations

import msgspec


class OffsetCommitPartition(msgspec.Struct, array_like=True):
    """``committed_offset`` is the next offset to consume (Kafka's convention)."""

    partition: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = None


class OffsetCommitTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[OffsetCommitPartition]


class OffsetCommitRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    group_id: str
    topics: list[OffsetCommitTopic]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetCommitPartitionResponse(msgspec.Struct, array_like=True):
    partition: int
    error_code: int
    error_message: str | None = None


class OffsetCommitTopicResponse(msgspec.Struct, array_like=True):
    name: str
    partitions: list[OffsetCommitPartitionResponse]


class OffsetCommitResponse(msgspec.Struct, array_like=True):
    topics: list[OffsetCommitTopicResponse]
    throttle_time_ms: int = 0


class OffsetFetchTopic(msgspec.Struct, array_like=True):
    name: str
    partition_indexes: list[int]


class OffsetFetchRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``topics`` None fetches every committed offset of the group. ``require_stable``
    makes the coordinator answer UNSTABLE_OFFSET_COMMIT-style retriable errors while a
    transactional offset commit for the partition is pending (Kafka's KIP-447)."""

    group_id: str
    topics: list[OffsetFetchTopic] | None = None
    require_stable: bool = True


class OffsetFetchPartitionResponse(msgspec.Struct, array_like=True):
    """``committed_offset`` -1 means nothing is committed for the partition."""

    partition: int
    committed_offset: int
    error_code: int = 0
    committed_leader_epoch: int = -1
    metadata: str | None = None
    error_message: str | None = None


class OffsetFetchTopicResponse(msgspec.Struct, array_like=True):
    name: str
    partitions: list[OffsetFetchPartitionResponse]


class OffsetFetchResponse(msgspec.Struct, array_like=True):
    error_code: int
    topics: list[OffsetFetchTopicResponse]
    throttle_time_ms: int = 0


def offset_commit_error(
    request: OffsetCommitRequest, code: int, message: str
) -> OffsetCommitResponse:
    """Every partition of an OffsetCommit that failed as a whole, with ``code``."""
    return OffsetCommitResponse(
        [
            OffsetCommitTopicResponse(
                t.name,
                [OffsetCommitPartitionResponse(p.partition, code, message) for p in t.partitions],
            )
            for t in request.topics
        ]
    )


def offset_fetch_error(_: OffsetFetchRequest, code: int, _message: str) -> OffsetFetchResponse:
    """An OffsetFetch that failed as a whole: the group-level ``code``, no partitions."""
    return OffsetFetchResponse(code, [])
