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

Threads: the application's thread calls everything except the ``heartbeat_*``,
``next_heartbeat_task`` and ``poll_timeout_expired`` methods, which the heartbeat thread
calls. ``_state``, ``_generation``, ``_rejoin_needed``, ``_coordinator``, ``_fatal`` and the
heartbeat timer are shared and change only under ``_lock``; the channels and hooks belong to
the application's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ConsumerConfig
from spark_mq.client.group.channel import CoordinatorChannel
from spark_mq.client.group.coordinator_lookup import CoordinatorInfo, find_coordinator
from spark_mq.client.group.heartbeat import HeartbeatThread, HeartbeatTimer
from spark_mq.client.group.member_state import (
    NO_GENERATION,
    Generation,
    MemberState,
    checked_transition,
)
from spark_mq.errors import (
    FencedInstanceIdError,
    RequestTimedOutError,
    SparkMQError,
    UsageError,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.groups import (
    JoinGroupMember,
    JoinGroupProtocol,
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

HeartbeatTask = tuple[str, Any]

_COORDINATOR_GONE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


class GroupMembership(ABC):
    """Joining, syncing, heartbeating and leaving (see the module docstring)."""

    def __init__(
        self,
        config: ConsumerConfig,
        cluster: Cluster,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not config.group_id:
            raise UsageError("a consumer group needs group.id (group_id=...)")
        self.config = config
        self.cluster = cluster
        self.group_id = config.group_id
        self.instance_id = config.group_instance_id or None
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Condition()
        self._state = MemberState.UNJOINED
        self._generation = NO_GENERATION
        self._rejoin_needed = True
        self._rejoin_reason = "joining for the first time"
        self._coordinator: CoordinatorInfo | None = None
        self._fatal: SparkMQError | None = None
        self._closed = False
        self._timer = HeartbeatTimer(
            interval_ms=config.heartbeat_interval_ms,
            session_timeout_ms=config.session_timeout_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            now=clock(),
        )
        # Owned by the application's thread.
        self._needs_join_prepare = True
        self._error: SparkMQError | None = None
        self._join_retry_at = 0.0
        self._lookup_retry_at = 0.0
        self._heartbeat_thread: HeartbeatThread | None = None
        self._group_channel = CoordinatorChannel(
            cluster, "join/sync", on_failure=self._channel_failed, clock=clock
        )
        self.offset_channel = CoordinatorChannel(
            cluster, "offsets", on_failure=self._channel_failed, clock=clock
        )
        #: Rebalances this member completed (SyncGroup answered); for tests and benchmarks.
        self.rebalances_completed = 0

    # -- hooks for the protocol (the consumer) --------------------------------------------

    @abstractmethod
    def join_protocols(self) -> list[JoinGroupProtocol]:
        """The assignors this member offers, each with its subscription bytes."""

    @abstractmethod
    def on_join_prepare(self, generation: Generation) -> None:
        """Before (re)joining: commit, and revoke (or declare lost) what must go."""

    @abstractmethod
    def perform_assignment(
        self, leader_id: str, protocol: str, members: list[JoinGroupMember]
    ) -> dict[str, bytes]:
        """As leader: every member's assignment bytes."""

    @abstractmethod
    def on_join_complete(self, generation: Generation, assignment: bytes) -> None:
        """After SyncGroup: apply this member's assignment."""

    # -- shared state ---------------------------------------------------------------------

    def generation(self) -> Generation:
        with self._lock:
            return self._generation

    @property
    def state(self) -> MemberState:
        with self._lock:
            return self._state

    def coordinator(self) -> CoordinatorInfo | None:
        with self._lock:
            return self._coordinator

    def is_stable(self) -> bool:
        with self._lock:
            return self._state is MemberState.STABLE and not self._rejoin_needed

    def rejoin_needed_or_pending(self) -> bool:
        with self._lock:
            return self._rejoin_needed or self._state is not MemberState.STABLE

    def request_rejoin(self, reason: str) -> None:
        with self._lock:
            if not self._rejoin_needed:
                log.info("group %s: rejoining: %s", self.group_id, reason)
            self._rejoin_needed = True
            self._rejoin_reason = reason

    def _set_state(self, target: MemberState) -> None:
        # Caller holds the lock.
        self._state = checked_transition(self._state, target)
        self._lock.notify_all()

    def _reset_generation(self, *, keep_member_id: bool, reason: str) -> None:
        """Forget the generation (the partitions are lost) and rejoin. Caller holds the lock."""
        log.info(
            "group %s: member %s lost its generation: %s",
            self.group_id,
            self._generation.member_id,
            reason,
        )
        self._generation = self._generation.reset(keep_member_id=keep_member_id)
        if self._state is not MemberState.UNJOINED:
            self._set_state(MemberState.UNJOINED)
        self._rejoin_needed = True
        self._rejoin_reason = reason

    def _fenced_error(self) -> FencedInstanceIdError:
        return FencedInstanceIdError(
            f"group {self.group_id}: another consumer joined with group.instance.id "
            f"{self.instance_id!r}; this one is fenced and must be closed"
        )

    def mark_coordinator_unknown(self, reason: str) -> None:
        with self._lock:
            if self._coordinator is not None:
                log.info(
                    "group %s: coordinator %s unknown: %s",
                    self.group_id,
                    self._coordinator.node_id,
                    reason,
                )
            self._coordinator = None

    def _channel_failed(self, error: SparkMQError) -> None:
        self.mark_coordinator_unknown(str(error))

    def raise_errors(self) -> None:
        """Raise a fatal error (every time) or the error the last step met (once)."""
        with self._lock:
            if self._fatal is not None:
                raise self._fatal
        error, self._error = self._error, None
        if error is not None:
            raise error

    def record_poll(self, now: float) -> None:
        """The application is in ``poll()``: the poll timer starts again."""
        with self._lock:
            self._timer.poll(now)

    # -- the coordinator ------------------------------------------------------------------

    def ensure_coordinator_ready(self, deadline: float) -> CoordinatorInfo | None:
        """The coordinator, looked up if unknown (at least one attempt, then until
        ``deadline``); None when it could not be found in time."""
        coordinator = self.coordinator()
        if coordinator is not None:
            return coordinator
        now = self._clock()
        if now < self._lookup_retry_at:
            if now >= deadline:
                return None
            self._sleep(min(self._lookup_retry_at, deadline) - now)
        timeout_ms = max(int((deadline - self._clock()) * 1000), 0)
        try:
            found = find_coordinator(
                self.cluster,
                self.group_id,
                timeout_ms=timeout_ms,
                clock=self._clock,
                sleep=self._sleep,
            )
        except RequestTimedOutError as exc:
            log.info("group %s: coordinator not found yet: %s", self.group_id, exc)
            self._lookup_retry_at = self._clock() + self.config.retry_backoff_ms / 1000
            return None
        with self._lock:
            self._coordinator = found
            self._timer.received(self._clock())
            self._lock.notify_all()
        return found

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
                    self._needs_join_prepare = False
                    self.on_join_prepare(self.generation())
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
            elif code in _COORDINATOR_GONE:
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

    # -- the heartbeat thread's side --------------------------------------------------------

    def _start_heartbeat_thread(self) -> None:
        if self._heartbeat_thread is None:
            self._heartbeat_thread = HeartbeatThread(self)
            self._heartbeat_thread.start()

    def next_heartbeat_task(self) -> HeartbeatTask | None:
        """Block until there is something to do: ``("heartbeat", (generation, coordinator))``,
        ``("leave", None)`` when the poll timer expired, or None once closed."""
        with self._lock:
            while not self._closed:
                now = self._clock()
                coordinator, generation = self._coordinator, self._generation
                if (
                    self._state is not MemberState.STABLE
                    or coordinator is None
                    or not generation.is_valid
                ):
                    self._lock.wait(1.0)
                    continue
                if self._timer.poll_timeout_expired(now):
                    return ("leave", None)
                if self._timer.session_expired(now):
                    # Kafka's rule: a coordinator silent for a whole session is presumed
                    # gone; the application's next poll() looks it up again.
                    self._coordinator = None
                    self._timer.received(now)
                    continue
                wait_s = self._timer.seconds_to_next(now)
                if wait_s > 0:
                    self._lock.wait(wait_s)
                    continue
                self._timer.sent(now)
                return ("heartbeat", (generation, coordinator))
            return None

    def heartbeat_answered(self, sent: Generation, code: int, message: str | None) -> None:
        with self._lock:
            now = self._clock()
            if sent != self._generation or self._state is not MemberState.STABLE:
                return  # the member moved on while the heartbeat was in flight
            if code == ErrorCode.NONE:
                self._timer.received(now)
            elif code == ErrorCode.REBALANCE_IN_PROGRESS:
                self._timer.received(now)
                self.request_rejoin("the group is rebalancing")
            elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
                self._reset_generation(
                    keep_member_id=code == ErrorCode.ILLEGAL_GENERATION,
                    reason=f"heartbeat: {message or ErrorCode(code).name}",
                )
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self._fatal = self._fenced_error()
                self._reset_generation(keep_member_id=False, reason="fenced")
            elif code in _COORDINATOR_GONE:
                self._coordinator = None
                self._timer.failed(now)
            else:
                log.warning(
                    "group %s: heartbeat failed: %s", self.group_id, error_from_code(code, message)
                )
                self._timer.failed(now)

    def commit_refused(self, sent: Generation, code: int, message: str | None) -> None:
        """A commit sent with ``sent`` was refused for a membership reason. Only a STABLE
        member reacts: mid-rebalance, the join in flight settles the membership anyway."""
        with self._lock:
            if self._state is not MemberState.STABLE or sent != self._generation:
                return
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin("a commit found the group rebalancing")
            elif code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
                self._reset_generation(
                    keep_member_id=code == ErrorCode.ILLEGAL_GENERATION,
                    reason=f"commit: {message or ErrorCode(code).name}",
                )
            elif code == ErrorCode.FENCED_INSTANCE_ID:
                self._fatal = self._fenced_error()

    def heartbeat_failed(self, sent: Generation, error: SparkMQError) -> None:
        with self._lock:
            log.info("group %s: heartbeat failed: %s", self.group_id, error)
            if sent == self._generation:
                self._coordinator = None
            self._timer.failed(self._clock())

    def poll_timeout_expired(self, send: Callable[[Any, CoordinatorInfo], Any]) -> None:
        """The application did not call ``poll()`` within ``max.poll.interval.ms``: leave the
        group (Kafka's behaviour), so its partitions go to members that are polling."""
        with self._lock:
            if self._state is not MemberState.STABLE:
                return
            generation, coordinator = self._generation, self._coordinator
        log.warning(
            "group %s: poll() was not called for max.poll.interval.ms (%d ms): the member "
            "leaves the group and its partitions count as lost; the next poll() rejoins. "
            "Process less per poll (max.poll.records) or raise max.poll.interval.ms.",
            self.group_id,
            self.config.max_poll_interval_ms,
        )
        if self.instance_id is None and coordinator is not None:
            request = LeaveGroupRequest(
                self.group_id,
                [LeavingMember(generation.member_id, None, "consumer poll timeout has expired")],
            )
            try:
                send(request, coordinator)
            except SparkMQError as exc:
                log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)
        with self._lock:
            if self._generation == generation:
                self._reset_generation(
                    keep_member_id=self.instance_id is not None,
                    reason="poll() was not called within max.poll.interval.ms",
                )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        thread = self._heartbeat_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.config.request_timeout_ms / 1000 + 1)
        self._group_channel.close()
        self.offset_channel.close()
