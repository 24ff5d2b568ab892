"""Three replicas of one partition under leader changes and restarts (a Hypothesis model).

Each replica is a real log directory owned by its own
:class:`~spark_mq.storage.log_manager.LogManager` (so restarts go through recovery, the
``leader-epoch-checkpoint`` and the ``replication-offset-checkpoint``), and the replication
protocol between them is played in-process, as Kafka's replica fetchers and controller play it:

- **produce**: the leader appends a batch in its epoch.
- **fetch**: a follower that must truncate first (it restarted, or the leader changed) does
  only that, by the leader epoch rules (:mod:`~spark_mq.storage.epoch_truncation`); its next
  fetch starts at its log end. The fetch offset tells the leader how far the follower is: the
  leader may add it back to the ISR (log end at or past the high watermark and the start of
  the leader's epoch) and moves its high watermark to the smallest log end in the ISR. The
  response carries that high watermark and the leader's batches as they are
  (``append_as_follower``); the follower learns the high watermark one fetch late, as in
  Kafka, which is what made truncating to it unsafe (KIP-101).
- **shrink the ISR**: a follower falls out (``replica.lag.time.max.ms``, whenever the model
  says).
- **elect**: a member of the ISR becomes leader in the next epoch (clean election; its epoch
  starts at its log end).
- **restart**: a replica's manager closes (or crashes: nothing flushed or checkpointed) and
  reopens; its leader epoch checkpoint may be lost too (it is rebuilt from the batches). A
  leader that restarts is replaced by another ISR member, or re-elected if it was alone.

Invariants, after every step: every batch *committed* (below the highest high watermark any
leader reached: what ``acks=all`` acknowledged) is, unchanged, on every ISR member, so on any
replica that can become leader; a follower that has truncated since the last leader change
holds a prefix of the leader's log (no divergence, above or below the high watermark); each
log's epoch cache agrees with its batches' epochs; a high watermark never passes its log end.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from spark_mq.storage.epoch_truncation import truncate_as_follower
from spark_mq.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch

REPLICAS = (0, 1, 2)
TOPIC = "t"
NOW_MS = 1_700_000_000_000
#: Small segments, so truncation and recovery cross segment boundaries.
CONFIG = LogConfig(segment_bytes=2048)

Batch = tuple[int, int, int, tuple[bytes, ...]]  # base offset, next offset, epoch, values


def batches_of(replica: PartitionLog) -> list[Batch]:
    out: list[Batch] = []
    for segment in replica.segments:
        for header, _ in segment.records.headers():
            table = replica.read_records(
                header.base_offset,
                isolation=FetchIsolation.LOG_END,
                max_offset=header.next_offset,
            )
            values = tuple(table.column("value").to_pylist())
            out.append(
                (header.base_offset, header.next_offset, header.partition_leader_epoch, values)
            )
    return out


class ReplicationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # On tmpfs when there is one: the model crashes processes, not machines, so fsync buys
        # nothing here, and on a shared disk it is most of the run time.
        shm = Path("/dev/shm")
        self.root = Path(
            tempfile.mkdtemp(prefix="replication-model-", dir=shm if shm.is_dir() else None)
        )
        self.managers: dict[int, LogManager] = {}
        self.leader = 0
        self.epoch = 0
        self.isr: set[int] = set(REPLICAS)
        #: What the leader knows of each follower's log end (from its last fetch offset).
        self.known_end: dict[int, int] = {}
        #: Followers that must truncate before their next fetch.
        self.must_truncate: set[int] = set()
        #: Committed batches: below the highest high watermark a leader reached.
        self.committed: list[Batch] = []
        self.committed_end = 0
        self.serial = 0

    # -----------------------------------------------------------------------------------------
    # Helpers

    def log(self, replica: int) -> PartitionLog:
        return self.managers[replica].get_log(TOPIC, 0)

    def open_manager(self, replica: int) -> None:
        self.managers[replica] = LogManager(
            self.root / f"broker-{replica}",
            CONFIG,
            time_ms=lambda: NOW_MS,
            high_watermark_follows_log_end=False,
        )

    def elect(self, replica: int) -> None:
        """The controller makes ``replica`` leader in the next epoch (Kafka's makeLeader: the
        epoch starts at its log end); every other replica truncates before it fetches."""
        self.epoch += 1
        self.leader = replica
        leader = self.log(replica)
        leader.leader_epoch = self.epoch
        leader.maybe_assign_epoch_start_offset(self.epoch, leader.log_end_offset)
        self.known_end = {r: 0 for r in REPLICAS if r != replica}
        self.must_truncate = {r for r in REPLICAS if r != replica}

    def advance_high_watermark(self) -> None:
        leader = self.log(self.leader)
        ends = [leader.log_end_offset] + [self.known_end[r] for r in self.isr if r != self.leader]
        leader.update_high_watermark(max(leader.high_watermark, min(ends)))
        if leader.high_watermark > self.committed_end:
            self.committed = [b for b in batches_of(leader) if b[1] <= leader.high_watermark]
            self.committed_end = leader.high_watermark

    # -----------------------------------------------------------------------------------------
    # Rules

    @initialize()
    def start(self) -> None:
        for replica in REPLICAS:
            self.open_manager(replica)
            self.managers[replica].create_topic(TOPIC, partitions=1)
        self.epoch = -1
        self.elect(0)

    @rule(count=st.integers(1, 4))
    def produce(self, count: int) -> None:
        self.serial += 1
        values = [b"%d:%d" % (self.serial, i) for i in range(count)]
        self.log(self.leader).append(
            encode_batch(pa.array(values, pa.binary())), leader_epoch=self.epoch
        )
        self.advance_high_watermark()

    @rule(data=st.data(), max_bytes=st.sampled_from([1, 600, 1 << 20]))
    def fetch(self, data: st.DataObject, max_bytes: int) -> None:
        self.fetch_once(
            data.draw(st.sampled_from([r for r in REPLICAS if r != self.leader])), max_bytes
        )

    @rule(reverse=st.booleans())
    def fetch_round(self, reverse: bool) -> None:
        """Every follower fetches once, as their fetchers do concurrently: the high watermark
        moves, and the followers learn it one round late."""
        followers = [r for r in REPLICAS if r != self.leader]
        for follower_id in reversed(followers) if reverse else followers:
            self.fetch_once(follower_id, 1 << 20)

    def fetch_once(self, follower_id: int, max_bytes: int) -> None:
        follower, leader = self.log(follower_id), self.log(self.leader)
        if follower_id in self.must_truncate:
            # Truncation is its own step, as in Kafka's fetcher threads: the leader may change
            # (or die) between a follower's truncation and its next fetch.
            truncate_as_follower(follower, leader.end_offset_for_epoch)
            self.must_truncate.discard(follower_id)
            return
        fetch_offset = follower.log_end_offset
        self.known_end[follower_id] = fetch_offset
        epoch_start = leader.leader_epoch_cache.entries[-1].start_offset
        if fetch_offset >= max(leader.high_watermark, epoch_start):
            self.isr.add(follower_id)  # caught up: back in the ISR
        self.advance_high_watermark()
        info = leader.read(fetch_offset, max_bytes, isolation=FetchIsolation.LOG_END)
        if info.records is not None:
            with info.records as records:
                follower.append_as_follower(records.read())
        follower.update_high_watermark(info.high_watermark)

    @precondition(lambda self: len(self.isr) > 1)
    @rule(data=st.data())
    def shrink_isr(self, data: st.DataObject) -> None:
        self.isr.discard(data.draw(st.sampled_from(sorted(self.isr - {self.leader}))))
        self.advance_high_watermark()

    @rule(data=st.data())
    def change_leader(self, data: st.DataObject) -> None:
        self.elect(data.draw(st.sampled_from(sorted(self.isr))))

    @rule(
        data=st.data(),
        crash=st.booleans(),
        lose_epoch_checkpoint=st.booleans(),
        checkpoint_first=st.booleans(),
    )
    def restart(
        self, data: st.DataObject, crash: bool, lose_epoch_checkpoint: bool, checkpoint_first: bool
    ) -> None:
        replica = data.draw(st.sampled_from(REPLICAS))
        manager = self.managers[replica]
        if checkpoint_first:
            manager.checkpoint()
        if crash:
            manager._simulate_crash()
        else:
            manager.close()
        if lose_epoch_checkpoint:
            (manager.root / f"{TOPIC}-0" / LEADER_EPOCH_CHECKPOINT).unlink(missing_ok=True)
        self.open_manager(replica)
        if replica == self.leader:
            others = sorted(self.isr - {replica})
            if others:
                # The controller removes the dead leader from the ISR and elects another member.
                self.isr.discard(replica)
                self.elect(data.draw(st.sampled_from(others)))
            else:
                self.elect(replica)  # alone in the ISR: nobody else may lead
        else:
            self.must_truncate.add(replica)

    # -----------------------------------------------------------------------------------------
    # Invariants

    @invariant()
    def committed_batches_are_on_every_replica_that_can_lead(self) -> None:
        if not self.managers:
            return
        for replica in sorted(self.isr):
            held = [b for b in batches_of(self.log(replica)) if b[1] <= self.committed_end]
            assert held == self.committed, (
                f"replica {replica} (ISR {sorted(self.isr)}, leader {self.leader}) lost or "
                f"changed committed batches below {self.committed_end}"
            )

    @invariant()
    def followers_that_truncated_hold_a_prefix_of_the_leader(self) -> None:
        if not self.managers:
            return
        leader = batches_of(self.log(self.leader))
        for replica in REPLICAS:
            if replica == self.leader or replica in self.must_truncate:
                continue
            held = batches_of(self.log(replica))
            assert held == leader[: len(held)], f"replica {replica} diverged from the leader"

    @invariant()
    def epoch_caches_agree_with_the_batches(self) -> None:
        for replica in self.managers:
            log = self.log(replica)
            assert log.high_watermark <= log.log_end_offset
            cache = log.leader_epoch_cache
            for base, _, epoch, _ in batches_of(log):
                if base >= log.log_start_offset:
                    assert cache.epoch_for_offset(base) == epoch, (replica, base, cache)

    def teardown(self) -> None:
        for manager in self.managers.values():
            manager.close()
        shutil.rmtree(self.root, ignore_errors=True)


TestReplicationModel = ReplicationMachine.TestCase
TestReplicationModel.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
