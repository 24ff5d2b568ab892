"""Clients follow leaders in a real three-broker LocalCluster with its own controller: a
partition's leader is killed (SIGKILL), its ZooKeeper session expires and the controller
elects another replica; a producer, a consumer and an Admin made before the kill notice the
dropped connection, refresh their metadata and go to the new leader within their timeouts.
``bootstrap.servers`` may list dead servers before a live one; the client's node map follows
the live brokers; a request to a broker that restarted on another port looks up where it
listens now; a produce to a replica that lost its leadership (NOT_LEADER_OR_FOLLOWER) makes
the producer refresh. ``spark-mq topics describe`` shows the layout and, after a kill, the
under-replicated and unavailable partitions.

One cluster is shared by the tests of this module: each uses a topic of its own and starts
the brokers it killed again before it ends."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from cluster_fixtures import ClusterFactory, broker_address, replica_properties
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.cli import main
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ClientConfig
from spark_mq.client.connection import BrokerConnection
from spark_mq.client.descriptions import PartitionDescription
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.cluster.zookeeper_server import free_loopback_port
from spark_mq.errors import BrokerNotAvailableError, UnknownTopicOrPartitionError
from spark_mq.protocol.api_versions import ApiVersionsRequest
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse

pytestmark = pytest.mark.slow

#: A killed broker's session ends, and its partitions move, this long after the kill.
SESSION_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3, session_timeout_ms=SESSION_TIMEOUT_MS, broker_properties=replica_properties()
    )


def _dead_server() -> str:
    return f"127.0.0.1:{free_loopback_port()}"


def _create(cluster: LocalCluster, topic: str, partitions: int = 3) -> list[PartitionDescription]:
    """Create ``topic`` (replication factor 3) and wait until every broker knows it with a
    full ISR; its partitions as described then."""
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=3)
    described: list[PartitionDescription] = []
    for broker_id in cluster.broker_ids:
        with Admin(bootstrap_servers=cluster.broker_server(broker_id)) as admin:

            def full(a: Admin = admin) -> bool:
                if topic not in a.list_topics():
                    return False
                parts = a.describe_topic(topic).partitions
                described[:] = parts
                return all(p.leader > 0 and sorted(p.isr) == [1, 2, 3] for p in parts)

            wait_for(full, timeout_s=30)
    return described


def _leader_told_by(cluster: LocalCluster, broker_id: int, topic: str, partition: int) -> int:
    """The leader of ``topic``'s ``partition`` in ``broker_id``'s Metadata answer."""
    conn = BrokerConnection(broker_address(cluster, broker_id))
    conn.connect()
    try:
        answer: MetadataResponse = conn.request(MetadataRequest([topic]), timeout_s=10)
    finally:
        conn.close()
    parts = {p.partition: p for p in answer.topics[0].partitions}
    return parts[partition].leader_id if partition in parts else -1


def _victim(cluster: LocalCluster, parts: list[PartitionDescription]) -> PartitionDescription:
    """A partition whose leader is not the controller (killing the controller would add a
    controller election to what the test waits for)."""
    controller = cluster.controller_id()
    return next(p for p in parts if p.leader != controller)


def _survivor(cluster: LocalCluster, victim: int) -> int:
    return next(b for b in cluster.broker_ids if b != victim)


def _restore(cluster: LocalCluster, broker_id: int, *, new_port: bool = False) -> None:
    """Start a killed broker again and wait until the controller lists it as live."""
    cluster.start_broker(broker_id, new_port=new_port)
    with Admin(bootstrap_servers=cluster.broker_server(_survivor(cluster, broker_id))) as admin:
        wait_for(lambda: broker_id in admin.describe_cluster().broker_ids, timeout_s=30)


def _elections(cluster: LocalCluster, broker_id: int) -> float:
    """The broker's spark_mq_leader_elections_total (its Prometheus endpoint)."""
    url = cluster.metrics_url(broker_id)
    assert url is not None
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    (value,) = (
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "spark_mq_leader_elections_total"
    )
    return value


def test_the_producer_follows_a_leader_that_moves_off_a_killed_broker(
    cluster: LocalCluster,
) -> None:
    victim = _victim(cluster, _create(cluster, "p"))
    survivor = _survivor(cluster, victim.leader)
    controller = cluster.controller_id()
    assert controller is not None
    elections_before = _elections(cluster, controller)
    with Producer(
        bootstrap_servers=cluster.broker_server(survivor),
        config={"delivery.timeout.ms": 60000, "retry.backoff.max.ms": 200},
    ) as producer:
        # The producer knows the leader and has a connection to it.
        assert producer.send("p", b"before", partition=victim.partition).get(30).offset == 0
        cluster.kill(victim.leader)
        try:
            metadata = producer.send("p", b"after", partition=victim.partition).get(timeout=45)
        finally:
            _restore(cluster, victim.leader)
    assert metadata.offset == 1
    # The controller counted the leaders it elected off the killed broker.
    assert _elections(cluster, controller) > elections_before
    tp = TopicPartition("p", victim.partition)
    with Consumer(bootstrap_servers=cluster.broker_server(survivor)) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
    assert got == [b"before", b"after"]


def test_the_consumer_follows_a_leader_that_moves_off_a_killed_broker(
    cluster: LocalCluster,
) -> None:
    victim = _victim(cluster, _create(cluster, "c"))
    survivor = _survivor(cluster, victim.leader)
    tp = TopicPartition("c", victim.partition)
    with Producer(bootstrap_servers=cluster.broker_server(survivor)) as producer:
        producer.send("c", b"r0", partition=victim.partition).get(timeout=30)
        with Consumer(
            bootstrap_servers=cluster.broker_server(survivor), config={"retry.backoff.max.ms": 200}
        ) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            # The consumer fetches from the leader before the kill ...
            got: list[bytes | None] = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                got = [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
            assert got == [b"r0"]
            cluster.kill(victim.leader)
            try:
                # ... and after it, from the replica the controller elected.
                producer.send("c", b"r1", partition=victim.partition).get(timeout=45)
                got = []
                deadline = time.monotonic() + 45
                while not got and time.monotonic() < deadline:
                    got = [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
            finally:
                _restore(cluster, victim.leader)
    assert got == [b"r1"]


def test_bootstrap_skips_dead_servers_and_the_node_map_follows_the_live_brokers(
    cluster: LocalCluster,
) -> None:
    controller = cluster.controller_id()
    victim = next(b for b in cluster.broker_ids if b != controller)
    live = _survivor(cluster, victim)
    servers = ",".join([_dead_server(), _dead_server(), cluster.broker_server(live)])
    client = Cluster(ClientConfig.from_properties({"bootstrap.servers": servers}))
    try:
        # Two dead bootstrap servers are skipped for the live third.
        assert sorted(b.node_id for b in client.refresh([]).brokers) == [1, 2, 3]
        assert sorted(client.nodes()) == [1, 2, 3]
        cluster.kill(victim)
        try:
            # Once its session ended, the metadata no longer lists it, and the client no
            # longer dials it by id (it asks for a refresh instead).
            def gone() -> bool:
                client.refresh([])
                return victim not in client.nodes()

            wait_for(gone, timeout_s=30)
            with pytest.raises(BrokerNotAvailableError, match="not among the live brokers"):
                client.address_for(victim)
            assert client.update_requested
            client.refresh([])
            assert not client.update_requested
        finally:
            _restore(cluster, victim)
        # A broker that comes back is in the node map again, where it listens now.
        client.refresh([])
        assert client.nodes()[victim] == broker_address(cluster, victim)
    finally:
        client.close()


def test_admin_delete_records_follows_a_leader_that_moves_off_a_killed_broker(
    cluster: LocalCluster,
) -> None:
    victim = _victim(cluster, _create(cluster, "d"))
    survivor = _survivor(cluster, victim.leader)
    tp = TopicPartition("d", victim.partition)
    with Producer(bootstrap_servers=cluster.broker_server(survivor)) as producer:
        for value in (b"a", b"b", b"c", b"d"):
            producer.send("d", value, partition=victim.partition).get(timeout=30)
    with Admin(
        bootstrap_servers=cluster.broker_server(survivor), config={"retry.backoff.max.ms": 200}
    ) as admin:
        # The Admin knows the leader and has a connection to it.
        assert admin.delete_records({tp: 1}) == {tp: 1}
        cluster.kill(victim.leader)
        try:
            assert admin.delete_records({tp: 3}) == {tp: 3}
        finally:
            _restore(cluster, victim.leader)


def test_a_request_to_a_broker_looks_up_where_it_listens_now(cluster: LocalCluster) -> None:
    controller = cluster.controller_id()
    victim = next(b for b in cluster.broker_ids if b != controller)
    live = _survivor(cluster, victim)
    client = Cluster(
        ClientConfig.from_properties({"bootstrap.servers": cluster.broker_server(live)})
    )
    try:
        client.refresh([])
        old = client.nodes()[victim]
        # The broker restarts and listens on another port (it moved).
        cluster.kill(victim)
        _restore(cluster, victim, new_port=True)
        now = broker_address(cluster, victim)
        assert now != old
        with Admin(bootstrap_servers=cluster.broker_server(live)) as admin:
            wait_for(
                lambda: (
                    (victim, now.host, now.port)
                    in {b[:3] for b in admin.describe_cluster().brokers}
                ),
                timeout_s=30,
            )
        # The client still has the old address: the failed connection makes the request
        # look again before its next attempt.
        assert client.nodes()[victim] == old
        answer = client.request(ApiVersionsRequest(), node_id=victim)
        assert answer.error_code == 0 and client.nodes()[victim] == now
    finally:
        client.close()


def test_the_producer_refreshes_on_not_leader_or_follower(cluster: LocalCluster) -> None:
    victim = _victim(cluster, _create(cluster, "n"))
    old_leader = victim.leader
    survivor = _survivor(cluster, old_leader)
    with Producer(
        bootstrap_servers=cluster.broker_server(survivor),
        config={"delivery.timeout.ms": 60000, "retry.backoff.max.ms": 200},
    ) as producer:
        assert producer.send("n", b"v0", partition=victim.partition).get(30).offset == 0
        # The leader freezes; its session expires and the controller elects another
        # replica. Resumed, the old leader is alive (the producer's connection to it still
        # open) but a follower: it answers NOT_LEADER_OR_FOLLOWER.
        cluster.pause(old_leader)
        try:
            with Admin(bootstrap_servers=cluster.broker_server(survivor)) as admin:

                def moved() -> bool:
                    part = admin.describe_topic("n").partitions[victim.partition]
                    return part.leader not in (-1, old_leader)

                wait_for(moved, timeout_s=30)
        finally:
            cluster.resume(old_leader)
        # The old leader has heard from the controller that it no longer leads.
        wait_for(lambda: _leader_told_by(cluster, old_leader, "n", victim.partition)
                 not in (-1, old_leader), timeout_s=30)  # fmt: skip
        assert producer.send("n", b"v1", partition=victim.partition).get(timeout=30).offset == 1
    with Admin(bootstrap_servers=cluster.broker_server(survivor)) as admin:
        # The cluster is whole again for whatever comes next.
        wait_for(lambda: old_leader in admin.describe_cluster().broker_ids, timeout_s=30)


def _leader_known(admin: Admin, topic: str) -> bool:
    try:
        return admin.describe_topic(topic).partitions[0].leader > 0
    except UnknownTopicOrPartitionError:
        return False


def test_describe_shows_the_layout_and_the_partitions_a_killed_broker_leaves(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    controller = cluster.controller_id()
    victim = next(b for b in cluster.broker_ids if b != controller)
    survivor = _survivor(cluster, victim)
    _create(cluster, "t", partitions=2)
    with Admin(bootstrap_servers=cluster.broker_server(survivor)) as admin:
        # A topic whose only replica is the broker to be killed: it becomes unavailable.
        admin.create_topic("single", partitions=1, replication_factor=1)
        # The Admin may ask another broker than the one that created the topic, which
        # learns of it from the controller's UpdateMetadata a moment later (as in Kafka).
        wait_for(lambda: _leader_known(admin, "single"), 30)
    with Producer(bootstrap_servers=cluster.broker_server(survivor)) as producer:
        producer.send("t", b"x", partition=0).get(timeout=30)

    def describe(topic: str, *args: str) -> str:
        server = cluster.broker_server(survivor)
        assert main(["topics", "describe", topic, "--bootstrap-server", server, *args]) == 0
        return capsys.readouterr().out

    lines = describe("t").splitlines()
    assert lines[0].startswith("Topic: t\tTopicId: ")
    assert lines[0].endswith("\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: ")
    assert lines[1].startswith("\tTopic: t\tPartition: 0\tLeader: ")
    assert "\tIsr: " in lines[1] and "\tLeaderEpoch: " in lines[1]
    assert lines[1].endswith("\tLogStartOffset: 0\tHighWatermark: 1\tLastStableOffset: 1")
    assert describe("t", "--under-replicated-partitions") == ""
    assert describe("t", "--unavailable-partitions") == ""

    with Admin(bootstrap_servers=cluster.broker_server(survivor)) as admin:
        single = admin.describe_topic("single").partitions[0].leader
    cluster.kill(single)
    try:
        with Admin(bootstrap_servers=cluster.broker_server(_survivor(cluster, single))) as admin:
            wait_for(lambda: single not in admin.describe_cluster().broker_ids, timeout_s=30)
        survivor = _survivor(cluster, single)
        # Every partition of t had a replica on the killed broker: each leaves the ISR
        # (by the controller's election, or by its leader's AlterPartition once the lag
        # time passed).
        wait_for(lambda: len(describe("t", "--under-replicated-partitions").splitlines()) == 2,
                 timeout_s=30)  # fmt: skip
        assert describe("t", "--unavailable-partitions") == ""
        (document,) = json.loads(describe("single", "--unavailable-partitions", "--json"))
        assert [(p["partition"], p["leader"]) for p in document["partitions"]] == [(0, -1)]
        # Metadata answers the partition without a leader, and says to retry.
        conn = BrokerConnection(broker_address(cluster, survivor))
        conn.connect()
        try:
            answer: MetadataResponse = conn.request(MetadataRequest(["single"]), timeout_s=10)
        finally:
            conn.close()
        (part,) = answer.topics[0].partitions
        assert (part.error_code, part.leader_id) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
        assert part.error_message and "retry" in part.error_message
    finally:
        _restore(cluster, single)
