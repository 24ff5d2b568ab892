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

A cluster leader keeps a :class:`~spark_mq.broker.isr.LeaderIsrState`, reset at each
:meth:`Partition.make_leader` (with the injected monotonic clock): each replica fetch
(:meth:`Partition.update_follower`) records the follower's log end, and the high watermark
advances to the smallest log end of the leader and the (maximal) ISR
(:meth:`Partition.maybe_advance_high_watermark`, after every append, follower fetch and ISR
change). On one node there is no such state: the ISR is this broker and the high watermark
follows every append. An ``acks=all`` append is refused before it is written while the ISR
is smaller than the topic's ``min.insync.replicas`` (:meth:`Partition.append` with
``required_acks=-1``). A follower refuses produce and consumer fetches
(NOT_LEADER_OR_FOLLOWER); the replica fetchers fill its log. Consumers never see data at or
above the high watermark: reads are bounded by it in storage.

A leader whose ISR change the controller refuses because the leader's view is stale
(:data:`STALE_LEADER_ERRORS`: another leader epoch, partition epoch or leader) reads the
controller's current state in the answer. If it still names this broker leader in its epoch,
the leader takes it (ISR, partition epoch) and goes on; otherwise it has been replaced or is
about to be: it moves to :attr:`ReplicaState.FENCED_LEADER` and stops acting as leader
(no produce, no client or follower fetch, no high watermark movement; its acks=all waits are
answered NOT_LEADER_OR_FOLLOWER by the ReplicaManager) until the controller's next
LeaderAndIsr makes it leader again, follower, or stops it. docs/cluster.md, "Replication",
says why.

Threads: :meth:`append` may run on any thread (storage is thread-safe per partition); the
role changes run on an executor thread, one controller request at a time (the
ReplicaManager serialises them); the waiter methods run on the event loop thread only. The
follower and ISR methods (:meth:`update_follower`, :meth:`propose_isr_change`,
:meth:`on_alter_partition`) run on the event loop and hold the role lock, as the role changes
do, so a leader's ISR view never mixes two leader epochs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import threading
import time
from collections.abc import Callable
from typing import Final

from spark_mq.broker.isr import LeaderIsrState
from spark_mq.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UsageError,
)
from spark_mq.protocol.controller import AlterPartitionResult, AlterPartitionState
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.log import LogAppendInfo, PartitionLog


class ReplicaState(enum.Enum):
    """The local replica's role (Kafka's leader/follower/offline partition states; ``NEW``: a
    cluster broker's replica that the controller has not given a role yet;
    ``FENCED_LEADER``: a leader whose ISR change the controller refused as stale, which
    stops acting as leader until the controller's next LeaderAndIsr gives it a role)."""

    NEW = "new"
    LEADER = "leader"
    FENCED_LEADER = "fenced-leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


#: The states each state may move to. Leader to leader and follower to follower are a new
#: leader epoch in the same role (re-elected, or following a new leader). Only the
#: controller's answer to an ISR change fences a leader; only a LeaderAndIsr (or StopReplica)
#: moves a fenced leader on: back to leader (the controller says it still leads), to follower,
#: or offline.
_TRANSITIONS: Final[dict[ReplicaState, frozenset[ReplicaState]]] = {
    ReplicaState.NEW: frozenset({ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.OFFLINE}),
    ReplicaState.LEADER: frozenset(
        {
            ReplicaState.LEADER,
            ReplicaState.FENCED_LEADER,
            ReplicaState.FOLLOWER,
            ReplicaState.OFFLINE,
        }
    ),
    ReplicaState.FENCED_LEADER: frozenset(
        {ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.OFFLINE}
    ),
    ReplicaState.FOLLOWER: frozenset(
        {ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.OFFLINE}
    ),
    ReplicaState.OFFLINE: frozenset(),
}


#: AlterPartition errors that say the leader's view of the partition is stale: the
#: controller has a newer leader epoch (FENCED_LEADER_EPOCH), a newer partition epoch
#: (INVALID_UPDATE_VERSION), or another leader (NOT_LEADER_OR_FOLLOWER).
STALE_LEADER_ERRORS: Final = frozenset(
    {
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
    }
)


def is_transition_valid(old: ReplicaState, new: ReplicaState) -> bool:
    return new in _TRANSITIONS[old]


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


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

    def __init__(
        self,
        log: PartitionLog,
        *,
        leader_epoch: int,
        node_id: int,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.log = log
        self._clock_ms = clock_ms
        #: A cluster leader's view of its followers (None: one node, or not leading).
        self.isr_state: LeaderIsrState | None = None
        # Where the current leader epoch starts: a follower joins the ISR only past it.
        self._epoch_start_offset = 0
        # Why the controller fenced this leader (ReplicaState.FENCED_LEADER), for the
        # NOT_LEADER_OR_FOLLOWER answers it gives meanwhile.
        self._fenced_reason = ""
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
    def for_cluster(
        cls, log: PartitionLog, *, node_id: int, clock_ms: Callable[[], int] = monotonic_ms
    ) -> Partition:
        """A cluster broker's replica before the controller gives it a role: it serves
        nothing, and any leader epoch the controller sends is newer than its -1."""
        part = cls(log, leader_epoch=log.leader_epoch, node_id=node_id, clock_ms=clock_ms)
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
            self._epoch_start_offset = self.log.log_end_offset
            self.log.maybe_assign_epoch_start_offset(state.leader_epoch, self._epoch_start_offset)
            self.log.leader_epoch = state.leader_epoch
            self._apply(state)
            # Followers in the ISR count as caught up now; their log ends are learned from
            # their next fetches (Kafka's resetReplicaState).
            self.isr_state = LeaderIsrState(
                leader_id=self.node_id,
                replicas=state.replicas,
                isr=state.isr,
                now_ms=self._clock_ms(),
            )
            self.maybe_advance_high_watermark()

    def make_follower(self, state: LeaderAndIsr) -> None:
        """Follow ``state.leader`` in ``state.leader_epoch``: produce and consumer fetches are
        refused from now on; the replica fetchers (ReplicaManager) copy the leader's log."""
        if state.leader == self.node_id:
            raise UsageError(
                f"{self.topic}-{self.index}: make_follower names this broker ({self.node_id}) "
                "as the leader"
            )
        with self._role_lock:
            self.transition_to(ReplicaState.FOLLOWER)
            self.isr_state = None
            self._apply(state)

    def update_isr(self, state: LeaderAndIsr) -> None:
        """Take a new ISR, replica list and partition epoch in the same leader epoch (the
        controller changed the ISR without a new leader): the role does not change, except
        that a fenced leader (:attr:`ReplicaState.FENCED_LEADER`) that the controller names
        as leader in the same epoch leads again, with what it knew of its followers."""
        if (state.leader, state.leader_epoch) != (self.leader_id, self.leader_epoch):
            raise UsageError(
                f"{self.topic}-{self.index}: update_isr with leader {state.leader} in epoch "
                f"{state.leader_epoch}, but the partition has {self.leader_id} in "
                f"{self.leader_epoch}"
            )
        with self._role_lock:
            if self.state is ReplicaState.FENCED_LEADER:
                self.transition_to(ReplicaState.LEADER)
            self._apply(state)
            if self.isr_state is not None:
                self.isr_state.replicas = tuple(state.replicas)
                self.isr_state.settle(state.isr)
                # A shrink may let the high watermark move on.
                self.maybe_advance_high_watermark()

    def stop(self) -> None:
        """Stop serving (StopReplica, or a stray replica): OFFLINE from now on; idempotent."""
        with self._role_lock:
            if self.state is not ReplicaState.OFFLINE:
                self.transition_to(ReplicaState.OFFLINE)
            self.isr_state = None

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

    @property
    def role_description(self) -> str:
        """Why this replica does not serve as leader now, for NOT_LEADER_OR_FOLLOWER answers
        (what it is: follower, fenced leader, no role yet, offline)."""
        if self.state is ReplicaState.FOLLOWER and self.leader_id >= 0:
            return f"it follows broker {self.leader_id} (leader epoch {self.leader_epoch})"
        if self.state is ReplicaState.FENCED_LEADER:
            return (
                f"it stopped acting as leader because {self._fenced_reason}, and waits for "
                "the controller's LeaderAndIsr"
            )
        if self.state is ReplicaState.NEW:
            return "the controller has not told it its role yet"
        return f"the replica is {self.state.value}"

    def _not_leader_message(self) -> str:
        return (
            f"broker {self.node_id} is not the leader of {self.topic}-{self.index}: "
            f"{self.role_description}; refresh metadata and retry"
        )

    def update_follower(self, broker_id: int, fetch_offset: int) -> bool:
        """A follower fetches from ``fetch_offset`` (its log end): record it and advance
        the high watermark; whether the high watermark moved. Refused unless the broker is a
        replica of the partition and this one leads it."""
        with self._role_lock:
            if self.state is not ReplicaState.LEADER:
                raise NotLeaderOrFollowerError(self._not_leader_message())
            isr_state = self.isr_state
            if (
                broker_id == self.node_id
                or broker_id not in self._replicas
                or isr_state is None
                or not isr_state.update_follower(
                    broker_id, fetch_offset, self.log.log_end_offset, self._clock_ms()
                )
            ):
                raise NotLeaderOrFollowerError(
                    f"broker {broker_id} fetches {self.topic}-{self.index} as a follower, but "
                    f"the partition's replicas are {list(self._replicas)}; it waits for the "
                    "controller's LeaderAndIsr"
                )
            return self.maybe_advance_high_watermark()

    # -----------------------------------------------------------------------------------------
    # ISR changes (KIP-497: proposed to the controller with AlterPartition)

    def propose_isr_change(self, lag_time_max_ms: int) -> AlterPartitionState | None:
        """The ISR change this leader proposes now, marked in flight: without the followers
        that have not caught up for ``lag_time_max_ms``, else with the followers that
        caught up. None if there is none, if a proposal is in flight, or if this broker does
        not lead (a fenced leader proposes nothing until the next LeaderAndIsr)."""
        with self._role_lock:
            isr_state = self.isr_state
            if self.state is not ReplicaState.LEADER or isr_state is None:
                return None
            new = isr_state.proposed_shrink(self._clock_ms(), lag_time_max_ms)
            if new is None:
                new = isr_state.proposed_expansion(
                    self.log.high_watermark, self._epoch_start_offset
                )
            if new is None:
                return None
            isr_state.propose(new)
            return AlterPartitionState(
                self.topic, self.index, self.leader_epoch, sorted(new), self.partition_epoch
            )

    def wants_isr_expansion(self) -> bool:
        """Whether a follower outside the ISR has caught up and may be proposed now."""
        with self._role_lock:
            isr_state = self.isr_state
            return (
                isr_state is not None
                and self.state is ReplicaState.LEADER
                and isr_state.pending_isr is None
                and bool(isr_state.ready_to_join(self.log.high_watermark, self._epoch_start_offset))
            )

    def on_alter_partition(
        self, proposal: AlterPartitionState, result: AlterPartitionResult
    ) -> bool:
        """The controller's answer to ``proposal``: take the new ISR and partition epoch, or
        drop the proposal. A refusal saying this leader's view is stale
        (:data:`STALE_LEADER_ERRORS`) carries the controller's current state: if that still
        names this broker leader in its leader epoch (only the partition epoch moved), the
        leader takes it and goes on leading; otherwise it lost leadership and is fenced:
        :attr:`ReplicaState.FENCED_LEADER` until the controller's next LeaderAndIsr. Any
        other error is retried at the next check. Whether the partition's waiters must be
        told: the high watermark moved, or the leader was fenced (its acks=all waits and
        parked fetches are answered NOT_LEADER_OR_FOLLOWER)."""
        with self._role_lock:
            isr_state = self.isr_state
            if (
                isr_state is None
                or self.state is not ReplicaState.LEADER
                or self.leader_epoch != proposal.leader_epoch
            ):
                return False  # leadership changed meanwhile: the answer is about the past
            if result.error_code == ErrorCode.NONE:
                self._isr = tuple(result.isr)
                self.partition_epoch = result.partition_epoch
                isr_state.settle(result.isr)
                return self.maybe_advance_high_watermark()
            isr_state.settle(None)
            if result.error_code not in STALE_LEADER_ERRORS:
                return False
            if self.partition_epoch != proposal.partition_epoch:
                # A LeaderAndIsr moved this leader on while the proposal was in flight: the
                # refusal is about a state it no longer holds (fencing now would wait for a
                # LeaderAndIsr that already came).
                return False
            if (
                result.leader == self.node_id
                and result.leader_epoch == self.leader_epoch
                and result.partition_epoch > self.partition_epoch
                and self.node_id in result.isr
            ):
                # Still the leader of this epoch, and the controller says what the partition
                # is now (an earlier proposal of ours applied, its answer lost): take it, as
                # the answer to a proposal. No LeaderAndIsr would come to end a fence here
                # (the controller sends none for a change a leader proposed).
                self._isr = tuple(result.isr)
                self.partition_epoch = result.partition_epoch
                isr_state.settle(result.isr)
                return self.maybe_advance_high_watermark()
            self._fenced_reason = (
                f"the controller refused its ISR change {proposal.new_isr} at leader epoch "
                f"{proposal.leader_epoch} and partition epoch {proposal.partition_epoch} with "
                f"{ErrorCode(result.error_code).name} (the controller has leader "
                f"{result.leader} in leader epoch {result.leader_epoch}, partition epoch "
                f"{result.partition_epoch})"
            )
            self.transition_to(ReplicaState.FENCED_LEADER)
            return True

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

    def append(self, records: memoryview | bytes, *, required_acks: int = 1) -> LogAppendInfo:
        """Append validated batches as leader; advance the high watermark. With
        ``required_acks=-1`` (acks=all) nothing is written while the ISR is smaller than
        the topic's ``min.insync.replicas`` (NotEnoughReplicasError). Any thread."""
        with self._role_lock:
            if self.state is not ReplicaState.LEADER:
                raise NotLeaderOrFollowerError(self._not_leader_message())
            if required_acks == -1:
                self.check_enough_replicas(after_append=False)
            info = self.log.append(records, leader_epoch=self.leader_epoch)
            self.maybe_advance_high_watermark()
        return info

    def check_enough_replicas(self, *, after_append: bool) -> None:
        """Raise NotEnoughReplicasError (or, ``after_append``,
        NotEnoughReplicasAfterAppendError) while the ISR is smaller than the topic's
        ``min.insync.replicas``. ``after_append`` (an acks=all wait ended): raise
        NotLeaderOrFollowerError if this broker no longer leads, as Kafka's
        ``checkEnoughReplicasReachOffset`` does, since its ISR is not the partition's any
        more."""
        if after_append and self.state is not ReplicaState.LEADER:
            raise NotLeaderOrFollowerError(
                f"{self._not_leader_message()}; the records were appended by this broker "
                "but may not be on every in-sync replica (an idempotent producer's retry is "
                "recognised as a duplicate)"
            )
        required = self.log.config.min_insync_replicas
        if len(self._isr) >= required:
            return
        error = NotEnoughReplicasAfterAppendError if after_append else NotEnoughReplicasError
        what = (
            "the records were appended by the leader, but the ISR shrank before every "
            "member had them: they may or may not be kept; retry (an idempotent producer's "
            "retry is recognised as a duplicate)"
            if after_append
            else "nothing was appended; retry when the replicas are back, or produce with acks=1"
        )
        raise error(
            f"{self.topic}-{self.index}: the in-sync replicas {list(self._isr)} are fewer than "
            f"min.insync.replicas={required} (acks=all); {what}"
        )

    def maybe_advance_high_watermark(self) -> bool:
        """Advance the high watermark to the smallest log end of the leader and the
        (maximal) ISR; on one node to this replica's log end. Whether it moved. Only a
        leader moves it: a fenced leader's ISR may no longer be the partition's, so what its
        followers fetched proves nothing committed."""
        if self.state is not ReplicaState.LEADER:
            return False
        old = self.log.high_watermark
        end = self.log.log_end_offset
        target = end if self.isr_state is None else self.isr_state.high_watermark(end, old)
        return self.log.update_high_watermark(target) != old

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
