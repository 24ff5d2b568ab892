"""Replica sizes (DescribeLogDirs) on each broker and in the console's topic page, and the
cluster half of Kafka's alerting set, scraped from the Prometheus endpoints of a real
three-broker LocalCluster while its brokers fail: leader counts, the produce purgatory, the
under-replicated and under-min-ISR partitions of a leader whose follower stopped, the
controller's offline partitions once a partition's only replicas are dead, and an unclean
leader election when the one replica that comes back was out of the ISR.

The brokers: C, the controller (never stopped, so its counters span the whole test), and X
and Y, which fail. The topics (placed by assignment znodes, so each lands where the story
needs it):

- ``urp``: replicas (C, X, Y), ``min.insync.replicas=3``: led by C;
- ``solo``: replica X only: offline while X is dead;
- ``unclean``: replicas (X, Y), ``unclean.leader.election.enable=true``: led by X; Y leaves
  its ISR, then X dies, so Y can lead it only uncleanly.
"""

from __future__ import annotations

import re
import urllib.request

import pyarrow as pa
import pytest
from cluster_fixtures import ClusterFactory, connect_to, replica_properties
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from spark_mq import Admin, Producer, TopicPartition
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import (
    create_topic,
    list_topics,
    read_partition_state,
    read_topic_assignment,
)
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.produce import ProducePartition, ProduceRequest, ProduceTopic
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

#: A paused follower leaves the ISR this long after its last fetch ...
LAG_TIME_MAX_MS = 3000
#: ... well before its ZooKeeper session ends (which is also how long a kill takes to show).
SESSION_TIMEOUT_MS = 6000

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        broker_properties=replica_properties(
            lag_time_max_ms=LAG_TIME_MAX_MS, fetch_wait_max_ms=100, fetch_backoff_ms=100
        ),
    )


def scrape(cluster: LocalCluster, broker_id: int) -> Samples:
    url = cluster.metrics_url(broker_id)
    assert url is not None, f"broker {broker_id} serves no metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def gauge(cluster: LocalCluster, broker_id: int, name: str, **labels: str) -> float:
    return scrape(cluster, broker_id)[(name, tuple(sorted(labels.items())))]


def leader(zk: ZkClient, topic: str) -> int:
    return leader_of(zk, topic, 0)


def leader_of(zk: ZkClient, topic: str, partition: int) -> int:
    state = read_partition_state(zk, topic, partition)
    return -1 if state is None else state.value.leader


def isr(zk: ZkClient, topic: str) -> set[int]:
    state = read_partition_state(zk, topic, 0)
    return set() if state is None else set(state.value.isr)


def send_produce(cluster: LocalCluster, broker_id: int, topic: str) -> BrokerConnection:
    """Send an acks=all produce of one record and leave its answer unread (the caller
    closes the connection)."""
    conn = connect_to(cluster, broker_id)
    records = encode_batch(pa.array([b"waiting for every in-sync replica"]))
    body = ProduceRequest(-1, 20_000, [ProduceTopic(topic, [ProducePartition(0, len(records))])])
    conn.send(body, records=[records])
    return conn


def test_each_broker_reports_its_replica_sizes_and_the_console_shows_the_leaders(
    cluster: LocalCluster, zk: ZkClient
) -> None:
    pytest.importorskip("flask", reason="the console extra (flask, waitress) is not installed")
    from spark_mq.console.config import ConsoleConfig
    from spark_mq.console.log_sizes import format_bytes
    from spark_mq.console.server import ConsoleServer

    servers = cluster.bootstrap_servers
    # On C and X only, so that the next test's stopped Y leaves it alone.
    c = cluster.controller_id()
    assert c is not None
    x = next(b for b in cluster.broker_ids if b != c)
    create_topic(zk, "sized", znodes.TopicAssignment({0: (c, x), 1: (x, c)}))
    wait_for(lambda: [leader(zk, "sized"), leader_of(zk, "sized", 1)] == [c, x])
    with Admin(bootstrap_servers=servers) as admin:
        with Producer(bootstrap_servers=servers, acks="all", linger_ms=0) as producer:
            for n in range(60):
                producer.send("sized", b"s" * (100 + n), partition=n % 2)
            producer.flush()
        parts = {p.partition: p for p in admin.describe_topic("sized").partitions}
        described = admin.describe_log_dirs()
    assert sorted(described) == sorted(cluster.broker_ids)
    for broker, (directory,) in described.items():
        assert directory.path == str(cluster.log_dir(broker))
        assert 0 < directory.usable_bytes <= directory.total_bytes
        for index, part in parts.items():
            tp = TopicPartition("sized", index)
            if broker not in part.replicas:
                assert tp not in directory.replica_sizes
                continue
            # acks=all: each replica has every record; its size is its segment files'.
            files = (cluster.log_dir(broker) / f"sized-{index}").glob("*.log")
            on_disk = sum(f.stat().st_size for f in files)
            assert directory.replica_sizes[tp] == on_disk > 30 * 100, (broker, index)
    leaders = {
        i: described[p.leader][0].replica_sizes[TopicPartition("sized", i)]
        for i, p in parts.items()
    }

    console = ConsoleServer(ConsoleConfig(bootstrap_servers=servers), port=0)
    console.start()
    try:
        with urllib.request.urlopen(f"{console.url}/topics/sized", timeout=30) as answer:
            page = answer.read().decode()
    finally:
        console.close()
    shown = re.findall(r'<td class="num size"[^>]*>([^<]*)</td>', page)
    assert shown == [format_bytes(leaders[0]), format_bytes(leaders[1])]


def test_alerting_metrics_follow_failures(cluster: LocalCluster, zk: ZkClient) -> None:
    c = cluster.controller_id()
    assert c is not None
    x, y = (b for b in cluster.broker_ids if b != c)
    create_topic(zk, "urp", znodes.TopicAssignment({0: (c, x, y)}), {"min.insync.replicas": "3"})
    create_topic(zk, "solo", znodes.TopicAssignment({0: (x,)}))
    create_topic(
        zk,
        "unclean",
        znodes.TopicAssignment({0: (x, y)}),
        {"unclean.leader.election.enable": "true"},
    )
    wait_for(lambda: [leader(zk, t) for t in ("urp", "solo", "unclean")] == [c, x, x])
    wait_for(lambda: all(cluster.metrics_url(b) for b in cluster.broker_ids))

    # Healthy: each broker counts the partitions it leads (of these topics and the earlier
    # tests'), nothing is under-replicated.
    led = dict.fromkeys(cluster.broker_ids, 0)
    for topic in list_topics(zk):
        assignment = read_topic_assignment(zk, topic)
        assert assignment is not None
        for index in assignment.partitions:
            state = read_partition_state(zk, topic, index)
            assert state is not None
            led[state.value.leader] += 1
    assert led[c] >= 1 and led[x] >= 2
    wait_for(lambda: all(gauge(cluster, b, "spark_mq_leader_partitions") == led[b] for b in led))
    for b in cluster.broker_ids:
        healthy = scrape(cluster, b)
        assert healthy[("spark_mq_under_replicated_partitions", ())] == 0, b
        assert healthy[("spark_mq_offline_partitions", ())] == 0, b
        assert healthy[("spark_mq_active_controller", ())] == (1 if b == c else 0), b
    before = scrape(cluster, c)
    elections = before[("spark_mq_leader_elections_total", ())]
    unclean = before[("spark_mq_unclean_leader_elections_total", ())]

    # Y stops fetching: an acks=all produce to urp waits in C's purgatory for it, until C
    # drops Y from the ISR, which leaves urp under-replicated and under min.insync.replicas.
    cluster.pause(y)
    conn = send_produce(cluster, c, "urp")
    try:
        wait_for(lambda: gauge(cluster, c, "spark_mq_produce_purgatory_size") == 1, 10)
        wait_for(lambda: isr(zk, "urp") == {c, x}, 10)
        wait_for(lambda: gauge(cluster, c, "spark_mq_produce_purgatory_size") == 0, 10)
    finally:
        conn.close()
    on_c = scrape(cluster, c)
    assert on_c[("spark_mq_under_replicated_partitions", ())] == 1
    assert on_c[("spark_mq_under_min_isr_partitions", ())] == 1
    # X leads unclean, which has min.insync.replicas 1: under-replicated, not under min ISR.
    wait_for(lambda: isr(zk, "unclean") == {x}, 10)
    on_x = scrape(cluster, x)
    assert on_x[("spark_mq_under_replicated_partitions", ())] == 1
    assert on_x[("spark_mq_under_min_isr_partitions", ())] == 0

    # X and Y dead: solo has no replica left, unclean none in its ISR. The controller counts
    # both offline; the other brokers count none.
    cluster.kill(y)
    cluster.kill(x)
    try:
        wait_for(lambda: gauge(cluster, c, "spark_mq_offline_partitions") == 2, 30)
        # Y comes back alone: only it can lead unclean, from outside the ISR.
        cluster.start_broker(y)
        wait_for(lambda: leader(zk, "unclean") == y, 30)
        wait_for(lambda: gauge(cluster, c, "spark_mq_offline_partitions") == 1, 30)
        after = scrape(cluster, c)
        assert after[("spark_mq_unclean_leader_elections_total", ())] == unclean + 1
        assert after[("spark_mq_leader_elections_total", ())] > elections
        assert gauge(cluster, y, "spark_mq_offline_partitions") == 0
    finally:
        cluster.start_broker(x)
        cluster.start_broker(y)
    wait_for(lambda: gauge(cluster, c, "spark_mq_offline_partitions") == 0, 30)
