"""The ReplicaManager's acks=all waits: completed when a follower's fetch moves the high
watermark past the records, ended with NOT_LEADER_OR_FOLLOWER when the leadership is lost
or the broker shuts down."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.broker.partition import LeaderAndIsr
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.errors import NotLeaderOrFollowerError
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(tmp_path / "mq", high_watermark_follows_log_end=False)
    logs.create_topic("t", 1)
    yield ReplicaManager(
        logs, node_id=1, leader_epoch=0, num_partitions=1, auto_create_topics=False, cluster=True
    )
    logs.close()


def test_a_wait_completes_when_the_isr_has_the_records(replicas: ReplicaManager) -> None:
    part = replicas.partition("t", 0)
    part.make_leader(LeaderAndIsr(1, 1, (1, 2), (1, 2), 0))

    async def scenario() -> None:
        info = part.append(encode_batch(pa.array([b"a", b"b", b"c"])), required_acks=-1)
        replicas.notify([part])
        waiting = asyncio.create_task(
            replicas.purgatory.wait(("t", 0), info.last_offset + 1, timeout_s=5)
        )
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the leader alone does not move the high watermark
        part.update_follower(2, 2)
        replicas.notify([part])
        await asyncio.sleep(0.01)
        assert not waiting.done()  # broker 2 lacks the last record
        assert part.update_follower(2, 3)
        replicas.notify([part])
        await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_leadership_loss_and_shutdown_end_the_waits(replicas: ReplicaManager) -> None:
    part = replicas.partition("t", 0)
    part.make_leader(LeaderAndIsr(1, 1, (1, 2), (1, 2), 0))

    async def scenario() -> None:
        part.append(encode_batch(pa.array([b"a"])))
        waiting = asyncio.create_task(replicas.purgatory.wait(("t", 0), 1, timeout_s=5))
        await asyncio.sleep(0.01)
        part.make_follower(LeaderAndIsr(2, 2, (1, 2), (1, 2), 1))
        replicas.notify([part])
        with pytest.raises(NotLeaderOrFollowerError, match="no longer leads"):
            await waiting
        part.make_leader(LeaderAndIsr(1, 3, (1, 2), (1, 2), 2))
        waiting = asyncio.create_task(replicas.purgatory.wait(("t", 0), 1, timeout_s=5))
        await asyncio.sleep(0.01)
        replicas.wake_all()
        with pytest.raises(NotLeaderOrFollowerError, match="shutting down"):
            await waiting

    asyncio.run(scenario())
