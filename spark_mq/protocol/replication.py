"""OffsetForLeaderEpoch (23): where a leader epoch ends in a partition's log.

A follower that becomes a follower (or restarts) asks its leader, for its own latest leader
epoch, where that epoch ends in the leader's log, and truncates its log to the smaller of
that and its own end before it fetches (KIP-101; KIP-279 repeats the question for the epochs
the leader does not know, so replicas that diverged across two failovers agree again). A
consumer may ask the same to detect that its position is past a truncation (KIP-320).

The answer for a partition is the largest epoch the leader knows that is at most the one
asked for, and the offset where that epoch ends: the start offset of the next epoch, or the
log end offset for the leader's latest epoch. Both are -1 when the leader knows no such epoch
(an empty log, or an epoch older than all it keeps). ``current_leader_epoch`` fences the
request as in Fetch: an older one than the leader's is ``FENCED_LEADER_EPOCH`` (74), a newer
one ``UNKNOWN_LEADER_EPOCH`` (75); -1 skips the check. Only the leader answers
(``NOT_LEADER_OR_FOLLOWER`` elsewhere), as Kafka's does for replicas and consumers.
"""

from __future__ import annotations

import msgspec

#: ``replica_id`` of a consumer's request (a follower sends its broker id).
CONSUMER_REPLICA_ID = -1


class OffsetForLeaderPartition(msgspec.Struct, array_like=True):
    partition: int
    leader_epoch: int
    current_leader_epoch: int = -1


class OffsetForLeaderTopic(msgspec.Struct, array_like=True):
    topic: str
    partitions: list[OffsetForLeaderPartition]


class OffsetForLeaderEpochRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    topics: list[OffsetForLeaderTopic]
    replica_id: int = CONSUMER_REPLICA_ID


class EpochEndOffsetResult(msgspec.Struct, array_like=True):
    partition: int
    error_code: int
    leader_epoch: int = -1
    end_offset: int = -1
    error_message: str | None = None


class OffsetForLeaderTopicResult(msgspec.Struct, array_like=True):
    topic: str
    partitions: list[EpochEndOffsetResult]


class OffsetForLeaderEpochResponse(msgspec.Struct, array_like=True):
    topics: list[OffsetForLeaderTopicResult]
    throttle_time_ms: int = 0


def offset_for_leader_epoch_error(
    request: OffsetForLeaderEpochRequest, code: int, message: str
) -> OffsetForLeaderEpochResponse:
    """The request failed as a whole: every partition answers ``code``."""
    return OffsetForLeaderEpochResponse(
        [
            OffsetForLeaderTopicResult(
                t.topic,
                [
                    EpochEndOffsetResult(p.partition, code, error_message=message)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )
