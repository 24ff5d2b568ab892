"""One topic partition as the broker sees it: the local replica, its leader epoch, its high
watermark and the fetches waiting for it to grow.

Shaped for replication (a later issue): the partition owns a :class:`ReplicaState` that moves
by an explicit transition table, a leader epoch stamped on every append, and a high
watermark kept apart from the log end offset. On one node the in-sync replica set is just
this broker, so after every append the leader advances the high watermark to the log end
(:meth:`Partition.maybe_advance_high_watermark`); with followers it will advance to the
smallest log end of the in-sync replicas instead. Consumers never see data at or above
the high watermark: reads are bounded by it in storage.

Threads: :meth:`append` may run on any thread (storage is thread-safe per partition); the
waiter methods run on the event loop thread only.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Final

from spark_mq.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UsageError,
)
from spark_mq.storage.log import LogAppendInfo, PartitionLog


class ReplicaState(enum.Enum):
    """The local replica's role (Kafka's leader/follower/offline partition states)."""

    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


_TRANSITIONS: Final[dict[ReplicaState, frozenset[ReplicaState]]] = {
    ReplicaState.LEADER: frozenset({ReplicaState.FOLLOWER, ReplicaState.OFFLINE}),
    ReplicaState.FOLLOWER: frozenset({ReplicaState.LEADER, ReplicaState.OFFLINE}),
    ReplicaState.OFFLINE: frozenset(),
}


def is_transition_valid(old: ReplicaState, new: ReplicaState) -> bool:
    return new in _TRANSITIONS[old]


class Partition:
    """The local replica of ``topic``-``index``, leader of it on a single node."""

    def __init__(self, log: PartitionLog, *, leader_epoch: int, node_id: int) -> None:
        self.log = log
        self.topic = log.topic
        self.index = log.partition
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.state = ReplicaState.LEADER
        # Stamped on every batch appended without an explicit epoch.
        log.leader_epoch = leader_epoch
        self._waiters: set[asyncio.Future[None]] = set()

    # -----------------------------------------------------------------------------------------
    # State

    def transition_to(self, new: ReplicaState) -> None:
        if not is_transition_valid(self.state, new):
            raise UsageError(
                f"partition {self.topic}-{self.index} cannot go from {self.state.value} to "
                f"{new.value}"
            )
        self.state = new

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def replicas(self) -> list[int]:
        return [self.node_id]

    @property
    def isr(self) -> list[int]:
        return [self.node_id]

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing of requests carrying a leader epoch (-1: the client has none)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} in the request "
                f"is older than the broker's {self.leader_epoch}; refresh metadata and retry"
            )
        raise UnknownLeaderEpochError(
            f"{self.topic}-{self.index}: leader epoch {current_leader_epoch} in the request is "
            f"newer than the broker's {self.leader_epoch}; retry after a metadata refresh"
        )

    # -----------------------------------------------------------------------------------------
    # Append

    def append(self, records: memoryview | bytes) -> LogAppendInfo:
        """Append validated batches as leader; advance the high watermark. Any thread."""
        if self.state is not ReplicaState.LEADER:
            raise NotLeaderOrFollowerError(
                f"this broker is not the leader of {self.topic}-{self.index}; refresh metadata"
            )
        info = self.log.append(records, leader_epoch=self.leader_epoch)
        self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> int:
        """Advance the high watermark to the smallest log end of the in-sync replicas: on
        one node, this replica's own log end."""
        return self.log.update_high_watermark(self.log.log_end_offset)

    # -----------------------------------------------------------------------------------------
    # Waiting fetches (event loop thread only)

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.add(waiter)

    def remove_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def notify_waiters(self) -> None:
        """Wake every fetch waiting for this partition (data appended, or it went away)."""
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.index}, {self.state.value}, epoch={self.leader_epoch}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset})"
        )
