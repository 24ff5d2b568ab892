"""The transaction coordinator in a cluster: a ``__transaction_state`` partition is loaded when
this broker becomes its leader (with the leader epoch as coordinator epoch) and unloaded when
it stops; requests for other ids answer NOT_COORDINATOR; state records are acks=all.

A real ReplicaManager over real logs; the controller's LeaderAndIsr is played by making the
partitions leader or follower and announcing it, as the replica manager does after applying
the request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from spark_mq.broker.coordinator_topic import coordinator_partition
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.service import GroupService
from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.partition import LeaderAndIsr, Partition
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn import two_phase
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.broker.txn.log_reader import read_batches
from spark_mq.broker.txn.service import TransactionService
from spark_mq.broker.txn.state import TxnState
from spark_mq.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
from spark_mq.protocol.transactions import CommitPreparedTxnsRequest, PreparedTxnRef
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import ControlType

T = TypeVar("T")
STATE_PARTITIONS = 4
DATA = ("events", 0)
ME, OTHER = 1, 2


async def _inline(fn: Callable[..., T], /, *args: object) -> T:
    return fn(*args)


class Broker:
    """One cluster broker's transaction coordinator over real logs."""

    def __init__(self, root: Path) -> None:
        self.logs = LogManager(root, high_watermark_follows_log_end=False)
        compact = {"cleanup.policy": "compact"}
        self.logs.create_topic(TRANSACTION_STATE_TOPIC, STATE_PARTITIONS, compact)
        self.logs.create_topic("events", 1, {})
        self.replicas = ReplicaManager(
            self.logs,
            node_id=ME,
            leader_epoch=0,
            num_partitions=1,
            auto_create_topics=False,
            cluster=True,
        )
        groups = GroupService(GroupConfig(), self.replicas, _inline)
        ids = iter(range(5000, 6000))
        self.txns = TransactionService(
            TxnConfig(),
            self.replicas,
            _inline,
            groups,
            coordinator_epoch=99,
            new_producer_id=lambda: next(ids),
            partition_count=lambda: STATE_PARTITIONS,
        )
        self.lead(*DATA, epoch=0)

    def part(self, topic: str, index: int) -> Partition:
        return self.replicas.partition(topic, index)

    def lead(self, topic: str, index: int, *, epoch: int, isr: tuple[int, ...] = (ME,)) -> None:
        part = self.part(topic, index)
        part.make_leader(LeaderAndIsr(ME, epoch, isr, (ME, OTHER), 0))
        self.replicas.notify([part])
        self.replicas.announce_leadership([part])

    def follow(self, topic: str, index: int, *, epoch: int) -> None:
        part = self.part(topic, index)
        part.make_follower(LeaderAndIsr(OTHER, epoch, (OTHER,), (ME, OTHER), 0))
        self.replicas.notify([part])
        self.replicas.announce_leadership([part])

    async def loads_done(self) -> None:
        # Let the load tasks run (the run_blocking here is inline).
        for _ in range(5):
            await asyncio.sleep(0)

    def close(self) -> None:
        self.txns.close()
        self.logs.close()


def _tid_on(partition: int, skip: int = 0) -> str:
    """A transactional id of ``__transaction_state`` partition ``partition``."""
    found = [
        f"tx-{i}"
        for i in range(1000)
        if coordinator_partition(f"tx-{i}", STATE_PARTITIONS) == partition
    ]
    return found[skip]


def _markers(broker: Broker) -> list[tuple[ControlType, int]]:
    log = broker.part(*DATA).log
    return [
        (b.marker.type, b.marker.coordinator_epoch)
        for b in read_batches(log, 1 << 20, to_log_end=True)
        if b.marker is not None
    ]


def _run(tmp_path: Path, test: Callable[[Broker], Coroutine[Any, Any, None]]) -> None:
    broker = Broker(tmp_path / "logs")
    try:
        asyncio.run(test(broker))
    finally:
        broker.close()


def test_ids_of_partitions_not_led_here_answer_not_coordinator(tmp_path: Path) -> None:
    mine, theirs = _tid_on(1), _tid_on(2)

    async def test(b: Broker) -> None:
        b.txns.start()
        with pytest.raises(NotCoordinatorError, match="its partition __transaction_state-1"):
            await b.txns.coordinator_for(mine)
        b.lead(TRANSACTION_STATE_TOPIC, 1, epoch=7)
        # Elected, not loaded yet: retriable, and says so.
        with pytest.raises(CoordinatorLoadInProgressError, match="coordinator epoch 7"):
            await b.txns.coordinator_for(mine)
        await b.loads_done()
        coordinator = await b.txns.coordinator_for(mine)
        assert b.txns.coordinates(mine) and not b.txns.coordinates(theirs)
        with pytest.raises(NotCoordinatorError):
            await b.txns.coordinator_for(theirs)
        # A two-phase decision naming ids of two coordinators is refused whole.
        with pytest.raises(NotCoordinatorError):
            await b.txns.coordinator_for(mine, theirs)
        assert coordinator.epochs == {1: 7}

    _run(tmp_path, test)


def test_markers_carry_the_partitions_leader_epoch_as_coordinator_epoch(tmp_path: Path) -> None:
    tid = _tid_on(3)

    async def test(b: Broker) -> None:
        b.txns.start()
        b.lead(TRANSACTION_STATE_TOPIC, 3, epoch=12)
        await b.loads_done()
        c = await b.txns.coordinator_for(tid)
        pid, epoch = c.init_producer_id(tid, 60_000, -1, -1, b.txns.now_ms())
        c.add_partitions(tid, pid, epoch, [DATA], b.txns.now_ms())
        c.end_txn(tid, pid, epoch, True, b.txns.now_ms())
        await b.txns.settle([tid])
        assert c.txns[tid].state is TxnState.COMPLETE_COMMIT
        # Not the broker epoch (99) a single node would use: the partition's leader epoch.
        assert _markers(b) == [(ControlType.COMMIT, 12)]

    _run(tmp_path, test)


def test_a_new_coordinator_completes_a_decision_and_keeps_the_rest(tmp_path: Path) -> None:
    decided, ongoing = _tid_on(0), _tid_on(0, skip=1)

    async def test(b: Broker) -> None:
        b.txns.start()
        # The old coordinator: a follower in the ISR has not fetched yet, so its records
        # are not replicated and no marker may be written for its decision.
        b.lead(TRANSACTION_STATE_TOPIC, 0, epoch=3, isr=(ME, OTHER))
        await b.loads_done()
        c = await b.txns.coordinator_for(decided)
        now = b.txns.now_ms()
        for tid in (decided, ongoing):
            pid, epoch = c.init_producer_id(tid, 60_000, -1, -1, now)
            c.add_partitions(tid, pid, epoch, [DATA], now)
        started = c.txns[ongoing].txn_start_ms
        pid, epoch = c.txns[decided].producer_id, c.txns[decided].producer_epoch
        c.end_txn(decided, pid, epoch, True, now)
        assert c.txns[decided].state is TxnState.PREPARE_COMMIT
        assert _markers(b) == []  # the decision is not on every in-sync replica yet
        # The partition moves away: everything of it is unloaded.
        b.follow(TRANSACTION_STATE_TOPIC, 0, epoch=4)
        assert decided not in c.txns and ongoing not in c.txns and 0 not in c.epochs
        with pytest.raises(NotCoordinatorError):
            await b.txns.coordinator_for(decided)
        # ... and comes back in a later epoch (the other broker died): the new coordinator
        # loads the log, writes the markers of the decision with its own epoch and completes
        # it; the Ongoing transaction keeps its start time (its timeout still applies).
        b.lead(TRANSACTION_STATE_TOPIC, 0, epoch=5)
        await b.loads_done()
        c = await b.txns.coordinator_for(decided)
        assert c.txns[decided].state is TxnState.COMPLETE_COMMIT
        assert c.txns[ongoing].state is TxnState.ONGOING
        assert c.txns[ongoing].txn_start_ms == started
        assert _markers(b) == [(ControlType.COMMIT, 5)]

    _run(tmp_path, test)


def test_a_state_change_is_answered_once_the_in_sync_replicas_have_it(tmp_path: Path) -> None:
    tid = _tid_on(2)

    async def test(b: Broker) -> None:
        b.txns.start()
        b.lead(TRANSACTION_STATE_TOPIC, 2, epoch=1, isr=(ME, OTHER))
        await b.loads_done()
        c = await b.txns.coordinator_for(tid)
        # The wait is bounded by the transaction's timeout (200 ms), as Kafka's append.
        c.init_producer_id(tid, 200, -1, -1, b.txns.now_ms())
        # The follower never fetches: a retriable COORDINATOR_NOT_AVAILABLE, as Kafka's
        # mapping of a timed-out append.
        with pytest.raises(CoordinatorNotAvailableError, match="not on every in-sync"):
            await b.txns.settle([tid])
        # The follower fetches up to the log end: answered.
        part = b.part(TRANSACTION_STATE_TOPIC, 2)
        waiting = asyncio.ensure_future(b.txns.settle([tid]))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        part.update_follower(OTHER, part.log.log_end_offset)
        b.replicas.notify([part])
        await asyncio.wait_for(waiting, 1)
        # Leadership lost while waiting: NOT_COORDINATOR.
        c.init_producer_id(tid, 200, -1, -1, b.txns.now_ms())
        waiting = asyncio.ensure_future(b.txns.settle([tid]))
        await asyncio.sleep(0.01)
        b.follow(TRANSACTION_STATE_TOPIC, 2, epoch=2)
        with pytest.raises(NotCoordinatorError, match="no longer leads"):
            await asyncio.wait_for(waiting, 1)

    _run(tmp_path, test)


def test_a_prepared_transaction_survives_a_move_and_a_stale_load_is_dropped(
    tmp_path: Path,
) -> None:
    tid = _tid_on(1)

    async def test(b: Broker) -> None:
        b.txns.start()
        b.lead(TRANSACTION_STATE_TOPIC, 1, epoch=1)
        await b.loads_done()
        c = await b.txns.coordinator_for(tid)
        now = b.txns.now_ms()
        pid, epoch = c.init_producer_id(tid, 60_000, -1, -1, now)
        c.add_partitions(tid, pid, epoch, [DATA], now)
        two_phase.prepare(c, tid, pid, epoch, now)
        assert c.txns[tid].state is TxnState.PREPARED
        # Elected again (epoch 2) and resigned before the load ran: nothing is installed.
        b.follow(TRANSACTION_STATE_TOPIC, 1, epoch=2)
        b.lead(TRANSACTION_STATE_TOPIC, 1, epoch=3)
        b.follow(TRANSACTION_STATE_TOPIC, 1, epoch=4)
        await b.loads_done()
        assert tid not in c.txns and 1 not in b.txns.placement.led
        # Back for good: the two-phase promise holds, no marker was written.
        b.lead(TRANSACTION_STATE_TOPIC, 1, epoch=5)
        await b.loads_done()
        assert c.txns[tid].state is TxnState.PREPARED
        assert c.txns[tid].producer_epoch == epoch
        assert _markers(b) == []

    _run(tmp_path, test)


def test_an_anonymous_two_phase_decision_lands_on_a_partition_led_here(tmp_path: Path) -> None:
    # Two prepared transactions decided together without an owner: the decision record
    # gets a generated name, which must hash to a partition this broker leads (here only
    # partition 1 of 4 is led, so a name drawn at random would land elsewhere 3 times in 4).
    async def test(b: Broker) -> None:
        b.txns.start()
        b.lead(TRANSACTION_STATE_TOPIC, 1, epoch=1)
        await b.loads_done()
        for round_ in range(3):
            tids = [_tid_on(1, skip=2 * round_), _tid_on(1, skip=2 * round_ + 1)]
            c = await b.txns.coordinator_for(*tids)
            now = b.txns.now_ms()
            refs = []
            for tid in tids:
                pid, epoch = c.init_producer_id(tid, 60_000, -1, -1, now)
                c.add_partitions(tid, pid, epoch, [DATA], now)
                two_phase.prepare(c, tid, pid, epoch, now)
                refs.append(PreparedTxnRef(tid, pid, epoch))
            outcome = two_phase.commit(c, CommitPreparedTxnsRequest(refs), now)
            assert outcome.first_error is None
            assert all(c.txns[t].state is TxnState.COMPLETE_COMMIT for t in tids)

    _run(tmp_path, test)
