"""The group coordinator: every consumer group this broker coordinates, and their offsets.

:class:`GroupCoordinator` is synchronous logic with no clock, no threads and no I/O of its
own: each call takes ``now_ms``; deadlines live in a :class:`~spark_mq.broker.group.timers.
TimerQueue` that the owner of time runs (:meth:`GroupCoordinator.advance`); records go to a
:class:`~spark_mq.broker.group.offsets_topic.GroupStore`. The broker drives it from its event
loop through :class:`~spark_mq.broker.group.service.GroupService`; tests drive it directly
with whatever time they choose.

Its halves: :class:`~spark_mq.broker.group.rebalance.Rebalancer` (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, sessions) and :class:`~spark_mq.broker.group.offsets.OffsetManager`
(OffsetCommit, OffsetFetch, expiry). Here: DescribeGroups, ListGroups, DeleteGroups, and
loading the state ``__consumer_offsets`` holds when the broker starts.

    >>> from spark_mq.broker.group.config import GroupConfig
    >>> class Memory:
    ...     def append(self, group_id, records, now_ms): pass
    >>> coordinator = GroupCoordinator(GroupConfig(group_initial_rebalance_delay_ms=0), Memory())
    >>> from spark_mq.protocol.groups import JoinGroupRequest, JoinGroupProtocol
    >>> answers = []
    >>> protocols = [JoinGroupProtocol("range", b"")]
    >>> join = JoinGroupRequest("g", 10000, 30000, "", "consumer", protocols)
    >>> coordinator.join(join, client_id="c", client_host="h", now_ms=0, respond=answers.append)
    >>> answers[-1].error_code  # MEMBER_ID_REQUIRED: rejoin with the id given
    79
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Hashable, Sequence

from spark_mq.broker.coordinator_topic import Record
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.group import Group
from spark_mq.broker.group.join import JoinHandler
from spark_mq.broker.group.member import JoinCallback, SyncCallback
from spark_mq.broker.group.offsets import FetchedOffset, OffsetCommit, OffsetManager
from spark_mq.broker.group.offsets_topic import GroupStore, LoadedGroups
from spark_mq.broker.group.ownership import PartitionOwnership
from spark_mq.broker.group.rebalance import Rebalancer, join_error, sync_error, validate_group_id
from spark_mq.broker.group.records import OffsetEntry, TopicPartitionKey, group_key, offset_key
from spark_mq.broker.group.state import GroupState
from spark_mq.broker.group.timers import TimerQueue
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    NonEmptyGroupError,
    NotCoordinatorError,
    SparkMQError,
    StorageError,
)
from spark_mq.protocol.error_codes import ErrorCode, code_for
from spark_mq.protocol.groups import (
    DeletableGroupResult,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    SyncGroupRequest,
)

logger = logging.getLogger("spark_mq.broker.group")


def random_member_id(client_id: str) -> str:
    """Kafka's member ids: the client id, a dash and a random UUID."""
    return f"{client_id or 'member'}-{uuid.uuid4()}"


def counting_member_ids() -> Callable[[str], str]:
    """Deterministic member ids (``client-1``, ``client-2``, ...) for tests."""
    counter = itertools.count(1)
    return lambda client_id: f"{client_id or 'member'}-{next(counter)}"


class GroupCoordinator:
    """Groups, members and committed offsets; see the module docstring."""

    def __init__(
        self,
        config: GroupConfig,
        store: GroupStore,
        *,
        new_member_id: Callable[[str], str] = random_member_id,
        ownership: PartitionOwnership | None = None,
    ) -> None:
        self.config = config
        self.store = store
        #: Which partitions of __consumer_offsets this coordinator serves (ownership.py);
        #: everything unless a cluster broker's service gives its own.
        self.ownership = ownership or PartitionOwnership.everything()
        self.groups: dict[str, Group] = {}
        self.timers = TimerQueue()
        self.rebalancer = Rebalancer(config, self.groups, self.timers, store)
        self.joins = JoinHandler(self.rebalancer, new_member_id)
        self.offsets = OffsetManager(
            config,
            self.groups,
            store,
            create_group=self._create_group,
            touch_member=self.rebalancer.touch,
            check_coordinator=self.check_coordinator,
        )

    def _create_group(self, group_id: str, now_ms: int) -> Group:
        group = self.groups[group_id] = Group(group_id, now_ms)
        return group

    # -----------------------------------------------------------------------------------------
    # Time

    def advance(self, now_ms: int) -> int:
        """Run every deadline due at ``now_ms``; how many ran."""
        return self.timers.run_due(now_ms)

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline_ms()

    # -----------------------------------------------------------------------------------------
    # Membership (rebalance.py)

    def join(
        self,
        request: JoinGroupRequest,
        *,
        client_id: str,
        client_host: str,
        now_ms: int,
        respond: JoinCallback,
    ) -> None:
        try:
            self.check_coordinator(request.group_id)
        except SparkMQError as exc:
            respond(join_error(exc, request.member_id))
            return
        self.joins.join(
            request, client_id=client_id, client_host=client_host, now_ms=now_ms, respond=respond
        )

    def sync(self, request: SyncGroupRequest, *, now_ms: int, respond: SyncCallback) -> None:
        try:
            self.check_coordinator(request.group_id)
        except SparkMQError as exc:
            respond(sync_error(exc))
            return
        self.rebalancer.sync(request, now_ms=now_ms, respond=respond)

    def heartbeat(self, request: HeartbeatRequest, *, now_ms: int) -> None:
        self.check_coordinator(request.group_id)
        self.rebalancer.heartbeat(request, now_ms=now_ms)

    def leave(self, request: LeaveGroupRequest, *, now_ms: int) -> LeaveGroupResponse:
        self.check_coordinator(request.group_id)
        return self.rebalancer.leave(request, now_ms=now_ms)

    # -----------------------------------------------------------------------------------------
    # Offsets (offsets.py)

    def commit_offsets(
        self,
        group_id: str,
        commits: Sequence[OffsetCommit],
        *,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
        now_ms: int,
        staged: dict[TopicPartitionKey, OffsetEntry] | None = None,
    ) -> list[SparkMQError | None]:
        self.check_coordinator(group_id)
        return self.offsets.commit(
            group_id,
            commits,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            now_ms=now_ms,
            staged=staged,
        )

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[TopicPartitionKey] | None = None,
        *,
        require_stable: bool = True,
    ) -> list[FetchedOffset]:
        self.check_coordinator(group_id)
        return self.offsets.fetch(group_id, partitions, require_stable=require_stable)

    def expire_offsets(self, now_ms: int) -> int:
        return self.offsets.expire(now_ms)

    # -----------------------------------------------------------------------------------------
    # DescribeGroups, ListGroups, DeleteGroups

    def describe_groups(self, group_ids: Sequence[str]) -> DescribeGroupsResponse:
        """Each group's state, protocol and members; a group that does not exist is
        reported Dead with no error, as Kafka's classic coordinator does."""
        out = []
        for group_id in group_ids:
            try:
                self.check_coordinator(group_id)
            except SparkMQError as exc:
                out.append(
                    DescribedGroup(
                        int(code_for(exc)), group_id, "", "", "", [], error_message=str(exc)
                    )
                )
                continue
            group = self.groups.get(group_id)
            if group is None:
                out.append(DescribedGroup(0, group_id, GroupState.DEAD.value, "", "", []))
                continue
            stable = group.is_in(GroupState.STABLE)
            members = [
                DescribedGroupMember(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    # Kafka shows subscriptions and assignments only once they are settled.
                    member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
                    member_assignment=m.assignment if stable else b"",
                    group_instance_id=m.group_instance_id,
                )
                for m in group.members.values()
            ]
            out.append(
                DescribedGroup(
                    0,
                    group_id,
                    group.state.value,
                    group.protocol_type or "",
                    (group.protocol_name or "") if stable else "",
                    members,
                    generation_id=group.generation_id,
                )
            )
        return DescribeGroupsResponse(out)

    def list_groups(self, states_filter: Sequence[str] = ()) -> ListGroupsResponse:
        """Every group (sorted by id), or those in the named states (any case). Only the
        groups of owned partitions are in memory; while a partition loads, the answer says
        COORDINATOR_LOAD_IN_PROGRESS with the groups known so far, as Kafka's does."""
        wanted = {GroupState.parse(name) for name in states_filter}
        groups = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in sorted(self.groups.values(), key=lambda g: g.group_id)
            if not states_filter or g.state in wanted
        ]
        loading = bool(self.ownership.loading())
        return ListGroupsResponse(
            int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) if loading else 0, groups
        )

    def delete_groups(self, group_ids: Sequence[str], *, now_ms: int) -> list[DeletableGroupResult]:
        results = []
        for group_id in group_ids:
            try:
                self._delete_one(group_id, now_ms)
                results.append(DeletableGroupResult(group_id, 0))
            except SparkMQError as exc:
                results.append(DeletableGroupResult(group_id, int(code_for(exc)), str(exc)))
        return results

    def _delete_one(self, group_id: str, now_ms: int) -> None:
        self.check_coordinator(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        if not group.is_in(GroupState.EMPTY):
            raise NonEmptyGroupError(
                f"group {group_id!r} has {len(group.members)} active members "
                f"({group.state.value}); stop its consumers first"
            )
        records: list[Record] = [
            (offset_key(group_id, topic, partition), None) for topic, partition in group.offsets
        ]
        records.append((group_key(group_id), None))
        try:
            self.store.append(group_id, records, now_ms)
        except (OSError, StorageError) as exc:  # the disk's; a bug is raised as it is
            logger.error("group %s: writing its deletion failed: %s", group_id, exc, exc_info=exc)
            raise CoordinatorNotAvailableError(
                f"group {group_id!r} could not be deleted ({type(exc).__name__}: {exc}); retry"
            ) from exc
        group.transition_to(GroupState.DEAD, now_ms)
        del self.groups[group_id]
        for member_id in group.pending_members:
            self.timers.cancel(("pending", group_id, member_id))
        logger.info("group %s: deleted with %d offsets", group_id, len(group.offsets))

    # -----------------------------------------------------------------------------------------
    # Startup and shutdown

    def load(self, loaded: LoadedGroups, now_ms: int) -> None:
        """Install what ``__consumer_offsets`` holds (a single node, at startup, before any
        request).

        Groups with members come back Stable with their assignments; their sessions start at
        ``now_ms``, so members that do not heartbeat within their session timeout are removed
        and the group rebalances. Groups known only by offsets come back Empty.
        """
        self._install(loaded, now_ms)
        logger.info(
            "loaded %d groups and %d committed offsets from %d records (%d skipped)",
            len(self.groups),
            sum(len(g.offsets) for g in self.groups.values()),
            loaded.records,
            loaded.skipped,
        )

    def _install(self, loaded: LoadedGroups, now_ms: int) -> None:
        for group_id, record in loaded.groups.items():
            restored = self.groups[group_id] = Group.from_record(group_id, record, now_ms)
            for member in restored.members.values():
                self.rebalancer.touch(restored, member.member_id, now_ms)
        for group_id, offsets in loaded.offsets.items():
            if offsets:
                # A group known only by its offsets committed outside the group protocol: it
                # comes back Empty with no protocol type.
                owner = self.groups.get(group_id) or self._create_group(group_id, now_ms)
                owner.offsets.update(offsets)
        for group_id, by_producer in loaded.pending.items():
            # Transactional offsets whose transaction has no marker yet: the transaction
            # coordinator's recovery completes them.
            owner = self.groups.get(group_id) or self._create_group(group_id, now_ms)
            for producer_id, entries in by_producer.items():
                owner.pending_txn_offsets.setdefault(producer_id, {}).update(entries)

    # -----------------------------------------------------------------------------------------
    # Partitions moving in and out (a cluster broker; ownership.py)

    def check_coordinator(self, group_id: str) -> None:
        """Raise unless this coordinator serves ``group_id`` now: an invalid id, or
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when its partition of
        ``__consumer_offsets`` is not (yet) owned here."""
        validate_group_id(group_id)
        if self.ownership.owns_everything:
            return
        self.ownership.check(self.store.partition_for(group_id), group_id)

    def load_partition(self, partition: int, token: int, loaded: LoadedGroups, now_ms: int) -> bool:
        """Install the groups of ``partition`` that load ``token`` read, unless the
        partition resigned or a newer load began meanwhile; whether they were installed."""
        if not self.ownership.finish_loading(partition, token):
            logger.info(
                "__consumer_offsets-%d: discarding a load that finished after the partition "
                "moved on",
                partition,
            )
            return False
        foreign = [
            g
            for g in (*loaded.groups, *loaded.offsets, *loaded.pending)
            if self.store.partition_for(g) != partition
        ]
        if foreign:
            # Records of other partitions' groups (a topic whose partition count changed):
            # they are not this partition's to serve.
            logger.warning(
                "__consumer_offsets-%d holds records of %d groups of other partitions; "
                "they are skipped",
                partition,
                len(set(foreign)),
            )
            for g in foreign:
                loaded.groups.pop(g, None)
                loaded.offsets.pop(g, None)
                loaded.pending.pop(g, None)
        self._install(loaded, now_ms)
        mine = [
            g for g in self.groups.values() if self.store.partition_for(g.group_id) == partition
        ]
        logger.info(
            "__consumer_offsets-%d loaded (coordinator epoch %s): %d groups, %d committed "
            "offsets from %d records (%d skipped)",
            partition,
            self.ownership.epoch_of(partition),
            len(mine),
            sum(len(g.offsets) for g in mine),
            loaded.records,
            loaded.skipped,
        )
        return True

    def unload_partition(self, partition: int, now_ms: int) -> int:
        """This broker no longer leads ``partition``: forget its groups. Members waiting in
        JoinGroup or SyncGroup are answered NOT_COORDINATOR (they find the new coordinator
        and rejoin there), and the groups' deadlines are cancelled. How many groups went."""
        self.ownership.resign(partition)
        gone = NotCoordinatorError(
            f"__consumer_offsets-{partition} moved to another broker, which coordinates its "
            "groups now; find the coordinator again (FindCoordinator) and rejoin"
        )
        unloaded = [
            g
            for g in list(self.groups.values())
            if self.store.partition_for(g.group_id) == partition
        ]
        for group in unloaded:
            for member in group.members.values():
                member.answer_join(join_error(gone, member.member_id))
                member.answer_sync(sync_error(gone))
            group.transition_to(GroupState.DEAD, now_ms)
            del self.groups[group.group_id]
            self.timers.cancel_matching(_of_group(group.group_id))
        if unloaded:
            logger.info("__consumer_offsets-%d unloaded: %d groups", partition, len(unloaded))
        return len(unloaded)

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup and SyncGroup (retriable): the broker stops."""
        self.rebalancer.shutdown()


def _of_group(group_id: str) -> Callable[[Hashable], bool]:
    """Whether a deadline's key is about ``group_id`` (keys are ``(kind, group id, ...)``)."""
    return lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] == group_id
