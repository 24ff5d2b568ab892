"""A member of a consumer group: the client side of the classic rebalance protocol.

:class:`GroupMembership` is Kafka's ``AbstractCoordinator``: it finds the coordinator, joins
(JoinGroup, retried with the member id the coordinator assigns on MEMBER_ID_REQUIRED), syncs
(SyncGroup: the leader sends every member's assignment, the others receive theirs), keeps
the membership alive through the heartbeat thread, and leaves. It knows nothing about
partitions: :class:`~spark_mq.client.group.consumer_coordinator.ConsumerCoordinator`
supplies the subscription bytes, runs the assignor when this member leads, and applies the
assignment, through four hooks (``join_protocols``, ``on_join_prepare``,
``perform_assignment``, ``on_join_complete``).

The join is a state machine (:class:`~spark_mq.client.group.member_state.MemberState`)
advanced by :meth:`GroupMembership.join_step`, which sends what is due and runs the handlers
of the answers that arrived, waiting at most until a deadline. The consumer calls it from
``poll()``, so every hook, and every rebalance listener callback, runs in the application's
thread. A JoinGroup can take as long as the group's rebalance timeout (the coordinator
answers once every member has rejoined); ``poll()`` does not wait for it when it has
partitions to read (cooperative rebalancing), and the next ``poll()`` takes it up again.

What each error answer does is tabled in ``docs/groups.md`` ("The member's states");
FENCED_INSTANCE_ID is fatal: every later call raises it.

The state the member shares with the heartbeat thread, the hooks, coordinator lookup and
the heartbeat thread's side are in :class:`~spark_mq.client.group.membership_state.
MembershipState`; this module is the JoinGroup / SyncGroup exchange and leaving, all on the
application's thread.
"""

from __future__ import annotations

import logging

from spark_mq.client.group.coordinator_lookup import CoordinatorInfo
from spark_mq.client.group.heartbeat import HeartbeatThread
from spark_mq.client.group.member_state import NO_GENERATION, Generation, MemberState
from spark_mq.client.group.membership_state import (
    COORDINATOR_GONE,
    HeartbeatTask,
    MembershipState,
)
from spark_mq.errors import SparkMQError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.groups import (
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger(__name__)

#: The protocol type consumer groups register with (Kafka's).
CONSUMER_PROTOCOL_TYPE = "consumer"

__all__ = ["CONSUMER_PROTOCOL_TYPE", "GroupMembership", "HeartbeatTask"]


class GroupMembership(MembershipState):
    """Joining, syncing, heartbeating and leaving (see the module docstring)."""

    # -- joining --------------------------------------------------------------------------

    def join_step(self, deadline: float) -> bool:
        """Advance the (re)join until the member is STABLE or ``deadline`` passes; returns
        whether it is STABLE with nothing left to do."""
        while True:
            self.raise_errors()
            with self._lock:
                state, rejoin = self._state, self._rejoin_needed
            if state is MemberState.STABLE and not rejoin:
                return True
            if not state.in_rebalance:
                now = self._clock()
                if now < self._join_retry_at:
                    if now >= deadline:
                        return False
                    self._sleep(min(self._join_retry_at, deadline) - now)
                    continue
                coordinator = self.ensure_coordinator_ready(deadline)
                if coordinator is None:
                    return False
                if self._needs_join_prepare:
                    if not self.on_join_prepare(self.generation(), deadline):
                        return False  # its commit is still pending: the next poll goes on
                    self._needs_join_prepare = False
                self._send_join(coordinator)
                continue
            if not self._group_channel.in_flight:
                # A rebalance state with nothing in flight cannot make progress; rejoin.
                with self._lock:
                    self._set_state(MemberState.UNJOINED)
                continue
            remaining = deadline - self._clock()
            if not self._group_channel.poll(max(remaining, 0.0)) and remaining <= 0:
                return self.is_stable()

    def _join_timeout_ms(self) -> int:
        # The coordinator holds a JoinGroup until every member rejoined (up to the rebalance
        # timeout), and a follower's SyncGroup until the leader has synced.
        return self.config.effective_rebalance_timeout_ms + self.config.request_timeout_ms

    def _send_join(self, coordinator: CoordinatorInfo) -> None:
        self._start_heartbeat_thread()
        with self._lock:
            generation = self._generation
            reason = self._rejoin_reason
            self._set_state(MemberState.PREPARING_REBALANCE)
            self._rejoin_needed = False
        request = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.effective_rebalance_timeout_ms,
            member_id=generation.member_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=self.join_protocols(),
            group_instance_id=self.instance_id,
            reason=reason,
        )
        log.debug("group %s: JoinGroup as %r (%s)", self.group_id, generation.member_id, reason)
        self._group_channel.send(
            request, self._on_join, coordinator=coordinator, timeout_ms=self._join_timeout_ms()
        )

    def _retry_join(self, *, backoff: bool) -> None:
        """Back to UNJOINED; the next join_step sends JoinGroup again. Caller holds the lock."""
        if self._state is not MemberState.UNJOINED:
            self._set_state(MemberState.UNJOINED)
        self._rejoin_needed = True
        delay_s = self.config.retry_backoff_ms / 1000 if backoff else 0.0
        self._join_retry_at = self._clock() + delay_s

    def _join_error(self, code: int, message: str | None, during: str) -> None:
        """What an error answer to JoinGroup or SyncGroup does (see the module docstring)."""
        with self._lock:
            if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.MEMBER_ID_REQUIRED):
                self._retry_join(backoff=False)
            elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                keep = code == ErrorCode.ILLEGAL_GENERATION
                self._reset_generation(keep_member_id=keep, reason=f"{during}: {message or code}")
                self._needs_join_prepare = True
                self._retry_join(backoff=False)
            elif code in COORDINATOR_GONE:
                self._coordinator = None
                self._retry_join(backoff=True)
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self._fatal = self._fenced_error()
                self._retry_join(backoff=True)
            else:
                error = error_from_code(code, message)
                if not error.retriable:
                    self._error = error
                self._retry_join(backoff=True)

    def _on_join(self, body: JoinGroupResponse | None, error: SparkMQError | None) -> None:
        if error is not None or body is None:
            with self._lock:
                if self._state is MemberState.PREPARING_REBALANCE:
                    self._coordinator = None
                    self._retry_join(backoff=True)
            return
        with self._lock:
            if self._state is not MemberState.PREPARING_REBALANCE:
                return  # left or closed meanwhile
            if body.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self._generation = Generation(-1, body.member_id, None)
            elif body.error_code == ErrorCode.NONE:
                self._generation = Generation(
                    body.generation_id, body.member_id, body.protocol_name
                )
                self._set_state(MemberState.COMPLETING_REBALANCE)
        if body.error_code != ErrorCode.NONE:
            self._join_error(body.error_code, body.error_message, "JoinGroup")
            return
        generation = self.generation()
        assignments: list[SyncGroupAssignment] = []
        if body.leader == body.member_id and not body.skip_assignment:
            try:
                encoded = self.perform_assignment(
                    body.leader, body.protocol_name or "", body.members
                )
            except SparkMQError as exc:
                # A metadata lookup that failed for now is retried with the join; anything
                # else (an undecodable subscription, an unknown assignor) is raised from
                # poll() (and tried again by the next one).
                log.warning("group %s: the assignment failed: %s", self.group_id, exc)
                if not exc.retriable:
                    self._error = exc
                with self._lock:
                    self._retry_join(backoff=True)
                return
            assignments = [SyncGroupAssignment(m, data) for m, data in encoded.items()]
        request = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=generation.generation_id,
            member_id=generation.member_id,
            assignments=assignments,
            group_instance_id=self.instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=generation.protocol,
        )
        coordinator = self.coordinator()
        if coordinator is None:
            with self._lock:
                self._retry_join(backoff=True)
            return
        self._group_channel.send(
            request, self._on_sync, coordinator=coordinator, timeout_ms=self._join_timeout_ms()
        )

    def _on_sync(self, body: SyncGroupResponse | None, error: SparkMQError | None) -> None:
        if error is not None or body is None:
            with self._lock:
                if self._state is MemberState.COMPLETING_REBALANCE:
                    self._coordinator = None
                    self._retry_join(backoff=True)
            return
        if body.error_code != ErrorCode.NONE:
            with self._lock:
                if self._state is not MemberState.COMPLETING_REBALANCE:
                    return
            self._join_error(body.error_code, body.error_message, "SyncGroup")
            return
        with self._lock:
            if self._state is not MemberState.COMPLETING_REBALANCE:
                return
            generation = self._generation
            self._set_state(MemberState.STABLE)
            self._timer.reset(self._clock())
        self._needs_join_prepare = True
        self.rebalances_completed += 1
        log.info(
            "group %s: member %s joined generation %d",
            self.group_id,
            generation.member_id,
            generation.generation_id,
        )
        try:
            self.on_join_complete(generation, body.assignment)
        except SparkMQError as exc:
            self._error = exc
            self.request_rejoin(f"the assignment could not be applied: {exc}")

    # -- leaving --------------------------------------------------------------------------

    def leave_group(self, reason: str) -> None:
        """Leave: a LeaveGroup for a dynamic member that has joined (a static member only
        forgets its generation, so a restart within the session timeout is not a
        rebalance); then UNJOINED with no generation."""
        with self._lock:
            generation, state, coordinator = self._generation, self._state, self._coordinator
        # Abandon a JoinGroup or SyncGroup in flight: the LeaveGroup must not wait for it.
        self._group_channel.close()
        if (
            self.instance_id is None
            and coordinator is not None
            and state is not MemberState.UNJOINED
            and generation.member_id
        ):
            request = LeaveGroupRequest(
                self.group_id, [LeavingMember(generation.member_id, None, reason)]
            )
            try:
                self._group_channel.call(
                    request, coordinator=coordinator, timeout_ms=self.config.request_timeout_ms
                )
            except SparkMQError as exc:
                log.info(
                    "group %s: LeaveGroup failed (the session timeout will remove the member): %s",
                    self.group_id,
                    exc,
                )
        with self._lock:
            self._generation = NO_GENERATION
            if self._state is not MemberState.UNJOINED:
                self._set_state(MemberState.UNJOINED)
            self._rejoin_needed = True
            self._rejoin_reason = reason
        self._needs_join_prepare = True

    def _start_heartbeat_thread(self) -> None:
        if self._heartbeat_thread is None:
            self._heartbeat_thread = HeartbeatThread(self)
            self._heartbeat_thread.start()
