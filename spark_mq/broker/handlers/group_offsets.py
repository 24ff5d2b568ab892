"""OffsetCommit (8) and OffsetFetch (9).

OffsetCommit answers per partition in request order: a partition of a topic that does not
exist is UNKNOWN_TOPIC_OR_PARTITION (as Kafka checks its metadata cache); a check of the
group that fails (stale generation, unknown or fenced member, rebalance in progress) is the
error of every partition; the rest are written as one batch to the group's partition of
``__consumer_offsets`` and acknowledged once appended (in a cluster: once every in-sync
replica has them, within ``offsets.commit.timeout.ms``). OffsetFetch answers -1 for a
partition with nothing committed. A group whose partition this broker does not lead gets
NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it loads).
"""

from __future__ import annotations

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.group.offsets import OffsetCommit
from spark_mq.broker.group.records import OffsetEntry, TopicPartitionKey
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.errors import SparkMQError
from spark_mq.protocol.group_offsets import (
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResponse,
)


def _commit_response(
    request: OffsetCommitRequest, results: dict[tuple[str, int], tuple[int, str | None]]
) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        [
            OffsetCommitTopicResponse(
                t.name,
                [
                    OffsetCommitPartitionResponse(p.partition, *results[(t.name, p.partition)])
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


async def handle_offset_commit(
    ctx: RequestContext, request: OffsetCommitRequest, _: memoryview
) -> Response:
    core = ctx.core
    groups = core.groups
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    commits: list[OffsetCommit] = []
    for topic in request.topics:
        for p in topic.partitions:
            try:
                core.logs.get_log(topic.name, p.partition)
            except TYPED_ERRORS as exc:
                results[(topic.name, p.partition)] = error_of(
                    exc, f"commit offset of {topic.name}-{p.partition}"
                )
                continue
            commits.append(
                OffsetCommit(
                    topic.name,
                    p.partition,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata,
                )
            )
    what = f"commit offsets of group {request.group_id!r}"
    if not commits:
        return Response(_commit_response(request, results))
    try:
        await groups.ready()
        # A cluster coordinator stages the offsets until they are replicated (below).
        staged: dict[TopicPartitionKey, OffsetEntry] | None = {} if groups.cluster else None
        errors: list[SparkMQError | None] = groups.call(
            lambda c, now: c.commit_offsets(
                request.group_id,
                commits,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                now_ms=now,
                staged=staged,
            )
        )
    except TYPED_ERRORS as exc:
        # The partitions that do not exist keep their own error.
        failure = error_of(exc, what)
        for c in commits:
            results[(c.topic, c.partition)] = failure
    else:
        if staged:
            # acks=all: answered, and visible to OffsetFetch, once every in-sync replica has
            # the offsets, so that an acknowledged commit survives the coordinator's death.
            try:
                await groups.replicated(request.group_id, what)
            except SparkMQError as exc:
                errors = [exc if error is None else error for error in errors]
            else:
                groups.call(lambda c, _: c.offsets.publish(request.group_id, staged))
        for c, error in zip(commits, errors, strict=True):
            results[(c.topic, c.partition)] = (0, None) if error is None else error_of(error, what)
    return Response(_commit_response(request, results))


async def handle_offset_fetch(
    ctx: RequestContext, request: OffsetFetchRequest, _: memoryview
) -> Response:
    groups = ctx.core.groups
    wanted = (
        None
        if request.topics is None
        else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    )
    coordinator = await groups.ready()
    fetched = coordinator.fetch_offsets(
        request.group_id, wanted, require_stable=request.require_stable
    )
    topics: dict[str, list[OffsetFetchPartitionResponse]] = {}
    for f in fetched:
        if f.error is not None:
            code, message = error_of(f.error, "fetch offsets")
            part = OffsetFetchPartitionResponse(f.partition, -1, code, error_message=message)
        elif f.entry is None:
            part = OffsetFetchPartitionResponse(f.partition, -1)
        else:
            part = OffsetFetchPartitionResponse(
                f.partition, f.entry.offset, 0, f.entry.leader_epoch, f.entry.metadata
            )
        topics.setdefault(f.topic, []).append(part)
    return Response(
        OffsetFetchResponse(0, [OffsetFetchTopicResponse(n, ps) for n, ps in topics.items()])
    )
