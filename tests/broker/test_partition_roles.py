"""Partition: the replica state machine's table, and the roles the controller gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.broker.partition import (
    LeaderAndIsr,
    Partition,
    ReplicaState,
    is_transition_valid,
)
from spark_mq.errors import NotLeaderOrFollowerError, UsageError
from spark_mq.storage.leader_epoch_cache import EpochEntry
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.record_batch import encode_batch

S = ReplicaState
#: Every legal move, written out: anything else is refused.
MOVES = {
    (S.NEW, S.LEADER),
    (S.NEW, S.FOLLOWER),
    (S.NEW, S.OFFLINE),
    (S.LEADER, S.LEADER),
    (S.LEADER, S.FOLLOWER),
    (S.LEADER, S.OFFLINE),
    (S.LEADER, S.FENCED_LEADER),
    (S.FENCED_LEADER, S.LEADER),
    (S.FENCED_LEADER, S.FOLLOWER),
    (S.FENCED_LEADER, S.OFFLINE),
    (S.FOLLOWER, S.LEADER),
    (S.FOLLOWER, S.FOLLOWER),
    (S.FOLLOWER, S.OFFLINE),
}


@pytest.mark.parametrize("old", list(S))
@pytest.mark.parametrize("new", list(S))
def test_transition_table(old: ReplicaState, new: ReplicaState) -> None:
    assert is_transition_valid(old, new) == ((old, new) in MOVES)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    opened = PartitionLog.open(
        tmp_path / "t-0",
        LogConfig(),
        topic="t",
        partition=0,
        high_watermark_follows_log_end=False,
    )
    yield opened
    opened.close()


def batch() -> bytes:
    return encode_batch(pa.array([b"v"]))


def test_a_cluster_replica_serves_nothing_until_it_has_a_role(log: PartitionLog) -> None:
    part = Partition.for_cluster(log, node_id=1)
    assert (part.state, part.leader_epoch, part.replicas, part.isr) == (S.NEW, -1, [], [])
    with pytest.raises(NotLeaderOrFollowerError, match="has not told it its role"):
        part.append(batch())
    with pytest.raises(NotLeaderOrFollowerError):
        part.require_leader()


def test_leader_then_follower_then_leader_again(log: PartitionLog) -> None:
    part = Partition.for_cluster(log, node_id=1)
    part.make_leader(LeaderAndIsr(1, 4, (1, 2), (1, 2), 0))
    part.append(batch())
    part.append(batch())
    # The high watermark waits for the other ISR member's fetch.
    assert part.high_watermark == 0
    assert part.update_follower(2, 2)
    assert part.high_watermark == 2
    part.make_follower(LeaderAndIsr(2, 5, (2,), (1, 2), 1))
    with pytest.raises(NotLeaderOrFollowerError, match="follows broker 2 \\(leader epoch 5\\)"):
        part.append(batch())
    part.make_leader(LeaderAndIsr(1, 6, (1,), (1, 2), 2))
    part.append(batch())
    # Each leadership starts its epoch at the log end of that moment.
    assert log.leader_epoch_cache.entries == (EpochEntry(4, 0), EpochEntry(6, 2))
    assert (part.leader_id, part.isr, part.replicas, part.partition_epoch) == (1, [1], [1, 2], 2)


def test_roles_must_match_the_leader_named(log: PartitionLog) -> None:
    part = Partition.for_cluster(log, node_id=1)
    with pytest.raises(UsageError):
        part.make_leader(LeaderAndIsr(2, 1, (2,), (1, 2), 0))
    with pytest.raises(UsageError):
        part.make_follower(LeaderAndIsr(1, 1, (1,), (1, 2), 0))
    part.make_leader(LeaderAndIsr(1, 1, (1, 2), (1, 2), 0))
    with pytest.raises(UsageError):
        part.update_isr(LeaderAndIsr(1, 2, (1,), (1, 2), 1))
    part.update_isr(LeaderAndIsr(1, 1, (1,), (1, 2), 1))
    assert (part.state, part.isr, part.leader_epoch) == (S.LEADER, [1], 1)


def test_a_stopped_replica_stays_offline(log: PartitionLog) -> None:
    part = Partition(log, leader_epoch=3, node_id=0)
    assert (part.state, part.replicas, part.isr) == (S.LEADER, [0], [0])
    part.stop()
    part.stop()
    assert part.state is S.OFFLINE
    with pytest.raises(UsageError):
        part.make_leader(LeaderAndIsr(0, 4, (0,), (0,), 0))
    with pytest.raises(NotLeaderOrFollowerError, match="offline"):
        part.append(batch())
