"""Consumer groups: FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13),
SyncGroup (14), DescribeGroups (15), ListGroups (16), DeleteGroups (42).

The classic (pre-KIP-848) rebalance protocol: members join, the coordinator picks a leader
that computes the assignment with an assignor (``spark_mq.client.assignors``), SyncGroup
hands every member its part, heartbeats keep the session alive. ``protocol_metadata`` and
``assignment`` are opaque bytes to the broker (the assignors' subscription/assignment
encodings).
"""

from __future__ import annotations

import msgspec

#: ``key_type`` of FindCoordinator.
COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1
#: spark_mq's own: the half-message service of a producer group (the leader of the group's
#: partition of ``__half_messages``; docs/half_messages.md). Kafka's key types stop at 1.
COORDINATOR_HALF_MESSAGES = 2


class FindCoordinatorRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``key`` is the group id (the transactional id with ``key_type`` 1, the producer
    group of half messages with 2)."""

    key: str
    key_type: int = COORDINATOR_GROUP


class FindCoordinatorResponse(msgspec.Struct, array_like=True):
    error_code: int
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str | None = None
    throttle_time_ms: int = 0


class JoinGroupProtocol(msgspec.Struct, array_like=True):
    """One assignor the member supports (``name``) and its subscription bytes."""

    name: str
    metadata: bytes


class JoinGroupRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``member_id`` is "" on a dynamic member's first join (the coordinator answers
    MEMBER_ID_REQUIRED with an id to rejoin with); ``group_instance_id`` makes the member
    static."""

    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    protocol_type: str
    protocols: list[JoinGroupProtocol]
    group_instance_id: str | None = None
    reason: str | None = None


class JoinGroupMember(msgspec.Struct, array_like=True):
    member_id: str
    metadata: bytes
    group_instance_id: str | None = None


class JoinGroupResponse(msgspec.Struct, array_like=True):
    """``members`` is filled only for the leader (``leader == member_id``)."""

    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupMember] = []
    skip_assignment: bool = False
    error_message: str | None = None
    throttle_time_ms: int = 0


class SyncGroupAssignment(msgspec.Struct, array_like=True):
    member_id: str
    assignment: bytes


class SyncGroupRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The leader sends every member's assignment; followers send none."""

    group_id: str
    generation_id: int
    member_id: str
    assignments: list[SyncGroupAssignment] = []
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


class SyncGroupResponse(msgspec.Struct, array_like=True):
    error_code: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None
    error_message: str | None = None
    throttle_time_ms: int = 0


class HeartbeatRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


class HeartbeatResponse(msgspec.Struct, array_like=True):
    """REBALANCE_IN_PROGRESS tells the member to rejoin."""

    error_code: int
    error_message: str | None = None
    throttle_time_ms: int = 0


class LeavingMember(msgspec.Struct, array_like=True):
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


class LeaveGroupRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    group_id: str
    members: list[LeavingMember]


class LeavingMemberResponse(msgspec.Struct, array_like=True):
    member_id: str
    error_code: int
    group_instance_id: str | None = None


class LeaveGroupResponse(msgspec.Struct, array_like=True):
    error_code: int
    members: list[LeavingMemberResponse] = []
    error_message: str | None = None
    throttle_time_ms: int = 0


class DescribeGroupsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    groups: list[str]


class DescribedGroupMember(msgspec.Struct, array_like=True):
    member_id: str
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes
    group_instance_id: str | None = None


class DescribedGroup(msgspec.Struct, array_like=True):
    """``group_state`` is Kafka's name: Empty, PreparingRebalance, CompletingRebalance,
    Stable or Dead."""

    error_code: int
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedGroupMember]
    generation_id: int = -1
    error_message: str | None = None


class DescribeGroupsResponse(msgspec.Struct, array_like=True):
    groups: list[DescribedGroup]
    throttle_time_ms: int = 0


class ListGroupsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``states_filter`` empty lists every group."""

    states_filter: list[str] = []


class ListedGroup(msgspec.Struct, array_like=True):
    group_id: str
    protocol_type: str
    group_state: str


class ListGroupsResponse(msgspec.Struct, array_like=True):
    error_code: int
    groups: list[ListedGroup]
    throttle_time_ms: int = 0


class DeleteGroupsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    groups_names: list[str]


class DeletableGroupResult(msgspec.Struct, array_like=True):
    group_id: str
    error_code: int
    error_message: str | None = None


class DeleteGroupsResponse(msgspec.Struct, array_like=True):
    results: list[DeletableGroupResult]
    throttle_time_ms: int = 0


# ---------------------------------------------------------------------------------------------
# The answers to requests that failed as a whole, with the code (and message where the
# response has one).


def find_coordinator_error(
    _: FindCoordinatorRequest, code: int, message: str
) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(code, error_message=message)


def join_group_error(request: JoinGroupRequest, code: int, message: str) -> JoinGroupResponse:
    return JoinGroupResponse(code, member_id=request.member_id, error_message=message)


def sync_group_error(_: SyncGroupRequest, code: int, message: str) -> SyncGroupResponse:
    return SyncGroupResponse(code, error_message=message)


def heartbeat_error(_: HeartbeatRequest, code: int, message: str) -> HeartbeatResponse:
    return HeartbeatResponse(code, message)


def leave_group_error(_: LeaveGroupRequest, code: int, message: str) -> LeaveGroupResponse:
    return LeaveGroupResponse(code, error_message=message)


def describe_groups_error(
    request: DescribeGroupsRequest, code: int, message: str
) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(
        [DescribedGroup(code, g, "", "", "", [], error_message=message) for g in request.groups]
    )


def list_groups_error(_: ListGroupsRequest, code: int, _message: str) -> ListGroupsResponse:
    return ListGroupsResponse(code, [])


def delete_groups_error(
    request: DeleteGroupsRequest, code: int, message: str
) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(
        [DeletableGroupResult(g, code, message) for g in request.groups_names]
    )
