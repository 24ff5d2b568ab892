"""OffsetForLeaderEpoch (23): the leader's answer from its leader-epoch cache (see
:mod:`spark_mq.protocol.replication`). Each partition is answered on its own: one that
fails (unknown, not led here, a fenced epoch) does not fail the others."""

from __future__ import annotations

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.partition import ReplicaState
from spark_mq.errors import NotLeaderOrFollowerError
from spark_mq.protocol.replication import (
    EpochEndOffsetResult,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopicResult,
)


def _answer(
    ctx: RequestContext, topic: str, asked: OffsetForLeaderPartition
) -> EpochEndOffsetResult:
    try:
        part = ctx.core.replicas.partition(topic, asked.partition)
        if part.state is not ReplicaState.LEADER:
            raise NotLeaderOrFollowerError(
                f"broker {ctx.core.node_id} is not the leader of {topic}-{asked.partition}; "
                "refresh metadata and ask its leader"
            )
        part.check_leader_epoch(asked.current_leader_epoch)
        found = part.log.end_offset_for_epoch(asked.leader_epoch)
    except TYPED_ERRORS as exc:
        code, message = error_of(exc, f"offset for leader epoch of {topic}-{asked.partition}")
        return EpochEndOffsetResult(asked.partition, code, error_message=message)
    return EpochEndOffsetResult(asked.partition, 0, found.leader_epoch, found.end_offset)


async def handle_offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest, _: memoryview
) -> Response:
    return Response(
        OffsetForLeaderEpochResponse(
            [
                OffsetForLeaderTopicResult(
                    t.topic, [_answer(ctx, t.topic, p) for p in t.partitions]
                )
                for t in request.topics
            ]
        )
    )
