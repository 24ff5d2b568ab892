"""ACL authorization on a real single-node broker process (issue 33): every API a client
uses is refused without its ACL and works with it, with the API's typed error naming the
principal, the operation and the ACL to add.

Two principals without any password: the broker's Unix socket gives its peer the OS user
(``User:<login>``, from SO_PEERCRED), a super user here, which administers the ACLs through
``path=DIR``; TCP connections are ``User:ANONYMOUS``, the principal the ACLs are written for.
One broker serves the module; every test uses its own topic names and the ACLs are removed
after each test.
"""

from __future__ import annotations

import getpass
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.acl.authorizer import AclAuthorizer
from spark_mq.broker.acl.config import AuthorizerConfig
from spark_mq.broker.acl.store import FileAclStore
from spark_mq.broker.local import broker_status, ensure_broker, stop_broker
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
from spark_mq.client.connection import BrokerConnection
from spark_mq.client.half_messages import LocalTransactionState, TransactionalMessageProducer
from spark_mq.client.quota_admin import ClientQuotaAlteration, ClientQuotaEntity, filter_exact
from spark_mq.errors import (
    ClusterAuthorizationError,
    GroupAuthorizationError,
    SecurityDisabledError,
    TopicAuthorizationError,
    TransactionalIdAuthorizationError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic

Op = AclOperation
RT = ResourceType
ANON = "User:ANONYMOUS"
OS_USER = f"User:{getpass.getuser()}"
AUTHORIZER = {
    "listeners": "UNIX://,PLAINTEXT://127.0.0.1:0",
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
}
FAST = {"request_timeout_ms": 5000, "default_api_timeout_ms": 5000}
PRODUCER_FAST = {"max_block_ms": 5000, "request_timeout_ms": 5000, "delivery_timeout_ms": 10000}
_names = itertools.count()


def start(root: Path, **settings: str) -> str:
    ensure_broker(root, config={**AUTHORIZER, **settings})
    status = broker_status(root)
    assert status is not None
    tcp = next(a for a in status.addresses if a.unix_path is None)
    return f"{tcp.host}:{tcp.port}"


def acl(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    *,
    principal: str = ANON,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern),
        AccessControlEntry(principal, "*", op, permission),
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    root = tmp_path_factory.mktemp("acl-broker")
    bootstrap = start(root, **{"super.users": OS_USER})
    yield root, bootstrap
    stop_broker(root)


@pytest.fixture
def admin(broker: tuple[Path, str]) -> Iterator[Admin]:
    """The super user's admin (the Unix socket); removes every ACL after the test."""
    with Admin(path=broker[0]) as a:
        yield a
        a.delete_acls([AclBindingFilter()])


@pytest.fixture
def anon(broker: tuple[Path, str]) -> Iterator[Admin]:
    """User:ANONYMOUS's admin (TCP)."""
    with Admin(bootstrap_servers=broker[1], **FAST) as a:
        yield a


@pytest.fixture
def topic(admin: Admin) -> str:
    name = f"t{next(_names)}"
    admin.create_topic(name)
    return name


def denied_then_allowed(
    action: Callable[[], Any],
    error: type[Exception],
    grant: Callable[[], None],
    *,
    operation: str,
) -> Any:
    """``action`` fails with ``error`` naming ANONYMOUS and ``operation``; after ``grant``
    it succeeds (its result is returned)."""
    with pytest.raises(error) as refused:
        action()
    assert ANON in str(refused.value) and operation in str(refused.value)
    assert "spark-mq acls add" in str(refused.value)
    grant()
    return action()


def produce(bootstrap: str, topic: str, **settings: Any) -> int:
    with Producer(bootstrap_servers=bootstrap, linger_ms=0, **PRODUCER_FAST, **settings) as p:
        return int(p.send(topic, b"v").get(10).offset)


def test_produce_needs_write_on_the_topic(
    broker: tuple[Path, str], admin: Admin, topic: str
) -> None:
    offset = denied_then_allowed(
        lambda: produce(broker[1], topic),
        TopicAuthorizationError,
        lambda: admin.create_acls([acl(RT.TOPIC, topic, Op.WRITE)]),
        operation="Describe",  # the producer's Metadata request is refused first
    )
    assert offset == 0


def test_fetch_needs_read(broker: tuple[Path, str], admin: Admin, topic: str) -> None:
    with Producer(path=broker[0]) as p:
        p.send(topic, b"v").get(10)
    admin.create_acls([acl(RT.TOPIC, topic, Op.DESCRIBE)])

    def read() -> int:
        with Consumer(bootstrap_servers=broker[1], auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, 0)])
            for _ in range(20):
                records = c.poll(timeout_ms=200)
                if records:
                    return len(records)
        return 0

    assert (
        denied_then_allowed(
            read,
            TopicAuthorizationError,
            lambda: admin.create_acls([acl(RT.TOPIC, topic, Op.READ)]),
            operation="Read",
        )
        == 1
    )


def test_metadata_hides_topics_a_principal_may_not_describe(
    admin: Admin, anon: Admin, topic: str
) -> None:
    assert topic not in anon.list_topics()
    with pytest.raises(TopicAuthorizationError, match="Describe"):
        anon.describe_topic(topic)
    admin.create_acls([acl(RT.TOPIC, topic, Op.DESCRIBE)])
    assert topic in anon.list_topics()
    # describe_topic also reads the topic's configs: DescribeConfigs.
    admin.create_acls([acl(RT.TOPIC, topic, Op.DESCRIBE_CONFIGS)])
    assert anon.describe_topic(topic).partition_count == 1


def test_list_offsets_needs_describe(admin: Admin, anon: Admin, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    offsets = denied_then_allowed(
        lambda: anon.list_offsets({tp: "latest"}),
        TopicAuthorizationError,
        lambda: admin.create_acls([acl(RT.TOPIC, topic, Op.DESCRIBE)]),
        operation="Describe",
    )
    assert offsets[tp].offset == 0


def test_create_topic_needs_create_on_the_cluster_or_the_topic(admin: Admin, anon: Admin) -> None:
    name = f"made-{next(_names)}"
    denied_then_allowed(
        lambda: anon.create_topic(name),
        TopicAuthorizationError,
        lambda: admin.create_acls(
            [acl(RT.TOPIC, "made-", Op.CREATE, pattern=PatternType.PREFIXED)]
        ),
        operation="Create",
    )
    assert name in admin.list_topics()
    admin.delete_acls([AclBindingFilter()])
    admin.create_acls([acl(RT.CLUSTER, "kafka-cluster", Op.CREATE)])
    anon.create_topic(f"other-{next(_names)}")


def test_delete_topic_and_records_need_delete(admin: Admin, anon: Admin, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    denied_then_allowed(
        lambda: anon.delete_records({tp: 0}),
        TopicAuthorizationError,
        lambda: admin.create_acls([acl(RT.TOPIC, topic, Op.DELETE)]),
        operation="Delete",
    )
    anon.delete_topic(topic)
    assert topic not in admin.list_topics()


def test_configs_need_describe_configs_and_alter_configs(
    admin: Admin, anon: Admin, topic: str
) -> None:
    denied_then_allowed(
        lambda: anon.describe_configs(topic),
        TopicAuthorizationError,
        lambda: admin.create_acls([acl(RT.TOPIC, topic, Op.ALTER_CONFIGS)]),
        operation="DescribeConfigs",
    )
    anon.alter_configs(topic, {"retention.ms": "60000"})
    assert anon.describe_configs(topic)["retention.ms"] == "60000"


def test_create_partitions_needs_alter(admin: Admin, anon: Admin, topic: str) -> None:
    denied_then_allowed(
        lambda: anon.create_partitions(topic, 2),
        TopicAuthorizationError,
        lambda: admin.create_acls([acl(RT.TOPIC, topic, Op.ALTER)]),
        operation="Alter",
    )
    assert admin.describe_topic(topic).partition_count == 2


def test_consumer_group_needs_read_on_the_group(
    broker: tuple[Path, str], admin: Admin, anon: Admin, topic: str
) -> None:
    with Producer(path=broker[0]) as p:
        p.send(topic, b"v").get(10)
    admin.create_acls([acl(RT.TOPIC, topic, Op.READ)])
    group = f"g{next(_names)}"

    def consume() -> int:
        with Consumer(
            bootstrap_servers=broker[1], group_id=group, auto_offset_reset="earliest"
        ) as c:
            c.subscribe([topic])
            for _ in range(50):
                records = c.poll(timeout_ms=200)
                if records:
                    c.commit()
                    return len(records)
        return 0

    assert (
        denied_then_allowed(
            consume,
            GroupAuthorizationError,
            lambda: admin.create_acls([acl(RT.GROUP, group, Op.READ)]),
            operation="Group",
        )
        == 1
    )
    # Read on the group implies Describe: OffsetFetch of the group's offsets.
    assert anon.list_group_offsets(group)[TopicPartition(topic, 0)].offset == 1
    with pytest.raises(GroupAuthorizationError, match="Delete"):
        anon.delete_groups([group])
    admin.create_acls([acl(RT.GROUP, group, Op.DELETE)])
    anon.delete_groups([group])


def test_transactions_need_write_on_the_transactional_id(
    broker: tuple[Path, str], admin: Admin, topic: str
) -> None:
    admin.create_acls([acl(RT.TOPIC, topic, Op.WRITE)])

    def transaction() -> None:
        with Producer(
            bootstrap_servers=broker[1], transactional_id=f"job-{topic}", **PRODUCER_FAST
        ) as p:
            p.init_transactions()
            p.begin_transaction()
            p.send(topic, b"x")
            p.commit_transaction()

    denied_then_allowed(
        transaction,
        TransactionalIdAuthorizationError,
        lambda: admin.create_acls(
            [acl(RT.TRANSACTIONAL_ID, "job-", Op.WRITE, pattern=PatternType.PREFIXED)]
        ),
        operation="TransactionalId",
    )


def test_deny_wins_over_allow(broker: tuple[Path, str], admin: Admin, topic: str) -> None:
    admin.create_acls(
        [
            acl(RT.TOPIC, "*", Op.ALL),
            acl(RT.TOPIC, topic, Op.WRITE, permission=AclPermissionType.DENY),
        ]
    )
    with pytest.raises(TopicAuthorizationError, match="Write"):
        produce(broker[1], topic)
    # The wildcard still allows what the Deny does not name.
    with Producer(path=broker[0]) as p:
        p.send(topic, b"v").get(10)
    with Consumer(bootstrap_servers=broker[1], auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        assert any(c.poll(timeout_ms=200) for _ in range(20))


def test_acl_apis_need_rights_on_the_cluster(admin: Admin, anon: Admin, topic: str) -> None:
    grant = acl(RT.TOPIC, topic, Op.READ)
    with pytest.raises(ClusterAuthorizationError, match="Alter"):
        anon.create_acls([grant])
    found = denied_then_allowed(
        anon.describe_acls,
        ClusterAuthorizationError,
        lambda: admin.create_acls([acl(RT.CLUSTER, "kafka-cluster", Op.DESCRIBE)]),
        operation="Describe",
    )
    assert [b.pattern.resource_type for b in found] == [RT.CLUSTER]
    match = AclBindingFilter(RT.TOPIC, topic, PatternType.MATCH)
    admin.create_acls([grant])
    assert anon.describe_acls(match) == [grant]
    assert admin.delete_acls([match]) == [grant]
    assert anon.describe_acls(match) == []


def test_acls_of_the_os_user_from_the_directory(tmp_path: Path) -> None:
    """No super users: the OS user of a Unix-socket client is held to ACLs too, here
    written into the ACL file before the broker starts (what it reads at start-up)."""
    # Written by the store alone (its authorizer, off, enforces nothing here).
    store = FileAclStore(tmp_path, AclAuthorizer(AuthorizerConfig()))
    store.create([acl(RT.CLUSTER, "kafka-cluster", Op.CREATE, principal=OS_USER)])
    start(tmp_path)
    with Admin(path=tmp_path, **FAST) as own:
        own.create_topic("mine")
        with pytest.raises(TopicAuthorizationError, match=OS_USER):
            own.delete_topic("mine")


def test_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    bootstrap = start(
        tmp_path, **{"super.users": OS_USER, "allow.everyone.if.no.acl.found": "true"}
    )
    with Admin(path=tmp_path) as admin:
        admin.create_topic("open")
        admin.create_topic("named")
        admin.create_acls([acl(RT.TOPIC, "named", Op.WRITE, principal="User:someone")])
    assert produce(bootstrap, "open") == 0
    with pytest.raises(TopicAuthorizationError):
        produce(bootstrap, "named")


def test_a_broker_without_authorizer_keeps_no_acls(tmp_path: Path) -> None:
    ensure_broker(tmp_path)
    with Admin(path=tmp_path) as admin:
        with pytest.raises(SecurityDisabledError, match=r"authorizer\.class\.name"):
            admin.create_acls([acl(RT.TOPIC, "t", Op.READ)])
        admin.create_topic("t")
        admin.delete_topic("t")


def test_two_phase_owner_calls_need_write_on_the_transactional_id_prefix(
    admin: Admin, anon: Admin
) -> None:
    owner = f"sink{next(_names)}"
    denied_then_allowed(
        lambda: anon.owner_heartbeat(f"{owner}/run/"),
        TransactionalIdAuthorizationError,
        lambda: admin.create_acls(
            [acl(RT.TRANSACTIONAL_ID, owner, Op.WRITE, pattern=PatternType.PREFIXED)]
        ),
        operation="TransactionalId",  # its FindCoordinator (Describe) is refused first
    )
    # Write on the prefix implies Describe of the owner (DescribeTxnOwner).
    assert anon.last_committed_sequence(owner) == -1


class _Commit:
    """A local transaction that always commits."""

    def execute_local_transaction(self, message: object, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_half_messages_need_write_on_the_producer_group(
    broker: tuple[Path, str], admin: Admin, topic: str
) -> None:
    admin.create_acls([acl(RT.TOPIC, topic, Op.WRITE)])
    group = f"orders{next(_names)}"

    def send() -> Any:
        with TransactionalMessageProducer(
            bootstrap_servers=broker[1], producer_group=group, listener=_Commit(), **FAST
        ) as producer:
            return producer.send(topic, b"v")

    # The producer first looks up its group's broker (FindCoordinator: Describe on the
    # TransactionalId, as Kafka's transactional producer); Write implies Describe.
    result = denied_then_allowed(
        send,
        TransactionalIdAuthorizationError,
        lambda: admin.create_acls([acl(RT.TRANSACTIONAL_ID, group, Op.WRITE)]),
        operation="Describe",
    )
    assert result is not None


def test_fetch_answers_refused_topics_apart(
    broker: tuple[Path, str], admin: Admin, topic: str
) -> None:
    """As Kafka: one Fetch for a readable and an unreadable topic reads the first and
    answers TOPIC_AUTHORIZATION_FAILED for the second."""
    other = f"t{next(_names)}"
    admin.create_topic(other)
    with Producer(path=broker[0]) as p:
        p.send(topic, b"v").get(10)
        p.send(other, b"v").get(10)
    admin.create_acls([acl(RT.TOPIC, topic, Op.READ)])
    host, port = broker[1].rsplit(":", 1)
    conn = BrokerConnection(BrokerAddress(host, int(port)))
    conn.connect()
    try:
        answer: FetchResponse = conn.request(
            FetchRequest(
                0,
                1,
                1 << 20,
                [FetchTopic(t, [FetchPartition(0, 0, 1 << 20)]) for t in (topic, other)],
            ),
            timeout_s=10,
        )
    finally:
        conn.close()
    by_topic = {t.name: t.partitions[0] for t in answer.topics}
    assert by_topic[topic].error_code == ErrorCode.NONE and by_topic[topic].records_size > 0
    refused = by_topic[other]
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert refused.records_size == 0 and refused.error_message and ANON in refused.error_message


def test_produce_answers_refused_topics_apart(
    broker: tuple[Path, str], admin: Admin, topic: str
) -> None:
    """As Kafka: one Produce request for a writable and an unwritable topic appends to the
    first and answers TOPIC_AUTHORIZATION_FAILED for the second."""
    other = f"t{next(_names)}"
    admin.create_topic(other)
    # Describe on the other topic lets the producer batch for it; only Write is missing.
    admin.create_acls([acl(RT.TOPIC, topic, Op.WRITE), acl(RT.TOPIC, other, Op.DESCRIBE)])
    with Producer(bootstrap_servers=broker[1], linger_ms=200, **PRODUCER_FAST) as p:
        written = p.send(topic, b"kept")
        refused = p.send(other, b"refused")
        p.flush()
    assert written.get(10).offset == 0
    with pytest.raises(TopicAuthorizationError, match="Write"):
        refused.get(10)
    assert (
        admin.list_offsets({TopicPartition(other, 0): "latest"})[TopicPartition(other, 0)].offset
        == 0
    )


def test_offset_fetch_of_every_topic_answers_only_describable_topics(
    broker: tuple[Path, str], admin: Admin, anon: Admin, topic: str
) -> None:
    other = f"t{next(_names)}"
    admin.create_topic(other)
    group = f"g{next(_names)}"
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): 0, TopicPartition(other, 0): 0})
    admin.create_acls([acl(RT.GROUP, group, Op.DESCRIBE), acl(RT.TOPIC, topic, Op.DESCRIBE)])
    assert set(anon.list_group_offsets(group)) == {TopicPartition(topic, 0)}
    assert set(admin.list_group_offsets(group)) == {
        TopicPartition(topic, 0),
        TopicPartition(other, 0),
    }


def test_a_producer_refused_its_producer_id_fails_its_sends_at_once(
    broker: tuple[Path, str], admin: Admin, topic: str
) -> None:
    """A refused InitProducerId (an idempotent producer with neither IdempotentWrite on the
    Cluster nor Write on any topic) is fatal, as in Kafka's producer: the record fails with
    ClusterAuthorizationError, and so does the next send, instead of retrying until
    delivery.timeout.ms or leaving a future that never completes."""
    admin.create_acls([acl(RT.TOPIC, topic, Op.DESCRIBE)])
    started = time.monotonic()
    with Producer(bootstrap_servers=broker[1], linger_ms=0, **PRODUCER_FAST) as p:
        with pytest.raises(ClusterAuthorizationError, match="IdempotentWrite"):
            p.send(topic, b"v").get(10)
        with pytest.raises(ClusterAuthorizationError):
            p.send(topic, b"w").get(10)
        with pytest.raises(ClusterAuthorizationError):
            p.flush(5)
    assert time.monotonic() - started < 8


def test_client_quota_apis_need_describe_configs_and_alter_configs_on_the_cluster(
    admin: Admin, anon: Admin
) -> None:
    """As Kafka's: DescribeClientQuotas needs DescribeConfigs, AlterClientQuotas
    AlterConfigs, both on the Cluster."""
    entity = ClientQuotaEntity(user="quota-acl-user")
    alteration = ClientQuotaAlteration(entity, {"producer_byte_rate": 4096})
    denied_then_allowed(
        lambda: anon.alter_client_quotas([alteration]),
        ClusterAuthorizationError,
        lambda: admin.create_acls([acl(RT.CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS)]),
        operation="AlterConfigs",
    )
    # AlterConfigs implies DescribeConfigs (Kafka's implied operations).
    assert anon.describe_client_quotas([filter_exact("user", "quota-acl-user")]) == {
        entity: {"producer_byte_rate": 4096.0}
    }
    admin.delete_acls([AclBindingFilter()])
    with pytest.raises(ClusterAuthorizationError, match="DescribeConfigs"):
        anon.describe_client_quotas()
    anon_alter_removed = ClientQuotaAlteration(entity, {"producer_byte_rate": None})
    admin.alter_client_quotas([anon_alter_removed])
    assert admin.describe_client_quotas() == {}
