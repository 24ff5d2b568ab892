"""SCRAM users in a real two-broker LocalCluster (broker/zk/user_credentials.py): a user added
through one broker is in ZooKeeper as Kafka keeps it (``/config/users/<user>``, salted keys,
no password) and every broker's store has it within seconds, through the change
notification; removing it reaches every broker the same way. A broker started afterwards
reads the users at start-up. What each broker holds is asked of that broker itself
(DescribeUserScramCredentials answers from its own store)."""

from __future__ import annotations

import json

import pytest
from cluster_fixtures import ClusterFactory, request_to
from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq import Admin, UserScramCredentialDeletion, UserScramCredentialUpsertion
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.sasl import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

pytestmark = pytest.mark.slow

PASSWORD = "Cluster-Secret-5d1e"


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(2)


def mechanisms_on(cluster: LocalCluster, broker_id: int, user: str) -> list[str]:
    response: DescribeUserScramCredentialsResponse = request_to(
        cluster, broker_id, DescribeUserScramCredentialsRequest([user])
    )
    (result,) = response.results
    return [info.mechanism for info in result.credential_infos]


def test_users_reach_every_broker(cluster: LocalCluster, zk_module_connect: str) -> None:
    first = cluster.state["brokers"]["1"]
    with Admin(bootstrap_servers=f"{first['host']}:{first['port']}") as admin:
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion("ivan", "SCRAM-SHA-512", PASSWORD),
                UserScramCredentialUpsertion("ivan", "SCRAM-SHA-256", PASSWORD),
            ]
        )
    for broker_id in (1, 2):
        wait_for(
            lambda b=broker_id: (
                mechanisms_on(cluster, b, "ivan") == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
            ),
            timeout_s=5,
        )

    zk = KazooClient(hosts=zk_module_connect)
    zk.start(timeout=10)
    try:
        data, _ = zk.get("/config/users/ivan")
        doc = json.loads(data)
        assert doc["version"] == 1 and set(doc["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert doc["config"]["SCRAM-SHA-512"].endswith(",iterations=4096")
        assert "stored_key=" in doc["config"]["SCRAM-SHA-512"]
        dumped = [zk.get(f"/config/changes/{c}")[0] for c in zk.get_children("/config/changes")]
        assert any(b'"entity_path":"users/ivan"' in d for d in dumped)
        assert PASSWORD.encode() not in data
    finally:
        zk.stop()
        zk.close()

    # A broker that restarts reads the users at start-up.
    cluster.stop_broker(2)
    cluster.start_broker(2)
    assert mechanisms_on(cluster, 2, "ivan") == ["SCRAM-SHA-256", "SCRAM-SHA-512"]

    second = cluster.state["brokers"]["2"]
    with Admin(bootstrap_servers=f"{second['host']}:{second['port']}") as admin:
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialDeletion("ivan", "SCRAM-SHA-512"),
                UserScramCredentialDeletion("ivan", "SCRAM-SHA-256"),
            ]
        )
    for broker_id in (1, 2):
        wait_for(
            lambda b=broker_id: mechanisms_on(cluster, b, "ivan") == [],
            timeout_s=5,
        )

    # The password is in no broker's directory or log.
    for path in cluster.directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert PASSWORD.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("user", ["svc/etl", "..", "a%2Fb"])
def test_user_names_that_need_encoding_reach_every_broker(
    cluster: LocalCluster, zk_module_connect: str, user: str
) -> None:
    """A user name with "/", ".." or a "%" is sanitized in its znode's path and in the
    change notification alike (Kafka's Sanitizer), so every broker applies it at once, not
    only at its next full reload."""
    first = cluster.state["brokers"]["1"]
    with Admin(bootstrap_servers=f"{first['host']}:{first['port']}") as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, "SCRAM-SHA-256", PASSWORD)]
        )
    for broker_id in (1, 2):
        wait_for(
            lambda b=broker_id: mechanisms_on(cluster, b, user) == ["SCRAM-SHA-256"],
            timeout_s=5,
        )
    with Admin(bootstrap_servers=f"{first['host']}:{first['port']}") as admin:
        admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, "SCRAM-SHA-256")])
    for broker_id in (1, 2):
        wait_for(lambda b=broker_id: mechanisms_on(cluster, b, user) == [], timeout_s=5)
