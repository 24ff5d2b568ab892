"""A cluster coordinator's writes are answered only once every in-sync replica has them.

Kafka appends offset commits and group metadata to ``__consumer_offsets`` with acks=all
(``offsets.commit.required.acks=-1``) and answers once the high watermark passed them, so an
acknowledged commit survives the coordinator's death. Here the coordinator appends as the
leader (refused while the ISR is below ``min.insync.replicas``), and the request waits in
the replica manager's acks=all purgatory, as a produce with acks=all does, for the high
watermark to reach the partition's log end as it was after the append: everything the
coordinator wrote to the partition so far, this write included.

The errors are Kafka's mapping for a coordinator's appends (``GroupMetadataManager``):

=====================================  ======================  ========================
the append or the wait met             an OffsetCommit gets    a SyncGroup gets
=====================================  ======================  ========================
NOT_ENOUGH_REPLICAS(_AFTER_APPEND)     COORDINATOR_NOT_AVAIL.  COORDINATOR_NOT_AVAIL.
NOT_LEADER_OR_FOLLOWER (moved away)    NOT_COORDINATOR         NOT_COORDINATOR
REQUEST_TIMED_OUT                      REQUEST_TIMED_OUT       REBALANCE_IN_PROGRESS
=====================================  ======================  ========================

A single node needs none of this: its high watermark is its log end after every append.

Threads: the event loop thread.
"""

from __future__ import annotations

from spark_mq.broker.internal_topics import OFFSETS_TOPIC
from spark_mq.broker.partition import ReplicaState
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RebalanceInProgressError,
    RequestTimedOutError,
    SparkMQError,
    UnknownTopicOrPartitionError,
)

#: What an append to, or a wait on, a coordinator's partition may raise that is the
#: world's doing (a bug is raised as it is).
APPEND_ERRORS = (
    NotEnoughReplicasError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    RequestTimedOutError,
)


def coordinator_error(exc: SparkMQError, what: str, *, sync_group: bool = False) -> SparkMQError:
    """The error a group request answers for ``exc`` met while writing ``what``."""
    if isinstance(exc, NotLeaderOrFollowerError):
        return NotCoordinatorError(
            f"{what}: this broker stopped leading the group's __consumer_offsets partition "
            f"({exc}); find the coordinator again and retry"
        )
    if isinstance(exc, RequestTimedOutError):
        if sync_group:
            return RebalanceInProgressError(
                f"{what}: the group's metadata was not on every in-sync replica in time "
                f"({exc}); rejoin the group"
            )
        return exc
    return CoordinatorNotAvailableError(
        f"{what}: the group's __consumer_offsets partition cannot take acks=all writes now "
        f"({exc}); retry"
    )


async def wait_replicated(replicas: ReplicaManager, partition: int, timeout_s: float) -> None:
    """Wait until every in-sync replica of ``__consumer_offsets-<partition>`` has what this
    leader has appended so far; raises one of :data:`APPEND_ERRORS`."""
    part = replicas.partition(OFFSETS_TOPIC, partition)
    if part.state is not ReplicaState.LEADER:
        # Nothing would end the wait: the purgatory is told only of partitions that move.
        raise NotLeaderOrFollowerError(
            f"broker {replicas.node_id} no longer leads __consumer_offsets-{partition}"
        )
    end = part.log.log_end_offset
    if part.high_watermark < end:
        await replicas.purgatory.wait((OFFSETS_TOPIC, partition), end, timeout_s)
    part.check_enough_replicas(after_append=True)
