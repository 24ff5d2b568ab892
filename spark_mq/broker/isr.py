"""A leader's view of its followers: their log ends, when each last caught up, the in-sync
replica set (ISR) and the high watermark it allows (Kafka's Partition and Replica state on
the leader).

Every follower fetch tells the leader the follower's log end (the fetch offset: a follower
asks for what it does not have yet). From that the leader keeps, per follower:

- ``log_end_offset`` (-1 until its first fetch after this broker became leader);
- ``last_caught_up_ms``: the last time the follower had everything the leader had when the
  follower fetched before (Kafka's rule: a fetch at or past the leader's log end at the time
  of that fetch makes it caught up now; a fetch at or past the leader's log end as of the
  *previous* fetch makes it caught up as of the previous fetch). A follower that keeps up
  with a steady stream of appends is therefore never out of sync, though it is always a
  little behind.

From these:

- **Shrink**: a follower of the ISR that has not caught up for more than
  ``replica.lag.time.max.ms`` leaves it.
- **Expand**: a follower outside the ISR joins it when its log end reaches the high
  watermark and the start offset of the leader's current epoch (so that a follower
  that still holds a tail of an older epoch never counts as in sync).
- **High watermark**: the smallest log end among the leader and the ISR (the *maximal*
  ISR while a change is in flight: the current ISR plus any follower an expansion being
  proposed adds, so that the high watermark never gets ahead of a replica the controller may
  already count as in sync; Kafka's ``maximalIsr``). It never moves back.

ISR changes are proposed to the controller (AlterPartition) at the partition epoch the leader
knows; until the answer comes, ``pending_isr`` holds the proposal and no other change is
proposed. Nothing here does I/O: :class:`LeaderIsrState` is pure, with the clock passed in,
and the partition calls it under its own lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

#: A follower whose log end the leader does not know yet.
UNKNOWN_OFFSET = -1


@dataclasses.dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    #: The leader's log end at this follower's previous fetch, and that fetch's time.
    last_fetch_leader_log_end: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0


class LeaderIsrState:
    """The leader's replication state of one partition (see the module docstring)."""

    def __init__(
        self,
        *,
        leader_id: int,
        replicas: Sequence[int],
        isr: Iterable[int],
        now_ms: int,
    ) -> None:
        self.leader_id = leader_id
        self.replicas = tuple(replicas)
        self.isr: frozenset[int] = frozenset(isr)
        #: An ISR proposed to the controller and not answered yet.
        self.pending_isr: frozenset[int] | None = None
        # Followers in the ISR start caught up now: they were in sync when the controller
        # made this broker leader (Kafka's resetReplicaState).
        self.followers: dict[int, FollowerState] = {
            b: FollowerState(b, last_caught_up_ms=now_ms if b in self.isr else 0)
            for b in self.replicas
            if b != leader_id
        }

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR the high watermark must respect: current plus any proposed addition."""
        return self.isr if self.pending_isr is None else self.isr | self.pending_isr

    def update_follower(
        self, broker_id: int, fetch_offset: int, leader_log_end: int, now_ms: int
    ) -> bool:
        """Record a follower's fetch from ``fetch_offset`` while the leader's log ends at
        ``leader_log_end``. Returns False for a broker that is not a replica (its fetch is
        refused)."""
        follower = self.followers.get(broker_id)
        if follower is None:
            return False
        if fetch_offset >= leader_log_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_log_end >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_log_end = leader_log_end
        follower.last_fetch_ms = now_ms
        return True

    def high_watermark(self, leader_log_end: int, current: int) -> int:
        """The high watermark the ISR allows, never below ``current``: the smallest log end
        of the leader and the (maximal) ISR. A member whose log end is unknown holds it."""
        candidate = leader_log_end
        for broker_id in self.maximal_isr:
            if broker_id == self.leader_id:
                continue
            follower = self.followers.get(broker_id)
            end = UNKNOWN_OFFSET if follower is None else follower.log_end_offset
            if end == UNKNOWN_OFFSET:
                return current
            candidate = min(candidate, end)
        return max(candidate, current)

    def out_of_sync(self, now_ms: int, lag_time_max_ms: int) -> frozenset[int]:
        """ISR followers that have not caught up for more than ``lag_time_max_ms``."""
        return frozenset(
            b
            for b in self.isr
            if b != self.leader_id
            and (f := self.followers.get(b)) is not None
            and now_ms - f.last_caught_up_ms > lag_time_max_ms
        )

    def ready_to_join(self, high_watermark: int, epoch_start_offset: int) -> frozenset[int]:
        """Followers outside the ISR whose log end reached the high watermark and the start
        of the leader's current epoch."""
        if self.isr.issuperset(self.followers):
            return frozenset()  # every follower is in sync: the common case, at every fetch
        return frozenset(
            b
            for b, f in self.followers.items()
            if b not in self.isr
            and f.log_end_offset >= high_watermark
            and f.log_end_offset >= epoch_start_offset
        )

    def proposed_shrink(self, now_ms: int, lag_time_max_ms: int) -> frozenset[int] | None:
        """The ISR to propose without the out-of-sync followers, or None (nothing to change,
        or a proposal is already in flight)."""
        if self.pending_isr is not None:
            return None
        gone = self.out_of_sync(now_ms, lag_time_max_ms)
        return self.isr - gone if gone else None

    def proposed_expansion(
        self, high_watermark: int, epoch_start_offset: int
    ) -> frozenset[int] | None:
        """The ISR to propose with the followers that caught up, or None."""
        if self.pending_isr is not None:
            return None
        joining = self.ready_to_join(high_watermark, epoch_start_offset)
        return self.isr | joining if joining else None

    def propose(self, isr: frozenset[int]) -> None:
        """Mark ``isr`` as sent to the controller."""
        self.pending_isr = isr

    def settle(self, isr: Iterable[int] | None) -> None:
        """The controller answered: the ISR is now ``isr`` (None: the proposal failed and
        the ISR stays as it was). Either way a new proposal may be made."""
        if isr is not None:
            self.isr = frozenset(isr)
        self.pending_isr = None

    def enough_in_sync(self, min_insync_replicas: int) -> bool:
        """Whether the ISR has at least ``min.insync.replicas`` members (counting the
        leader)."""
        return len(self.isr) >= min_insync_replicas
