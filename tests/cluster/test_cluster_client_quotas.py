"""Client quotas of a cluster in ZooKeeper, as Kafka keeps them (broker/zk/client_quotas.py),
on a real one-broker LocalCluster: a quota altered through the broker is in
``/config/users/<u>`` (beside the user's SCRAM credentials, which it keeps) and
``/config/users/<u>/clients/<c>``; one written into ZooKeeper directly (as
``kafka-configs --zookeeper`` or ``spark-mq quotas alter --zookeeper`` do) is applied by the
broker within seconds through the change notification. What the broker holds is asked of
it (DescribeClientQuotas answers from its own store)."""

from __future__ import annotations

import json

import pytest
from cluster_fixtures import ClusterFactory
from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq import Admin, UserScramCredentialUpsertion
from spark_mq.cli import main as cli_main
from spark_mq.client.quota_admin import DEFAULT, ClientQuotaAlteration, ClientQuotaEntity
from spark_mq.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(1)


def bootstrap(cluster: LocalCluster) -> str:
    entry = cluster.state["brokers"]["1"]
    return f"{entry['host']}:{entry['port']}"


def znode_config(connect: str, path: str) -> dict[str, str]:
    zk = KazooClient(hosts=connect)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(path)
    finally:
        zk.stop()
        zk.close()
    doc = json.loads(data)
    assert doc["version"] == 1
    return doc["config"]  # type: ignore[no-any-return]


def test_quotas_altered_through_a_broker_are_kept_as_kafka_keeps_them(
    cluster: LocalCluster, zk_module_connect: str
) -> None:
    with Admin(bootstrap_servers=bootstrap(cluster)) as admin:
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("quinn", "SCRAM-SHA-512", "Quota-Secret-77a")]
        )
        admin.alter_client_quotas(
            [
                ClientQuotaAlteration(
                    ClientQuotaEntity(user="quinn"), {"producer_byte_rate": 2048}
                ),
                ClientQuotaAlteration(
                    ClientQuotaEntity(user="quinn", client_id="etl/job"),
                    {"consumer_byte_rate": 4096},
                ),
            ]
        )
        # The SCRAM credential written after the quota keeps it too.
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("quinn", "SCRAM-SHA-256", "Quota-Secret-77a")]
        )
    user = znode_config(zk_module_connect, "/config/users/quinn")
    assert user["producer_byte_rate"] == "2048"
    assert {"SCRAM-SHA-512", "SCRAM-SHA-256"} <= set(user)
    assert znode_config(zk_module_connect, "/config/users/quinn/clients/etl%2Fjob") == {
        "consumer_byte_rate": "4096"
    }
    # ZooKeeper refuses ".." as a path component: the name is encoded in full.
    dots = ClientQuotaEntity(client_id="..")
    with Admin(bootstrap_servers=bootstrap(cluster)) as admin:
        admin.alter_client_quotas([ClientQuotaAlteration(dots, {"producer_byte_rate": 512})])
        assert admin.describe_client_quotas()[dots] == {"producer_byte_rate": 512.0}
    assert znode_config(zk_module_connect, "/config/clients/%2E%2E") == {
        "producer_byte_rate": "512"
    }
    with Admin(bootstrap_servers=bootstrap(cluster)) as admin:
        admin.alter_client_quotas([ClientQuotaAlteration(dots, {"producer_byte_rate": None})])
        assert dots not in admin.describe_client_quotas()


def test_a_quota_written_into_zookeeper_is_applied_by_the_broker(
    cluster: LocalCluster, zk_module_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # As kafka-configs --zookeeper: no broker is asked, the change notification tells them.
    written = cli_main(
        [
            "quotas", "alter", "--zookeeper", zk_module_connect,
            "--entity-type", "clients", "--entity-default",
            "--add-config", "request_percentage=80",
        ]
    )  # fmt: skip
    assert written == 0, capsys.readouterr().err
    assert znode_config(zk_module_connect, "/config/clients/<default>") == {
        "request_percentage": "80"
    }
    wanted = {ClientQuotaEntity(client_id=DEFAULT): {"request_percentage": 80.0}}
    with Admin(bootstrap_servers=bootstrap(cluster)) as admin:

        def applied() -> bool:
            found = admin.describe_client_quotas()
            return {e: v for e, v in found.items() if e.user is None} == wanted

        wait_for(applied, timeout_s=10)
        admin.alter_client_quotas(
            [
                ClientQuotaAlteration(
                    ClientQuotaEntity(client_id=DEFAULT), {"request_percentage": None}
                )
            ]
        )
    capsys.readouterr()
    assert cli_main(["quotas", "describe", "--zookeeper", zk_module_connect, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)["quotas"]
    assert all(q["entity"] != {"client-id": "<default>"} for q in described)
