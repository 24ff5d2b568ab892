"""A three-broker LocalCluster whose only listener is SASL_SSL, so brokers and the controller
log in to each other with SASL/SCRAM-SHA-512 (user ``broker``, whose salted credential
LocalCluster writes to ZooKeeper before the brokers start) over TLS, then show the cluster's
secret with AuthenticateBroker. Had a broker's connection skipped SASL, the other broker would
refuse every request on it and no controller could reach a broker, nor a follower its leader.

Clients produce with acks=all (the ISR stays full, so every follower fetched over SASL_SSL);
after the leader stops, the records are read back from the follower that took over. A client
with a wrong password is refused. The brokers' password is in no broker's output and nowhere
in ZooKeeper (only the salted credential is). A fourth broker started with a wrong
inter-broker password registers, but cannot fetch as a follower: the leader refuses its
connections, and its log names the mechanism and user, not the password.

Sessions last 2 s (``connections.max.reauth.ms``): the brokers' own connections and the
clients re-authenticate throughout, and none is closed for an expired session.

One cluster is shared by the tests of this module."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_fixtures import SHORT_SESSION_MS, ClusterFactory, ClusterPki, replica_properties
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition, UserScramCredentialUpsertion
from spark_mq.broker.properties_file import read_properties_file
from spark_mq.broker.sasl.credential_store import decode_user_config
from spark_mq.cluster.inter_broker_user import BROKER_USER, broker_user_properties, password_in
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import AuthenticationError, UnknownTopicOrPartitionError
from spark_mq.scram import ScramCredential

pytestmark = pytest.mark.slow

APP_PASSWORD = "App-Secret-77c1"


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory, cluster_pki: ClusterPki) -> LocalCluster:
    return start_module_cluster(
        3,
        session_timeout_ms=SHORT_SESSION_MS,
        listener_name="SASL_SSL",
        broker_properties={
            **cluster_pki.broker_properties(),
            **replica_properties(lag_time_max_ms=None),
            # Sessions of 2 s: the brokers' own connections re-authenticate throughout.
            "connections.max.reauth.ms": "2000",
        },
    )


def broker_password(cluster: LocalCluster) -> str:
    password = password_in("SASL_SSL", read_properties_file(cluster.properties_path(1)))
    assert password
    return password


@pytest.fixture(scope="module")
def app_user(cluster: LocalCluster) -> str:
    """User ``app``, added by an admin that logs in as the brokers' user."""
    with Admin(
        bootstrap_servers=cluster.bootstrap_servers,
        config=client(cluster, BROKER_USER, broker_password(cluster)),
    ) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("app", "SCRAM-SHA-512", APP_PASSWORD)]
        )
    return "app"


def client(cluster: LocalCluster, user: str, password: str) -> dict[str, Any]:
    props = read_properties_file(cluster.properties_path(1))
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": props["ssl.ca.location"],
    }


def _isr_size(admin: Admin, topic: str) -> int:
    try:
        return len(admin.describe_topic(topic).partitions[0].isr)
    except UnknownTopicOrPartitionError:
        return 0


def test_brokers_register_sasl_ssl_and_elect_a_controller(cluster: LocalCluster) -> None:
    assert cluster.controller_id() in cluster.broker_ids
    for registration in cluster.registered_brokers().values():
        assert [(e.listener_name, e.security_protocol) for e in registration.endpoints] == [
            ("SASL_SSL", "SASL_SSL")
        ]
    mode = cluster.properties_path(1).stat().st_mode & 0o777
    assert mode == 0o600


def test_acks_all_replicates_over_sasl_ssl(cluster: LocalCluster, app_user: str) -> None:
    config = client(cluster, app_user, APP_PASSWORD)
    servers = cluster.bootstrap_servers
    with Admin(bootstrap_servers=servers, config=config) as admin:
        admin.create_topic("secure", partitions=1, replication_factor=3)
        wait_for(lambda: _isr_size(admin, "secure") == 3, timeout_s=30)
    values = [f"record-{i}".encode() for i in range(200)]
    with Producer(bootstrap_servers=servers, acks="all", config=config) as producer:
        futures = [producer.send("secure", v) for v in values]
        producer.flush()
        assert [f.get(30).offset for f in futures] == list(range(200))
    with Admin(bootstrap_servers=servers, config=config) as admin:
        described = admin.describe_topic("secure").partitions[0]
    assert len(described.isr) == 3
    leader = described.leader
    cluster.stop_broker(leader)
    try:
        with Admin(bootstrap_servers=cluster.bootstrap_servers, config=config) as admin:
            wait_for(
                lambda: admin.describe_topic("secure").partitions[0].leader not in (-1, leader),
                timeout_s=30,
            )
        read: list[bytes] = []
        with Consumer(
            bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest", config=config
        ) as consumer:
            consumer.assign([TopicPartition("secure", 0)])
            deadline = time.monotonic() + 30
            while len(read) < len(values) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    read.extend(r.value for r in records)
        assert read == values
    finally:
        cluster.start_broker(leader)


def _reauth_counts(cluster: LocalCluster) -> tuple[float, float, float]:
    """Re-authentications (successful, failed) and expired connections closed, summed
    over the brokers' Prometheus endpoints."""
    success = failure = killed = 0.0
    for broker_id in cluster.broker_ids:
        url = cluster.metrics_url(broker_id)
        assert url is not None
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "spark_mq_sasl_reauthentications_total":
                    if sample.labels["result"] == "success":
                        success += sample.value
                    else:
                        failure += sample.value
                elif sample.name == "spark_mq_expired_connections_killed_total":
                    killed += sample.value
    return success, failure, killed


def test_brokers_and_clients_reauthenticate_over_sasl_ssl(
    cluster: LocalCluster, app_user: str
) -> None:
    """connections.max.reauth.ms=2000: for 4.5 s an acks=all producer writes while the
    followers fetch; every connection (the producer's, the replica fetchers', the
    controller's) re-authenticates in time, none is closed for an expired session, and no
    record is lost or duplicated."""
    config = client(cluster, app_user, APP_PASSWORD)
    servers = cluster.bootstrap_servers
    with Admin(bootstrap_servers=servers, config=config) as admin:
        admin.create_topic("reauth", partitions=1, replication_factor=3)
        wait_for(lambda: _isr_size(admin, "reauth") == 3, timeout_s=30)
    before = _reauth_counts(cluster)
    offsets: list[int] = []
    with Producer(bootstrap_servers=servers, acks="all", linger_ms=0, config=config) as producer:
        deadline = time.monotonic() + 4.5
        while time.monotonic() < deadline:
            offsets.append(producer.send("reauth", b"x").get(30).offset)
            time.sleep(0.01)
    after = _reauth_counts(cluster)
    assert offsets == list(range(len(offsets)))
    with Admin(bootstrap_servers=servers, config=config) as admin:
        assert len(admin.describe_topic("reauth").partitions[0].isr) == 3
    # Two followers re-authenticated at least twice each, and the producer too.
    assert after[0] - before[0] >= 5, (before, after)
    assert (after[1], after[2]) == (before[1], before[2]), (before, after)


def test_a_wrong_password_is_refused(cluster: LocalCluster, app_user: str) -> None:
    with (
        pytest.raises(AuthenticationError, match=r"SCRAM-SHA-512.*'app'") as refused,
        Admin(
            bootstrap_servers=cluster.bootstrap_servers,
            config=client(cluster, app_user, "not-" + APP_PASSWORD),
        ) as admin,
    ):
        admin.list_topics()
    assert APP_PASSWORD not in str(refused.value)


def _znodes(zk: KazooClient, path: str) -> Iterator[tuple[str, bytes]]:
    data, _ = zk.get(path)
    yield path, data or b""
    for child in zk.get_children(path):
        yield from _znodes(zk, f"{path.rstrip('/')}/{child}")


def test_the_password_is_in_no_log_and_not_in_zookeeper(
    cluster: LocalCluster, zk_module_connect: str
) -> None:
    password = broker_password(cluster)
    for broker_id in cluster.broker_ids:
        output = cluster.output_path(broker_id).read_text(encoding="utf-8", errors="replace")
        assert output  # the brokers did log
        assert password not in output
    zk = KazooClient(hosts=zk_module_connect)
    zk.start(timeout=10)
    try:
        everything = dict(_znodes(zk, "/"))
    finally:
        zk.stop()
        zk.close()
    assert not [path for path, data in everything.items() if password.encode() in data]
    stored = json.loads(everything[f"/config/users/{BROKER_USER}"])["config"]
    (credential,) = decode_user_config(BROKER_USER, stored).values()
    assert isinstance(credential, ScramCredential)
    assert credential.verify_password(password)


def test_a_broker_with_a_wrong_password_cannot_join(cluster: LocalCluster, app_user: str) -> None:
    """Broker 4 logs in with a wrong password: the leader of a partition reassigned to it
    refuses its fetcher's connections, so it never joins the ISR, and its log says which
    mechanism and user failed."""
    config = client(cluster, app_user, APP_PASSWORD)
    # The topic is made before broker 4 runs, so its one replica is on a broker that logs in.
    with Admin(bootstrap_servers=cluster.bootstrap_servers, config=config) as admin:
        admin.create_topic("stranger", partitions=1, replication_factor=1)
        wait_for(lambda: _isr_size(admin, "stranger") == 1, timeout_s=30)
        leader = admin.describe_topic("stranger").partitions[0].leader
    wrong = "wrong-" + broker_password(cluster)
    props = read_properties_file(cluster.properties_path(1))
    home = cluster.directory / "broker-4"
    (home / "logs").mkdir(parents=True)
    props.update(
        {
            "broker.id": "4",
            "log.dirs": str(home / "logs"),
            "listeners": "SASL_SSL://127.0.0.1:0",
            **broker_user_properties("SASL_SSL", wrong),
        }
    )
    path = home / "broker.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    out_path = home / "broker.out"
    with open(out_path, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "spark_mq.broker", "--config", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: 4 in cluster.registered_brokers(), timeout_s=30)
        with Admin(bootstrap_servers=cluster.bootstrap_servers, config=config) as admin:
            admin.alter_partition_reassignments({("stranger", 0): [leader, 4]})

            def refused() -> bool:
                text = out_path.read_text(encoding="utf-8", errors="replace")
                return f"refused SASL SCRAM-SHA-512 authentication of user '{BROKER_USER}'" in text

            wait_for(refused, timeout_s=30)
            assert list(admin.describe_topic("stranger").partitions[0].isr) == [leader]
        assert wrong not in out_path.read_text(encoding="utf-8", errors="replace")
    finally:
        process.kill()
        process.wait()
