"""LeaderAndIsr and StopReplica on a cluster broker, in process: a BrokerCore with
``zookeeper.connect`` set over a LogManager in tmp_path, requests from an authenticated
broker connection (``inter_broker=True``) through the dispatcher, no sockets.

The broker-epoch fence needs a registered broker, so that case is in
tests/cluster/test_cluster_replica_requests.py, against a real ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.broker.partition import ReplicaState
from spark_mq.protocol import fetch, produce
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.controller import (
    LEADER_AND_ISR_FULL,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaPartitionState,
    StopReplicaRequest,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.storage.batch_decoder import iter_batches
from spark_mq.storage.leader_epoch_cache import EpochEntry
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch

NODE = 1
CONTROLLER = 3


def cluster_config(root: Path) -> ServerConfig:
    return ServerConfig.from_properties(
        {
            "log.dirs": str(root),
            "broker.id": str(NODE),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            # Only read by the wiring that joins the cluster; the core just learns it is a
            # cluster broker.
            "zookeeper.connect": "127.0.0.1:2181",
        }
    )


def open_core(root: Path) -> tuple[BrokerCore, LogManager]:
    # A cluster broker's logs keep their high watermark apart from the log end.
    logs = LogManager(root, high_watermark_follows_log_end=False)
    return BrokerCore(cluster_config(root), logs, BrokerMeta.take_over(root)), logs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "mq"


@pytest.fixture
def core(root: Path) -> Iterator[BrokerCore]:
    core, logs = open_core(root)
    yield core
    core.close()
    logs.close()


async def call(core: BrokerCore, request: Any, records: bytes = b"", *, broker: bool = True) -> Any:
    spec = spec_for_request(request)
    ctx = RequestContext(
        core,
        RequestHeader(spec.key, 0, 1, "test"),
        BrokerAddress("127.0.0.1", 9092),
        "peer",
        inter_broker=broker,
    )
    response = await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(records))
    assert isinstance(response, Response)
    return response


def run(core: BrokerCore, request: Any, *, broker: bool = True) -> Any:
    return asyncio.run(call(core, request, broker=broker)).body


def state(
    partition: int,
    leader: int,
    leader_epoch: int,
    *,
    topic: str = "t",
    replicas: tuple[int, ...] = (1, 2),
    isr: tuple[int, ...] | None = None,
    partition_epoch: int = 0,
) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(
        topic=topic,
        partition=partition,
        controller_epoch=1,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=list(replicas if isr is None else isr),
        partition_epoch=partition_epoch,
        replicas=list(replicas),
        is_new=True,
    )


def leader_and_isr(
    *states: LeaderAndIsrPartitionState, controller_epoch: int = 1, type: int = 0
) -> LeaderAndIsrRequest:
    return LeaderAndIsrRequest(CONTROLLER, controller_epoch, -1, list(states), [], type)


def stop_replica(
    *states: StopReplicaPartitionState, controller_epoch: int = 1
) -> StopReplicaRequest:
    return StopReplicaRequest(CONTROLLER, controller_epoch, -1, list(states))


def codes(body: Any) -> list[tuple[str, int, int]]:
    return [(e.topic, e.partition, e.error_code) for e in body.partition_errors]


def produce_request(topic: str, partition: int, records: bytes) -> produce.ProduceRequest:
    return produce.ProduceRequest(
        1, 1000, [produce.ProduceTopic(topic, [produce.ProducePartition(partition, len(records))])]
    )


def produce_code(core: BrokerCore, topic: str, partition: int) -> int:
    records = encode_batch(pa.array([b"v"]))
    response = asyncio.run(call(core, produce_request(topic, partition, records), records))
    return int(response.body.topics[0].partitions[0].error_code)


def fetch_request(topic: str, partition: int, **kw: int) -> fetch.FetchRequest:
    params = {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, **kw}
    return fetch.FetchRequest(
        topics=[fetch.FetchTopic(topic, [fetch.FetchPartition(partition, 0, 1 << 20)])],
        isolation_level=fetch.READ_UNCOMMITTED,
        **params,
    )


def fetch_code(core: BrokerCore, topic: str, partition: int) -> int:
    response = asyncio.run(call(core, fetch_request(topic, partition), broker=False))
    response.close()
    return int(response.body.topics[0].partitions[0].error_code)


# ---------------------------------------------------------------------------------------------


def test_leader_and_follower_applied(core: BrokerCore, root: Path) -> None:
    body = run(core, leader_and_isr(state(0, NODE, 3), state(1, 2, 5, isr=(2,))))
    assert body.error_code == 0
    assert codes(body) == [("t", 0, 0), ("t", 1, 0)]
    assert sorted(p.name for p in root.glob("t-*")) == ["t-0", "t-1"]

    leader = core.replicas.partition("t", 0)
    assert (leader.state, leader.leader_epoch, leader.replicas, leader.isr) == (
        ReplicaState.LEADER,
        3,
        [1, 2],
        [1, 2],
    )
    # The epoch starts at the log end, recorded before anything is appended in it.
    assert leader.log.leader_epoch_cache.entries == (EpochEntry(3, 0),)
    assert produce_code(core, "t", 0) == ErrorCode.NONE
    # Consumers read below the high watermark, which waits for the follower in the ISR.
    assert leader.high_watermark == 0
    leader.update_follower(2, 1)
    response = asyncio.run(call(core, fetch_request("t", 0), broker=False))
    data = b"".join(r.read() if not isinstance(r, bytes) else r for r in response.records)
    response.close()
    assert [h.partition_leader_epoch for h, _ in iter_batches(data)] == [3]

    follower = core.replicas.partition("t", 1)
    assert (follower.state, follower.leader_id, follower.leader_epoch, follower.isr) == (
        ReplicaState.FOLLOWER,
        2,
        5,
        [2],
    )
    assert produce_code(core, "t", 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_code(core, "t", 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert follower.log_end_offset == 0


def test_a_stale_controller_epoch_is_refused_whole(core: BrokerCore, root: Path) -> None:
    assert run(core, leader_and_isr(state(0, NODE, 1), controller_epoch=5)).error_code == 0
    stale = leader_and_isr(state(0, 2, 2), state(0, 2, 0, topic="u"), controller_epoch=4)
    body = run(core, stale)
    assert body.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert codes(body) == [
        ("t", 0, ErrorCode.STALE_CONTROLLER_EPOCH),
        ("u", 0, ErrorCode.STALE_CONTROLLER_EPOCH),
    ]
    assert "controller epoch 4" in body.error_message
    part = core.replicas.partition("t", 0)
    assert (part.state, part.leader_epoch) == (ReplicaState.LEADER, 1)
    assert not core.logs.topic_exists("u")
    stop = stop_replica(StopReplicaPartitionState("t", 0, -2, True), controller_epoch=4)
    assert run(core, stop).error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert (root / "t-0").is_dir() and core.replicas.partition("t", 0) is part


def test_an_older_leader_epoch_is_fenced_for_that_partition(core: BrokerCore) -> None:
    run(core, leader_and_isr(state(0, NODE, 4), state(1, NODE, 4)))
    body = run(core, leader_and_isr(state(0, 2, 3), state(1, 2, 5)))
    assert body.error_code == 0
    assert codes(body) == [("t", 0, ErrorCode.FENCED_LEADER_EPOCH), ("t", 1, 0)]
    assert (
        "leader epoch 3, not newer than this broker's 4" in body.partition_errors[0].error_message
    )
    kept = core.replicas.partition("t", 0)
    assert (kept.state, kept.leader_epoch) == (ReplicaState.LEADER, 4)
    moved = core.replicas.partition("t", 1)
    assert (moved.state, moved.leader_id, moved.leader_epoch) == (ReplicaState.FOLLOWER, 2, 5)


def test_a_resend_changes_nothing(core: BrokerCore) -> None:
    request = leader_and_isr(state(0, NODE, 2), state(1, 2, 2))
    run(core, request)
    part = core.replicas.partition("t", 0)
    assert produce_code(core, "t", 0) == ErrorCode.NONE
    # A new controller resends what the broker has, with its own (newer) epoch.
    resend = leader_and_isr(state(0, NODE, 2), state(1, 2, 2), controller_epoch=2)
    body = run(core, resend)
    assert (body.error_code, codes(body)) == (0, [("t", 0, 0), ("t", 1, 0)])
    assert core.replicas.partition("t", 0) is part
    assert part.log.leader_epoch_cache.entries == (EpochEntry(2, 0),)
    assert part.log_end_offset == 1


def test_same_epoch_isr_change_and_conflicting_state(core: BrokerCore) -> None:
    run(core, leader_and_isr(state(0, NODE, 2, replicas=(1, 2, 3), partition_epoch=4)))
    part = core.replicas.partition("t", 0)
    shrunk = state(0, NODE, 2, replicas=(1, 2, 3), isr=(1, 3), partition_epoch=5)
    assert codes(run(core, leader_and_isr(shrunk))) == [("t", 0, 0)]
    assert (part.state, part.isr, part.partition_epoch) == (ReplicaState.LEADER, [1, 3], 5)
    assert part.log.leader_epoch_cache.entries == (EpochEntry(2, 0),)
    # Another leader in the same epoch is not a state the controller can send: fenced.
    other = state(0, 2, 2, replicas=(1, 2, 3), partition_epoch=6)
    body = run(core, leader_and_isr(other))
    assert codes(body) == [("t", 0, ErrorCode.FENCED_LEADER_EPOCH)]
    assert "a new leader needs a new epoch" in body.partition_errors[0].error_message
    assert (part.state, part.leader_id) == (ReplicaState.LEADER, NODE)


def test_a_partition_not_assigned_here_is_refused(core: BrokerCore) -> None:
    body = run(core, leader_and_isr(state(0, 2, 1, replicas=(2, 3)), state(1, NODE, 1)))
    assert codes(body) == [("t", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ("t", 1, 0)]
    assert core.logs.hosted_partitions("t") == [1]


def test_full_request_removes_stray_partitions(
    core: BrokerCore, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run(core, leader_and_isr(state(0, NODE, 1), state(1, NODE, 1), state(0, NODE, 1, topic="gone")))
    assert produce_code(core, "t", 0) == ErrorCode.NONE
    assert produce_code(core, "t", 1) == ErrorCode.NONE
    with caplog.at_level(logging.WARNING):
        body = run(core, leader_and_isr(state(0, NODE, 1), type=LEADER_AND_ISR_FULL))
    assert codes(body) == [("t", 0, 0)]
    assert "stray replica t-1" in caplog.text and "stray replica gone-0" in caplog.text
    assert core.logs.hosted_partitions("t") == [0]
    assert not core.logs.topic_exists("gone")
    # Out of the log for good, but kept: a controller's mistake loses no data.
    names = sorted(p.name for p in root.iterdir() if p.name[:2] in ("t-", "go"))
    assert [n.split(".")[0] for n in names] == ["gone-0", "t-0", "t-1"]
    assert names[0].endswith(".stray") and names[2].endswith(".stray")
    assert core.replicas.partition("t", 0).log_end_offset == 1
    assert produce_code(core, "t", 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # Given back later, the replica starts empty: a stray log is never adopted.
    run(core, leader_and_isr(state(1, NODE, 2)))
    assert core.replicas.partition("t", 1).log_end_offset == 0


def test_an_incremental_request_leaves_unlisted_partitions(core: BrokerCore) -> None:
    run(core, leader_and_isr(state(0, NODE, 1), state(1, 2, 1)))
    run(core, leader_and_isr(state(0, NODE, 2)))
    assert core.logs.hosted_partitions("t") == [0, 1]


def test_stop_replica(core: BrokerCore, root: Path) -> None:
    run(core, leader_and_isr(state(0, NODE, 3), state(1, NODE, 3), state(2, 2, 3)))
    assert produce_code(core, "t", 1) == ErrorCode.NONE
    body = run(
        core,
        stop_replica(
            StopReplicaPartitionState("t", 0, 2, True),  # older than 3: fenced
            StopReplicaPartitionState("t", 1, 3, False),  # kept on disk
            StopReplicaPartitionState("t", 2, -2, True),  # deletion: no epoch check
            StopReplicaPartitionState("t", 7, 3, True),  # not hosted: nothing to do
        ),
    )
    assert codes(body) == [
        ("t", 0, ErrorCode.FENCED_LEADER_EPOCH),
        ("t", 1, 0),
        ("t", 2, 0),
        ("t", 7, 0),
    ]
    assert core.logs.hosted_partitions("t") == [0]
    assert (root / "t-1").is_dir() and not (root / "t-2").exists()
    assert produce_code(core, "t", 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_code(core, "t", 2) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # Deleting the kept log later removes its directory.
    run(core, stop_replica(StopReplicaPartitionState("t", 1, -2, True)))
    assert not (root / "t-1").exists()


def test_a_waiting_fetch_is_answered_when_its_partition_stops_leading(core: BrokerCore) -> None:
    run(core, leader_and_isr(state(0, NODE, 1)))

    async def scenario() -> Any:
        waiting = asyncio.create_task(
            call(core, fetch_request("t", 0, max_wait_ms=600_000, min_bytes=1), broker=False)
        )
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await call(core, leader_and_isr(state(0, 2, 2)))
        return await asyncio.wait_for(waiting, 5)

    response = asyncio.run(scenario())
    assert response.body.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_clients_are_refused(core: BrokerCore) -> None:
    body = run(core, leader_and_isr(state(0, NODE, 1)), broker=False)
    assert codes(body) == [("t", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]
    assert "Partition leadership is the controller's" in body.error_message
    assert not core.logs.topic_exists("t")
    run(core, leader_and_isr(state(0, NODE, 1)))
    stop = stop_replica(StopReplicaPartitionState("t", 0, -2, True), controller_epoch=9)
    assert codes(run(core, stop, broker=False)) == [
        ("t", 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    ]
    assert core.logs.hosted_partitions("t") == [0]
    # A refused client does not move the fence either.
    assert core.controller_fence.controller_epoch == 1


def test_a_cluster_broker_never_creates_topics_itself(core: BrokerCore) -> None:
    assert produce_code(core, "auto", 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not core.logs.topic_exists("auto")


def test_a_replica_without_a_role_serves_nothing(root: Path) -> None:
    with LogManager(root) as logs:
        logs.create_topic("old", partitions=1)
    core, logs = open_core(root)
    try:
        assert produce_code(core, "old", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert fetch_code(core, "old", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        core.close()
        logs.close()


def test_restart_reopens_exactly_the_hosted_partitions(root: Path) -> None:
    core, logs = open_core(root)
    request = leader_and_isr(state(0, NODE, 1), state(2, 2, 1), type=LEADER_AND_ISR_FULL)
    try:
        # Partitions 1 and 3 of the topic are other brokers' replicas.
        run(core, request)
        assert produce_code(core, "t", 0) == ErrorCode.NONE
    finally:
        core.close()
        logs.close()
    core, logs = open_core(root)
    try:
        assert logs.hosted_partitions("t") == [0, 2]
        assert sorted(p.name for p in root.glob("t-*")) == ["t-0", "t-2"]
        # Until the controller speaks, the reopened replicas serve nothing.
        assert produce_code(core, "t", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        body = run(core, request)
        assert codes(body) == [("t", 0, 0), ("t", 2, 0)]
        part = core.replicas.partition("t", 0)
        assert (part.state, part.log_end_offset) == (ReplicaState.LEADER, 1)
        assert produce_code(core, "t", 0) == ErrorCode.NONE
    finally:
        core.close()
        logs.close()


def test_topic_config_is_read_for_a_topic_new_here(core: BrokerCore) -> None:
    configs = {"t": {"retention.ms": "5000"}}
    core.replicas.become_leader_or_follower(
        leader_and_isr(state(0, NODE, 1)), topic_config=configs.__getitem__
    )
    assert core.logs.get_log("t", 0).config.retention_ms == 5000
    bad = {"b": {"retention.ms": "soon"}}
    changes = core.replicas.become_leader_or_follower(
        leader_and_isr(state(0, NODE, 1, topic="b"), state(0, NODE, 1, topic="c")),
        topic_config=lambda topic: bad.get(topic, {}),
    )
    (b, c) = changes.results
    assert b[:2] == ("b", 0) and "retention.ms" in str(b[2])
    assert c == ("c", 0, None)
    assert not core.logs.topic_exists("b")


def test_a_single_node_refuses_controller_requests(tmp_path: Path) -> None:
    root = tmp_path / "single"
    logs = LogManager(root)
    core = BrokerCore(
        ServerConfig.from_properties({"log.dirs": str(root)}), logs, BrokerMeta.take_over(root)
    )
    try:
        body = run(core, leader_and_isr(state(0, 0, 1, replicas=(0,))))
        assert body.error_code == ErrorCode.INVALID_REQUEST
        assert "single node" in body.error_message
        assert not logs.topic_exists("t")
    finally:
        core.close()
        logs.close()
