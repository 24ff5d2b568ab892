"""A cluster broker's group coordinator serves the groups of the ``__consumer_offsets``
partitions it leads: loaded when the replica manager announces an election, unloaded on a
resignation; NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS otherwise; commits answered
once replicated. Real partitions, logs and replica manager; the test moves leadership as the
controller's LeaderAndIsr would and announces it as the handler does."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.coordinator_topic import coordinator_partition
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.offsets import OffsetCommit
from spark_mq.broker.group.ownership import PartitionOwnership, PartitionState
from spark_mq.broker.group.service import GroupService
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.broker.handlers.groups import cluster_coordinator
from spark_mq.broker.internal_topics import OFFSETS_TOPIC
from spark_mq.broker.partition import LeaderAndIsr, Partition
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    RequestTimedOutError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.controller import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.protocol.group_offsets import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
)
from spark_mq.protocol.groups import (
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupAssignment,
    SyncGroupRequest,
)
from spark_mq.storage.log_manager import LogManager

T = TypeVar("T")
PARTITIONS = 3
NODE = 1


def _group_in(partition: int) -> str:
    """A group id whose __consumer_offsets partition is ``partition``."""
    return next(
        g
        for g in (f"group-{i}" for i in range(1000))
        if coordinator_partition(g, PARTITIONS) == partition
    )


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(tmp_path / "mq", high_watermark_follows_log_end=False)
    logs.create_topic(OFFSETS_TOPIC, PARTITIONS, {"cleanup.policy": "compact"})
    yield ReplicaManager(
        logs, node_id=NODE, leader_epoch=0, num_partitions=1, auto_create_topics=False, cluster=True
    )
    logs.close()


class Gate:
    """The executor of the service under test: blocking calls run on a thread, each only
    once the test opens the gate (so a load can be caught half-way)."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()

    async def run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        await self.open.wait()
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))


def _service(replicas: ReplicaManager, gate: Gate, **config: Any) -> GroupService:
    cfg = GroupConfig(offsets_topic_num_partitions=PARTITIONS, **config)
    return GroupService(cfg, replicas, gate.run_blocking)


def _lead(replicas: ReplicaManager, index: int, epoch: int, isr: tuple[int, ...] = (NODE,)) -> None:
    part = replicas.partition(OFFSETS_TOPIC, index)
    part.make_leader(LeaderAndIsr(NODE, epoch, isr, (NODE, 2, 3), epoch))
    replicas.announce_leadership([part])


def _follow(replicas: ReplicaManager, index: int, epoch: int) -> None:
    part = replicas.partition(OFFSETS_TOPIC, index)
    part.make_follower(LeaderAndIsr(2, epoch, (2, NODE), (NODE, 2, 3), epoch))
    replicas.notify([part])
    replicas.announce_leadership([part])


def _commit(service: GroupService, group_id: str, offset: int) -> list[Any]:
    return service.call(
        lambda c, now: c.commit_offsets(group_id, [OffsetCommit("t", 0, offset)], now_ms=now)
    )


def _fetched(service: GroupService, group_id: str) -> int | None:
    [fetched] = service.coordinator.fetch_offsets(group_id, [("t", 0)])
    return None if fetched.entry is None else fetched.entry.offset


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached within 5 s")


def test_groups_are_served_only_while_their_partition_is_led_here(
    replicas: ReplicaManager,
) -> None:
    mine, other = _group_in(0), _group_in(1)

    async def scenario() -> None:
        gate = Gate()
        service = _service(replicas, gate)
        service.start()
        # Nothing led yet: every group is another broker's.
        with pytest.raises(NotCoordinatorError, match="__consumer_offsets-0"):
            _commit(service, mine, 5)
        assert service.coordinator.list_groups().groups == []

        # Elected: the partition loads (held at the gate), its groups wait meanwhile.
        gate.open.clear()
        _lead(replicas, 0, epoch=1)
        assert service.ownership.state_of(0) is PartitionState.LOADING
        with pytest.raises(CoordinatorLoadInProgressError):
            _commit(service, mine, 5)
        assert (
            service.coordinator.list_groups().error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        )
        with pytest.raises(NotCoordinatorError):
            _commit(service, other, 5)  # partition 1 is still someone else's
        gate.open.set()
        await _until(lambda: service.ownership.state_of(0) is PartitionState.OWNED)

        assert _commit(service, mine, 5) == [None]
        await service.replicated(mine, "commit")  # the ISR is this broker alone
        assert _fetched(service, mine) == 5
        assert [g.group_id for g in service.coordinator.list_groups().groups] == [mine]

        # Resigned: the group is gone from memory and answered NOT_COORDINATOR.
        _follow(replicas, 0, epoch=2)
        assert service.coordinator.groups == {}
        with pytest.raises(NotCoordinatorError):
            service.coordinator.fetch_offsets(mine, [("t", 0)])

        # Elected again: the log gives the committed offset back.
        _lead(replicas, 0, epoch=3)
        await _until(lambda: service.ownership.state_of(0) is PartitionState.OWNED)
        assert service.ownership.epoch_of(0) == 3
        assert _fetched(service, mine) == 5
        service.close()

    asyncio.run(scenario())


def test_a_load_that_finishes_after_its_partition_moved_on_installs_nothing(
    replicas: ReplicaManager,
) -> None:
    group = _group_in(2)

    async def scenario() -> None:
        gate = Gate()
        service = _service(replicas, gate)
        _lead(replicas, 2, epoch=1)
        await _until(lambda: service.ownership.state_of(2) is PartitionState.OWNED)
        assert _commit(service, group, 7) == [None]

        gate.open.clear()
        _follow(replicas, 2, epoch=2)
        _lead(replicas, 2, epoch=3)  # a load begins, held at the gate
        _follow(replicas, 2, epoch=4)  # and the partition moves away before it ran
        gate.open.set()
        await asyncio.sleep(0.2)
        assert service.ownership.state_of(2) is None
        assert service.coordinator.groups == {}
        service.close()

    asyncio.run(scenario())


def test_a_resignation_answers_waiting_joins_not_coordinator_and_cancels_deadlines(
    replicas: ReplicaManager,
) -> None:
    group = _group_in(1)

    async def scenario() -> None:
        # A first rebalance waits group.initial.rebalance.delay.ms for more members.
        service = _service(replicas, Gate(), group_initial_rebalance_delay_ms=60_000)
        _lead(replicas, 1, epoch=1)
        await _until(lambda: service.ownership.state_of(1) is PartitionState.OWNED)
        answers: list[JoinGroupResponse] = []
        protocols = [JoinGroupProtocol("range", b"")]
        for _ in range(2):  # MEMBER_ID_REQUIRED, then the join that waits
            member_id = answers[-1].member_id if answers else ""
            request = JoinGroupRequest(group, 10_000, 30_000, member_id, "consumer", protocols)
            service.call(
                lambda c, now, r=request: c.join(
                    r, client_id="c", client_host="h", now_ms=now, respond=answers.append
                )
            )
        assert len(answers) == 1 and service.coordinator.next_deadline_ms() is not None

        _follow(replicas, 1, epoch=2)
        assert answers[-1].error_code == ErrorCode.NOT_COORDINATOR
        assert service.coordinator.next_deadline_ms() is None
        service.close()

    asyncio.run(scenario())


def test_a_commit_is_answered_once_every_in_sync_replica_has_it(
    replicas: ReplicaManager,
) -> None:
    group = _group_in(0)

    async def scenario() -> None:
        service = _service(replicas, Gate(), offsets_commit_timeout_ms=300)
        _lead(replicas, 0, epoch=1, isr=(NODE, 2))
        await _until(lambda: service.ownership.state_of(0) is PartitionState.OWNED)
        part: Partition = replicas.partition(OFFSETS_TOPIC, 0)

        assert _commit(service, group, 1) == [None]
        waiting = asyncio.create_task(service.replicated(group, "commit"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # broker 2 has not fetched it
        part.update_follower(2, part.log.log_end_offset)
        replicas.notify([part])
        await asyncio.wait_for(waiting, 1)

        # No follower fetch: REQUEST_TIMED_OUT after offsets.commit.timeout.ms.
        assert _commit(service, group, 2) == [None]
        with pytest.raises(RequestTimedOutError):
            await service.replicated(group, "commit")

        # Leadership lost while waiting: NOT_COORDINATOR.
        assert _commit(service, group, 3) == [None]
        waiting = asyncio.create_task(service.replicated(group, "commit"))
        await asyncio.sleep(0.05)
        part.make_follower(LeaderAndIsr(2, 2, (2, NODE), (NODE, 2, 3), 2))
        replicas.notify([part])
        with pytest.raises(NotCoordinatorError):
            await waiting
        service.close()

    asyncio.run(scenario())


def test_a_commit_below_min_insync_replicas_is_coordinator_not_available(
    tmp_path: Path,
) -> None:
    logs = LogManager(tmp_path / "mq", high_watermark_follows_log_end=False)
    logs.create_topic(
        OFFSETS_TOPIC, PARTITIONS, {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    )
    replicas = ReplicaManager(
        logs, node_id=NODE, leader_epoch=0, num_partitions=1, auto_create_topics=False, cluster=True
    )
    group = _group_in(0)

    async def scenario() -> None:
        service = _service(replicas, Gate())
        _lead(replicas, 0, epoch=1)  # the ISR is this broker alone
        await _until(lambda: service.ownership.state_of(0) is PartitionState.OWNED)
        [error] = _commit(service, group, 1)
        assert isinstance(error, CoordinatorNotAvailableError)
        assert "min.insync.replicas" in str(error)
        assert _fetched(service, group) is None  # nothing was written
        service.close()

    try:
        asyncio.run(scenario())
    finally:
        logs.close()


def test_ownership_transitions() -> None:
    owned = PartitionOwnership()
    first = owned.elect(4, 2)
    assert first is not None and owned.loading() == [4]
    assert owned.elect(4, 1) is None and owned.epoch_of(4) == 2  # stale: ignored
    assert owned.elect(4, 3) is None and owned.epoch_of(4) == 3  # newer: kept, same load
    assert owned.finish_loading(4, first) and owned.owned() == [4]
    assert owned.elect(4, 5) is None and owned.state_of(4) is PartitionState.OWNED
    assert owned.resign(4) and not owned.resign(4)
    second = owned.elect(4, 6)
    assert second is not None and not owned.finish_loading(4, first)  # an older load
    assert owned.finish_loading(4, second)
    everything = PartitionOwnership.everything()
    everything.check(17, "any")  # a single node serves every group


def _cluster_core(root: Path) -> tuple[BrokerCore, LogManager]:
    logs = LogManager(root, high_watermark_follows_log_end=False)
    config = ServerConfig.from_properties(
        {
            "log.dirs": str(root),
            "broker.id": str(NODE),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": "127.0.0.1:2181",  # only makes the core a cluster broker's
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": str(PARTITIONS),
        }
    )
    return BrokerCore(config, logs, BrokerMeta.take_over(root)), logs


def _metadata(leaders: dict[int, int], live: tuple[int, ...]) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(
        controller_id=3,
        controller_epoch=1,
        broker_epoch=-1,
        partition_states=[
            UpdateMetadataPartitionState(OFFSETS_TOPIC, p, 1, leader, 4, [1, 2, 3], 0, [1, 2, 3])
            for p, leader in leaders.items()
        ],
        live_brokers=[
            UpdateMetadataBroker(
                b, [UpdateMetadataEndpoint(f"host-{b}", 9000 + b, "PLAINTEXT")], None
            )
            for b in live
        ],
    )


def test_find_coordinator_names_the_leader_of_the_keys_partition(tmp_path: Path) -> None:
    core, logs = _cluster_core(tmp_path / "mq")
    try:
        ctx = RequestContext(
            core,
            RequestHeader(10, 0, 1, "test"),
            BrokerAddress("10.0.0.1", 7001),
            "peer:1",
        )
        led_elsewhere, led_here, leaderless = _group_in(0), _group_in(1), _group_in(2)
        with pytest.raises(CoordinatorNotAvailableError, match="does not know its partitions"):
            cluster_coordinator(ctx, OFFSETS_TOPIC, led_elsewhere)
        core.metadata_cache.update(_metadata({0: 2, 1: NODE, 2: -1}, live=(NODE, 2)))
        assert cluster_coordinator(ctx, OFFSETS_TOPIC, led_elsewhere) == (2, "host-2", 9002)
        # This broker: the listener the request came in on.
        assert cluster_coordinator(ctx, OFFSETS_TOPIC, led_here) == (NODE, "10.0.0.1", 7001)
        with pytest.raises(CoordinatorNotAvailableError, match="no live leader"):
            cluster_coordinator(ctx, OFFSETS_TOPIC, leaderless)
        # A leader that is not live (its session ended) is no coordinator either.
        core.metadata_cache.update(_metadata({0: 3}, live=(NODE, 2)))
        with pytest.raises(CoordinatorNotAvailableError, match="no live leader"):
            cluster_coordinator(ctx, OFFSETS_TOPIC, led_elsewhere)
    finally:
        core.close()
        logs.close()


async def _send(core: BrokerCore, request: Any) -> Any:
    """``request`` through the broker's dispatcher, as a connection hands it over."""
    spec = spec_for_request(request)
    ctx = RequestContext(core, RequestHeader(spec.key, 0, 1, "test"), BrokerAddress("h", 1), "p:1")
    response = await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(b""))
    assert isinstance(response, Response)
    return response.body


def test_offset_commit_is_answered_and_visible_once_replicated(tmp_path: Path) -> None:
    core, logs = _cluster_core(tmp_path / "mq")
    logs.create_topic(OFFSETS_TOPIC, PARTITIONS, {"cleanup.policy": "compact"})
    logs.create_topic("t", 1)
    group = _group_in(0)
    commit = OffsetCommitRequest(group, [OffsetCommitTopic("t", [OffsetCommitPartition(0, 42)])])
    fetch = OffsetFetchRequest(group, [OffsetFetchTopic("t", [0])])

    def committed(body: OffsetFetchResponse) -> int:
        return body.topics[0].partitions[0].committed_offset

    async def scenario() -> None:
        _lead(core.replicas, 0, epoch=1, isr=(NODE, 2))
        await _until(lambda: core.groups.ownership.state_of(0) is PartitionState.OWNED)
        answered = asyncio.create_task(_send(core, commit))
        await asyncio.sleep(0.1)
        # Appended, not yet on broker 2: not answered, and not what OffsetFetch gives.
        assert not answered.done()
        assert committed(await _send(core, fetch)) == -1
        part = core.replicas.partition(OFFSETS_TOPIC, 0)
        part.update_follower(2, part.log.log_end_offset)
        core.replicas.notify([part])
        body: OffsetCommitResponse = await asyncio.wait_for(answered, 2)
        assert body.topics[0].partitions[0].error_code == 0
        assert committed(await _send(core, fetch)) == 42
        core.groups.close()

    try:
        asyncio.run(scenario())
    finally:
        core.close()
        logs.close()


def test_sync_group_is_answered_once_the_assignment_is_replicated(tmp_path: Path) -> None:
    core, logs = _cluster_core(tmp_path / "mq")
    logs.create_topic(OFFSETS_TOPIC, PARTITIONS, {"cleanup.policy": "compact"})
    group = _group_in(1)
    protocols = [JoinGroupProtocol("range", b"")]

    async def scenario() -> None:
        _lead(core.replicas, 1, epoch=1, isr=(NODE, 2))
        await _until(lambda: core.groups.ownership.state_of(1) is PartitionState.OWNED)
        first = await _send(
            core, JoinGroupRequest(group, 10_000, 30_000, "", "consumer", protocols)
        )
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        join = JoinGroupRequest(group, 10_000, 30_000, first.member_id, "consumer", protocols)
        joined = await asyncio.wait_for(_send(core, join), 5)
        assert joined.error_code == 0 and joined.leader == joined.member_id
        sync = SyncGroupRequest(
            group,
            joined.generation_id,
            joined.member_id,
            [SyncGroupAssignment(joined.member_id, b"mine")],
        )
        answered = asyncio.create_task(_send(core, sync))
        await asyncio.sleep(0.1)
        assert not answered.done()  # the group's record is not on broker 2 yet
        part = core.replicas.partition(OFFSETS_TOPIC, 1)
        part.update_follower(2, part.log.log_end_offset)
        core.replicas.notify([part])
        synced = await asyncio.wait_for(answered, 2)
        assert synced.error_code == 0 and synced.assignment == b"mine"
        core.groups.close()

    try:
        asyncio.run(scenario())
    finally:
        core.close()
        logs.close()
