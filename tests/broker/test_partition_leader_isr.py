"""Partition as a cluster leader: the high watermark follows the ISR's log ends as followers
fetch, acks=all appends are refused below min.insync.replicas before anything is written,
the ISR's changes from the controller move the high watermark, and ISR changes are proposed
(shrink after replica.lag.time.max.ms, expansion once caught up) and settled by the
controller's answer. The clock is injected."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.broker.partition import LeaderAndIsr, Partition, ReplicaState
from spark_mq.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
)
from spark_mq.protocol.controller import AlterPartitionResult, AlterPartitionState
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import encode_batch


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(
        tmp_path / "t-0",
        LogConfig(min_insync_replicas=2),
        topic="t",
        partition=0,
        high_watermark_follows_log_end=False,
    )
    yield opened
    opened.close()


def records(n: int) -> bytes:
    return encode_batch(pa.array([b"v"] * n))


def leader(log: PartitionLog, isr: tuple[int, ...], *, epoch: int = 1) -> Partition:
    part = Partition.for_cluster(log, node_id=1, clock_ms=lambda: 1_000)
    part.make_leader(LeaderAndIsr(1, epoch, isr, (1, 2, 3), 0))
    return part


def test_high_watermark_is_the_smallest_log_end_of_the_isr(log: PartitionLog) -> None:
    part = leader(log, (1, 2, 3))
    part.append(records(5))
    assert (part.log_end_offset, part.high_watermark) == (5, 0)
    assert part.update_follower(2, 5) is False  # broker 3's log end is not known yet
    assert part.high_watermark == 0
    assert part.update_follower(3, 2) is True
    assert part.high_watermark == 2
    assert part.update_follower(3, 5) is True
    assert part.high_watermark == 5


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark(log: PartitionLog) -> None:
    part = leader(log, (1, 2))
    part.append(records(4))
    part.update_follower(3, 0)
    assert part.update_follower(2, 4) is True
    assert part.high_watermark == 4


def test_an_isr_shrink_from_the_controller_moves_the_high_watermark(log: PartitionLog) -> None:
    part = leader(log, (1, 2, 3))
    part.append(records(3))
    part.update_follower(2, 3)
    assert part.high_watermark == 0
    part.update_isr(LeaderAndIsr(1, 1, (1, 2), (1, 2, 3), 1))
    assert part.high_watermark == 3


def test_acks_all_is_refused_before_the_append_below_min_insync(log: PartitionLog) -> None:
    part = leader(log, (1,))
    with pytest.raises(NotEnoughReplicasError, match=r"min.insync.replicas=2"):
        part.append(records(2), required_acks=-1)
    assert part.log_end_offset == 0
    # acks=1 is not held to min.insync.replicas; the lone ISR member moves the HW itself.
    part.append(records(2), required_acks=1)
    assert (part.log_end_offset, part.high_watermark) == (2, 2)
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        part.check_enough_replicas(after_append=True)
    part.update_isr(LeaderAndIsr(1, 1, (1, 2), (1, 2, 3), 1))
    part.check_enough_replicas(after_append=True)
    part.append(records(1), required_acks=-1)
    assert part.log_end_offset == 3


def test_only_replicas_may_fetch_as_followers(log: PartitionLog) -> None:
    part = leader(log, (1, 2, 3))
    with pytest.raises(NotLeaderOrFollowerError, match="replicas are"):
        part.update_follower(7, 0)
    part.make_follower(LeaderAndIsr(2, 2, (1, 2, 3), (1, 2, 3), 1))
    with pytest.raises(NotLeaderOrFollowerError):
        part.update_follower(3, 0)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        return self.now_ms


def test_a_lagging_follower_is_proposed_out_and_the_answer_settles_it(
    log: PartitionLog,
) -> None:
    clock = Clock()
    part = Partition.for_cluster(log, node_id=1, clock_ms=clock)
    part.make_leader(LeaderAndIsr(1, 1, (1, 2, 3), (1, 2, 3), 4))
    part.append(records(3))
    part.update_follower(2, 3)
    part.update_follower(3, 0)
    assert part.propose_isr_change(2000) is None  # nobody lags yet
    clock.now_ms += 2001
    part.update_follower(2, 3)  # broker 2 keeps up; broker 3 never caught up
    proposal = part.propose_isr_change(2000)
    assert proposal == AlterPartitionState("t", 0, 1, [1, 2], 4)
    assert part.propose_isr_change(2000) is None  # one proposal in flight
    assert part.high_watermark == 0  # broker 3 still counts until the controller agrees
    moved = part.on_alter_partition(proposal, AlterPartitionResult("t", 0, 0, 1, 1, [1, 2], 5))
    assert moved and part.high_watermark == 3
    assert (part.isr, part.partition_epoch) == ([1, 2], 5)


def test_a_caught_up_follower_is_proposed_back(log: PartitionLog) -> None:
    part = leader(log, (1, 2))
    part.append(records(2))
    part.update_follower(2, 2)
    assert part.high_watermark == 2
    part.update_follower(3, 1)
    assert not part.wants_isr_expansion()
    part.update_follower(3, 2)
    assert part.wants_isr_expansion()
    proposal = part.propose_isr_change(30_000)
    assert proposal is not None and proposal.new_isr == [1, 2, 3]
    # While the expansion is in flight, broker 3 holds the high watermark (maximal ISR).
    part.append(records(1))
    part.update_follower(2, 3)
    assert part.high_watermark == 2
    part.update_follower(3, 3)
    assert part.high_watermark == 3


def test_a_refusal_naming_this_leader_in_its_epoch_updates_its_state(log: PartitionLog) -> None:
    clock = Clock()
    part = Partition.for_cluster(log, node_id=1, clock_ms=clock)
    part.make_leader(LeaderAndIsr(1, 1, (1, 2, 3), (1, 2, 3), 0))
    clock.now_ms += 60_000
    proposal = part.propose_isr_change(2000)
    assert proposal is not None
    # The controller's state moved to partition epoch 3 (an earlier proposal of this leader
    # was applied and its answer lost) and still names broker 1 leader in epoch 1: the leader
    # takes it and proposes again from there (tests/broker/test_partition_fenced_leader.py
    # has the refusals that fence it).
    refused = AlterPartitionResult("t", 0, ErrorCode.INVALID_UPDATE_VERSION, 1, 1, [1, 2, 3], 3)
    part.on_alter_partition(proposal, refused)
    assert part.state is ReplicaState.LEADER
    assert (part.isr, part.partition_epoch) == ([1, 2, 3], 3)
    again = part.propose_isr_change(2000)
    assert again is not None and again.partition_epoch == 3
    # A transient failure (the controller moved) drops the proposal but not the right to
    # propose.
    moved_away = AlterPartitionResult("t", 0, ErrorCode.NOT_CONTROLLER)
    part.on_alter_partition(again, moved_away)
    assert part.propose_isr_change(2000) is not None
