"""The transaction marker channel against real in-process brokers: two BrokerCores (brokers
2 and 3) answer its WriteTxnMarkers through their real handlers and write the markers into
their logs. What the channel believes about the cluster is a MetadataSnapshot the test
builds (as an UpdateMetadata would), so a test can move a leader or delete a topic; faults
on the wire are injected around the transport."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType

import pyarrow as pa
import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.context import RequestContext
from spark_mq.broker.core import BrokerCore
from spark_mq.broker.dir_files import BrokerMeta
from spark_mq.broker.handlers import HANDLERS
from spark_mq.broker.handlers.errors import answer
from spark_mq.broker.metadata_cache import (
    BrokerEndpoint,
    CachedPartition,
    LiveBroker,
    MetadataSnapshot,
)
from spark_mq.broker.txn.marker_channel import (
    BrokerCredentials,
    MarkerChannelConfig,
    TransactionMarkerChannel,
)
from spark_mq.broker.txn.markers import MarkerPendingError
from spark_mq.errors import BrokerNotAvailableError, TransactionCoordinatorFencedError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api import spec_for_request
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.framing import RequestHeader
from spark_mq.protocol.transactions import (
    TxnTopic,
    WritableTxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import ControlType, encode_batch

FAST = MarkerChannelConfig(retry_backoff_ms=10, retry_backoff_max_ms=40, request_timeout_ms=5000)


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[int, BrokerCore]]:
    cores: dict[int, BrokerCore] = {}
    for broker_id in (2, 3):
        root = tmp_path / f"b{broker_id}"
        logs = LogManager(root)
        config = ServerConfig.from_properties({"log.dirs": str(root)})
        cores[broker_id] = BrokerCore(config, logs, BrokerMeta.take_over(root))
    yield cores
    for core in cores.values():
        core.close()
        core.logs.close()


def _open_transaction(core: BrokerCore, topic: str, producer_id: int, sequence: int = 0) -> None:
    """A transactional batch of ``producer_id`` in ``topic``-0, its transaction open."""
    if not core.logs.topic_exists(topic):
        core.logs.create_topic(topic, 1)
    core.replicas.partition(topic, 0).log.append(
        encode_batch(
            pa.array([b"in-txn"]),
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence,
            is_transactional=True,
        )
    )


def _is_open(core: BrokerCore, topic: str, producer_id: int) -> bool:
    entry = core.replicas.partition(topic, 0).log.producer_state.entry(producer_id)
    assert entry is not None
    return entry.current_txn_first_offset is not None


def _snapshot(leaders: dict[str, int], brokers: tuple[int, ...] = (2, 3)) -> MetadataSnapshot:
    """The cluster as an UpdateMetadata would describe it: ``leaders`` by topic (one
    partition each)."""
    live = {
        b: LiveBroker(b, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + b),)) for b in brokers
    }
    topics = {
        topic: MappingProxyType(
            {0: CachedPartition(topic, 0, leader, 0, (leader,), (leader,), (), 0, 1)}
        )
        for topic, leader in leaders.items()
    }
    return MetadataSnapshot(MappingProxyType(live), MappingProxyType(topics), 1, 1)


class Wire:
    """The transport: each request goes to the in-process broker it is addressed to, through
    its real WriteTxnMarkers handler on the event loop; ``faults[broker]`` requests to that
    broker fail first with a lost connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cores: dict[int, BrokerCore]) -> None:
        self.loop = loop
        self.cores = cores
        self.sent: list[tuple[int, WriteTxnMarkersRequest]] = []
        self.faults: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(
        self, leader: int, address: BrokerAddress, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        assert address.port == 9000 + leader
        with self._lock:
            self.sent.append((leader, request))
            if self.faults.get(leader, 0) > 0:
                self.faults[leader] -= 1
                raise BrokerNotAvailableError(f"connection to broker {leader} lost")
        future = asyncio.run_coroutine_threadsafe(self._answer(leader, request), self.loop)
        return future.result(timeout=10)

    async def _answer(
        self, leader: int, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        spec = spec_for_request(request)
        ctx = RequestContext(
            self.cores[leader],
            RequestHeader(spec.key, 0, 1, "channel"),
            BrokerAddress("127.0.0.1", 1),
            "channel",
            inter_broker=True,
        )
        response = await answer(spec, HANDLERS[spec.key], ctx, request, memoryview(b""))
        assert response is not None
        body: WriteTxnMarkersResponse = response.body
        return body


def _channel(
    wire: Wire, metadata: Callable[[], MetadataSnapshot], acknowledged: list[int]
) -> TransactionMarkerChannel:
    return TransactionMarkerChannel(
        node_id=1,
        metadata=metadata,
        credentials=BrokerCredentials(1, lambda: 7, "secret"),
        config=FAST,
        on_acknowledged=lambda: acknowledged.append(1),
        transport=wire,
    )


async def _until(condition: Callable[[], bool], timeout_s: float = 5) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def _submit(
    channel: TransactionMarkerChannel, topics: list[str], producer_id: int, epoch: int = 2
) -> dict[tuple[str, int], Exception]:
    return channel.submit(
        [(t, 0) for t in topics],
        producer_id=producer_id,
        producer_epoch=0,
        commit=True,
        coordinator_epoch=epoch,
    )


def test_markers_of_many_transactions_go_in_one_request_per_broker(brokers):
    """Three transactions over partitions led by brokers 2 and 3: one request to each
    broker carries the three markers; the coordinator is told once they are written, and
    submit then reports nothing pending and forgets them."""
    for pid in (10, 11, 12):
        _open_transaction(brokers[2], "a", pid)
        _open_transaction(brokers[3], "b", pid)
    snapshot = _snapshot({"a": 2, "b": 3})

    async def run() -> None:
        wire = Wire(asyncio.get_running_loop(), brokers)
        acknowledged: list[int] = []
        channel = _channel(wire, lambda: snapshot, acknowledged)
        for pid in (10, 11, 12):
            pending = _submit(channel, ["a", "b"], pid)
            assert set(pending) == {("a", 0), ("b", 0)}
            assert all(isinstance(e, MarkerPendingError) for e in pending.values())
        channel.start()
        try:
            await _until(lambda: channel.pending() == 0)
            await _until(lambda: bool(acknowledged))
        finally:
            await channel.close()
        assert sorted(leader for leader, _ in wire.sent) == [2, 3]
        for _, request in wire.sent:
            assert sorted(m.producer_id for m in request.markers) == [10, 11, 12]
        for pid in (10, 11, 12):
            assert _submit(channel, ["a", "b"], pid) == {}
        assert not channel._markers

    asyncio.run(run())
    for pid in (10, 11, 12):
        assert not _is_open(brokers[2], "a", pid)
        assert not _is_open(brokers[3], "b", pid)
    log = brokers[2].replicas.partition("a", 0).log
    assert log.log_end_offset == 6  # three batches, three markers: none written twice


def test_a_partition_follows_its_leader_and_survives_lost_connections(brokers):
    """The metadata first names a broker that does not host the partition
    (UNKNOWN_TOPIC_OR_PARTITION, retried), whose connection also drops twice; once the
    metadata names the real leader, the marker is written there."""
    _open_transaction(brokers[3], "moved", 20)
    current = {"snapshot": _snapshot({"moved": 2})}

    async def run() -> None:
        wire = Wire(asyncio.get_running_loop(), brokers)
        wire.faults[2] = 2
        channel = _channel(wire, lambda: current["snapshot"], [])
        _submit(channel, ["moved"], 20)
        channel.start()
        try:
            await _until(lambda: len(wire.sent) >= 4)
            assert _is_open(brokers[3], "moved", 20)
            assert isinstance(_submit(channel, ["moved"], 20)[("moved", 0)], MarkerPendingError)
            current["snapshot"] = _snapshot({"moved": 3})
            await _until(lambda: channel.pending() == 0)
        finally:
            await channel.close()
        assert [leader for leader, _ in wire.sent][:2] == [2, 2]
        assert wire.sent[-1][0] == 3

    asyncio.run(run())
    assert not _is_open(brokers[3], "moved", 20)


def test_a_leader_with_a_newer_coordinator_stops_the_retries(brokers):
    """A partition that saw coordinator epoch 5 refuses a marker of epoch 2: the channel
    reports the transaction fenced and sends nothing more for it."""
    _open_transaction(brokers[2], "f", 30)
    brokers[2].replicas.partition("f", 0).log.append_transaction_marker(
        ControlType.ABORT, producer_id=30, producer_epoch=0, coordinator_epoch=5
    )
    _open_transaction(brokers[2], "f", 30, sequence=1)
    _open_transaction(brokers[2], "f", 31)

    async def run() -> None:
        wire = Wire(asyncio.get_running_loop(), brokers)
        channel = _channel(wire, lambda: _snapshot({"f": 2}), [])
        # Producer 30's partition saw epoch 5; producer 31's is written at epoch 2 (the
        # fence is per producer).
        _submit(channel, ["f"], 30)
        _submit(channel, ["f"], 31)
        channel.start()
        try:
            await _until(lambda: channel.pending() == 1)
            sent = len(wire.sent)
            await asyncio.sleep(0.2)
            assert len(wire.sent) == sent
        finally:
            await channel.close()
        fenced = _submit(channel, ["f"], 30)
        assert isinstance(fenced[("f", 0)], TransactionCoordinatorFencedError)
        assert _submit(channel, ["f"], 31) == {}

    asyncio.run(run())
    assert not _is_open(brokers[2], "f", 31)


def test_a_deleted_topic_and_a_leaderless_partition(brokers):
    """A partition the metadata no longer knows needs no marker; one without a live
    leader waits (nothing is sent) until it has one."""
    _open_transaction(brokers[3], "later", 40)
    current = {"snapshot": _snapshot({"later": 2}, brokers=(3,))}

    async def run() -> None:
        wire = Wire(asyncio.get_running_loop(), brokers)
        channel = _channel(wire, lambda: current["snapshot"], [])
        _submit(channel, ["gone", "later"], 40)
        channel.start()
        try:
            await asyncio.sleep(0.2)
            assert wire.sent == []
            assert set(_submit(channel, ["gone", "later"], 40)) == {("later", 0)}
            current["snapshot"] = _snapshot({"later": 3}, brokers=(3,))
            await _until(lambda: channel.pending() == 0)
        finally:
            await channel.close()
        assert _submit(channel, ["gone", "later"], 40) == {}

    asyncio.run(run())
    assert not _is_open(brokers[3], "later", 40)


def test_a_cluster_broker_writes_markers_only_where_it_leads(tmp_path: Path) -> None:
    """WriteTxnMarkers to a cluster broker that hosts a partition without leading it (a
    follower, or a replica the controller has not given a role yet) writes nothing and
    answers NOT_LEADER_OR_FOLLOWER, for the sender to find the leader."""
    root = tmp_path / "follower"
    logs = LogManager(root)
    config = ServerConfig.from_properties(
        {"log.dirs": str(root), "zookeeper.connect": "127.0.0.1:1", "broker.id": "2"}
    )
    core = BrokerCore(config, logs, BrokerMeta.take_over(root))
    try:
        logs.create_topic("held", 1)
        before = logs.get_log("held", 0).log_end_offset

        async def run() -> WriteTxnMarkersResponse:
            wire = Wire(asyncio.get_running_loop(), {2: core})
            request = WriteTxnMarkersRequest(
                [WritableTxnMarker(50, 0, True, [TxnTopic("held", [0])], 2)]
            )
            return await wire._answer(2, request)

        response = asyncio.run(run())
        [result] = response.markers[0].topics[0].partitions
        assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert logs.get_log("held", 0).log_end_offset == before
    finally:
        core.close()
        logs.close()
