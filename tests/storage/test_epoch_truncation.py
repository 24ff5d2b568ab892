"""Truncation by leader epoch (KIP-101, KIP-279) over real partition logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.storage.epoch_truncation import (
    Truncation,
    truncate_as_follower,
    truncation_offset,
)
from spark_mq.storage.leader_epoch_cache import EpochEndOffset, EpochEntry, end_offset_for
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.record_batch import encode_batch


class Replicas:
    """Replicas of one partition, each a real log in its own directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs: dict[str, PartitionLog] = {}

    def open(self, name: str) -> PartitionLog:
        self.logs[name] = PartitionLog.open(
            self.root / name / "t-0",
            topic="t",
            partition=0,
            high_watermark_follows_log_end=False,
            high_watermark=self.logs[name].high_watermark if name in self.logs else None,
        )
        return self.logs[name]

    def restart(self, name: str) -> PartitionLog:
        self.logs[name].close()
        return self.open(name)

    def close(self) -> None:
        for replica in self.logs.values():
            replica.close()


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    r = Replicas(tmp_path)
    yield r
    r.close()


def lead(replica: PartitionLog, epoch: int) -> None:
    """Become leader in ``epoch``, as Kafka's makeLeader: the epoch starts at the log end."""
    replica.leader_epoch = epoch
    replica.maybe_assign_epoch_start_offset(epoch, replica.log_end_offset)


def produce(leader: PartitionLog, *values: bytes) -> None:
    leader.append(encode_batch(pa.array(list(values), pa.binary())))


def fetch(follower: PartitionLog, leader: PartitionLog) -> None:
    """One replica fetch: the leader's batches as they are, and its high watermark."""
    info = leader.read(follower.log_end_offset, 1 << 20, isolation=FetchIsolation.LOG_END)
    if info.records is not None:
        with info.records as records:
            follower.append_as_follower(records.read())
    follower.update_high_watermark(leader.high_watermark)


def content(replica: PartitionLog) -> list[tuple[int, int, list[bytes]]]:
    """(offset, leader epoch, values) of every record batch."""
    out = []
    for segment in replica.segments:
        for header, _ in segment.records.headers():
            table = replica.read_records(
                header.base_offset, isolation=FetchIsolation.LOG_END, max_offset=header.next_offset
            )
            out.append(
                (header.base_offset, header.partition_leader_epoch, table["value"].to_pylist())
            )
    return out


def test_kip101_a_restarted_follower_keeps_committed_records(replicas: Replicas) -> None:
    a, b = replicas.open("a"), replicas.open("b")
    lead(a, 0)
    produce(a, b"m0")
    produce(a, b"m1")
    fetch(b, a)
    a.update_high_watermark(b.log_end_offset)  # both in the ISR have it: committed
    assert (a.high_watermark, b.high_watermark) == (2, 0)  # b learns it on its next fetch
    # b restarts. Truncating to its own high watermark (pre-KIP-101) would drop both
    # committed records; by epoch it keeps them.
    b = replicas.restart("b")
    assert truncate_as_follower(b, a.end_offset_for_epoch) == Truncation(2, 1)
    # a dies; b, in the ISR, is elected and a follows it.
    lead(b, 1)
    a = replicas.restart("a")
    truncate_as_follower(a, b.end_offset_for_epoch)
    produce(b, b"m2")
    fetch(a, b)
    assert content(a) == content(b) == [(0, 0, [b"m0"]), (1, 0, [b"m1"]), (2, 1, [b"m2"])]


def test_kip101_divergence_after_two_quick_failures(replicas: Replicas) -> None:
    a, b = replicas.open("a"), replicas.open("b")
    lead(a, 0)
    produce(a, b"m0")
    fetch(b, a)
    produce(a, b"m1")  # b never gets it
    a.update_high_watermark(2)  # b had been dropped from the ISR
    # Both fail; b comes back first and is elected; it writes its own offset 1.
    b = replicas.restart("b")
    lead(b, 1)
    produce(b, b"m2")
    a = replicas.restart("a")
    assert a.high_watermark == 2  # past the point where the logs differ: HW truncation keeps m1
    assert truncate_as_follower(a, b.end_offset_for_epoch) == Truncation(1, 1)
    fetch(a, b)
    assert content(a) == content(b) == [(0, 0, [b"m0"]), (1, 1, [b"m2"])]


def test_kip279_a_leader_that_never_had_the_followers_epoch(replicas: Replicas) -> None:
    a, b = replicas.open("a"), replicas.open("b")
    lead(a, 0)
    produce(a, b"m0")
    fetch(b, a)
    produce(a, b"m1")  # a fails before b fetches it
    lead(b, 1)
    produce(b, b"m2")  # b fails before a follows it
    lead(a, 2)  # a comes back and is elected at once
    produce(a, b"m3")
    assert a.leader_epoch_cache.entries == ((0, 0), (2, 2))
    assert b.leader_epoch_cache.entries == ((0, 0), (1, 1))
    # b asks where its epoch 1 ends. a never had epoch 1: KIP-101's first answer was where a's
    # next epoch starts (2), which kept b's m2 at offset 1 against a's m1. KIP-279's answer is
    # a's largest epoch below it, 0, ending at 2; b's own epoch 0 ends at 1, so b cuts there.
    assert a.end_offset_for_epoch(1) == EpochEndOffset(0, 2)
    assert truncate_as_follower(b, a.end_offset_for_epoch) == Truncation(1, 1)
    fetch(b, a)
    assert content(b) == content(a) == [(0, 0, [b"m0"]), (1, 0, [b"m1"]), (2, 2, [b"m3"])]


def test_kip279_several_rounds_when_the_follower_lacks_the_leaders_epochs() -> None:
    leader = [EpochEntry(0, 0), EpochEntry(2, 4), EpochEntry(4, 8)]
    follower = [EpochEntry(0, 0), EpochEntry(3, 5)]
    asked: list[int] = []

    def ask_leader(epoch: int) -> EpochEndOffset:
        asked.append(epoch)
        return end_offset_for(leader, epoch, 10)

    # Epoch 3 is unknown to the leader: (2, 8). The follower has no epoch 2, so its epochs above
    # 0 go (to offset 5) and it asks about 0: (0, 4), where its own epoch 0 runs on to 5.
    got = truncation_offset(follower, log_end_offset=9, high_watermark=0, ask_leader=ask_leader)
    assert got == Truncation(4, 2)
    assert asked == [3, 0]


@pytest.mark.parametrize(
    ("follower", "leader", "log_end", "expected"),
    [
        # Same latest epoch: the shorter of the two logs.
        ([EpochEntry(0, 0)], [EpochEntry(0, 0)], 7, Truncation(7, 1)),
        (
            [EpochEntry(0, 0), EpochEntry(1, 5)],
            [EpochEntry(0, 0), EpochEntry(1, 5)],
            9,
            Truncation(8, 1),
        ),
        # The leader's log start moved past every epoch the follower has.
        ([EpochEntry(1, 0)], [EpochEntry(3, 20)], 10, Truncation(10, 1)),
        # No epochs, or a leader that knows none at or below ours: the high watermark.
        ([], [EpochEntry(0, 0)], 10, Truncation(3, 0, by_high_watermark=True)),
        ([EpochEntry(5, 0)], [], 10, Truncation(3, 1, by_high_watermark=True)),
    ],
)
def test_edge_cases(
    follower: list[EpochEntry], leader: list[EpochEntry], log_end: int, expected: Truncation
) -> None:
    got = truncation_offset(
        follower,
        log_end_offset=log_end,
        high_watermark=3,
        ask_leader=lambda epoch: end_offset_for(leader, epoch, 8),
    )
    assert got == expected


def test_a_replaced_leader_forgets_the_epoch_it_never_appended_to(replicas: Replicas) -> None:
    a, b = replicas.open("a"), replicas.open("b")
    lead(a, 0)
    produce(a, b"m0")
    lead(b, 1)  # elected, but replaced before it appends anything
    lead(a, 2)
    assert b.leader_epoch_cache.entries == ((1, 0),)
    # b's log end is its truncation offset, yet its epoch 1 at the log end must go: the
    # leader's epoch 0 batch it copies next would otherwise look like an epoch going back.
    assert truncate_as_follower(b, a.end_offset_for_epoch).offset == 0
    assert b.leader_epoch_cache.entries == ()
    fetch(b, a)
    assert content(b) == content(a) == [(0, 0, [b"m0"])]
