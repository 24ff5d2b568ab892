"""The transaction coordinator moves with its ``__transaction_state`` partition in a real
three-broker LocalCluster: the coordinator is killed (SIGKILL) in the middle of a
transaction, the controller makes another broker leader of the partition, that broker loads
it (the Ongoing transaction included) and the producer, finding the new coordinator after
its connection dropped, commits; read_committed consumers see every record exactly once.

Deterministic layout: the transactional id is one whose ``__transaction_state`` partition
broker 1 leads, and the data topic is created with that partition's replica list, so the
controller moves the data partition to the same broker as the coordinator (the markers stay
local: this test does not depend on markers crossing brokers). It does depend on
FindCoordinator answering the leader of the id's ``__transaction_state`` partition (the group
coordinator's placement work): with FindCoordinator answering the broker asked, the producer
may keep asking a broker that answers NOT_COORDINATOR until its deadline."""

from __future__ import annotations

import contextlib
import time

import pytest
from cluster_fixtures import SHORT_SESSION_MS, ClusterFactory, replica_properties
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.txn.state_topic import partition_for
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.broker.zk.partition_states import create_topic
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import SparkMQError

pytestmark = pytest.mark.slow

TOPIC = "moved"


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    return start_cluster(
        3,
        session_timeout_ms=SHORT_SESSION_MS,
        broker_properties={
            **replica_properties(),
            # The move, not a timeout, must be what ends the transaction.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "60000",
        },
    )


def _producer(cluster: LocalCluster, transactional_id: str, timeout: float = 30) -> Producer:
    producer = Producer(
        bootstrap_servers=cluster.bootstrap_servers,
        transactional_id=transactional_id,
        config={"retry.backoff.max.ms": 200, "delivery.timeout.ms": 60000},
    )
    try:
        producer.init_transactions(timeout=timeout)
    except BaseException:
        producer.close()
        raise
    return producer


def _led_by_broker_1(cluster: LocalCluster) -> tuple[str, tuple[int, ...]]:
    """A transactional id whose __transaction_state partition broker 1 leads with every
    replica in sync, and that partition's replicas (broker 1 first)."""
    with Admin(bootstrap_servers=cluster.broker_server(1)) as admin:

        def ready() -> bool:
            if TRANSACTION_STATE_TOPIC not in admin.list_topics():
                # The first FindCoordinator creates the topic.
                with contextlib.suppress(SparkMQError):
                    _producer(cluster, "creates-the-topic", timeout=2).close()
                return False
            parts = admin.describe_topic(TRANSACTION_STATE_TOPIC).partitions
            return all(p.leader > 0 and len(p.isr) == 3 for p in parts)

        wait_for(ready, timeout_s=60)
        parts = admin.describe_topic(TRANSACTION_STATE_TOPIC).partitions
    led = {p.partition: p.replicas for p in parts if p.leader == 1 and p.replicas[0] == 1}
    tid = next(
        t for t in (f"move-{i}" for i in range(100_000)) if partition_for(t, len(parts)) in led
    )
    return tid, tuple(led[partition_for(tid, len(parts))])


def _create(cluster: LocalCluster, replicas: tuple[int, ...]) -> None:
    zk = ZkClient(ZkClientConfig(cluster.zookeeper_connect))
    zk.start()
    try:
        create_topic(zk, TOPIC, znodes.TopicAssignment({0: replicas}))
    finally:
        zk.close()
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:

        def placed() -> bool:
            if TOPIC not in admin.list_topics():
                return False
            (part,) = admin.describe_topic(TOPIC).partitions
            return part.leader == replicas[0] and len(part.isr) == len(replicas)

        wait_for(placed, timeout_s=30)


def _read_committed(cluster: LocalCluster, count: int, timeout_s: float = 30) -> list[bytes]:
    tp = TopicPartition(TOPIC, 0)
    with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_committed"
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=300).get(tp, []) if r.value]
            if len(got) >= count:
                # A little longer: a duplicate would show up right behind.
                got += [r.value for r in consumer.poll(timeout_ms=500).get(tp, []) if r.value]
                break
        return got


def test_an_ongoing_transaction_goes_on_with_the_new_coordinator(cluster: LocalCluster) -> None:
    tid, replicas = _led_by_broker_1(cluster)
    _create(cluster, replicas)
    with _producer(cluster, tid) as producer:
        producer.begin_transaction()
        producer.send(TOPIC, b"a", partition=0)
        producer.commit_transaction(timeout=30)
        producer.begin_transaction()
        producer.send(TOPIC, b"b", partition=0)
        producer.flush(timeout=30)  # AddPartitionsToTxn and the records are replicated
        cluster.kill(1)  # the coordinator and the data partition's leader
        # The producer's connection dropped: it finds the new coordinator (the broker the
        # controller made leader of the __transaction_state partition, which loaded the
        # Ongoing transaction) and commits there.
        producer.commit_transaction(timeout=60)
        producer.begin_transaction()
        producer.send(TOPIC, b"c", partition=0)
        producer.commit_transaction(timeout=30)
    assert _read_committed(cluster, 3) == [b"a", b"b", b"c"]
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        (state,) = admin.describe_transactions([tid])
        assert state.state == "CompleteCommit"
        # Its coordinator is the partition's new leader, not the killed broker.
        assert state.coordinator_id == replicas[1]
