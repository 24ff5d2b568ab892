"""Clients follow leaders, against real cluster brokers (a real ZooKeeper) whose metadata the
test sets as a controller would (tests/cluster/acting_controller.py): a partition's leader is
first a broker that is down, then it moves to a live one; the producer and the consumer must
notice the dropped connection, refresh their metadata and go to the new leader within their
timeouts. ``bootstrap.servers`` may list dead brokers before a live one; the client's node
map follows the live brokers the metadata lists."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

import pytest
from acting_controller import cluster_brokers, partition_state

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ClientConfig
from spark_mq.cluster.zookeeper_server import free_loopback_port
from spark_mq.errors import BrokerNotAvailableError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.api_versions import ApiVersionsRequest


def _dead_address() -> BrokerAddress:
    return BrokerAddress("127.0.0.1", free_loopback_port())


def test_the_producer_follows_a_leader_that_moves_off_a_dead_broker(
    tmp_path: Path, zk_connect: str
) -> None:
    with cluster_brokers(tmp_path, zk_connect, (1,)) as (controller, brokers):
        b1 = brokers[1]
        epoch = b1.local_epoch()
        dead = _dead_address()
        # Partition 0's leader is broker 2, which does not answer.
        controller.publish(
            [partition_state("t", 0, 2, epoch - 1, [2, 1])], {1: b1.address, 2: dead}
        )
        with Producer(
            bootstrap_servers=f"{b1.address.host}:{b1.address.port}",
            config={"delivery.timeout.ms": 60000, "retry.backoff.max.ms": 200},
        ) as producer:
            future = producer.send("t", b"moved", partition=0)
            time.sleep(1.0)  # the sender tries broker 2 and fails
            assert not future.done()
            # The controller elects broker 1 (broker 2's session ended).
            controller.publish([partition_state("t", 0, 1, epoch, [2, 1])], {1: b1.address})
            metadata = future.get(timeout=30)
        assert (metadata.partition, metadata.offset) == (0, 0)

        with Consumer(bootstrap_servers=f"{b1.address.host}:{b1.address.port}") as consumer:
            consumer.assign([TopicPartition("t", 0)])
            consumer.seek(TopicPartition("t", 0), 0)
            records = consumer.poll(timeout_ms=10000).get(TopicPartition("t", 0), [])
        assert [r.value for r in records] == [b"moved"]


def test_the_consumer_follows_a_leader_that_moves_off_a_dead_broker(
    tmp_path: Path, zk_connect: str
) -> None:
    with cluster_brokers(tmp_path, zk_connect, (1,)) as (controller, brokers):
        b1 = brokers[1]
        epoch = b1.local_epoch()
        bootstrap = f"{b1.address.host}:{b1.address.port}"
        controller.publish([partition_state("c", 0, 1, epoch, [1, 2])], {1: b1.address})
        with Producer(bootstrap_servers=bootstrap) as producer:
            producer.send("c", b"r0", partition=0).get(timeout=30)

        dead = _dead_address()
        controller.publish(
            [partition_state("c", 0, 2, epoch + 1, [2, 1])],
            {1: b1.address, 2: dead},
            leaders=False,
        )
        with Consumer(
            bootstrap_servers=bootstrap, config={"retry.backoff.max.ms": 200}
        ) as consumer:
            tp = TopicPartition("c", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert consumer.poll(timeout_ms=1000) == {}  # its leader is down
            controller.publish([partition_state("c", 0, 1, epoch, [1, 2])], {1: b1.address})
            deadline = time.monotonic() + 20
            got: list[bytes | None] = []
            while not got and time.monotonic() < deadline:
                got = [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
        assert got == [b"r0"]


def test_bootstrap_skips_dead_servers_and_the_node_map_follows_the_live_brokers(
    tmp_path: Path, zk_connect: str
) -> None:
    with cluster_brokers(tmp_path, zk_connect, (1,)) as (controller, brokers):
        b1 = brokers[1]
        dead_a, dead_b, other = _dead_address(), _dead_address(), _dead_address()
        controller.publish([], {1: b1.address, 2: other})
        servers = ",".join(f"{a.host}:{a.port}" for a in (dead_a, dead_b, b1.address))
        cluster = Cluster(ClientConfig.from_properties({"bootstrap.servers": servers}))
        try:
            # Two dead bootstrap servers are skipped for the live third.
            assert sorted(b.node_id for b in cluster.refresh([]).brokers) == [1, 2]
            assert sorted(cluster.nodes()) == [1, 2]
            # Broker 2 leaves the cluster: the next metadata no longer lists it, and the
            # client no longer dials it by id (it asks for a refresh instead).
            controller.publish([], {1: b1.address})
            cluster.refresh([])
            assert sorted(cluster.nodes()) == [1]
            with pytest.raises(BrokerNotAvailableError, match="not among the live brokers"):
                cluster.address_for(2)
            assert cluster.update_requested
            cluster.refresh([])
            assert not cluster.update_requested
        finally:
            cluster.close()


def test_admin_delete_records_follows_a_leader_that_moves_off_a_dead_broker(
    tmp_path: Path, zk_connect: str
) -> None:
    with cluster_brokers(tmp_path, zk_connect, (1,)) as (controller, brokers):
        b1 = brokers[1]
        epoch = b1.local_epoch()
        bootstrap = f"{b1.address.host}:{b1.address.port}"
        controller.publish([partition_state("d", 0, 1, epoch, [1, 2])], {1: b1.address})
        with Producer(bootstrap_servers=bootstrap) as producer:
            for value in (b"a", b"b", b"c"):
                producer.send("d", value, partition=0).get(timeout=30)
        controller.publish(
            [partition_state("d", 0, 2, epoch + 1, [2, 1])],
            {1: b1.address, 2: _dead_address()},
            leaders=False,
        )
        outcome: list[object] = []
        with Admin(bootstrap_servers=bootstrap, config={"retry.backoff.max.ms": 200}) as admin:
            worker = threading.Thread(
                target=lambda: outcome.append(admin.delete_records({("d", 0): 2}))
            )
            worker.start()
            time.sleep(1.0)  # it finds broker 2 down and waits for a new leader
            assert worker.is_alive() and not outcome
            controller.publish([partition_state("d", 0, 1, epoch, [1, 2])], {1: b1.address})
            worker.join(30)
        assert outcome == [{TopicPartition("d", 0): 2}]


def test_a_request_to_a_broker_looks_up_where_it_listens_now(
    tmp_path: Path, zk_connect: str
) -> None:
    with cluster_brokers(tmp_path, zk_connect, (1,)) as (controller, brokers):
        b1 = brokers[1]
        servers = f"{b1.address.host}:{b1.address.port}"
        cluster = Cluster(ClientConfig.from_properties({"bootstrap.servers": servers}))
        try:
            # The client learns an address of broker 1 where nothing listens (as after the
            # broker restarted on another port)...
            controller.publish([], {1: _dead_address()})
            cluster.refresh([])
            # ... and the cluster then says where it is: the failed connection makes the
            # request look again before its second attempt.
            controller.publish([], {1: b1.address})
            answer = cluster.request(ApiVersionsRequest(), node_id=1)
            assert answer.broker_id == 1 and cluster.nodes()[1] == b1.address
            # A broker the client has not heard of yet (new in the cluster) is looked up
            # instead of refused.
            controller.publish([], {1: b1.address, 7: b1.address})
            assert cluster.request(ApiVersionsRequest(), node_id=7).error_code == 0
        finally:
            cluster.close()


@pytest.mark.skipif(
    importlib.util.find_spec("spark_mq.broker.handlers.controller_requests") is None,
    reason="needs brokers that take leader and follower roles (LeaderAndIsr)",
)
def test_the_producer_refreshes_on_not_leader_or_follower(tmp_path: Path, zk_connect: str) -> None:
    with cluster_brokers(tmp_path, zk_connect, (1, 2)) as (controller, brokers):
        b1, b2 = brokers[1], brokers[2]
        live = {1: b1.address, 2: b2.address}
        # Broker 1 leads, broker 2 follows (their roles from LeaderAndIsr) ...
        controller.publish([partition_state("n", 0, 1, 5, [1, 2])], live)
        # ... but the clients are told that broker 2 leads (metadata that lags a move).
        controller.publish([partition_state("n", 0, 2, 5, [1, 2])], live, leaders=False)
        with Producer(
            bootstrap_servers=f"{b1.address.host}:{b1.address.port}",
            config={"delivery.timeout.ms": 60000, "retry.backoff.max.ms": 200},
        ) as producer:
            future = producer.send("n", b"v", partition=0)
            time.sleep(1.0)  # broker 2 answers NOT_LEADER_OR_FOLLOWER, again and again
            assert not future.done()
            controller.publish([partition_state("n", 0, 1, 5, [1, 2])], live, leaders=False)
            assert future.get(timeout=30).offset == 0
