"""UpdateMetadata and Metadata on a real cluster broker whose own controller runs (a
one-broker LocalCluster, a real ZooKeeper): an ex-controller that still holds the cluster's
secret sends UpdateMetadata at a controller epoch older than the elected controller's, or a
controller's request meant for an earlier life of the broker arrives (an older broker
epoch): neither changes what clients are told; a client may not send UpdateMetadata at all.
A deleted topic is unknown to Metadata; internal topics are never auto-created by it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cluster_fixtures import ClusterFactory, broker_address
from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq import Admin
from spark_mq.broker.zk import znodes
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.controller import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse

pytestmark = pytest.mark.slow

#: The broker id the ex-controller authenticates as (a broker that has left the cluster).
EX_CONTROLLER = 2


class Broker:
    """Broker 1 of a running one-broker cluster, and what ZooKeeper says about it: the
    cluster's inter-broker secret, its broker epoch and the elected controller's epoch."""

    def __init__(self, cluster: LocalCluster, zk: KazooClient) -> None:
        self.address = broker_address(cluster, 1)
        self.server = cluster.broker_server(1)
        self.zk = zk

    @property
    def secret(self) -> str:
        return str(self.zk.get(znodes.INTER_BROKER_SECRET)[0].decode())

    @property
    def broker_epoch(self) -> int:
        stat = self.zk.exists(znodes.broker_path(1))
        assert stat is not None
        return int(stat.czxid)

    @property
    def controller_epoch(self) -> int:
        return znodes.decode_controller_epoch(self.zk.get(znodes.CONTROLLER_EPOCH)[0])

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
                    conn,
                    broker_id=EX_CONTROLLER,
                    broker_epoch=-1,
                    secret=self.secret,
                    timeout_s=10,
                )
            else:
                conn.connect()
            response: UpdateMetadataResponse = conn.request(request, timeout_s=10)
            return response.error_code
        finally:
            conn.close()


@pytest.fixture(scope="module")
def broker(start_module_cluster: ClusterFactory, zk_module_connect: str) -> Iterator[Broker]:
    local = start_module_cluster(1, session_timeout_ms=6000)
    zk = KazooClient(hosts=zk_module_connect)
    zk.start(timeout=10)
    try:
        wait_for(lambda: local.controller_id() == 1, timeout_s=30)
        wait_for(lambda: zk.exists(znodes.INTER_BROKER_SECRET) is not None, timeout_s=30)
        yield Broker(local, zk)
    finally:
        zk.stop()
        zk.close()


def _create(broker: Broker, topic: str) -> None:
    with Admin(bootstrap_servers=broker.server) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=1)

    def led() -> bool:
        (answer,) = broker.metadata([topic]).topics
        return answer.error_code == 0 and answer.partitions[0].leader_id == 1

    wait_for(led, timeout_s=30)


def _move_to_broker_2(
    broker: Broker, topic: str, *, controller_epoch: int, broker_epoch: int
) -> UpdateMetadataRequest:
    """What an ex-controller would send: partition 0 of ``topic`` led by broker 2."""
    state = UpdateMetadataPartitionState(
        topic, 0, controller_epoch, EX_CONTROLLER, 99, [EX_CONTROLLER], 99, [1, 2], []
    )
    live = [
        UpdateMetadataBroker(
            broker_id, [UpdateMetadataEndpoint("127.0.0.1", port, "PLAINTEXT")], None
        )
        for broker_id, port in ((1, broker.address.port), (EX_CONTROLLER, 19002))
    ]
    return UpdateMetadataRequest(
        controller_id=EX_CONTROLLER,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        partition_states=[state],
        live_brokers=live,
    )


def test_a_stale_controller_or_broker_epoch_changes_nothing(broker: Broker) -> None:
    _create(broker, "t")
    before = broker.metadata(["t"])
    epoch = broker.controller_epoch
    assert before.controller_id == 1
    # An ex-controller: the right secret, an older controller epoch.
    stale = _move_to_broker_2(
        broker, "t", controller_epoch=epoch - 1, broker_epoch=broker.broker_epoch
    )
    assert broker.update(stale) == ErrorCode.STALE_CONTROLLER_EPOCH
    # A request meant for an earlier life of broker 1.
    old_life = _move_to_broker_2(
        broker, "t", controller_epoch=epoch, broker_epoch=broker.broker_epoch - 1
    )
    assert broker.update(old_life) == ErrorCode.STALE_BROKER_EPOCH
    # A client may not send it at all.
    fresh = _move_to_broker_2(
        broker, "t", controller_epoch=epoch + 1, broker_epoch=broker.broker_epoch
    )
    assert broker.update(fresh, as_broker=False) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    after = broker.metadata(["t"])
    assert after.controller_id == 1
    assert [b.node_id for b in after.brokers] == [1]
    (part,) = after.topics[0].partitions
    (was,) = before.topics[0].partitions
    assert (part.leader_id, part.leader_epoch, part.isr) == (1, was.leader_epoch, [1])


def test_a_deleted_topic_is_unknown(broker: Broker) -> None:
    _create(broker, "d")
    _create(broker, "k")
    with Admin(bootstrap_servers=broker.server) as admin:
        admin.delete_topic("d")
    wait_for(lambda: "d" not in [t.name for t in broker.metadata().topics], timeout_s=30)
    assert "k" in [t.name for t in broker.metadata().topics]
    (gone,) = broker.metadata(["d"]).topics
    assert gone.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert gone.error_message and "does not exist" in gone.error_message


def test_internal_topics_are_never_auto_created_by_metadata(broker: Broker) -> None:
    (topic,) = broker.metadata(["__consumer_offsets"], allow_auto_topic_creation=True).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert topic.error_message and "coordinator" in topic.error_message
