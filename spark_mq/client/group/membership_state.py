"""The state a consumer group member shares between threads, and the heartbeat thread's side.

:class:`MembershipState` is the half of :class:`~spark_mq.client.group.membership.
GroupMembership` (Kafka's ``AbstractCoordinator``) that is not the join exchange: the
member's state, generation and coordinator, the hooks the consumer implements
(``join_protocols``, ``on_join_prepare``, ``perform_assignment``, ``on_join_complete``),
coordinator lookup, what heartbeat and commit answers do to the membership, the poll timeout,
and closing. The JoinGroup / SyncGroup exchange and leaving are in ``membership.py``.

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
    LeaveGroupRequest,
    LeavingMember,
)

# The logger keeps the name of the module it was split from, so log configuration that
# names it still applies.
log = logging.getLogger("spark_mq.client.group.membership")

HeartbeatTask = tuple[str, Any]

#: The answers that mean the coordinator moved or is gone.
COORDINATOR_GONE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


class MembershipState(ABC):
    """A member's shared state, hooks, coordinator and heartbeat side (see the module
    docstring); :class:`~spark_mq.client.group.membership.GroupMembership` adds joining."""

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
        # Why the last coordinator lookup failed (the broker's answer when it gave one).
        self._lookup_error: SparkMQError | None = None
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
    def on_join_prepare(self, generation: Generation, deadline: float) -> bool:
        """Before (re)joining: commit, and revoke (or declare lost) what must go. Waits at
        most until ``deadline`` (the caller's ``poll()`` timeout); returns False when it is
        not done yet and must be called again (from the next ``poll()``)."""

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
            cause = exc.__cause__
            self._lookup_error = cause if isinstance(cause, SparkMQError) else exc
            return None
        self._lookup_error = None
        with self._lock:
            self._coordinator = found
            self._timer.received(self._clock())
            self._lock.notify_all()
        return found

    def coordinator_not_found(self) -> SparkMQError:
        """The error for a coordinator :meth:`ensure_coordinator_ready` did not find: the
        broker's own answer to the last lookup when there was one (a coordinator that cannot
        create ``__consumer_offsets`` on a full disk says so), not just "not found"."""
        if self._lookup_error is not None:
            return self._lookup_error
        return RequestTimedOutError(f"the coordinator of group {self.group_id!r} was not found")

    # -- the heartbeat thread's side ----------------------------------------

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
            elif code in COORDINATOR_GONE:
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
            # A heartbeat in flight ends within request.timeout.ms; the thread then sees the
            # member closed and exits. Should it still be running (a broker that answers
            # nothing), the consumer closes the cluster next, which refuses every
            # connection, so the thread can reach no broker and start none.
            thread.join(self.config.request_timeout_ms / 1000 + 1)
            if thread.is_alive():
                log.warning(
                    "group %s: the heartbeat thread did not stop within request.timeout.ms; "
                    "it exits once its request in flight ends",
                    self.group_id,
                )
        self._group_channel.close()
        self.offset_channel.close()
