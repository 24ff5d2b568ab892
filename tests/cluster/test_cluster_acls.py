"""ACLs in a real three-broker LocalCluster (issue 33): kept in ZooKeeper as Kafka keeps
them (``/kafka-acl``, ``/kafka-acl-extended/prefixed``, change notifications under
``/kafka-acl-changes`` and ``/kafka-acl-extended-changes``), and an ACL created or deleted
through one broker is enforced by every broker within seconds.

The brokers run the authorizer with ``allow.everyone.if.no.acl.found=true``: the tests'
TCP clients are ``User:ANONYMOUS`` (no authentication yet), so they administer the cluster
while no ACL names the Cluster, and a topic is refused to them once an ACL names it for
another principal. The brokers' own connections (AuthenticateBroker) are never checked.
One cluster serves the module; each test uses topics of its own.
"""

from __future__ import annotations

import json
import time

import pytest
from cluster_fixtures import ClusterFactory, request_to
from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq import Admin
from spark_mq.client.acl_admin import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.metadata import MetadataRequest, MetadataResponse

pytestmark = pytest.mark.slow

#: What "within seconds" means for a change to reach every broker.
PROPAGATION_S = 10.0


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3,
        broker_properties={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        },
    )


def _topic_code(cluster: LocalCluster, broker_id: int, topic: str) -> int:
    """The error code of ``topic`` in ``broker_id``'s Metadata answer to ANONYMOUS."""
    answer: MetadataResponse = request_to(
        cluster, broker_id, MetadataRequest([topic]), timeout_s=10
    )
    (found,) = answer.topics
    return found.error_code


def _admin_of(cluster: LocalCluster, broker_id: int) -> Admin:
    return Admin(bootstrap_servers=cluster.broker_server(broker_id))


def _all_brokers_answer(cluster: LocalCluster, topic: str, code: int) -> float:
    """Seconds until every broker answers ``code`` for ``topic``."""
    started = time.monotonic()
    wait_for(
        lambda: all(_topic_code(cluster, b, topic) == code for b in cluster.broker_ids),
        timeout_s=PROPAGATION_S,
    )
    return time.monotonic() - started


def _only_someone(topic: str, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, topic, pattern),
        AccessControlEntry("User:someone", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    )


def test_an_acl_made_through_one_broker_is_enforced_by_every_broker(
    cluster: LocalCluster,
) -> None:
    with _admin_of(cluster, 1) as admin:
        admin.create_topic("locked", partitions=1, replication_factor=3)
    _all_brokers_answer(cluster, "locked", ErrorCode.NONE)
    with _admin_of(cluster, 1) as first:
        first.create_acls([_only_someone("locked")])
    _all_brokers_answer(cluster, "locked", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    with _admin_of(cluster, 3) as third:
        # Every broker lists what the first one stored.
        assert third.describe_acls() == [_only_someone("locked")]
    with _admin_of(cluster, 2) as second:
        assert second.delete_acls([AclBindingFilter(ResourceType.TOPIC, "locked")]) == [
            _only_someone("locked")
        ]
    _all_brokers_answer(cluster, "locked", ErrorCode.NONE)


def test_acls_are_kept_in_zookeeper_as_kafka_keeps_them(
    cluster: LocalCluster, zk_module_connect: str
) -> None:
    with _admin_of(cluster, 2) as admin:
        admin.create_topic("zk-literal", partitions=1, replication_factor=1)
        admin.create_acls(
            [_only_someone("zk-literal"), _only_someone("zk-pre", PatternType.PREFIXED)]
        )
    _all_brokers_answer(cluster, "zk-literal", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    zk = KazooClient(hosts=zk_module_connect)
    zk.start(timeout=10)
    try:
        literal, _ = zk.get("/kafka-acl/Topic/zk-literal")
        prefixed, _ = zk.get("/kafka-acl-extended/prefixed/Topic/zk-pre")
        entry = {
            "principal": "User:someone",
            "permissionType": "Allow",
            "operation": "Describe",
            "host": "*",
        }
        assert json.loads(literal) == {"version": 1, "acls": [entry]}
        assert json.loads(prefixed) == {"version": 1, "acls": [entry]}
        notices = [
            zk.get(f"/kafka-acl-changes/{c}")[0] for c in zk.get_children("/kafka-acl-changes")
        ]
        assert b"Topic:zk-literal" in notices
        extended = [
            json.loads(zk.get(f"/kafka-acl-extended-changes/{c}")[0])
            for c in zk.get_children("/kafka-acl-extended-changes")
        ]
        assert {
            "version": 1,
            "resourceType": "Topic",
            "name": "zk-pre",
            "patternType": "PREFIXED",
        } in extended
    finally:
        zk.stop()
        zk.close()
    with _admin_of(cluster, 1) as admin:
        admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "zk-", PatternType.ANY)])
        admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "zk-literal")])
    _all_brokers_answer(cluster, "zk-literal", ErrorCode.NONE)
