"""A leader whose ISR change the controller refuses as stale stops acting as leader
(ReplicaState.FENCED_LEADER) until the controller's next LeaderAndIsr: it refuses produce and
fetches with NOT_LEADER_OR_FOLLOWER, its high watermark stays where it was, its waiting
acks=all answers end with NOT_LEADER_OR_FOLLOWER, and a LeaderAndIsr makes it leader again
(same epoch, with what it knew of its followers), follower, or a leader of a new epoch. A
refusal that a LeaderAndIsr already overtook, or a transient one, fences nothing. The clock
is injected."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.broker.partition import (
    STALE_LEADER_ERRORS,
    Partition,
    ReplicaState,
)
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.errors import NotLeaderOrFollowerError
from spark_mq.protocol.controller import (
    AlterPartitionResult,
    AlterPartitionState,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch

STALE = sorted(STALE_LEADER_ERRORS)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def replicas(tmp_path: Path, clock: Clock) -> Iterator[ReplicaManager]:
    logs = LogManager(tmp_path / "mq", high_watermark_follows_log_end=False)
    logs.create_topic("t", 1)
    yield ReplicaManager(
        logs,
        node_id=1,
        leader_epoch=0,
        num_partitions=1,
        auto_create_topics=False,
        cluster=True,
        clock_ms=clock,
    )
    logs.close()


def records(n: int) -> bytes:
    return encode_batch(pa.array([b"v"] * n))


def leader_and_isr(
    leader: int, leader_epoch: int, isr: list[int], partition_epoch: int
) -> LeaderAndIsrRequest:
    state = LeaderAndIsrPartitionState(
        "t", 0, 1, leader, leader_epoch, isr, partition_epoch, [1, 2, 3]
    )
    return LeaderAndIsrRequest(0, 1, -1, [state], [])


def lead_and_lag(replicas: ReplicaManager, clock: Clock) -> tuple[Partition, AlterPartitionState]:
    """Broker 1 leads t-0 (ISR 1, 2, 3; epoch 5, partition epoch 7) with 4 records, broker 2
    has them all, broker 3 has 2 (the high watermark); after replica.lag.time.max.ms the
    leader proposes to drop broker 3."""
    changes = replicas.become_leader_or_follower(
        leader_and_isr(1, 5, [1, 2, 3], 7), topic_config=lambda _: {}
    )
    assert changes.results == [("t", 0, None)]
    part = replicas.partition("t", 0)
    part.append(records(4))
    part.update_follower(2, 4)
    part.update_follower(3, 2)
    assert part.high_watermark == 2
    clock.now_ms += 30_001
    part.update_follower(2, 4)
    proposal = part.propose_isr_change(30_000)
    assert proposal == AlterPartitionState("t", 0, 5, [1, 2], 7)
    return part, proposal


def stale_refusal(code: ErrorCode) -> AlterPartitionResult:
    """The controller's refusal: it has broker 2 leading in epoch 6, partition epoch 9."""
    return AlterPartitionResult("t", 0, int(code), 2, 6, [2, 3], 9, "refused")


@pytest.mark.parametrize("code", STALE, ids=lambda c: ErrorCode(c).name)
def test_a_stale_refusal_stops_the_leader(
    replicas: ReplicaManager, clock: Clock, code: ErrorCode
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    assert part.on_alter_partition(proposal, stale_refusal(code)) is True
    assert part.state is ReplicaState.FENCED_LEADER
    assert replicas.leaders() == []  # the AlterPartitionManager proposes nothing for it
    with pytest.raises(NotLeaderOrFollowerError) as produce:
        part.append(records(1), required_acks=-1)
    message = str(produce.value)
    assert ErrorCode(code).name in message
    assert "refresh metadata and retry" in message
    assert "LeaderAndIsr" in message
    assert part.log_end_offset == 4  # nothing was written
    with pytest.raises(NotLeaderOrFollowerError):
        part.require_leader()  # a consumer's fetch
    with pytest.raises(NotLeaderOrFollowerError):
        part.update_follower(3, 4)  # a follower's fetch moves nothing
    assert part.high_watermark == 2
    assert part.maybe_advance_high_watermark() is False
    assert part.propose_isr_change(30_000) is None
    assert not part.wants_isr_expansion()


def test_the_waiting_acks_all_answers_end_with_not_leader(
    replicas: ReplicaManager, clock: Clock
) -> None:
    part, proposal = lead_and_lag(replicas, clock)

    async def scenario() -> None:
        waiting = asyncio.create_task(replicas.purgatory.wait(("t", 0), 4, timeout_s=5))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        if part.on_alter_partition(proposal, stale_refusal(ErrorCode.FENCED_LEADER_EPOCH)):
            replicas.notify([part])
        with pytest.raises(NotLeaderOrFollowerError, match="FENCED_LEADER_EPOCH"):
            await asyncio.wait_for(waiting, 1)
        # A wait that ended anyway (the high watermark got there before the fence) is not
        # acknowledged either: the ISR it was checked against is no longer the partition's.
        with pytest.raises(NotLeaderOrFollowerError, match="may not be on every"):
            part.check_enough_replicas(after_append=True)

    asyncio.run(scenario())


def test_leader_and_isr_in_the_same_epoch_makes_it_lead_again(
    replicas: ReplicaManager, clock: Clock
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    part.on_alter_partition(proposal, stale_refusal(ErrorCode.FENCED_LEADER_EPOCH))
    assert part.state is ReplicaState.FENCED_LEADER
    # The controller names broker 1 leader of epoch 5 after all, with a new ISR.
    changes = replicas.become_leader_or_follower(
        leader_and_isr(1, 5, [1, 2], 8), topic_config=lambda _: {}
    )
    assert changes.results == [("t", 0, None)] and changes.touched == [part]
    assert part.state is ReplicaState.LEADER
    assert (part.isr, part.partition_epoch) == ([1, 2], 8)
    # What it knew of broker 2 (log end 4) was kept: the high watermark moved with the ISR.
    assert part.high_watermark == 4
    part.append(records(1), required_acks=-1)
    assert part.update_follower(2, 5) is True
    assert part.high_watermark == 5


def test_a_resend_of_the_same_state_makes_a_fenced_leader_lead_again(
    replicas: ReplicaManager, clock: Clock
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    part.on_alter_partition(proposal, stale_refusal(ErrorCode.NOT_LEADER_OR_FOLLOWER))
    changes = replicas.become_leader_or_follower(
        leader_and_isr(1, 5, [1, 2, 3], 7), topic_config=lambda _: {}
    )
    assert changes.results == [("t", 0, None)]
    assert part.state is ReplicaState.LEADER
    # An identical resend to a leader that was never fenced changes nothing.
    again = replicas.become_leader_or_follower(
        leader_and_isr(1, 5, [1, 2, 3], 7), topic_config=lambda _: {}
    )
    assert again.touched == []


def test_leader_and_isr_with_a_new_leader_makes_it_follow(
    replicas: ReplicaManager, clock: Clock
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    part.on_alter_partition(proposal, stale_refusal(ErrorCode.FENCED_LEADER_EPOCH))
    # An older epoch, or the same one with another leader, is still refused.
    stale = replicas.become_leader_or_follower(
        leader_and_isr(2, 5, [2, 3], 8), topic_config=lambda _: {}
    )
    assert isinstance(stale.results[0][2], Exception)
    assert part.state is ReplicaState.FENCED_LEADER
    changes = replicas.become_leader_or_follower(
        leader_and_isr(2, 6, [2, 3], 9), topic_config=lambda _: {}
    )
    assert changes.results == [("t", 0, None)]
    assert part.state is ReplicaState.FOLLOWER and part.leader_id == 2
    with pytest.raises(NotLeaderOrFollowerError, match="follows broker 2"):
        part.append(records(1))


def test_a_fenced_leader_elected_again_leads_a_new_epoch(
    replicas: ReplicaManager, clock: Clock
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    part.on_alter_partition(proposal, stale_refusal(ErrorCode.FENCED_LEADER_EPOCH))
    replicas.become_leader_or_follower(leader_and_isr(1, 7, [1, 2], 10), topic_config=lambda _: {})
    assert part.state is ReplicaState.LEADER and part.leader_epoch == 7
    info = part.append(records(1))
    assert info.first_offset == 4


def test_a_refusal_naming_this_leader_in_its_epoch_fences_nothing(
    replicas: ReplicaManager, clock: Clock
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    # An earlier shrink of this leader was applied (partition epoch 8) and its answer lost:
    # the refusal carries the state, which still names broker 1 leader of epoch 5. A fence
    # would last for good: the controller sends no LeaderAndIsr for a leader's own change.
    refused = AlterPartitionResult("t", 0, int(ErrorCode.INVALID_UPDATE_VERSION), 1, 5, [1, 2], 8)
    assert part.on_alter_partition(proposal, refused) is True  # broker 3 no longer holds it
    assert part.state is ReplicaState.LEADER
    assert (part.isr, part.partition_epoch, part.high_watermark) == ([1, 2], 8, 4)
    part.append(records(1), required_acks=-1)


def test_a_refusal_overtaken_by_leader_and_isr_fences_nothing(
    replicas: ReplicaManager, clock: Clock
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    # The controller's LeaderAndIsr (partition epoch 8) arrives before its answer to the
    # proposal made at partition epoch 7: the answer is about a state the leader left.
    replicas.become_leader_or_follower(leader_and_isr(1, 5, [1, 2], 8), topic_config=lambda _: {})
    refused = AlterPartitionResult("t", 0, int(ErrorCode.INVALID_UPDATE_VERSION), 1, 5, [1, 2], 8)
    assert part.on_alter_partition(proposal, refused) is False
    assert part.state is ReplicaState.LEADER
    part.append(records(1))


@pytest.mark.parametrize(
    "code",
    [ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.INVALID_REQUEST],
    ids=lambda c: c.name,
)
def test_a_transient_refusal_fences_nothing(
    replicas: ReplicaManager, clock: Clock, code: ErrorCode
) -> None:
    part, proposal = lead_and_lag(replicas, clock)
    assert part.on_alter_partition(proposal, AlterPartitionResult("t", 0, int(code))) is False
    assert part.state is ReplicaState.LEADER
    assert part.propose_isr_change(30_000) == proposal  # proposed again at the next check
