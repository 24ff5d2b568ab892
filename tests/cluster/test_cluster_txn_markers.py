"""Transaction markers cross brokers in a real three-broker LocalCluster: a transaction whose
partitions are led by other brokers than its coordinator is committed (read_committed
consumers of every partition see it) or aborted (they never see it), and a leader killed
with SIGKILL while its marker is pending gets the marker once it is back.

Deterministic layout: the data topic is created with a manual replica assignment (one
replica per partition, so each partition has exactly one possible leader), and the
transactional producer is bootstrapped to broker 1 alone, which makes broker 1 its
coordinator (FindCoordinator answers with the broker asked until coordinators follow their
``__transaction_state`` partitions; once they do, the test reads which broker coordinates
and places the data partitions on the others)."""

from __future__ import annotations

import contextlib
import time

import pytest
from cluster_fixtures import ClusterFactory, replica_properties, request_to
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.txn.state_topic import partition_for
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.broker.zk.partition_states import create_topic
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import SparkMQError
from spark_mq.protocol.groups import FindCoordinatorRequest, FindCoordinatorResponse

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        broker_properties={
            **replica_properties(lag_time_max_ms=10_000),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "60000",
            # One replica of each __transaction_state partition (its coordinator's): the
            # coordinator's own decisions then wait for no other broker, so what these tests
            # pause or kill holds back only the markers they are about.
            "transaction.state.log.replication.factor": "1",
        },
    )


def _transactional_id(cluster: LocalCluster, prefix: str) -> str:
    """A transactional id whose ``__transaction_state`` partition broker 1 leads: broker 1
    can then coordinate it whether or not coordinators follow their partitions yet."""
    with Admin(bootstrap_servers=cluster.broker_server(1)) as admin:

        def created() -> bool:
            if TRANSACTION_STATE_TOPIC in admin.list_topics():
                return all(
                    p.leader > 0 for p in admin.describe_topic(TRANSACTION_STATE_TOPIC).partitions
                )
            # The first transactional request creates the topic.
            with contextlib.suppress(SparkMQError):
                _producer(cluster, f"{prefix}-creates-the-topic", timeout=2).close()
            return False

        wait_for(created, timeout_s=30)
        parts = admin.describe_topic(TRANSACTION_STATE_TOPIC).partitions
    led = {p.partition for p in parts if p.leader == 1}
    return next(
        tid
        for tid in (f"{prefix}-{i}" for i in range(100_000))
        if partition_for(tid, len(parts)) in led
    )


def _coordinator_of(cluster: LocalCluster, transactional_id: str) -> int:
    """Which broker broker 1 names as the coordinator of ``transactional_id``."""
    answer: FindCoordinatorResponse = request_to(
        cluster, 1, FindCoordinatorRequest(transactional_id, 1), timeout_s=10
    )
    return answer.node_id


def _create(cluster: LocalCluster, topic: str, leaders: list[int]) -> None:
    """``topic`` with one partition per entry of ``leaders``, each with that broker as its
    only replica; waits until every broker's metadata names those leaders."""
    zk = ZkClient(ZkClientConfig(cluster.zookeeper_connect))
    zk.start()
    try:
        create_topic(zk, topic, znodes.TopicAssignment({i: (b,) for i, b in enumerate(leaders)}))
    finally:
        zk.close()
    for broker_id in cluster.broker_ids:
        with Admin(bootstrap_servers=cluster.broker_server(broker_id)) as admin:

            def placed(a: Admin = admin) -> bool:
                if topic not in a.list_topics():
                    return False
                parts = a.describe_topic(topic).partitions
                return [p.leader for p in sorted(parts, key=lambda p: p.partition)] == leaders

            wait_for(placed, timeout_s=30)


def _create_replicated(cluster: LocalCluster, topic: str, replicas: tuple[int, int]) -> None:
    """``topic`` with one partition on ``replicas`` (the first leads); waits until both are
    in its ISR."""
    zk = ZkClient(ZkClientConfig(cluster.zookeeper_connect))
    zk.start()
    try:
        create_topic(zk, topic, znodes.TopicAssignment({0: replicas}))
    finally:
        zk.close()
    with Admin(bootstrap_servers=cluster.broker_server(replicas[0])) as admin:

        def in_sync() -> bool:
            if topic not in admin.list_topics():
                return False
            [part] = admin.describe_topic(topic).partitions
            return part.leader == replicas[0] and sorted(part.isr) == sorted(replicas)

        wait_for(in_sync, timeout_s=30)


def _read_committed(
    cluster: LocalCluster, tp: TopicPartition, count: int, timeout_s: float = 30
) -> list[bytes | None]:
    """What a read_committed consumer of ``tp`` sees, waiting for ``count`` records."""
    with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_committed"
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes | None] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=300).get(tp, [])]
        return got


def _producer(cluster: LocalCluster, transactional_id: str, timeout: float = 30) -> Producer:
    producer = Producer(
        bootstrap_servers=cluster.broker_server(1),
        transactional_id=transactional_id,
        config={"retry.backoff.max.ms": 200, "delivery.timeout.ms": 60000},
    )
    try:
        producer.init_transactions(timeout=timeout)
    except BaseException:
        producer.close()
        raise
    return producer


def _state(cluster: LocalCluster, transactional_id: str) -> str:
    """The transaction's state as its coordinator (broker 1, asked alone) describes it."""
    with Admin(bootstrap_servers=cluster.broker_server(1)) as admin:
        return admin.describe_transactions([transactional_id])[0].state


def _others(cluster: LocalCluster, coordinator: int) -> list[int]:
    return [b for b in cluster.broker_ids if b != coordinator]


def test_a_commit_reaches_partitions_led_by_other_brokers(cluster: LocalCluster) -> None:
    tid = _transactional_id(cluster, "markers-commit")
    coordinator = _coordinator_of(cluster, tid)
    leaders = _others(cluster, coordinator)
    _create(cluster, "mc", leaders)
    with _producer(cluster, tid) as producer:
        producer.begin_transaction()
        for p in range(len(leaders)):
            producer.send("mc", f"c{p}".encode(), partition=p)
        producer.commit_transaction(timeout=30)
        # The next transaction can start only once the coordinator completed the previous
        # one, after every leader acknowledged its marker.
        producer.begin_transaction()
        producer.send("mc", b"second", partition=0)
        producer.commit_transaction(timeout=30)
    assert _read_committed(cluster, TopicPartition("mc", 0), 2) == [b"c0", b"second"]
    assert _read_committed(cluster, TopicPartition("mc", 1), 1) == [b"c1"]


def test_an_abort_reaches_partitions_led_by_other_brokers(cluster: LocalCluster) -> None:
    tid = _transactional_id(cluster, "markers-abort")
    coordinator = _coordinator_of(cluster, tid)
    leaders = _others(cluster, coordinator)
    _create(cluster, "ma", leaders)
    with _producer(cluster, tid) as producer:
        producer.begin_transaction()
        for p in range(len(leaders)):
            producer.send("ma", f"aborted{p}".encode(), partition=p)
        producer.abort_transaction(timeout=30)
        producer.begin_transaction()
        for p in range(len(leaders)):
            producer.send("ma", f"kept{p}".encode(), partition=p)
        producer.commit_transaction(timeout=30)
    for p in range(len(leaders)):
        # The aborted records stay invisible; the committed ones after them are read.
        assert _read_committed(cluster, TopicPartition("ma", p), 1) == [f"kept{p}".encode()]


def test_a_leader_killed_while_its_marker_is_pending_gets_it_when_back(
    cluster: LocalCluster,
) -> None:
    tid = _transactional_id(cluster, "markers-kill")
    coordinator = _coordinator_of(cluster, tid)
    leaders = _others(cluster, coordinator)
    victim = leaders[0]
    _create(cluster, "mk", leaders)
    with _producer(cluster, tid) as producer:
        producer.begin_transaction()
        for p in range(len(leaders)):
            producer.send("mk", f"k{p}".encode(), partition=p)
        producer.flush(timeout=30)
        cluster.kill(victim)
        # The decision is durable at once; partition 0's marker waits for its leader, so
        # the coordinator does not complete the transaction (while the other leader has its
        # marker already).
        producer.commit_transaction(timeout=30)
        assert _read_committed(cluster, TopicPartition("mk", 1), 1) == [b"k1"]
        time.sleep(1)  # several of the channel's retries
        assert _state(cluster, tid) == "PrepareCommit"
        cluster.start_broker(victim)
        wait_for(lambda: _state(cluster, tid) == "CompleteCommit", timeout_s=30)
        # A new transaction starts only once the coordinator completed the previous one,
        # which needs the restarted leader's acknowledgement.
        producer.begin_transaction()
        producer.send("mk", b"after", partition=1)
        producer.commit_transaction(timeout=30)
    assert _read_committed(cluster, TopicPartition("mk", 0), 1) == [b"k0"]
    assert _read_committed(cluster, TopicPartition("mk", 1), 2) == [b"k1", b"after"]


def test_a_marker_the_coordinator_writes_itself_waits_for_its_followers(
    cluster: LocalCluster,
) -> None:
    """A partition the coordinator leads gets its marker directly, but the transaction
    completes only once the partition's in-sync follower has the marker too: while that
    follower is paused (SIGSTOP, well within replica.lag.time.max.ms, so it stays in the
    ISR) the transaction stays PrepareCommit; once it fetches again, it completes."""
    tid = _transactional_id(cluster, "markers-replicas")
    coordinator = _coordinator_of(cluster, tid)
    follower = _others(cluster, coordinator)[0]
    _create_replicated(cluster, "mr", (coordinator, follower))
    with _producer(cluster, tid) as producer:
        producer.begin_transaction()
        producer.send("mr", b"r0", partition=0)
        producer.flush(timeout=30)
        cluster.pause(follower)
        try:
            producer.commit_transaction(timeout=30)
            assert _state(cluster, tid) == "PrepareCommit"
        finally:
            cluster.resume(follower)
        wait_for(lambda: _state(cluster, tid) == "CompleteCommit", timeout_s=30)
    assert _read_committed(cluster, TopicPartition("mr", 0), 1) == [b"r0"]


def test_a_killed_leaders_marker_goes_to_its_successor(cluster: LocalCluster) -> None:
    """The leader of a partition with two replicas is killed while its marker is pending:
    once the controller elects the other replica (after the dead broker's session ends),
    the channel finds the new leader in its metadata and the marker is written there."""
    tid = _transactional_id(cluster, "markers-successor")
    coordinator = _coordinator_of(cluster, tid)
    victim, successor = _others(cluster, coordinator)
    _create_replicated(cluster, "ms", (victim, successor))
    with _producer(cluster, tid) as producer:
        producer.begin_transaction()
        producer.send("ms", b"s0", partition=0)
        producer.flush(timeout=30)  # acks=all: the successor has the record
        cluster.kill(victim)
        try:
            producer.commit_transaction(timeout=30)
            assert _state(cluster, tid) == "PrepareCommit"
            wait_for(lambda: _state(cluster, tid) == "CompleteCommit", timeout_s=30)
            assert _read_committed(cluster, TopicPartition("ms", 0), 1) == [b"s0"]
        finally:
            cluster.start_broker(victim)
