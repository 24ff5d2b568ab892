"""Clients against a three-broker LocalCluster with its own controller (the whole of issue
29's "Clients follow leaders"): a topic with replication factor 3 is created and described
through any one broker; a producer and a consumer that each know one bootstrap broker
produce and consume every partition, wherever its leader is; ``spark-mq topics describe``
shows the replicas and the filters; after a partition's leader is killed, the controller
moves the leadership and the producer and consumer follow it (metadata refresh on the
dropped connection), while the killed broker's partitions show as under-replicated."""

from __future__ import annotations

import time

import pytest
from cluster_fixtures import SHORT_SESSION_MS, ClusterFactory
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.cli import main
from spark_mq.cli.cluster import _status as cluster_status_of
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse

pytestmark = pytest.mark.slow

RECORDS = 20


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    return start_cluster(3, session_timeout_ms=SHORT_SESSION_MS)


def _describe(capsys: pytest.CaptureFixture[str], server: str, *args: str) -> str:
    assert main(["topics", "describe", "t", "--bootstrap-server", server, *args]) == 0
    return capsys.readouterr().out


def test_clients_follow_leaders_in_a_three_broker_cluster(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    with Admin(bootstrap_servers=cluster.broker_server(2)) as admin:
        admin.create_topic("t", partitions=3, replication_factor=3)
    for broker_id in cluster.broker_ids:
        with Admin(bootstrap_servers=cluster.broker_server(broker_id)) as admin:
            # Each broker knows the topic once the controller's UpdateMetadata reached it.
            wait_for(lambda a=admin: "t" in a.list_topics(), timeout_s=30)  # type: ignore[misc]
            described = admin.describe_topic("t")
        assert described.partition_count == 3 and described.replication_factor == 3
        assert all(sorted(p.isr) == [1, 2, 3] for p in described.partitions)
        # Leaders go round the brokers.
        assert {p.leader for p in described.partitions} == {1, 2, 3}
    # The CLI waits until the broker it asked knows the topic it created.
    assert main(["topics", "create", "u", "--partitions", "2", "--replication-factor", "3",
                 "--bootstrap-server", cluster.broker_server(1)]) == 0  # fmt: skip
    assert capsys.readouterr().out == "Created topic u with 2 partitions.\n"
    lines = _describe(capsys, cluster.broker_server(3)).splitlines()
    assert "\tPartitionCount: 3\tReplicationFactor: 3\t" in lines[0]
    assert _describe(capsys, cluster.broker_server(3), "--under-replicated-partitions") == ""

    with Producer(bootstrap_servers=cluster.broker_server(1), acks=1) as producer:
        futures = [
            producer.send("t", f"{p}-{i}".encode(), partition=p)
            for p in range(3)
            for i in range(RECORDS)
        ]
        for future in futures:
            future.get(timeout=60)
    tps = [TopicPartition("t", p) for p in range(3)]
    with Consumer(bootstrap_servers=cluster.broker_server(3)) as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        got: dict[int, list[bytes]] = {p: [] for p in range(3)}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < 3 * RECORDS and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [r.value for r in records if r.value is not None]
    assert got == {p: [f"{p}-{i}".encode() for i in range(RECORDS)] for p in range(3)}

    # Kill the leader of a partition that the controller does not lead.
    controller = cluster.controller_id()
    victim_partition = next(p for p in described.partitions if p.leader != controller)
    victim = victim_partition.leader
    survivor = next(b for b in cluster.broker_ids if b != victim)
    bootstrap_all = cluster.bootstrap_servers
    with (
        Producer(bootstrap_servers=bootstrap_all, acks=1, delivery_timeout_ms=120000) as producer,
        Admin(bootstrap_servers=cluster.broker_server(survivor)) as admin,
    ):
        producer.send("t", b"before", partition=victim_partition.partition).get(timeout=60)
        cluster.kill(victim)

        def moved() -> bool:
            p = admin.describe_topic("t").partitions[victim_partition.partition]
            return p.leader not in (-1, victim)

        # The producer follows the leader to whichever broker the controller elects.
        after = producer.send("t", b"after", partition=victim_partition.partition)
        metadata = after.get(timeout=120)
        wait_for(moved, timeout_s=60)
        now = admin.describe_topic("t")
    moved_to = now.partitions[victim_partition.partition]
    assert moved_to.leader != victim and victim not in moved_to.isr
    assert moved_to.leader_epoch > victim_partition.leader_epoch

    under = _describe(capsys, cluster.broker_server(survivor), "--under-replicated-partitions")
    assert len(under.splitlines()) == 3  # every partition had a replica on the killed broker
    assert _describe(capsys, cluster.broker_server(survivor), "--unavailable-partitions") == ""
    # spark-mq cluster status reads the same from ZooKeeper.
    status = cluster_status_of(cluster)
    assert status["offline_partitions"] == []
    under_t = [e for e in status["under_replicated_partitions"] if e["topic"] == "t"]
    assert [e["partition"] for e in under_t] == [0, 1, 2]
    assert all(victim not in e["isr"] and victim in e["replicas"] for e in under_t)

    tp = TopicPartition("t", victim_partition.partition)
    with Consumer(bootstrap_servers=cluster.broker_server(survivor)) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, metadata.offset)
        values: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while not values and time.monotonic() < deadline:
            values = [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
    assert values[:1] == [b"after"]


def test_metadata_auto_creates_a_topic_through_the_controller(cluster: LocalCluster) -> None:
    server = cluster.broker_server(2)
    host, port = server.rsplit(":", 1)
    conn = BrokerConnection(BrokerAddress(host, int(port)))
    conn.connect()
    try:
        first: MetadataResponse = conn.request(
            MetadataRequest(["auto"], allow_auto_topic_creation=True), timeout_s=30
        )
        # Created, but its leaders are not elected yet: Kafka's answer.
        assert first.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
        internal: MetadataResponse = conn.request(
            MetadataRequest(["__transaction_state"], allow_auto_topic_creation=True),
            timeout_s=30,
        )
        assert internal.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        conn.close()
    # A producer writing to a topic nobody created gets it the same way, and its leader.
    with Producer(bootstrap_servers=server, acks=1) as producer:
        assert producer.send("auto", b"x").get(timeout=60).offset == 0
        assert producer.send("fresh", b"y").get(timeout=60).offset == 0
    # (Metadata: every topic in one answer.)
    conn = BrokerConnection(BrokerAddress(host, int(port)))
    conn.connect()
    try:
        answer: MetadataResponse = conn.request(MetadataRequest(None), timeout_s=30)
    finally:
        conn.close()
    topics = {t.name: t for t in answer.topics}
    assert "__transaction_state" not in topics
    (fresh,) = topics["fresh"].partitions
    # Without a replication factor the topic takes default.replication.factor (1).
    assert fresh.leader_id in (1, 2, 3) and fresh.replicas == [fresh.leader_id]
