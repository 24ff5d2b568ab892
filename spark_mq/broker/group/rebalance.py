"""Rebalance rounds, SyncGroup, Heartbeat, LeaveGroup and sessions: the classic protocol.

JoinGroup's three paths (new, returning and static members) are in
:mod:`~spark_mq.broker.group.join`, which starts and joins the rounds run here.

Kafka's ``GroupCoordinator`` (before KIP-848) as plain synchronous logic: every entry point
takes ``now_ms``; what must happen later is a deadline in the shared
:class:`~spark_mq.broker.group.timers.TimerQueue`; a JoinGroup or SyncGroup that has to wait
is answered later through its callback. One round::

    members JoinGroup ──> PreparingRebalance: wait until every known member has rejoined
      (or the rebalance timeout: dynamic members that did not rejoin are removed; the first
      rebalance of an empty group waits group.initial.rebalance.delay.ms for more members)
    ──> CompletingRebalance: generation + 1, protocol chosen by vote, every JoinGroup
      answered (the leader gets every member's subscription)
    ──> the leader's SyncGroup stores the assignment in __consumer_offsets ──> Stable: every
      member's SyncGroup answered with its assignment.

Deadlines, by timer key:

- ``("session", group, member)``: the member's session (``session.timeout.ms`` after its
  last heartbeat, JoinGroup, SyncGroup or commit). A member waiting in JoinGroup or SyncGroup
  is kept (its wait is bounded by the join and sync deadlines), except a new member that has
  not completed its first join within :data:`NEW_MEMBER_JOIN_TIMEOUT_MS`.
- ``("pending", group, member)``: an id handed out with MEMBER_ID_REQUIRED is forgotten if the
  member does not join with it within its session timeout.
- ``("join", group)``: the join round ends (the rebalance timeout, or the initial delay).
- ``("sync", group)``: members that have not sent SyncGroup one rebalance timeout after the
  join round are removed and the group rebalances.

Static members (``group.instance.id``) that do not rejoin a round keep their place until
their session expires, so a restarting static member gets its partitions back.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final

from spark_mq.broker.group.config import MAX_GROUP_ID_BYTES, GroupConfig
from spark_mq.broker.group.group import Group
from spark_mq.broker.group.member import Member, SyncCallback
from spark_mq.broker.group.offsets_topic import GroupStore
from spark_mq.broker.group.records import group_key
from spark_mq.broker.group.replication import APPEND_ERRORS, coordinator_error
from spark_mq.broker.group.state import GroupState
from spark_mq.broker.group.timers import TimerQueue
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    NotCoordinatorError,
    RebalanceInProgressError,
    SparkMQError,
    StorageError,
    UnknownMemberIdError,
)
from spark_mq.protocol.error_codes import code_for
from spark_mq.protocol.groups import (
    HeartbeatRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

logger = logging.getLogger("spark_mq.broker.group")

#: Kafka's ``GroupCoordinator.NewMemberJoinTimeoutMs``: how long a member that has never
#: completed a join round may wait in its first JoinGroup (KIP-394).
NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 300_000

STABLE = GroupState.STABLE
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
EMPTY = GroupState.EMPTY


def join_error(exc: SparkMQError, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(int(code_for(exc)), member_id=member_id, error_message=str(exc))


def sync_error(exc: SparkMQError) -> SyncGroupResponse:
    return SyncGroupResponse(int(code_for(exc)), error_message=str(exc))


def validate_group_id(group_id: str) -> None:
    if not group_id or len(group_id.encode("utf-8")) > MAX_GROUP_ID_BYTES:
        raise InvalidGroupIdError(
            f"group id {group_id[:40]!r} is not valid: it must be 1 to {MAX_GROUP_ID_BYTES} "
            "bytes of UTF-8 (set group.id on the consumer)"
        )


class Rebalancer:
    """The membership half of the coordinator; shares ``groups`` and ``timers`` with it."""

    def __init__(
        self,
        config: GroupConfig,
        groups: dict[str, Group],
        timers: TimerQueue,
        store: GroupStore,
    ) -> None:
        self.config = config
        self.groups = groups
        self.timers = timers
        self.store = store

    def validate_member(self, group: Group, member_id: str, instance_id: str | None) -> Member:
        """The member, or the error a request naming it gets (fenced, unknown)."""
        if group.is_static_member_fenced(instance_id, member_id):
            raise FencedInstanceIdError(
                f"group.instance.id {instance_id!r} of group {group.group_id!r} belongs to a "
                f"newer member ({group.static_member_id(instance_id)}); member {member_id} was "
                "replaced: another consumer with the same group.instance.id took over, so stop "
                "this one or give it a different group.instance.id"
            )
        member = group.members.get(member_id)
        if member is None or (
            instance_id is not None and group.static_member_id(instance_id) is None
        ):
            raise UnknownMemberIdError(
                f"member {member_id!r} is not in group {group.group_id!r} (its session expired "
                "or it left); rejoin with an empty member id"
            )
        return member

    def join_result(self, group: Group, member: Member) -> JoinGroupResponse:
        is_leader = member.member_id == group.leader_id
        return JoinGroupResponse(
            0,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=group.member_metadata() if is_leader else [],
        )

    # -----------------------------------------------------------------------------------------
    # Rebalance rounds

    def maybe_prepare_rebalance(self, group: Group, now_ms: int, reason: str) -> None:
        if group.can_rebalance:
            self.prepare_rebalance(group, now_ms, reason)
        else:
            self.maybe_complete_join(group, now_ms)

    def prepare_rebalance(self, group: Group, now_ms: int, reason: str) -> None:
        if group.is_in(COMPLETING):
            error = RebalanceInProgressError(
                f"group {group.group_id!r} is rebalancing again ({reason}); rejoin"
            )
            for member in group.members.values():
                member.assignment = b""
                if member.awaiting_sync:
                    # Its session counts from this answer: it must rejoin within it.
                    member.answer_sync(sync_error(error))
                    self.schedule_session(group, member, now_ms + member.session_timeout_ms)
        self.timers.cancel(("sync", group.group_id))
        group.pending_sync.clear()
        was_empty = group.is_in(EMPTY)
        group.transition_to(PREPARING, now_ms)
        logger.info(
            "group %s: preparing to rebalance generation %d (%s)",
            group.group_id,
            group.generation_id,
            reason,
        )
        delay_ms = self.config.group_initial_rebalance_delay_ms
        if was_empty and delay_ms > 0:
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms - delay_ms, 0)
            group.new_member_added = False
            self._schedule_join(group, now_ms + delay_ms, initial=True)
        else:
            group.initial_delay_remaining_ms = None
            self._schedule_join(group, now_ms + group.rebalance_timeout_ms, initial=False)
            self.maybe_complete_join(group, now_ms)

    def _schedule_join(self, group: Group, deadline_ms: int, *, initial: bool) -> None:
        group_id = group.group_id
        action = self._initial_delay_over if initial else self._join_timed_out
        self.timers.schedule(("join", group_id), deadline_ms, lambda now: action(group_id, now))

    def _initial_delay_over(self, group_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None or not group.is_in(PREPARING) or group.initial_delay_remaining_ms is None:
            return
        remaining = group.initial_delay_remaining_ms
        if group.new_member_added and remaining > 0:
            # Members are still arriving: wait a little longer, within the rebalance timeout.
            delay_ms = min(self.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_delay_remaining_ms = remaining - delay_ms
            group.new_member_added = False
            self._schedule_join(group, now_ms + delay_ms, initial=True)
            return
        group.initial_delay_remaining_ms = None
        self._complete_join(group, now_ms)

    def _join_timed_out(self, group_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.is_in(PREPARING):
            self._complete_join(group, now_ms)

    def maybe_complete_join(self, group: Group, now_ms: int) -> None:
        if (
            group.is_in(PREPARING)
            and group.initial_delay_remaining_ms is None
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        self.timers.cancel(("join", group.group_id))
        for member in group.not_yet_rejoined():
            # Static members keep their place until their session expires: they may be
            # restarting, and will get their assignment back.
            if not member.is_static:
                self.drop_member(group, member, "it did not rejoin within the rebalance timeout")
        if group.members and not group.elect_joined_leader():
            # Only static members that have not rejoined are left: wait for them.
            self._schedule_join(group, now_ms + group.rebalance_timeout_ms, initial=False)
            return
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.transition_to(EMPTY, now_ms)
            logger.info("group %s: empty at generation %d", group.group_id, group.generation_id)
            self.store_quietly(group, now_ms)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(COMPLETING, now_ms)
        group.pending_sync = set(group.members)
        generation = group.generation_id
        self.timers.schedule(
            ("sync", group.group_id),
            now_ms + group.rebalance_timeout_ms,
            lambda now: self._sync_timed_out(group.group_id, generation, now),
        )
        logger.info(
            "group %s: generation %d with %d members, leader %s, protocol %s",
            group.group_id,
            generation,
            len(group.members),
            group.leader_id,
            group.protocol_name,
        )
        for member in list(group.members.values()):
            member.is_new = False
            member.answer_join(self.join_result(group, member))
            self.schedule_session(group, member, now_ms + member.session_timeout_ms)

    def _sync_timed_out(self, group_id: str, generation: int, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if (
            group is None
            or group.generation_id != generation
            or not group.is_in(COMPLETING, STABLE)
            or not group.pending_sync
        ):
            return
        for member_id in sorted(group.pending_sync):
            self.drop_member(group, group.members[member_id], "it did not send SyncGroup in time")
        self.prepare_rebalance(group, now_ms, "members did not send SyncGroup in time")

    # -----------------------------------------------------------------------------------------
    # SyncGroup

    def sync(self, request: SyncGroupRequest, *, now_ms: int, respond: SyncCallback) -> None:
        """Handle a SyncGroup; ``respond`` is called once, now or when the leader syncs."""
        try:
            self._sync(request, now_ms, respond)
        except SparkMQError as exc:
            respond(sync_error(exc))

    def _sync(self, request: SyncGroupRequest, now_ms: int, respond: SyncCallback) -> None:
        group = self.require_group(request.group_id)
        member = self.validate_member(group, request.member_id, request.group_instance_id)
        self.check_generation(group, request.generation_id)
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol_name
        ):
            raise InconsistentGroupProtocolError(
                f"group {group.group_id!r} runs {group.protocol_type}/{group.protocol_name}, "
                f"not {request.protocol_type}/{request.protocol_name}"
            )
        if group.is_in(PREPARING):
            raise RebalanceInProgressError(
                f"group {group.group_id!r} is rebalancing; rejoin before syncing"
            )
        group.pending_sync.discard(member.member_id)
        if not group.pending_sync:
            self.timers.cancel(("sync", group.group_id))
        if group.is_in(STABLE):
            self.schedule_session(group, member, now_ms + member.session_timeout_ms)
            respond(self._sync_result(group, member))
            return
        superseded = RebalanceInProgressError("superseded by a newer SyncGroup of this member")
        member.answer_sync(sync_error(superseded))
        member.sync_callback = respond
        if member.member_id == group.leader_id:
            self._apply_assignment(group, request, now_ms)

    def _apply_assignment(self, group: Group, request: SyncGroupRequest, now_ms: int) -> None:
        given = {a.member_id: a.assignment for a in request.assignments}
        unknown = sorted(set(given) - set(group.members))
        if unknown:
            logger.warning(
                "group %s: the leader assigned partitions to unknown members %s; ignored",
                group.group_id,
                unknown,
            )
        for member in group.members.values():
            member.assignment = given.get(member.member_id, b"")
        try:
            self.store_group(group, now_ms)
        except SparkMQError as exc:
            for member in group.members.values():
                member.assignment = b""
                if member.awaiting_sync:
                    member.answer_sync(sync_error(exc))
                    self.schedule_session(group, member, now_ms + member.session_timeout_ms)
            self.prepare_rebalance(group, now_ms, "the assignment could not be stored")
            return
        group.transition_to(STABLE, now_ms)
        for member in group.members.values():
            if member.awaiting_sync:
                self.schedule_session(group, member, now_ms + member.session_timeout_ms)
                member.answer_sync(self._sync_result(group, member))

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncGroupResponse:
        return SyncGroupResponse(0, member.assignment, group.protocol_type, group.protocol_name)

    # -----------------------------------------------------------------------------------------
    # Heartbeat and LeaveGroup

    def heartbeat(self, request: HeartbeatRequest, *, now_ms: int) -> None:
        """Keep the member's session alive; raises what the response reports."""
        group = self.require_group(request.group_id)
        member = self.validate_member(group, request.member_id, request.group_instance_id)
        self.check_generation(group, request.generation_id)
        self.schedule_session(group, member, now_ms + member.session_timeout_ms)
        if group.is_in(PREPARING):
            raise RebalanceInProgressError(
                f"group {group.group_id!r} is rebalancing; rejoin (JoinGroup)"
            )

    def leave(self, request: LeaveGroupRequest, *, now_ms: int) -> LeaveGroupResponse:
        validate_group_id(request.group_id)
        results = []
        group = self.groups.get(request.group_id)
        for leaving in request.members:
            try:
                if group is None:
                    raise UnknownMemberIdError(f"group {request.group_id!r} does not exist")
                self._leave_one(group, leaving.member_id, leaving.group_instance_id, now_ms)
                code = 0
            except SparkMQError as exc:
                code = int(code_for(exc))
            results.append(
                LeavingMemberResponse(leaving.member_id, code, leaving.group_instance_id)
            )
        return LeaveGroupResponse(0, results)

    def _leave_one(
        self, group: Group, member_id: str, instance_id: str | None, now_ms: int
    ) -> None:
        if not member_id and instance_id is not None:
            # KIP-345: an admin removes a static member by its instance id.
            found = group.static_member_id(instance_id)
            if found is None:
                raise UnknownMemberIdError(
                    f"no member of group {group.group_id!r} has group.instance.id {instance_id!r}"
                )
            member_id = found
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.timers.cancel(("pending", group.group_id, member_id))
            self.maybe_complete_join(group, now_ms)
            return
        member = self.validate_member(group, member_id, instance_id)
        self.remove_member_and_update_group(group, member, now_ms, "it left the group")

    # -----------------------------------------------------------------------------------------
    # Sessions and removal

    def schedule_session(self, group: Group, member: Member, deadline_ms: int) -> None:
        group_id, member_id = group.group_id, member.member_id
        self.timers.schedule(
            ("session", group_id, member_id),
            deadline_ms,
            lambda now: self._session_expired(group_id, member_id, now),
        )

    def touch(self, group: Group, member_id: str, now_ms: int) -> None:
        """Another sign of life than a heartbeat (an offset commit): restart the session."""
        member = group.members.get(member_id)
        if member is not None:
            self.schedule_session(group, member, now_ms + member.session_timeout_ms)

    def _session_expired(self, group_id: str, member_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            # Waiting in a request: the join and sync deadlines bound that wait.
            self.schedule_session(group, member, now_ms + member.session_timeout_ms)
            return
        self.remove_member_and_update_group(group, member, now_ms, "its session expired")

    def expire_pending(self, group_id: str, member_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.maybe_complete_join(group, now_ms)

    def remove_member_and_update_group(
        self, group: Group, member: Member, now_ms: int, reason: str
    ) -> None:
        self.drop_member(group, member, reason)
        if group.is_in(STABLE, COMPLETING):
            self.prepare_rebalance(group, now_ms, f"member {member.member_id} left: {reason}")
        elif group.is_in(PREPARING):
            self.maybe_complete_join(group, now_ms)

    def drop_member(self, group: Group, member: Member, reason: str) -> None:
        logger.info("group %s: removing member %s: %s", group.group_id, member.member_id, reason)
        gone = UnknownMemberIdError(
            f"member {member.member_id} was removed from group {group.group_id!r} because "
            f"{reason}; rejoin with an empty member id"
        )
        member.answer_join(join_error(gone, member.member_id))
        member.answer_sync(sync_error(gone))
        group.remove(member.member_id)
        self.timers.cancel(("session", group.group_id, member.member_id))

    # -----------------------------------------------------------------------------------------
    # Shared checks and persistence

    def require_group(self, group_id: str) -> Group:
        validate_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(
                f"group {group_id!r} does not exist (deleted, or its members all expired); "
                "rejoin with an empty member id"
            )
        return group

    @staticmethod
    def check_generation(group: Group, generation_id: int) -> None:
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} of group {group.group_id!r} is over (it is at "
                f"generation {group.generation_id}); rejoin to get the current one"
            )

    def store_group(self, group: Group, now_ms: int) -> None:
        """Write the group's metadata record; CoordinatorNotAvailableError if that fails
        (NotCoordinatorError when this broker no longer leads the group's partition)."""
        try:
            self.store.append(
                group.group_id, [(group_key(group.group_id), group.to_record_value())], now_ms
            )
        except APPEND_ERRORS as exc:
            # A cluster's: the partition moved, or its ISR is below min.insync.replicas.
            logger.warning("group %s: its metadata was not written: %s", group.group_id, exc)
            raise coordinator_error(exc, f"group {group.group_id!r}", sync_group=True) from exc
        except (OSError, StorageError) as exc:  # the disk's; a bug is raised as it is
            logger.error(
                "group %s: writing its metadata to __consumer_offsets failed: %s",
                group.group_id,
                exc,
                exc_info=exc,
            )
            raise CoordinatorNotAvailableError(
                f"group {group.group_id!r}: the coordinator could not store the group in "
                f"__consumer_offsets ({type(exc).__name__}: {exc}); retry"
            ) from exc

    def store_quietly(self, group: Group, now_ms: int) -> None:
        # Nobody waits for this write (the group just became empty): a failure is logged by
        # store_group, and the next generation's record supersedes it.
        with contextlib.suppress(CoordinatorNotAvailableError, NotCoordinatorError):
            self.store_group(group, now_ms)

    def shutdown(self) -> None:
        """Answer every waiting JoinGroup and SyncGroup: the coordinator is going away."""
        gone = CoordinatorNotAvailableError(
            "the broker is shutting down; find the coordinator again and retry"
        )
        for group in self.groups.values():
            for member in group.members.values():
                member.answer_join(join_error(gone, member.member_id))
                member.answer_sync(sync_error(gone))
