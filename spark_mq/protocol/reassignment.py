"""Partition reassignment (KIP-455): AlterPartitionReassignments (45) and
ListPartitionReassignments (46), both sent to the controller.

AlterPartitionReassignments names, per partition, the target replicas (the first is the
preferred leader), or ``None`` to cancel the partition's reassignment in progress. The
controller answers per partition once it has *started* each one (written it to ZooKeeper):
the move itself goes on in the background, and ListPartitionReassignments shows what is
still moving. A broker that is not the controller answers every partition
``NOT_CONTROLLER`` (41).
"""

from __future__ import annotations

import msgspec


class ReassignablePartition(msgspec.Struct, array_like=True):
    """``replicas`` None cancels the reassignment of the partition."""

    partition_index: int
    replicas: list[int] | None


class ReassignableTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[ReassignablePartition]


class AlterPartitionReassignmentsRequest(
    msgspec.Struct, array_like=True, forbid_unknown_fields=True
):
    topics: list[ReassignableTopic]
    timeout_ms: int = 60_000


class ReassignablePartitionResponse(msgspec.Struct, array_like=True):
    partition_index: int
    error_code: int
    error_message: str | None = None


class ReassignableTopicResponse(msgspec.Struct, array_like=True):
    name: str
    partitions: list[ReassignablePartitionResponse]


class AlterPartitionReassignmentsResponse(msgspec.Struct, array_like=True):
    #: A failure of the request as a whole (NOT_CONTROLLER); 0 otherwise.
    error_code: int
    responses: list[ReassignableTopicResponse]
    error_message: str | None = None
    throttle_time_ms: int = 0


class ListPartitionReassignmentsTopic(msgspec.Struct, array_like=True):
    name: str
    partition_indexes: list[int]


class ListPartitionReassignmentsRequest(
    msgspec.Struct, array_like=True, forbid_unknown_fields=True
):
    #: None: every partition being reassigned.
    topics: list[ListPartitionReassignmentsTopic] | None = None
    timeout_ms: int = 60_000


class OngoingPartitionReassignment(msgspec.Struct, array_like=True):
    partition_index: int
    #: The full replica set while moving: the target replicas, then the leaving ones.
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class OngoingTopicReassignment(msgspec.Struct, array_like=True):
    name: str
    partitions: list[OngoingPartitionReassignment]


class ListPartitionReassignmentsResponse(msgspec.Struct, array_like=True):
    error_code: int
    topics: list[OngoingTopicReassignment]
    error_message: str | None = None
    throttle_time_ms: int = 0


def alter_partition_reassignments_error(
    request: AlterPartitionReassignmentsRequest, code: int, message: str
) -> AlterPartitionReassignmentsResponse:
    return AlterPartitionReassignmentsResponse(
        code,
        [
            ReassignableTopicResponse(
                t.name,
                [
                    ReassignablePartitionResponse(p.partition_index, code, message)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
        message,
    )


def list_partition_reassignments_error(
    _request: ListPartitionReassignmentsRequest, code: int, message: str
) -> ListPartitionReassignmentsResponse:
    return ListPartitionReassignmentsResponse(code, [], message)
