"""UpdateMetadata and Metadata on a real cluster broker (a real ZooKeeper, a real broker
process): what a controller sends with the cluster's secret is what clients are told, whole;
a stale controller or broker epoch changes nothing; a client may not send it; a partition
without a live leader is answered LEADER_NOT_AVAILABLE; leader -2 deletes a topic."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from acting_controller import cluster_brokers

from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.controller import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse


class Broker:
    """One cluster broker process, and the secret and broker epoch a controller knows."""

    def __init__(self, address: BrokerAddress, secret: str, broker_epoch: int) -> None:
        self.address = address
        self.secret = secret
        self.broker_epoch = broker_epoch

    def metadata(self, topics: list[str] | None = None, **kw: bool) -> MetadataResponse:
        conn = BrokerConnection(self.address)
        conn.connect()
        try:
            response: MetadataResponse = conn.request(MetadataRequest(topics, **kw), timeout_s=10)
            return response
        finally:
            conn.close()

    def update(self, request: UpdateMetadataRequest, *, as_broker: bool = True) -> int:
        conn = BrokerConnection(self.address)
        try:
            if as_broker:
                authenticate_as_broker(
                    conn, broker_id=9, broker_epoch=-1, secret=self.secret, timeout_s=10
                )
            else:
                conn.connect()
            response: UpdateMetadataResponse = conn.request(request, timeout_s=10)
            return response.error_code
        finally:
            conn.close()


@pytest.fixture
def broker(tmp_path: Path, zk_connect: str) -> Iterator[Broker]:
    """Broker 1, with the test holding the controller's place (no broker is controller)."""
    with cluster_brokers(tmp_path, zk_connect, (1,)) as (controller, brokers):
        b1 = brokers[1]
        yield Broker(b1.address, controller.secret, b1.broker_epoch)


def _live(*ids: int, port_of_1: int) -> list[UpdateMetadataBroker]:
    out = []
    for broker_id in ids:
        port = port_of_1 if broker_id == 1 else 19000 + broker_id
        out.append(
            UpdateMetadataBroker(
                broker_id,
                [UpdateMetadataEndpoint("127.0.0.1", port, "PLAINTEXT")],
                f"rack{broker_id}",
            )
        )
    return out


def _state(
    topic: str,
    partition: int,
    leader: int,
    *,
    leader_epoch: int = 0,
    isr: list[int] | None = None,
    offline: list[int] | None = None,
) -> UpdateMetadataPartitionState:
    return UpdateMetadataPartitionState(
        topic, partition, 3, leader, leader_epoch, isr or [1, 2], 0, [1, 2, 3], offline or []
    )


def _request(
    broker: Broker,
    states: list[UpdateMetadataPartitionState],
    *,
    controller_epoch: int = 3,
    live: tuple[int, ...] = (1, 2),
    broker_epoch: int | None = None,
) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(
        controller_id=2,
        controller_epoch=controller_epoch,
        broker_epoch=broker.broker_epoch if broker_epoch is None else broker_epoch,
        partition_states=states,
        live_brokers=_live(*live, port_of_1=broker.address.port),
    )


def test_clients_see_what_the_controller_sent(broker: Broker) -> None:
    before = broker.metadata([])
    # Before any UpdateMetadata the broker knows only itself.
    assert [b.node_id for b in before.brokers] == [1]

    states = [
        _state("t", 0, 1, leader_epoch=4),
        _state("t", 1, 2, isr=[2], offline=[3]),
        _state("t", 2, 3),  # broker 3 is not live
        _state("t", 3, -1),  # no leader at all
    ]
    assert broker.update(_request(broker, states)) == ErrorCode.NONE

    response = broker.metadata()
    assert response.controller_id == 2
    assert [(b.node_id, b.host, b.port, b.rack) for b in response.brokers] == [
        (1, "127.0.0.1", broker.address.port, "rack1"),
        (2, "127.0.0.1", 19002, "rack2"),
    ]
    (topic,) = response.topics
    assert topic.name == "t" and topic.error_code == ErrorCode.NONE
    p0, p1, p2, p3 = topic.partitions
    assert (p0.error_code, p0.leader_id, p0.leader_epoch, p0.replicas, p0.isr) == (
        0,
        1,
        4,
        [1, 2, 3],
        [1, 2],
    )
    assert (p1.leader_id, p1.isr, p1.offline_replicas) == (2, [2], [3])
    for leaderless in (p2, p3):
        assert leaderless.error_code == ErrorCode.LEADER_NOT_AVAILABLE
        assert leaderless.leader_id == -1
        assert leaderless.error_message and "retry" in leaderless.error_message

    # A later update moves one partition's leader; the rest stays.
    moved = [_state("t", 2, 2, leader_epoch=1)]
    assert broker.update(_request(broker, moved, controller_epoch=4)) == ErrorCode.NONE
    parts = broker.metadata(["t"]).topics[0].partitions
    assert (parts[2].error_code, parts[2].leader_id, parts[2].leader_epoch) == (0, 2, 1)
    assert parts[0].leader_epoch == 4


def test_a_stale_controller_or_broker_epoch_changes_nothing(broker: Broker) -> None:
    assert broker.update(_request(broker, [_state("t", 0, 1)], controller_epoch=5)) == 0
    stale = _request(broker, [_state("t", 0, 2, leader_epoch=9)], controller_epoch=4)
    assert broker.update(stale) == ErrorCode.STALE_CONTROLLER_EPOCH
    old_life = _request(
        broker, [_state("t", 0, 2, leader_epoch=9)], broker_epoch=broker.broker_epoch - 1
    )
    old_life.controller_epoch = 5
    assert broker.update(old_life) == ErrorCode.STALE_BROKER_EPOCH
    # A client may not send it at all.
    fresh = _request(broker, [_state("t", 0, 2, leader_epoch=9)], controller_epoch=6)
    assert broker.update(fresh, as_broker=False) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    part = broker.metadata(["t"]).topics[0].partitions[0]
    assert (part.leader_id, part.leader_epoch) == (1, 0)


def test_leader_minus_two_deletes_the_topic(broker: Broker) -> None:
    assert broker.update(_request(broker, [_state("d", 0, 1), _state("k", 0, 1)])) == 0
    assert broker.update(_request(broker, [_state("d", 0, -2)])) == 0
    assert [t.name for t in broker.metadata().topics] == ["k"]
    (gone,) = broker.metadata(["d"]).topics
    assert gone.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert gone.error_message and "does not exist" in gone.error_message


def test_internal_topics_are_never_auto_created_by_metadata(broker: Broker) -> None:
    (topic,) = broker.metadata(["__consumer_offsets"], allow_auto_topic_creation=True).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert topic.error_message and "coordinator" in topic.error_message
