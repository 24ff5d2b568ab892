"""ListOffsets (2) and DeleteRecords (21).

ListOffsets answers, per partition: EARLIEST (-2) the log start offset; LATEST (-1) the high
watermark, or for ``read_committed`` the last stable offset; MAX_TIMESTAMP (-3) the record
with the largest timestamp; a time in ms the first offset whose timestamp is at or after it.
As in Kafka, a timestamp lookup only finds offsets below what the isolation level may read
(the high watermark or the last stable offset); no match is offset -1 with no error.

DeleteRecords refuses internal topics (INVALID_TOPIC_EXCEPTION, as Kafka's "Cannot delete
records of internal topic"): only their coordinator's compaction removes records there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.internal_topics import check_not_internal
from spark_mq.errors import InvalidRequestError, OffsetOutOfRangeError
from spark_mq.protocol.fetch import READ_COMMITTED, READ_UNCOMMITTED
from spark_mq.protocol.offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    DeleteRecordsPartitionResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore


def _list_one(
    core: BrokerCore, topic: str, lp: ListOffsetsPartition, isolation_level: int
) -> ListOffsetsPartitionResponse:
    part = core.replicas.partition(topic, lp.partition)
    part.check_leader_epoch(lp.current_leader_epoch)
    log = part.log
    epoch = part.leader_epoch
    fetchable = log.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark
    if lp.timestamp == EARLIEST_TIMESTAMP:
        return ListOffsetsPartitionResponse(lp.partition, 0, -1, log.log_start_offset, epoch)
    if lp.timestamp == LATEST_TIMESTAMP:
        return ListOffsetsPartitionResponse(lp.partition, 0, -1, fetchable, epoch)
    if lp.timestamp < 0 and lp.timestamp != MAX_TIMESTAMP:
        raise InvalidRequestError(
            f"timestamp {lp.timestamp} is not a time in ms nor -1 (latest), -2 (earliest) or "
            "-3 (max timestamp)"
        )
    found = log.find_offset_by_timestamp(lp.timestamp)
    if found is None or found.offset >= fetchable:
        return ListOffsetsPartitionResponse(lp.partition, 0, -1, -1, epoch)
    return ListOffsetsPartitionResponse(lp.partition, 0, found.timestamp_ms, found.offset, epoch)


def _list_offsets(core: BrokerCore, request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = []
    for topic in request.topics:
        partitions = []
        for lp in topic.partitions:
            try:
                if request.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
                    raise InvalidRequestError(
                        f"isolation_level {request.isolation_level} is not 0 or 1"
                    )
                partitions.append(_list_one(core, topic.name, lp, request.isolation_level))
            except TYPED_ERRORS as exc:
                code, message = error_of(exc, f"list offsets of {topic.name}-{lp.partition}")
                partitions.append(
                    ListOffsetsPartitionResponse(lp.partition, code, error_message=message)
                )
        topics.append(ListOffsetsTopicResponse(topic.name, partitions))
    return ListOffsetsResponse(topics)


async def handle_list_offsets(
    ctx: RequestContext, request: ListOffsetsRequest, _: memoryview
) -> Response:
    # A timestamp search may read and decode a batch: off the event loop.
    by_time = any(
        p.timestamp >= 0 or p.timestamp == MAX_TIMESTAMP
        for t in request.topics
        for p in t.partitions
    )
    if by_time:
        return Response(await ctx.core.run_blocking(_list_offsets, ctx.core, request))
    return Response(_list_offsets(ctx.core, request))


def _delete_records(core: BrokerCore, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    for topic in request.topics:
        partitions = []
        for dp in topic.partitions:
            where = f"{topic.name}-{dp.partition}"
            try:
                check_not_internal(topic.name, "delete records of")
                log = core.replicas.partition(topic.name, dp.partition).log
                offset = log.high_watermark if dp.offset == -1 else dp.offset
                if offset < 0:
                    raise OffsetOutOfRangeError(
                        f"cannot delete records before offset {dp.offset} of {where}: give an "
                        "offset of 0 or more, or -1 for the high watermark",
                        topic=topic.name,
                        partition=dp.partition,
                        offset=dp.offset,
                        log_start_offset=log.log_start_offset,
                        log_end_offset=log.log_end_offset,
                    )
                low = log.delete_records_before(offset)
                partitions.append(DeleteRecordsPartitionResponse(dp.partition, 0, low))
            except Exception as exc:
                # A boundary: the partitions done before this one stay done and are
                # answered so; a bug here is this partition's UNKNOWN_SERVER_ERROR, logged with
                # its traceback by error_of.
                code, message = error_of(exc, f"delete records of {where}")
                partitions.append(
                    DeleteRecordsPartitionResponse(dp.partition, code, error_message=message)
                )
        topics.append(DeleteRecordsTopicResponse(topic.name, partitions))
    return DeleteRecordsResponse(topics)


async def handle_delete_records(
    ctx: RequestContext, request: DeleteRecordsRequest, _: memoryview
) -> Response:
    return Response(await ctx.core.run_blocking(_delete_records, ctx.core, request))
