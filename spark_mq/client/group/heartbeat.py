"""Heartbeats: the timers that keep a member in its group, and the thread that sends them.

:class:`HeartbeatTimer` is Kafka's ``Heartbeat``: pure bookkeeping over an injected clock.
It knows when the next heartbeat is due (``heartbeat.interval.ms`` after the last one, or
``retry.backoff.ms`` after a failed one), whether the coordinator has been silent for
``session.timeout.ms`` (then the member looks the coordinator up again), and whether the
application has gone ``max.poll.interval.ms`` without calling ``poll()``.

:class:`HeartbeatThread` runs the timer in the background, so a member stays in the group
while the application processes records between polls. It sends heartbeats only while the
member is STABLE; everything else about the rebalance happens in the application's thread,
inside ``poll()``. It acts on what the coordinator answers through the membership
(:class:`~spark_mq.client.group.membership.GroupMembership`): REBALANCE_IN_PROGRESS asks for
a rejoin, ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID mean the member was removed (its partitions
are lost), FENCED_INSTANCE_ID is fatal. When the poll timer expires it leaves the group
(LeaveGroup for a dynamic member; a static member just stops heartbeating), exactly as
Kafka's consumer does, and the next ``poll()`` rejoins.

Threads: the timer is guarded by the membership's lock; the thread owns its own connection
to the coordinator, so a heartbeat never waits behind a JoinGroup or a commit.

>>> clock = [0.0]
>>> timer = HeartbeatTimer(interval_ms=3000, session_timeout_ms=45000,
...                        max_poll_interval_ms=300000, retry_backoff_ms=100, now=0.0)
>>> timer.sent(0.0); timer.received(0.1); timer.seconds_to_next(1.0)
2.0
>>> timer.poll_timeout_expired(301.0)
True
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from spark_mq.client.connection import BrokerConnection
from spark_mq.client.group.coordinator_lookup import CoordinatorInfo, connect_to_coordinator
from spark_mq.client.group.member_state import Generation
from spark_mq.errors import SparkMQError
from spark_mq.protocol.groups import HeartbeatRequest, HeartbeatResponse

if TYPE_CHECKING:
    from spark_mq.client.group.membership import GroupMembership

log = logging.getLogger(__name__)


class HeartbeatTimer:
    """When to heartbeat, and whether the session or the poll interval ran out."""

    def __init__(
        self,
        *,
        interval_ms: int,
        session_timeout_ms: int,
        max_poll_interval_ms: int,
        retry_backoff_ms: int,
        now: float,
    ) -> None:
        assert interval_ms < session_timeout_ms, "checked by ConsumerConfig"
        self.interval_s = interval_ms / 1000
        self.session_timeout_s = session_timeout_ms / 1000
        self.max_poll_interval_s = max_poll_interval_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.last_poll = now
        self.last_received = now
        self.next_at = now + self.interval_s

    def poll(self, now: float) -> None:
        """The application called ``poll()``."""
        self.last_poll = now

    def reset(self, now: float) -> None:
        """A rebalance completed: the session starts now, the first heartbeat one interval on."""
        self.last_received = now
        self.next_at = now + self.interval_s

    def sent(self, now: float) -> None:
        self.next_at = now + self.interval_s

    def received(self, now: float) -> None:
        self.last_received = now

    def failed(self, now: float) -> None:
        self.next_at = now + self.retry_backoff_s

    def session_expired(self, now: float) -> bool:
        return now - self.last_received > self.session_timeout_s

    def poll_timeout_expired(self, now: float) -> bool:
        return now - self.last_poll > self.max_poll_interval_s

    def seconds_to_next(self, now: float) -> float:
        """Until the next heartbeat is due or the poll timer expires, whichever is first."""
        poll_deadline = self.last_poll + self.max_poll_interval_s
        return max(min(self.next_at, poll_deadline) - now, 0.0)


class HeartbeatThread(threading.Thread):
    """Sends heartbeats for one member (see the module docstring)."""

    def __init__(
        self, membership: GroupMembership, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(name=f"spark-mq-heartbeat-{membership.group_id}", daemon=True)
        self._membership = membership
        self._clock = clock
        self._conn: BrokerConnection | None = None
        self._conn_target: CoordinatorInfo | None = None

    def run(self) -> None:
        try:
            while True:
                task = self._membership.next_heartbeat_task()
                if task is None:
                    return  # closed
                kind, payload = task
                try:
                    if kind == "leave":
                        self._membership.poll_timeout_expired(self._send_sync)
                    else:
                        generation, coordinator = payload
                        self._heartbeat(generation, coordinator)
                except Exception:
                    # A bug, not the world: say so loudly, but keep the member alive.
                    log.exception("group %s: heartbeat thread error", self._membership.group_id)
                    time.sleep(self._membership.config.retry_backoff_ms / 1000)
        finally:
            if self._conn is not None:
                self._conn.close()

    def _send_sync(self, request: object, coordinator: CoordinatorInfo) -> object:
        """Send one request on this thread's connection and wait for the answer."""
        if self._conn is None or self._conn_target != coordinator:
            if self._conn is not None:
                self._conn.close()
            self._conn = self._membership.cluster.new_connection(coordinator.node_id)
            self._conn_target = coordinator
        try:
            connect_to_coordinator(self._membership.cluster, self._conn, coordinator)
            return self._conn.request(
                request,  # type: ignore[arg-type]
                timeout_s=self._membership.config.request_timeout_ms / 1000,
            )
        except SparkMQError:
            self._conn.close()
            raise

    def _heartbeat(self, gen: Generation, coordinator: CoordinatorInfo) -> None:
        membership = self._membership
        request = HeartbeatRequest(
            membership.group_id, gen.generation_id, gen.member_id, membership.instance_id
        )
        try:
            response = self._send_sync(request, coordinator)
        except SparkMQError as exc:
            membership.heartbeat_failed(gen, exc)
            return
        assert isinstance(response, HeartbeatResponse)
        membership.heartbeat_answered(gen, response.error_code, response.error_message)
