"""Committed offsets on the wire: the value type, OffsetCommit / OffsetFetch requests, and
what each error code of an answer means for the member.

A committed offset is the offset of the *next* record to consume (Kafka's convention), so a
consumer that committed ``position()`` resumes exactly where it stopped. A commit carries the
member's generation; a coordinator refuses a commit from a member that is no longer part of
the generation owning the partitions, so a member that missed a rebalance can never
overwrite the progress of the partition's new owner.

>>> normalize_offsets({("t", 0): 42})
{TopicPartition(topic='t', partition=0): OffsetAndMetadata(offset=42, metadata='', leader_epoch=-1)}
>>> commit_outcome(22).name, commit_outcome(15).name
('STALE_GENERATION', 'COORDINATOR_GONE')
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

from spark_mq.client.group.member_state import Generation
from spark_mq.client.records import TopicPartition
from spark_mq.errors import UsageError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.group_offsets import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
)


class OffsetAndMetadata(NamedTuple):
    """A committed offset (the next offset to consume), an optional application string
    stored with it, and the leader epoch of the last record consumed (-1: unknown)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


OffsetsArg = Mapping[TopicPartition | tuple[str, int], "int | OffsetAndMetadata"]


def normalize_offsets(offsets: OffsetsArg) -> dict[TopicPartition, OffsetAndMetadata]:
    """``{tp: offset | OffsetAndMetadata}`` with plain tuples accepted; refuses negatives."""
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for key, value in offsets.items():
        tp = key if isinstance(key, TopicPartition) else TopicPartition(*key)
        oam = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        if not isinstance(oam.offset, int) or isinstance(oam.offset, bool) or oam.offset < 0:
            raise UsageError(f"commit offset {oam.offset!r} for {tp} is not an offset >= 0")
        out[tp] = oam
    return out


def commit_request(
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    generation: Generation,
    instance_id: str | None,
) -> OffsetCommitRequest:
    by_topic: dict[str, list[OffsetCommitPartition]] = {}
    for tp, oam in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitPartition(tp.partition, oam.offset, oam.leader_epoch, oam.metadata or None)
        )
    return OffsetCommitRequest(
        group_id=group_id,
        topics=[OffsetCommitTopic(name, parts) for name, parts in by_topic.items()],
        generation_id=generation.generation_id,
        member_id=generation.member_id,
        group_instance_id=instance_id,
    )


def commit_errors(response: OffsetCommitResponse) -> dict[TopicPartition, tuple[int, str | None]]:
    """The partitions an OffsetCommit answer reports an error for: code and message."""
    return {
        TopicPartition(topic.name, part.partition): (part.error_code, part.error_message)
        for topic in response.topics
        for part in topic.partitions
        if part.error_code != ErrorCode.NONE
    }


class CommitOutcome(enum.Enum):
    """What an OffsetCommit error means for the member."""

    #: Coordinator loading, a timeout: the same commit may succeed if sent again.
    RETRY = "retry"
    #: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / REQUEST_TIMED_OUT (Kafka's consumer: a
    #: coordinator that did not get the commit onto its replicas in time may be cut off from
    #: them, or no longer lead): look the coordinator up, then retry.
    COORDINATOR_GONE = "coordinator_gone"
    #: ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID: the member was removed; CommitFailedError.
    STALE_GENERATION = "stale_generation"
    #: REBALANCE_IN_PROGRESS: the group is mid-rebalance; CommitFailedError, rejoin.
    REBALANCING = "rebalancing"
    #: FENCED_INSTANCE_ID: another process took this group.instance.id.
    FENCED = "fenced"
    #: Anything else (an unknown topic, metadata too large): raised as the typed error.
    FAILED = "failed"


_OUTCOMES: Final = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: CommitOutcome.RETRY,
    ErrorCode.REQUEST_TIMED_OUT: CommitOutcome.COORDINATOR_GONE,
    ErrorCode.NOT_COORDINATOR: CommitOutcome.COORDINATOR_GONE,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: CommitOutcome.COORDINATOR_GONE,
    ErrorCode.ILLEGAL_GENERATION: CommitOutcome.STALE_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID: CommitOutcome.STALE_GENERATION,
    ErrorCode.REBALANCE_IN_PROGRESS: CommitOutcome.REBALANCING,
    ErrorCode.FENCED_INSTANCE_ID: CommitOutcome.FENCED,
}


def commit_outcome(code: int) -> CommitOutcome:
    try:
        return _OUTCOMES.get(ErrorCode(code), CommitOutcome.FAILED)
    except ValueError:
        return CommitOutcome.FAILED


def fetch_request(group_id: str, partitions: Iterable[TopicPartition] | None) -> OffsetFetchRequest:
    """OffsetFetch of ``partitions`` (None: every partition the group committed)."""
    if partitions is None:
        return OffsetFetchRequest(group_id, None, require_stable=True)
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = [OffsetFetchTopic(name, parts) for name, parts in by_topic.items()]
    return OffsetFetchRequest(group_id, topics, require_stable=True)


def fetched_offsets(
    response: OffsetFetchResponse,
) -> tuple[
    dict[TopicPartition, OffsetAndMetadata | None], dict[TopicPartition, tuple[int, str | None]]
]:
    """An OffsetFetch answer as (offsets, partition errors); offset None: nothing committed."""
    offsets: dict[TopicPartition, OffsetAndMetadata | None] = {}
    errors: dict[TopicPartition, tuple[int, str | None]] = {}
    for topic in response.topics:
        for part in topic.partitions:
            tp = TopicPartition(topic.name, part.partition)
            if part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                offsets[tp] = None
            elif part.error_code != ErrorCode.NONE:
                errors[tp] = (part.error_code, part.error_message)
            elif part.committed_offset < 0:
                offsets[tp] = None
            else:
                offsets[tp] = OffsetAndMetadata(
                    part.committed_offset, part.metadata or "", part.committed_leader_epoch
                )
    return offsets, errors
