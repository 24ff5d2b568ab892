"""A three-broker LocalCluster whose only listener is SSL, so brokers and the controller talk
to each other over TLS: its brokers require client certificates (ssl.client.auth=required),
so a broker that connected in plaintext, or without its certificate, would be refused and
nothing would replicate. Clients produce with acks=all over TLS, the records are in every
replica's log (the ISR stays full), and after the leader stops they are read back from the
follower that took over. The registration in ZooKeeper lists the SSL endpoint with its
protocol, as Kafka's ``endpoints`` and ``listener_security_protocol_map`` do.

One cluster is shared by the tests of this module."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cluster_fixtures import SHORT_SESSION_MS, ClusterFactory, ClusterPki, replica_properties
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import SslAuthenticationError, UnknownTopicOrPartitionError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory, cluster_pki: ClusterPki) -> LocalCluster:
    return start_module_cluster(
        3,
        session_timeout_ms=SHORT_SESSION_MS,
        listener_name="SSL",
        broker_properties={
            **cluster_pki.broker_properties(),
            "ssl.client.auth": "required",
            **replica_properties(lag_time_max_ms=None),
        },
    )


def client(pki: ClusterPki) -> dict[str, Any]:
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client.cert),
        "ssl.key.location": str(pki.client.key),
    }


def _isr_size(admin: Admin, topic: str) -> int:
    """The ISR size of partition 0 (0 while the broker asked does not know the topic yet)."""
    try:
        return len(admin.describe_topic(topic).partitions[0].isr)
    except UnknownTopicOrPartitionError:
        return 0


def test_registration_lists_the_ssl_endpoint(cluster: LocalCluster) -> None:
    for registration in cluster.registered_brokers().values():
        assert [(e.listener_name, e.security_protocol) for e in registration.endpoints] == [
            ("SSL", "SSL")
        ]


def test_acks_all_replicates_over_tls(cluster: LocalCluster, cluster_pki: ClusterPki) -> None:
    servers = cluster.bootstrap_servers
    with Admin(bootstrap_servers=servers, config=client(cluster_pki)) as admin:
        admin.create_topic("secure", partitions=1, replication_factor=3)
        wait_for(lambda: _isr_size(admin, "secure") == 3, timeout_s=30)
    values = [f"record-{i}".encode() for i in range(200)]
    with Producer(bootstrap_servers=servers, acks="all", config=client(cluster_pki)) as producer:
        futures = [producer.send("secure", v) for v in values]
        producer.flush()
        assert [f.get(30).offset for f in futures] == list(range(200))
    with Admin(bootstrap_servers=servers, config=client(cluster_pki)) as admin:
        described = admin.describe_topic("secure").partitions[0]
    # acks=all with a full ISR: every follower fetched the records over TLS.
    assert len(described.isr) == 3
    leader = described.leader
    cluster.stop_broker(leader)
    try:
        with Admin(
            bootstrap_servers=cluster.bootstrap_servers, config=client(cluster_pki)
        ) as admin:
            wait_for(
                lambda: admin.describe_topic("secure").partitions[0].leader not in (-1, leader),
                timeout_s=30,
            )
        read: list[bytes] = []
        with Consumer(
            bootstrap_servers=cluster.bootstrap_servers,
            auto_offset_reset="earliest",
            config=client(cluster_pki),
        ) as consumer:
            consumer.assign([TopicPartition("secure", 0)])
            deadline = time.monotonic() + 30
            while len(read) < len(values) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    read.extend(r.value for r in records)
        assert read == values
    finally:
        cluster.start_broker(leader)


def test_client_without_certificate_is_refused(
    cluster: LocalCluster, cluster_pki: ClusterPki
) -> None:
    no_cert = {"security.protocol": "SSL", "ssl.ca.location": str(cluster_pki.ca)}
    started = time.monotonic()
    with (
        pytest.raises(SslAuthenticationError),
        Admin(bootstrap_servers=cluster.bootstrap_servers, config=no_cert) as admin,
    ):
        admin.list_topics()
    assert time.monotonic() - started < 15
