"""What ``Admin`` does for consumer groups: the result types and the coordinator requests.

ListGroups goes to every broker (each lists the groups it coordinates; one loading a
partition it was just elected for is asked again); the other calls go
to the group's coordinator (FindCoordinator first), and are retried while the coordinator
moves or loads (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS)
within ``default.api.timeout.ms``. Member assignments of ``consumer`` groups are decoded with
the assignors' byte format (``docs/groups.md``); an undecodable one is shown as empty.

Threads: any (the cluster's control connections are locked).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from spark_mq.client.assignors import InvalidGroupMetadataError, decode_assignment
from spark_mq.client.cluster import Cluster
from spark_mq.client.group.coordinator_lookup import call_coordinator
from spark_mq.client.group.member_state import Generation
from spark_mq.client.group.membership import CONSUMER_PROTOCOL_TYPE
from spark_mq.client.group.offsets import (
    OffsetAndMetadata,
    commit_errors,
    commit_request,
    fetch_request,
    fetched_offsets,
)
from spark_mq.client.records import TopicPartition
from spark_mq.client.retry import Again, Retry
from spark_mq.errors import NonEmptyGroupError, RequestTimedOutError, SparkMQError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.group_offsets import OffsetCommitResponse, OffsetFetchResponse
from spark_mq.protocol.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

log = logging.getLogger(__name__)

#: Group states in which offsets may be altered from outside (no member owns a partition).
ALTERABLE_STATES = frozenset({"Empty", "Dead"})


@dataclass(frozen=True)
class GroupListing:
    """One group as :meth:`~spark_mq.Admin.list_groups` lists it."""

    group_id: str
    state: str
    protocol_type: str


@dataclass(frozen=True)
class MemberDescription:
    """One member of a described group; ``assignment`` decoded for consumer groups."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class GroupDescription:
    """What :meth:`~spark_mq.Admin.describe_group` returns. ``state`` is Kafka's name
    (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead; Dead also for a group that
    does not exist); ``protocol`` is the assignor the group uses."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation_id: int
    members: tuple[MemberDescription, ...]
    coordinator_id: int

    @property
    def assignment(self) -> dict[TopicPartition, str]:
        """Partition to the id of the member it is assigned to."""
        return {tp: m.member_id for m in self.members for tp in m.assignment}


@dataclass(frozen=True)
class PartitionLag:
    """One partition of :meth:`~spark_mq.Admin.group_lag`: the committed offset (None when
    nothing is committed), the end offset (the last stable offset for read_committed, else
    the high watermark; -1 when the partition no longer exists), the lag (None without a
    commit), and the member it is assigned to (None when unassigned)."""

    committed: int | None
    end_offset: int
    lag: int | None
    member_id: str | None = None


class GroupAdmin:
    """The group calls of one ``Admin`` (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._cluster = cluster
        self._timeout_ms = timeout_ms
        self._clock = clock
        self._sleep = sleep
        self._nodes_known = False

    def _coordinator_call(
        self, group_id: str, request: msgspec.Struct, error_of: Callable[[Any], int]
    ) -> tuple[Any, int]:
        """Send ``request`` to the coordinator of ``group_id``; (response, node id).
        ``error_of`` picks the code that says the coordinator moved or is loading."""
        if not self._nodes_known:
            self._cluster.refresh([])  # learn every broker's address before routing by id
            self._nodes_known = True
        retry = Retry.within_ms(
            self._timeout_ms,
            backoff_s=max(self._cluster.config.retry_backoff_ms, 1) / 1000,
            clock=self._clock,
            sleep=self._sleep,
        )
        return call_coordinator(
            self._cluster,
            group_id,
            request,
            retry=retry,
            error_of=error_of,
            retry_codes=(
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ),
            timeout_error=lambda error: RequestTimedOutError(
                f"group {group_id!r}: {type(request).__name__} did not succeed within "
                f"{self._timeout_ms} ms (last error: {error})"
            ),
        )

    # -- listing and describing -----------------------------------------------------------

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupListing]:
        metadata = self._cluster.refresh([])
        self._nodes_known = True
        node_ids = sorted({b.node_id for b in metadata.brokers}) or [-1]
        found: dict[str, GroupListing] = {}
        retry = Retry.within_ms(
            self._timeout_ms,
            backoff_s=max(self._cluster.config.retry_backoff_ms, 1) / 1000,
            clock=self._clock,
            sleep=self._sleep,
        )
        for node_id in node_ids:

            def attempt(node_id: int = node_id) -> ListGroupsResponse | Again:
                response: ListGroupsResponse = self._cluster.request(
                    ListGroupsRequest(list(states)), node_id=node_id, timeout_ms=self._timeout_ms
                )
                if response.error_code in (
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ):
                    # A coordinator loading a partition it was just elected for lists it
                    # once loaded, as Kafka's admin client asks again.
                    return Again(error_from_code(response.error_code))
                if response.error_code != ErrorCode.NONE:
                    raise error_from_code(response.error_code)
                return response

            response = retry.until(attempt, self._list_timeout(node_id))
            for g in response.groups:
                found[g.group_id] = GroupListing(g.group_id, g.group_state, g.protocol_type)
        return [found[name] for name in sorted(found)]

    def _list_timeout(self, node_id: int) -> Callable[[SparkMQError], SparkMQError]:
        return lambda error: RequestTimedOutError(
            f"ListGroups to broker {node_id} did not succeed within {self._timeout_ms} ms "
            f"(last error: {error})"
        )

    def describe_group(self, group_id: str) -> GroupDescription:
        response, node_id = self._coordinator_call(
            group_id,
            DescribeGroupsRequest([group_id]),
            lambda r: r.groups[0].error_code if r.groups else ErrorCode.NONE,
        )
        assert isinstance(response, DescribeGroupsResponse)
        if not response.groups:
            raise error_from_code(ErrorCode.UNKNOWN_SERVER_ERROR, "empty DescribeGroups answer")
        group = response.groups[0]
        if group.error_code != ErrorCode.NONE:
            raise error_from_code(group.error_code, group.error_message)
        return _description(group, node_id)

    # -- offsets --------------------------------------------------------------------------

    def list_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        response, _ = self._coordinator_call(
            group_id, fetch_request(group_id, partitions), lambda r: r.error_code
        )
        assert isinstance(response, OffsetFetchResponse)
        if response.error_code != ErrorCode.NONE:
            raise error_from_code(response.error_code)
        offsets, errors = fetched_offsets(response)
        for tp, (code, message) in errors.items():
            raise error_from_code(code, message, topic=tp.topic, partition=tp.partition)
        return {tp: oam for tp, oam in sorted(offsets.items()) if oam is not None}

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        description = self.describe_group(group_id)
        if description.state not in ALTERABLE_STATES:
            raise NonEmptyGroupError(
                f"group {group_id!r} is {description.state} with "
                f"{len(description.members)} members: offsets can only be altered while "
                "the group is Empty; stop its consumers first"
            )
        request = commit_request(group_id, offsets, Generation(-1, "", None), None)

        def first_code(r: OffsetCommitResponse) -> int:
            codes = [code for code, _ in commit_errors(r).values()]
            return codes[0] if codes else ErrorCode.NONE

        response, _ = self._coordinator_call(group_id, request, first_code)
        assert isinstance(response, OffsetCommitResponse)
        for tp, (code, message) in commit_errors(response).items():
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                raise NonEmptyGroupError(
                    f"group {group_id!r} got members meanwhile: offsets can only be altered "
                    f"while the group is Empty ({message})"
                )
            raise error_from_code(code, message, topic=tp.topic, partition=tp.partition)

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        errors: list[SparkMQError] = []
        for group_id in group_ids:
            response, _ = self._coordinator_call(
                group_id,
                DeleteGroupsRequest([group_id]),
                lambda r: r.results[0].error_code if r.results else ErrorCode.NONE,
            )
            assert isinstance(response, DeleteGroupsResponse)
            for result in response.results:
                if result.error_code != ErrorCode.NONE:
                    errors.append(error_from_code(result.error_code, result.error_message))
        if errors:
            raise errors[0]


def _description(group: DescribedGroup, node_id: int) -> GroupDescription:
    members = []
    for m in group.members:
        assignment: tuple[TopicPartition, ...] = ()
        if group.protocol_type == CONSUMER_PROTOCOL_TYPE and m.member_assignment:
            try:
                assignment = decode_assignment(m.member_assignment).partitions
            except InvalidGroupMetadataError as exc:
                log.warning("group %s: member %s: %s", group.group_id, m.member_id, exc)
        members.append(
            MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment
            )
        )
    members.sort(key=lambda m: (m.group_instance_id or "", m.member_id))
    return GroupDescription(
        group.group_id,
        group.group_state,
        group.protocol_type,
        group.protocol_data,
        group.generation_id,
        tuple(members),
        node_id,
    )
