"""Topic configuration on a three-broker LocalCluster (real ZooKeeper, real broker processes):
a topic with replication factor 1 lives on one broker only, yet DescribeConfigs answers the
same through every broker (from ``/config/topics/<t>``, as a single node answers from its
directory); AlterConfigs through a broker without a replica writes ZooKeeper and a change
notification, and the broker hosting the replica applies it to its log; a broker stopped
during a change applies it when it starts again; bad values are refused with the single
node's errors and change nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_fixtures import SHORT_SESSION_MS, ClusterFactory, request_to
from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq import Admin
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import SparkMQError, UnknownTopicOrPartitionError
from spark_mq.protocol.admin import RESOURCE_TOPIC, AlterConfigsRequest, AlterConfigsResource
from spark_mq.storage.topic_metadata import TopicMetadata

pytestmark = pytest.mark.slow

BAD_CHANGES = (
    {"retention.ms": "soon"},
    {"retention.msec": "1000"},
    {"cleanup.policy": "shred"},
    {"segment.bytes": "-5"},
)


@pytest.fixture(scope="module")
def zk_root(zk_module_connect: str) -> Iterator[KazooClient]:
    """A session on the module's chroot, to read what the brokers wrote."""
    client = KazooClient(hosts=zk_module_connect)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    # One cluster for the module: each test uses topics of its own.
    return start_module_cluster(3, session_timeout_ms=SHORT_SESSION_MS)


def _admin(cluster: LocalCluster, broker_id: int) -> Admin:
    """An admin client whose requests to any broker go to ``broker_id``."""
    return Admin(bootstrap_servers=cluster.broker_server(broker_id))


def _log_overrides(cluster: LocalCluster, broker_id: int, topic: str) -> dict[str, str] | None:
    """The overrides in the broker's own log directory (None: it holds no replica)."""
    path = cluster.log_dir(broker_id) / "__meta" / "topics" / f"{topic}.json"
    return dict(TopicMetadata.read(path).config) if path.exists() else None


def _create_rf1(cluster: LocalCluster, topic: str, config: dict[str, str]) -> tuple[int, list[int]]:
    """Create ``topic`` with one partition and one replica; its host and the other brokers,
    once the host holds the replica."""
    with _admin(cluster, 1) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=1, config=config)
    (view,) = [p for p in cluster.partitions() if p.topic == topic]
    (host,) = view.replicas
    wait_for(lambda: _log_overrides(cluster, host, topic) == config)
    others = [b for b in cluster.broker_ids if b != host]
    assert all(_log_overrides(cluster, b, topic) is None for b in others)
    _wait_known(cluster, topic)
    return host, others


def _wait_known(cluster: LocalCluster, topic: str) -> None:
    """Until every broker's metadata (the controller's UpdateMetadata) lists ``topic``."""
    for broker_id in cluster.broker_ids:
        with _admin(cluster, broker_id) as admin:
            wait_for(lambda a=admin: topic in a.list_topics())  # type: ignore[misc]


def _notifications(zk: KazooClient) -> list[str]:
    return sorted(zk.get_children("/config/changes")) if zk.exists("/config/changes") else []


def _single_node_answers(path: Path) -> tuple[dict[str, str | None], list[tuple[type, str]]]:
    """What a single node answers for a topic with retention.ms=3600000: its configs, and
    the error of each bad change."""
    errors = []
    with Admin(path=path) as admin:
        admin.create_topic("t", partitions=1, config={"retention.ms": "3600000"})
        configs = admin.describe_configs("t")
        for change in BAD_CHANGES:
            with pytest.raises(SparkMQError) as refused:
                admin.alter_configs("t", change)
            errors.append((type(refused.value), str(refused.value)))
        assert admin.describe_configs("t") == configs
    return configs, errors


def test_every_broker_describes_a_topic_it_may_not_host(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    host, _others = _create_rf1(cluster, "t", {"retention.ms": "3600000"})
    single, _errors = _single_node_answers(tmp_path / "single")
    for broker_id in cluster.broker_ids:
        with _admin(cluster, broker_id) as admin:
            described = admin.describe_topic("t")
            assert described.configs == {"retention.ms": "3600000"}, broker_id
            assert [p.replicas for p in described.partitions] == [(host,)]
            # Every key, with the same values and in the same order as a single node.
            assert list(admin.describe_configs("t").items()) == list(single.items()), broker_id
            with pytest.raises(UnknownTopicOrPartitionError):
                admin.describe_configs("no-such-topic")


def test_a_change_through_any_broker_reaches_the_replica(
    cluster: LocalCluster, zk_root: KazooClient
) -> None:
    host, others = _create_rf1(cluster, "u", {"retention.ms": "3600000"})
    with _admin(cluster, others[0]) as admin:
        admin.alter_configs("u", {"retention.ms": "60000", "segment.ms": "120000"})
    wanted = {"retention.ms": "60000", "segment.ms": "120000"}
    for broker_id in cluster.broker_ids:
        with _admin(cluster, broker_id) as admin:
            assert admin.describe_topic("u").configs == wanted, broker_id
    wait_for(lambda: _log_overrides(cluster, host, "u") == wanted)
    assert all(_log_overrides(cluster, b, "u") is None for b in others)

    # ZooKeeper holds Kafka's JSON: the overrides and one notification per change.
    data, _stat = zk_root.get("/config/topics/u")
    assert json.loads(data) == {"version": 1, "config": wanted}
    notices = [
        json.loads(zk_root.get(f"/config/changes/{child}")[0]) for child in _notifications(zk_root)
    ]
    assert {"version": 2, "entity_path": "topics/u"} in notices

    # Removing an override (None) is a change too: the default applies again.
    with _admin(cluster, others[1]) as admin:
        admin.alter_configs("u", {"segment.ms": None})
        assert admin.describe_topic("u").configs == {"retention.ms": "60000"}
    wait_for(lambda: _log_overrides(cluster, host, "u") == {"retention.ms": "60000"})
    with _admin(cluster, host) as admin:
        assert admin.describe_topic("u").configs == {"retention.ms": "60000"}


def test_a_broker_down_during_a_change_applies_it_when_it_starts(cluster: LocalCluster) -> None:
    host, others = _create_rf1(cluster, "v", {"retention.ms": "3600000"})
    cluster.stop_broker(host)
    try:
        with _admin(cluster, others[0]) as admin:
            admin.alter_configs("v", {"retention.ms": "120000"})
            assert admin.describe_configs("v")["retention.ms"] == "120000"
        # Nobody could change the stopped broker's directory.
        assert _log_overrides(cluster, host, "v") == {"retention.ms": "3600000"}
    finally:
        cluster.start_broker(host)
    wait_for(lambda: _log_overrides(cluster, host, "v") == {"retention.ms": "120000"})
    _wait_known(cluster, "v")  # the restarted broker's metadata comes from the controller
    with _admin(cluster, host) as admin:
        assert admin.describe_topic("v").configs == {"retention.ms": "120000"}


def test_bad_changes_are_refused_as_on_a_single_node(
    cluster: LocalCluster, tmp_path: Path, zk_root: KazooClient
) -> None:
    _single, single_errors = _single_node_answers(tmp_path / "single")
    host, others = _create_rf1(cluster, "t2", {"retention.ms": "3600000"})
    before = _notifications(zk_root)
    for broker_id, change, (error_type, message) in zip(
        [others[0], others[1], host, others[0]], BAD_CHANGES, single_errors, strict=True
    ):
        with _admin(cluster, broker_id) as admin, pytest.raises(SparkMQError) as refused:
            admin.alter_configs("t2", change)
        assert (type(refused.value), str(refused.value)) == (error_type, message), change
    # validate_only checks a good change and writes nothing either.
    resource = AlterConfigsResource(RESOURCE_TOPIC, "t2", {"retention.ms": "5000"})
    answer = request_to(
        cluster, others[1], AlterConfigsRequest([resource], validate_only=True), timeout_s=30
    )
    assert [r.error_code for r in answer.results] == [0]
    # Nothing was written: no override, no notification.
    assert json.loads(zk_root.get("/config/topics/t2")[0])["config"] == {"retention.ms": "3600000"}
    assert _notifications(zk_root) == before
    with _admin(cluster, others[0]) as admin:
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.alter_configs("no-such-topic", {"retention.ms": "1000"})
        assert admin.describe_topic("t2").configs == {"retention.ms": "3600000"}


def test_overrides_another_tool_wrote_wrong_are_reported_as_such(
    cluster: LocalCluster, zk_root: KazooClient
) -> None:
    _host, others = _create_rf1(cluster, "w", {})
    zk_root.set("/config/topics/w", b'{"version":1,"config":{"retention.ms":"soon"}}')
    with _admin(cluster, others[0]) as admin, pytest.raises(SparkMQError) as refused:
        admin.describe_configs("w")
    assert "znode /config/topics/w holds overrides this broker cannot take" in str(refused.value)
    assert "'soon'" in str(refused.value)
