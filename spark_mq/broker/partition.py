"""One topic partition as the broker sees it: the local replica, its role, its leader epoch,
its high watermark and the fetches waiting for it to grow.

The partition owns a :class:`ReplicaState` that moves by an explicit transition table, a
leader epoch stamped on every append, and a high watermark kept apart from the log end
offset. On one node the partition is born leader, its replicas and in-sync replica set are
just this broker, and its leader epoch is the broker's epoch. In a cluster it is born
:attr:`ReplicaState.NEW` (no role yet: it serves nothing) and the controller's LeaderAndIsr
makes it leader or follower (:meth:`Partition.make_leader`, :meth:`Partition.make_follower`)
with the leader, leader epoch, ISR, replicas and partition epoch (the version of its state
znode) that the controller decided; :attr:`~Partition.replicas` and :attr:`~Partition.isr`
report those.

A leader appends and, after every append, advances the high watermark to its own log end
(:meth:`Partition.maybe_advance_high_watermark`): followers do not fetch yet (replication is
the next issue), so no follower's log end is known and the leader counts only itself; with
replication it will advance to the smallest log end of the in-sync replicas. A follower
refuses produce and consumer fetches (NOT_LEADER_OR_FOLLOWER); its log stays empty until
replication fills it. Consumers never see data at or above the high watermark: reads are
bounded by it in storage.

Threads: :meth:`append` may run on any thread (storage is thread-safe per partition); the
role changes run on an executor thread, one controller request at a time (the
ReplicaManager serialises them); the waiter methods run on the event loop thread only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import threading
from typing import Final

from spark_mq.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UsageError,
)
from spark_mq.storage.log import LogAppendInfo, PartitionLog


class ReplicaState(enum.Enum):
    """The local replica's role (Kafka's leader/follower/offline partition states; ``NEW``: a
    cluster broker's replica that the controller has not given a role yet)."""

    NEW = "new"
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


#: The states each state may move to. Leader to leader and follower to follower are a new
#: leader epoch in the same role (re-elected, or following a new leader).
_TRANSITIONS: Final[dict[ReplicaState, frozenset[ReplicaState]]] = {
    ReplicaState.NEW: frozenset({ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.OFFLINE}),
    ReplicaState.LEADER: frozenset(
        {ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.OFFLINE}
    ),
    ReplicaState.FOLLOWER: frozenset(
        {ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.OFFLINE}
    ),
    ReplicaState.OFFLINE: frozenset(),
}


def is_transition_valid(old: ReplicaState, new: ReplicaState) -> bool:
    return new in _TRANSITIONS[old]


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state as the controller decided it (Kafka's ``LeaderAndIsr``): who leads,
    in which leader epoch, the in-sync replicas, every replica, and the partition epoch (the
    version of ``/brokers/topics/<t>/partitions/<p>/state``)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int


class Partition:
    """The local replica of ``topic``-``index``: leader of it on a single node; in a cluster,
    what the controller makes it (:meth:`for_cluster`)."""

    def __init__(self, log: PartitionLog, *, leader_epoch: int, node_id: int) -> None:
        self.log = log
        self.topic = log.topic
        self.index = log.partition
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.state = ReplicaState.LEADER
        #: The leader's broker id (-1: none known).
        self.leader_id = node_id
        self.partition_epoch = 0
        self._replicas: tuple[int, ...] = (node_id,)
        self._isr: tuple[int, ...] = (node_id,)
        # Stamped on every batch appended without an explicit epoch.
        log.leader_epoch = leader_epoch
        self._waiters: set[asyncio.Future[None]] = set()
        # Held by an append and by a role change, so that no batch is stamped with the old
        # leader epoch after the new epoch's start offset was recorded (Kafka's
        # leaderIsrUpdateLock). Role changes are rare; appends do not contend with each other
        # here (the log has its own lock).
        self._role_lock = threading.Lock()

    @classmethod
    def for_cluster(cls, log: PartitionLog, *, node_id: int) -> Partition:
        """A cluster broker's replica before the controller gives it a role: it serves
        nothing, and any leader epoch the controller sends is newer than its -1."""
        part = cls(log, leader_epoch=log.leader_epoch, node_id=node_id)
        part.state = ReplicaState.NEW
        part.leader_epoch = -1
        part.leader_id = -1
        part.partition_epoch = -1
        part._replicas = part._isr = ()
        return part

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
        """Every replica of the partition, as the controller said (one node: this one)."""
        return list(self._replicas)

    @property
    def isr(self) -> list[int]:
        """The in-sync replicas, as the controller said (one node: this one)."""
        return list(self._isr)

    @property
    def state_from_controller(self) -> LeaderAndIsr:
        """The partition's state as last applied (what a resent LeaderAndIsr is compared to)."""
        return LeaderAndIsr(
            self.leader_id, self.leader_epoch, self._isr, self._replicas, self.partition_epoch
        )

    def make_leader(self, state: LeaderAndIsr) -> None:
        """Lead the partition in ``state.leader_epoch`` (blocking: fsyncs the leader-epoch
        checkpoint). The new epoch starts at the log end: recorded in the leader-epoch cache
        now, as Kafka's ``makeLeader`` does, so OffsetsForLeaderEpoch answers it before the
        first append; every append from now on is stamped with it."""
        if state.leader != self.node_id:
            raise UsageError(
                f"{self.topic}-{self.index}: make_leader with leader {state.leader}, but this "
                f"broker is {self.node_id}"
            )
        with self._role_lock:
            self.transition_to(ReplicaState.LEADER)
            self.log.maybe_assign_epoch_start_offset(state.leader_epoch, self.log.log_end_offset)
            self.log.leader_epoch = state.leader_epoch
            self._apply(state)
            # The leader's high watermark counts only itself until followers fetch.
            self.maybe_advance_high_watermark()

    def make_follower(self, state: LeaderAndIsr) -> None:
        """Follow ``state.leader`` in ``state.leader_epoch``: produce and consumer fetches are
        refused from now on. Nothing is fetched yet (replication is the next issue)."""
        if state.leader == self.node_id:
            raise UsageError(
                f"{self.topic}-{self.index}: make_follower names this broker ({self.node_id}) "
                "as the leader"
            )
        with self._role_lock:
            self.transition_to(ReplicaState.FOLLOWER)
            self._apply(state)

    def update_isr(self, state: LeaderAndIsr) -> None:
        """Take a new ISR, replica list and partition epoch in the same leader epoch (the
        controller changed the ISR without a new leader): the role does not change."""
        if (state.leader, state.leader_epoch) != (self.leader_id, self.leader_epoch):
            raise UsageError(
                f"{self.topic}-{self.index}: update_isr with leader {state.leader} in epoch "
                f"{state.leader_epoch}, but the partition has {self.leader_id} in "
                f"{self.leader_epoch}"
            )
        with self._role_lock:
            self._apply(state)

    def stop(self) -> None:
        """Stop serving (StopReplica, or a stray replica): OFFLINE from now on; idempotent."""
        with self._role_lock:
            if self.state is not ReplicaState.OFFLINE:
                self.transition_to(ReplicaState.OFFLINE)

    def _apply(self, state: LeaderAndIsr) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self._isr = tuple(state.isr)
        self._replicas = tuple(state.replicas)
        self.partition_epoch = state.partition_epoch

    def require_leader(self) -> None:
        """Raise NotLeaderOrFollowerError unless this broker leads the partition (what a
        consumer's fetch to a follower, or to a replica without a role yet, gets)."""
        if self.state is not ReplicaState.LEADER:
            raise NotLeaderOrFollowerError(self._not_leader_message())

    def _not_leader_message(self) -> str:
        if self.state is ReplicaState.FOLLOWER and self.leader_id >= 0:
            who = f"it follows broker {self.leader_id} (leader epoch {self.leader_epoch})"
        elif self.state is ReplicaState.NEW:
            who = "the controller has not told it its role yet"
        else:
            who = f"the replica is {self.state.value}"
        return (
            f"this broker is not the leader of {self.topic}-{self.index}: {who}; refresh metadata"
        )

    def update_follower(self, broker_id: int, fetch_offset: int) -> None:
        """A follower fetches from ``fetch_offset`` (its log end): refused unless it is a
        replica of the partition."""
        if broker_id == self.node_id or broker_id not in self._replicas:
            raise NotLeaderOrFollowerError(
                f"broker {broker_id} fetches {self.topic}-{self.index} as a follower, but the "
                f"partition's replicas are {list(self._replicas)}; it waits for the "
                "controller's LeaderAndIsr"
            )

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
        with self._role_lock:
            if self.state is not ReplicaState.LEADER:
                raise NotLeaderOrFollowerError(self._not_leader_message())
            info = self.log.append(records, leader_epoch=self.leader_epoch)
            self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> int:
        """Advance the high watermark to the smallest log end of the in-sync replicas: on
        one node, and until followers fetch, this replica's own log end."""
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
