"""Three broker replicas of one partition under produce, leader changes and restarts (a
Hypothesis model of the broker's replication, in one process).

The storage model (tests/storage/test_replication_model.py) plays the protocol over bare
logs. This one runs the broker's own replication code on real logs (each replica a
:class:`~spark_mq.storage.log_manager.LogManager` in a directory of its own, so a restart
goes through recovery and the checkpoints), with direct calls where the brokers would
exchange requests:

- **produce**: :meth:`Partition.append` on the leader with ``acks=1`` or ``acks=all``
  (``required_acks=-1``: refused before the append while the ISR is smaller than
  ``min.insync.replicas=2``). An ``acks=all`` append is acknowledged as the purgatory does:
  once the leader's high watermark reaches its end, in the leader epoch it was appended in,
  if the ISR is still large enough then (else NOT_ENOUGH_REPLICAS_AFTER_APPEND); a leader
  change ends the waits unacknowledged.
- **fetch**: a follower handed a new leader first truncates, with the replica fetcher's
  truncation (:func:`~spark_mq.storage.epoch_truncation.truncate_as_follower`, asking the
  leader as the OffsetForLeaderEpoch handler answers: the leader's epoch check, then its
  epoch cache); then each fetch is the leader's side of a replica Fetch
  (:meth:`Partition.update_follower`, a read to the log end) and the fetcher's follower side
  (:func:`~spark_mq.broker.replica_fetcher.append_fetched`).
- **ISR changes** (KIP-497): the leader's :meth:`Partition.propose_isr_change` after the
  injected clock moves past ``replica.lag.time.max.ms`` or a follower catches up; the
  controller (this model) accepts it only at the current leader and partition epochs, and
  :meth:`Partition.on_alter_partition` takes the answer, possibly later than other steps.
- **elections**, as the controller makes them: a clean one picks an ISR member, leader epoch
  + 1, and sends LeaderAndIsr to every replica (:meth:`Partition.make_leader`,
  :meth:`Partition.make_follower`); an unclean one (only where the topic allows it,
  ``unclean.leader.election.enable``) happens when every ISR member fails at once, and picks a
  replica outside the ISR.
- **restart**: a replica's log manager closes and reopens from disk. The controller treats
  it as a broker failure: it leaves the ISR (a leader is replaced by another ISR member, or
  re-elected if it was alone), then follows the leader again.

Invariants, after every step:

- No divergence below the high watermark: every replica's batches below its high watermark
  are the leader's (same base offsets, ends, leader epochs and CRCs), except a replica
  that an unclean election left behind and that has not truncated yet.
- A follower that has truncated since the last leader change holds a prefix of the leader's
  log (whole: what KIP-279 fixed is a divergence above the high watermark).
- Every batch acknowledged with ``acks=all`` is, unchanged, on every ISR member (every
  replica that can become leader cleanly); an unclean election may lose some, which the
  model writes off explicitly at that election.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from spark_mq.broker.partition import LeaderAndIsr, Partition, ReplicaState
from spark_mq.broker.replica_fetcher import append_fetched
from spark_mq.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError
from spark_mq.protocol.controller import AlterPartitionResult, AlterPartitionState
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.epoch_truncation import truncate_as_follower
from spark_mq.storage.leader_epoch_cache import EpochEndOffset
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch

REPLICAS = (0, 1, 2)
TOPIC = "t"
NOW_MS = 1_700_000_000_000
#: ``replica.lag.time.max.ms`` of the model's leaders (its clock is injected).
LAG_TIME_MAX_MS = 100
#: Small segments, so truncation and recovery cross segment boundaries.
CONFIG = LogConfig(segment_bytes=2048)

#: A batch as the invariants compare it: base offset, next offset, leader epoch and CRC (which
#: covers everything after the leader epoch: producer fields and records; every batch the
#: model writes has values of its own).
Batch = tuple[int, int, int, int]


def note(what: str) -> None:
    """Count ``what`` in Hypothesis's statistics (``--hypothesis-show-statistics``: how often
    the model reaches the cases it is for); nothing in the step-by-step tests."""
    if currently_in_test_context():
        event(what)


def batches_of(replica: PartitionLog) -> list[Batch]:
    return [
        (header.base_offset, header.next_offset, header.partition_leader_epoch, header.crc)
        for segment in replica.segments
        for header, _ in segment.records.headers()
    ]


@dataclass
class Waiting:
    """An ``acks=all`` produce in the purgatory: its leader epoch and offsets."""

    leader_epoch: int
    base_offset: int
    end_offset: int


class PartitionReplicationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # On tmpfs when there is one: the model restarts processes, not machines.
        shm = Path("/dev/shm")
        self.root = Path(
            tempfile.mkdtemp(prefix="partition-model-", dir=shm if shm.is_dir() else None)
        )
        self.now_ms = 0
        self.managers: dict[int, LogManager] = {}
        self.parts: dict[int, Partition] = {}
        self.unclean_allowed = False
        # The controller's view (what ZooKeeper's partition state znode holds).
        self.leader = 0
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = REPLICAS
        self.partition_epoch = -1
        #: Followers that truncate before their next fetch (a new leader, or a restart).
        self.must_truncate: set[int] = set()
        #: Replicas an unclean election left with a log the new leader may contradict.
        self.left_behind: set[int] = set()
        #: An AlterPartition on its way to the controller: the proposing replica object.
        self.in_flight: tuple[Partition, AlterPartitionState] | None = None
        self.waiting: list[Waiting] = []
        #: Batches acknowledged to acks=all producers (and not lost to an unclean election).
        self.acked: dict[int, Batch] = {}
        self.serial = 0

    # -----------------------------------------------------------------------------------------
    # Helpers

    def open_replica(self, replica: int) -> None:
        self.managers[replica] = manager = LogManager(
            self.root / f"broker-{replica}",
            CONFIG,
            time_ms=lambda: NOW_MS,
            high_watermark_follows_log_end=False,
        )
        if not manager.topic_exists(TOPIC):
            manager.create_topic(
                TOPIC,
                partitions=1,
                config={
                    "min.insync.replicas": "2",
                    "unclean.leader.election.enable": str(self.unclean_allowed).lower(),
                },
            )
        self.parts[replica] = Partition.for_cluster(
            manager.get_log(TOPIC, 0), node_id=replica, clock_ms=lambda: self.now_ms
        )

    def state(self) -> LeaderAndIsr:
        return LeaderAndIsr(
            self.leader, self.leader_epoch, tuple(self.isr), REPLICAS, self.partition_epoch
        )

    def elect(self, leader: int, isr: tuple[int, ...]) -> None:
        """The controller's LeaderAndIsr to every replica for a new leader epoch; waiting
        acks=all produces end unacknowledged (NOT_LEADER_OR_FOLLOWER)."""
        self.leader, self.isr = leader, tuple(sorted(isr))
        self.leader_epoch += 1
        self.partition_epoch += 1
        state = self.state()
        self.parts[leader].make_leader(state)
        for replica in REPLICAS:
            if replica != leader:
                self.parts[replica].make_follower(state)
        self.must_truncate = set(REPLICAS) - {leader}
        self.waiting.clear()

    def change_isr(self, isr: tuple[int, ...]) -> None:
        """The controller removes a failed follower from the ISR (the leader is told)."""
        self.isr = tuple(sorted(isr))
        self.partition_epoch += 1
        self.parts[self.leader].update_isr(self.state())

    def restart_replica(self, replica: int) -> None:
        self.managers[replica].close()
        if self.in_flight is not None and self.in_flight[0] is self.parts[replica]:
            self.in_flight = None  # its AlterPartition died with it
        self.open_replica(replica)

    def complete_waiting(self) -> None:
        """The purgatory's completion after the leader's high watermark may have moved."""
        leader = self.parts[self.leader]
        still: list[Waiting] = []
        for wait in self.waiting:
            if leader.high_watermark < wait.end_offset:
                still.append(wait)
                continue
            try:
                leader.check_enough_replicas(after_append=True)
            except NotEnoughReplicasAfterAppendError:
                note("acks=all: NOT_ENOUGH_REPLICAS_AFTER_APPEND")
                continue
            note("acks=all acknowledged")
            for batch in batches_of(leader.log):
                if wait.base_offset <= batch[0] < wait.end_offset:
                    self.acked[batch[0]] = batch
        self.waiting = still

    def ask_leader(self, follower: int, epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch as the leader's handler answers it."""
        leader = self.parts[self.leader]
        assert leader.state is ReplicaState.LEADER
        leader.check_leader_epoch(self.parts[follower].leader_epoch)
        return leader.log.end_offset_for_epoch(epoch)

    # -----------------------------------------------------------------------------------------
    # Rules

    @initialize(unclean=st.booleans())
    def start(self, unclean: bool) -> None:
        self.unclean_allowed = unclean
        for replica in REPLICAS:
            self.open_replica(replica)
        self.elect(0, REPLICAS)

    @rule(count=st.integers(1, 4), acks=st.sampled_from([1, -1]))
    def produce(self, count: int, acks: int) -> None:
        self.serial += 1
        values = [b"%d:%d" % (self.serial, i) for i in range(count)]
        leader = self.parts[self.leader]
        try:
            # The model's clock, not the wall clock: the same example writes the same batches.
            batch = encode_batch(pa.array(values, pa.binary()), now_ms=NOW_MS)
            info = leader.append(batch, required_acks=acks)
        except NotEnoughReplicasError:
            assert acks == -1 and len(self.isr) < 2
            note("acks=all: NOT_ENOUGH_REPLICAS")
            return
        if acks == -1:
            self.waiting.append(Waiting(self.leader_epoch, info.first_offset, info.last_offset + 1))
        self.complete_waiting()

    @rule(data=st.data(), max_bytes=st.sampled_from([1, 600, 1 << 20]))
    def fetch(self, data: st.DataObject, max_bytes: int) -> None:
        self.fetch_once(
            data.draw(st.sampled_from([r for r in REPLICAS if r != self.leader])), max_bytes
        )

    @rule(reverse=st.booleans())
    def fetch_round(self, reverse: bool) -> None:
        """Every follower fetches once, as their fetchers do concurrently: the high
        watermark moves (the followers learn it one round late)."""
        followers = [r for r in REPLICAS if r != self.leader]
        for follower_id in reversed(followers) if reverse else followers:
            self.fetch_once(follower_id)

    @rule()
    def settle(self) -> None:
        """The fetchers run undisturbed for a while: fetch rounds until nothing moves."""
        for _ in range(8):
            before = [(p.log_end_offset, p.high_watermark) for p in self.parts.values()]
            self.fetch_round(reverse=False)
            if before == [(p.log_end_offset, p.high_watermark) for p in self.parts.values()]:
                return

    def fetch_once(self, follower_id: int, max_bytes: int = 1 << 20) -> None:
        follower, leader = self.parts[follower_id], self.parts[self.leader]
        if follower_id in self.must_truncate:
            # The fetcher's TRUNCATING state: its own step, as the leader may change (or
            # die) between a follower's truncation and its first fetch.
            end = follower.log_end_offset
            truncate_as_follower(follower.log, lambda epoch: self.ask_leader(follower_id, epoch))
            if follower.log_end_offset < end:
                note("a follower truncated records away")
            self.must_truncate.discard(follower_id)
            self.left_behind.discard(follower_id)
            return
        fetch_offset = follower.log_end_offset
        leader.check_leader_epoch(follower.leader_epoch)
        leader.update_follower(follower_id, fetch_offset)
        info = leader.log.read(fetch_offset, max_bytes, isolation=FetchIsolation.LOG_END)
        records = b""
        if info.records is not None:
            with info.records as fetched:
                records = fetched.read()
        append_fetched(follower.log, records, info.high_watermark)
        self.complete_waiting()

    @rule(ms=st.sampled_from([10, 60, 150]))
    def tick(self, ms: int) -> None:
        self.now_ms += ms

    @precondition(lambda self: self.in_flight is None)
    @rule()
    def propose_isr_change(self) -> None:
        leader = self.parts[self.leader]
        proposal = leader.propose_isr_change(LAG_TIME_MAX_MS)
        if proposal is not None:
            self.in_flight = (leader, proposal)

    @precondition(lambda self: self.in_flight is not None)
    @rule()
    def controller_answers_alter_partition(self) -> None:
        assert self.in_flight is not None
        proposer, proposal = self.in_flight
        self.in_flight = None
        if proposal.leader_epoch != self.leader_epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH
        elif proposal.partition_epoch != self.partition_epoch:
            code = ErrorCode.INVALID_UPDATE_VERSION
        else:
            code = ErrorCode.NONE
            self.isr = tuple(sorted(proposal.new_isr))
            self.partition_epoch += 1
        result = AlterPartitionResult(
            TOPIC,
            0,
            code,
            self.leader,
            self.leader_epoch,
            list(self.isr),
            self.partition_epoch,
        )
        proposer.on_alter_partition(proposal, result)
        if proposer is self.parts[self.leader]:
            self.complete_waiting()

    @rule(data=st.data())
    def clean_election(self, data: st.DataObject) -> None:
        """A controlled leader change (preferred leader, reassignment): an ISR member leads
        in the next epoch, the ISR unchanged."""
        self.elect(data.draw(st.sampled_from(self.isr)), self.isr)

    @rule(data=st.data(), noticed=st.booleans())
    def restart(self, data: st.DataObject, noticed: bool) -> None:
        """A replica restarts. The controller notices a leader's (its session ends), and a
        follower's unless it is back before its session times out: then the follower stays
        in the ISR, as in KIP-101's first case."""
        replica = data.draw(st.sampled_from(REPLICAS))
        others = tuple(r for r in self.isr if r != replica)
        successor = data.draw(st.sampled_from(others)) if others else replica
        self.restart_as(replica, noticed=noticed, successor=successor)

    def restart_as(self, replica: int, *, noticed: bool = True, successor: int = -1) -> None:
        self.restart_replica(replica)
        if replica == self.leader:
            others = tuple(r for r in self.isr if r != replica)
            if others:
                assert successor in others
                self.elect(successor, others)
            else:
                self.elect(replica, self.isr)  # alone in the ISR: it leads again when back
            return
        if noticed and replica in self.isr:
            self.change_isr(tuple(r for r in self.isr if r != replica))
        # Back: the controller's LeaderAndIsr makes it follow the current leader.
        self.parts[replica].make_follower(self.state())
        self.must_truncate.add(replica)

    @precondition(lambda self: self.unclean_allowed and len(self.isr) < len(REPLICAS))
    @rule(data=st.data())
    def unclean_election(self, data: st.DataObject) -> None:
        """Every ISR member fails at once; the controller elects a replica outside the ISR
        (the topic allows it), and the failed ones come back as its followers."""
        failed = self.isr
        for replica in failed:
            self.restart_replica(replica)
        leader = data.draw(st.sampled_from([r for r in REPLICAS if r not in failed]))
        self.elect(leader, (leader,))
        note("unclean election")
        kept = set(batches_of(self.parts[leader].log))
        # What the new leader does not have is lost: the price of an unclean election.
        self.acked = {base: b for base, b in self.acked.items() if b in kept}
        self.left_behind = set(REPLICAS) - {leader}

    # -----------------------------------------------------------------------------------------
    # Invariants

    @invariant()
    def no_divergence_below_the_high_watermark(self) -> None:
        if not self.parts:
            return
        leader = batches_of(self.parts[self.leader].log)
        for replica, part in self.parts.items():
            if replica in self.left_behind:
                continue
            held = [b for b in batches_of(part.log) if b[1] <= part.high_watermark]
            assert held == leader[: len(held)], (
                f"replica {replica} diverged from leader {self.leader} below its high "
                f"watermark {part.high_watermark}"
            )

    @invariant()
    def truncated_followers_hold_a_prefix_of_the_leader(self) -> None:
        if not self.parts:
            return
        leader = batches_of(self.parts[self.leader].log)
        for replica, part in self.parts.items():
            if replica == self.leader or replica in self.must_truncate:
                continue
            held = batches_of(part.log)
            assert held == leader[: len(held)], f"replica {replica} diverged from the leader"

    @invariant()
    def acked_batches_are_on_every_isr_member(self) -> None:
        if not self.parts:
            return
        for replica in self.isr:
            held = set(batches_of(self.parts[replica].log))
            missing = [b for b in self.acked.values() if b not in held]
            assert not missing, (
                f"ISR member {replica} (ISR {list(self.isr)}, leader {self.leader}) lacks "
                f"batches acknowledged with acks=all: {missing[:3]}"
            )

    def assert_invariants(self) -> None:
        self.no_divergence_below_the_high_watermark()
        self.truncated_followers_hold_a_prefix_of_the_leader()
        self.acked_batches_are_on_every_isr_member()

    def teardown(self) -> None:
        for manager in self.managers.values():
            manager.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestPartitionReplicationModel = PartitionReplicationMachine.TestCase
TestPartitionReplicationModel.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------------------------------------
# The two cases of KIP-101 and KIP-279, step by step through the same machine (the random
# model reaches them, but not in every run).


def epochs_at(machine: PartitionReplicationMachine, replica: int) -> list[tuple[int, int]]:
    """(base offset, leader epoch) of each batch of ``replica``'s log."""
    return [(b[0], b[2]) for b in batches_of(machine.parts[replica].log)]


def test_restarted_follower_keeps_what_was_acknowledged_kip_101() -> None:
    """KIP-101's first case: a follower restarts before the controller notices (it stays in
    the ISR) while its high watermark lags the leader's; it must not truncate to it, or the
    acks=all batch is lost once it leads."""
    machine = PartitionReplicationMachine()
    try:
        machine.start(unclean=False)
        for follower in (1, 2, 1, 2):  # truncation (nothing), then fetches
            machine.fetch_once(follower)
        machine.produce(count=1, acks=-1)
        for follower in (1, 2, 1, 2):
            machine.fetch_once(follower)
        assert machine.acked, "the acks=all batch was not acknowledged"
        assert machine.parts[1].high_watermark < machine.parts[0].high_watermark
        machine.restart_as(1, noticed=False)
        machine.fetch_once(1)  # truncation
        machine.assert_invariants()
        machine.restart_as(0, successor=1)  # the leader fails: 1 leads
        machine.assert_invariants()
        assert epochs_at(machine, 1) == [(0, 0)]
    finally:
        machine.teardown()


def test_double_failover_divergence_is_repaired_kip_279() -> None:
    """KIP-279's case: leadership moves 0 -> 1 -> 0 before either truncates, each leader
    having written offset 0 in its own epoch; 1's epoch 1 is one the leader 0 never had, and 1
    must find that out and drop its batch, not keep it because the leader's epoch 0 ends past
    it."""
    machine = PartitionReplicationMachine()
    try:
        machine.start(unclean=False)
        machine.produce(count=1, acks=1)  # offset 0 in epoch 0, on broker 0 only
        machine.elect(1, machine.isr)
        machine.produce(count=1, acks=1)  # offset 0 in epoch 1, on broker 1 only
        machine.elect(0, machine.isr)
        # Diverged: the same offset in two epochs, before anything repairs it.
        assert epochs_at(machine, 0) == [(0, 0)]
        assert epochs_at(machine, 1) == [(0, 1)]
        machine.fetch_once(1)  # truncation
        machine.assert_invariants()
        machine.fetch_once(1)
        machine.fetch_once(2)
        machine.fetch_once(2)
        machine.assert_invariants()
        assert epochs_at(machine, 1) == epochs_at(machine, 0) == [(0, 0)]
    finally:
        machine.teardown()
