"""JoinGroup: new members, returning members and static members.

Three paths, as in Kafka's classic coordinator:

- **a new dynamic member** (no member id, no ``group.instance.id``) gets an id and
  MEMBER_ID_REQUIRED (KIP-394), and joins for real when it comes back with that id;
- **a known member** rejoins: it waits for the round if the group rebalances; a follower of a
  Stable group that offers the same protocols gets the current generation back without a
  rebalance; the leader, or a member with new protocols, starts a rebalance;
- **a static member** (``group.instance.id``) joins at once under a new id. If its instance
  id is known, it takes over the old member's place (and leadership, and assignment): the
  old member id is fenced, and a Stable group does not rebalance unless the group's
  protocol would change (KIP-345).

The rounds themselves (waiting for members, completing, sessions) are
:class:`~spark_mq.broker.group.rebalance.Rebalancer`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.broker.group.group import Group
from spark_mq.broker.group.member import JoinCallback, Member, Protocols
from spark_mq.broker.group.rebalance import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    Rebalancer,
    join_error,
    sync_error,
    validate_group_id,
)
from spark_mq.broker.group.state import GroupState
from spark_mq.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    SparkMQError,
    UnknownMemberIdError,
)
from spark_mq.protocol.groups import JoinGroupRequest

logger = logging.getLogger("spark_mq.broker.group")

STABLE = GroupState.STABLE
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE


class JoinHandler:
    """JoinGroup, over the rounds of a :class:`Rebalancer`."""

    def __init__(self, rounds: Rebalancer, new_member_id: Callable[[str], str]) -> None:
        self.rounds = rounds
        self.new_member_id = new_member_id

    # -----------------------------------------------------------------------------------------
    # JoinGroup

    def join(
        self,
        request: JoinGroupRequest,
        *,
        client_id: str,
        client_host: str,
        now_ms: int,
        respond: JoinCallback,
    ) -> None:
        """Handle a JoinGroup; ``respond`` is called once, now or when the round completes."""
        created = False
        try:
            validate_group_id(request.group_id)
            self._check_session_timeout(request.session_timeout_ms)
            group = self.rounds.groups.get(request.group_id)
            if group is None:
                if request.member_id:
                    raise UnknownMemberIdError(
                        f"group {request.group_id!r} does not exist (deleted, or its members "
                        "all expired); rejoin with an empty member id"
                    )
                group = self.rounds.groups[request.group_id] = Group(request.group_id, now_ms)
                created = True
            protocols: Protocols = [(p.name, p.metadata) for p in request.protocols]
            if not group.supports_protocols(request.protocol_type, [n for n, _ in protocols]):
                raise InconsistentGroupProtocolError(
                    f"group {request.group_id!r} uses protocol type {group.protocol_type!r} "
                    f"and assignors {sorted(group.candidate_protocols())}; this member offers "
                    f"{request.protocol_type!r} with {[n for n, _ in protocols]}: configure a "
                    "partition.assignment.strategy every member shares"
                )
            member = _JoinArgs(request, protocols, client_id, client_host)
            if request.member_id:
                self._join_known_member(group, member, now_ms, respond)
            else:
                self._join_new_member(group, member, now_ms, respond)
        except SparkMQError as exc:
            if created and not self.rounds.groups[request.group_id].size():
                del self.rounds.groups[request.group_id]
            respond(join_error(exc, request.member_id))

    def _check_session_timeout(self, session_timeout_ms: int) -> None:
        low = self.rounds.config.group_min_session_timeout_ms
        high = self.rounds.config.group_max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeoutError(
                f"session.timeout.ms={session_timeout_ms} is outside the broker's range "
                f"[{low}, {high}] (group.min.session.timeout.ms, group.max.session.timeout.ms); "
                "choose a value inside it"
            )

    def _join_new_member(
        self, group: Group, args: _JoinArgs, now_ms: int, respond: JoinCallback
    ) -> None:
        instance_id = args.request.group_instance_id
        known = group.static_member_id(instance_id)
        if known is None and group.size() >= self.rounds.config.group_max_size:
            raise GroupMaxSizeReachedError(
                f"group {group.group_id!r} already has {group.size()} members "
                f"(group.max.size={self.rounds.config.group_max_size}); stop a member or raise "
                "group.max.size"
            )
        member_id = self.new_member_id(args.client_id)
        if instance_id is not None and known is not None:
            self._replace_static_member(
                group, known, member_id, args, now_ms=now_ms, respond=respond
            )
        elif instance_id is not None:
            self._add_member_and_rebalance(group, member_id, args, now_ms, respond)
        else:
            # KIP-394: a dynamic member first gets an id, so a member that retries its first
            # join after a timeout is the same member, not a second one.
            group.pending_members.add(member_id)
            self.rounds.timers.schedule(
                ("pending", group.group_id, member_id),
                now_ms + args.request.session_timeout_ms,
                lambda now: self.rounds.expire_pending(group.group_id, member_id, now),
            )
            exc = MemberIdRequiredError(
                f"rejoin group {group.group_id!r} with the member id {member_id!r} given here"
            )
            respond(join_error(exc, member_id))

    def _join_known_member(
        self, group: Group, args: _JoinArgs, now_ms: int, respond: JoinCallback
    ) -> None:
        member_id = args.request.member_id
        instance_id = args.request.group_instance_id
        if member_id in group.pending_members and instance_id is None:
            self._add_member_and_rebalance(group, member_id, args, now_ms, respond)
            return
        member = self.rounds.validate_member(group, member_id, instance_id)
        if group.is_in(PREPARING):
            self._update_member_and_rebalance(group, member, args, now_ms, respond)
        elif group.is_in(COMPLETING) and member.matches(args.protocols):
            # The member lost the answer to its join (a timeout, a reconnect): repeat it.
            respond(self.rounds.join_result(group, member))
        elif (
            group.is_in(STABLE) and group.leader_id != member_id and member.matches(args.protocols)
        ):
            # A follower rejoining with nothing new: no need to disturb the group.
            self.rounds.schedule_session(group, member, now_ms + member.session_timeout_ms)
            respond(self.rounds.join_result(group, member))
        else:
            self._update_member_and_rebalance(group, member, args, now_ms, respond)

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, args: _JoinArgs, now_ms: int, respond: JoinCallback
    ) -> None:
        request = args.request
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=args.client_id,
            client_host=args.client_host,
            rebalance_timeout_ms=_rebalance_timeout(request),
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=args.protocols,
            join_callback=respond,
            is_new=True,
        )
        self.rounds.timers.cancel(("pending", group.group_id, member_id))
        group.add(member)
        if group.initial_delay_remaining_ms is not None:
            group.new_member_added = True
        self.rounds.schedule_session(group, member, now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS)
        self.rounds.maybe_prepare_rebalance(group, now_ms, f"member {member_id} joined")

    def _update_member_and_rebalance(
        self, group: Group, member: Member, args: _JoinArgs, now_ms: int, respond: JoinCallback
    ) -> None:
        member.protocols = args.protocols
        member.rebalance_timeout_ms = _rebalance_timeout(args.request)
        member.session_timeout_ms = args.request.session_timeout_ms
        superseded = RebalanceInProgressError(
            f"member {member.member_id} sent a newer JoinGroup; this one is superseded"
        )
        member.answer_join(join_error(superseded, member.member_id))
        member.join_callback = respond
        self.rounds.maybe_prepare_rebalance(group, now_ms, f"member {member.member_id} rejoined")

    def _replace_static_member(
        self,
        group: Group,
        old_id: str,
        new_id: str,
        args: _JoinArgs,
        *,
        now_ms: int,
        respond: JoinCallback,
    ) -> None:
        instance_id = args.request.group_instance_id
        assert instance_id is not None
        old = group.members[old_id]
        fenced = FencedInstanceIdError(
            f"group.instance.id {instance_id!r} rejoined group {group.group_id!r} as member "
            f"{new_id}; member {old_id} is replaced (another consumer with the same "
            "group.instance.id took over)"
        )
        old.answer_join(join_error(fenced, old_id))
        old.answer_sync(sync_error(fenced))
        self.rounds.timers.cancel(("session", group.group_id, old_id))
        saved = (old.protocols, old.rebalance_timeout_ms, old.session_timeout_ms)
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.protocols = args.protocols
        member.rebalance_timeout_ms = _rebalance_timeout(args.request)
        member.session_timeout_ms = args.request.session_timeout_ms
        self.rounds.schedule_session(group, member, now_ms + member.session_timeout_ms)
        logger.info(
            "group %s: static member %s replaced %s with %s",
            group.group_id,
            instance_id,
            old_id,
            new_id,
        )
        if group.is_in(STABLE) and group.select_protocol() == group.protocol_name:
            try:
                self.rounds.store_group(group, now_ms)
            except SparkMQError as exc:
                # Put the old member back, so that it can go on as if nothing happened.
                self.rounds.timers.cancel(("session", group.group_id, new_id))
                member = group.replace_static_member(instance_id, new_id, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = saved
                self.rounds.schedule_session(group, member, now_ms + member.session_timeout_ms)
                respond(join_error(exc))
                return
            # No rebalance: the member gets its previous assignment from SyncGroup. A leader
            # is told to skip the assignor (KIP-814): the assignment stays as it is.
            result = self.rounds.join_result(group, member)
            result.skip_assignment = member.member_id == group.leader_id
            respond(result)
            return
        member.join_callback = respond
        self.rounds.maybe_prepare_rebalance(group, now_ms, f"static member {instance_id} rejoined")


class _JoinArgs:
    """A JoinGroup with what the broker knows about its sender."""

    __slots__ = ("client_host", "client_id", "protocols", "request")

    def __init__(
        self, request: JoinGroupRequest, protocols: Protocols, client_id: str, client_host: str
    ) -> None:
        self.request = request
        self.protocols = protocols
        self.client_id = client_id
        self.client_host = client_host


def _rebalance_timeout(request: JoinGroupRequest) -> int:
    # Kafka's JoinGroup v0 had no rebalance timeout and used the session timeout.
    return (
        request.rebalance_timeout_ms
        if request.rebalance_timeout_ms > 0
        else (request.session_timeout_ms)
    )
