"""ListOffsets (key 2) and DeleteRecords (key 21)."""

from __future__ import annotations

import msgspec

#: Special ``timestamp`` values of ListOffsets, Kafka's.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


class ListOffsetsPartition(msgspec.Struct, array_like=True):
    """``timestamp`` is a time in ms (the first offset whose timestamp is at or after it) or
    one of LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP."""

    partition: int
    timestamp: int
    current_leader_epoch: int = -1


class ListOffsetsTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[ListOffsetsPartition]


class ListOffsetsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """With ``isolation_level`` 1 (read_committed), LATEST answers the last stable offset."""

    topics: list[ListOffsetsTopic]
    isolation_level: int = 1
    replica_id: int = -1


class ListOffsetsPartitionResponse(msgspec.Struct, array_like=True):
    """``offset`` -1 with error 0 means no record matches the timestamp."""

    partition: int
    error_code: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1
    error_message: str | None = None


class ListOffsetsTopicResponse(msgspec.Struct, array_like=True):
    name: str
    partitions: list[ListOffsetsPartitionResponse]


class ListOffsetsResponse(msgspec.Struct, array_like=True):
    topics: list[ListOffsetsTopicResponse]
    throttle_time_ms: int = 0


class DeleteRecordsPartition(msgspec.Struct, array_like=True):
    """Delete every record below ``offset`` (-1: up to the high watermark)."""

    partition: int
    offset: int


class DeleteRecordsTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[DeleteRecordsPartition]


class DeleteRecordsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    topics: list[DeleteRecordsTopic]
    timeout_ms: int = 30_000


class DeleteRecordsPartitionResponse(msgspec.Struct, array_like=True):
    """``low_watermark`` is the partition's log start offset after the deletion."""

    partition: int
    error_code: int
    low_watermark: int = -1
    error_message: str | None = None


class DeleteRecordsTopicResponse(msgspec.Struct, array_like=True):
    name: str
    partitions: list[DeleteRecordsPartitionResponse]


class DeleteRecordsResponse(msgspec.Struct, array_like=True):
    topics: list[DeleteRecordsTopicResponse]
    throttle_time_ms: int = 0


def list_offsets_error(request: ListOffsetsRequest, code: int, message: str) -> ListOffsetsResponse:
    """Every partition of a ListOffsets request that failed as a whole, with ``code``."""
    return ListOffsetsResponse(
        [
            ListOffsetsTopicResponse(
                t.name,
                [
                    ListOffsetsPartitionResponse(p.partition, code, error_message=message)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def delete_records_error(
    request: DeleteRecordsRequest, code: int, message: str
) -> DeleteRecordsResponse:
    """Every partition of a DeleteRecords request that failed as a whole, with ``code``."""
    return DeleteRecordsResponse(
        [
            DeleteRecordsTopicResponse(
                t.name,
                [
                    DeleteRecordsPartitionResponse(p.partition, code, error_message=message)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )
