"""ACLs checked against SASL principals on a real broker process (issue 33): the principal
the authorizer sees is the authenticated user (``User:alice``), so an ACL for alice lets
alice produce and consume while bob, authenticated on the same listener, is refused with
the error naming ``User:bob``; a prefixed ACL covers bob's topics by their prefix; a user in
``super.users`` needs no ACL at all.

One broker per broker-level setting (``super.users`` is read at start): the module's broker
has only the OS user as super user; the last test starts its own with alice added.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from secured_broker import OS_USER, SecuredBroker

from spark_mq import Admin, Consumer, Producer, TopicPartition
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
from spark_mq.errors import TopicAuthorizationError

MECHANISM = "SCRAM-SHA-256"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
FAST = {"request_timeout_ms": 5000, "default_api_timeout_ms": 5000}
PRODUCER_FAST = {"max_block_ms": 5000, "request_timeout_ms": 5000, "delivery_timeout_ms": 10000}
_names = itertools.count()


def start(root: Path, **props: str) -> SecuredBroker:
    served = SecuredBroker.start(
        root, "SASL_PLAINTEXT", {"sasl.enabled.mechanisms": MECHANISM, **props}
    )
    for user, password in USERS.items():
        served.add_user(user, password, MECHANISM)
    return served


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    served = start(tmp_path_factory.mktemp("sasl-acls"))
    yield served
    served.stop()


@pytest.fixture
def admin(broker: SecuredBroker) -> Iterator[Admin]:
    """The super user's admin; removes every ACL after the test."""
    with broker.admin() as a:
        yield a
        a.delete_acls([AclBindingFilter()])


def as_user(broker: SecuredBroker, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def allow(
    user: str,
    op: AclOperation,
    name: str,
    *,
    rtype: ResourceType = ResourceType.TOPIC,
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern),
        AccessControlEntry(f"User:{user}", "*", op, AclPermissionType.ALLOW),
    )


def produce(broker: SecuredBroker, user: str, topic: str, value: bytes) -> int:
    with Producer(linger_ms=0, **PRODUCER_FAST, **as_user(broker, user)) as p:
        return int(p.send(topic, value).get(10).offset)


def consume(broker: SecuredBroker, user: str, topic: str) -> list[bytes]:
    with Consumer(enable_auto_commit=False, **FAST, **as_user(broker, user)) as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning([tp])
        out: list[bytes] = []
        for _ in range(20):
            out += [r.value for rs in c.poll(timeout_ms=500).values() for r in rs]
            if out:
                break
        return out


def new_topic(admin: Admin, prefix: str = "t") -> str:
    name = f"{prefix}{next(_names)}"
    admin.create_topic(name)
    return name


def test_the_acl_follows_the_authenticated_user(broker: SecuredBroker, admin: Admin) -> None:
    topic = new_topic(admin)
    admin.create_acls(
        [allow("alice", AclOperation.WRITE, topic), allow("alice", AclOperation.READ, topic)]
    )
    assert produce(broker, "alice", topic, b"from alice") == 0
    assert consume(broker, "alice", topic) == [b"from alice"]
    # bob authenticates on the same listener; no ACL names him.
    with pytest.raises(TopicAuthorizationError) as wrote:
        produce(broker, "bob", topic, b"from bob")
    # The producer's Metadata is refused first (Write would imply Describe).
    assert "User:bob" in str(wrote.value) and topic in str(wrote.value)
    with pytest.raises(TopicAuthorizationError) as read:
        consume(broker, "bob", topic)
    assert "User:bob" in str(read.value)
    # Nothing bob tried reached the log.
    assert consume(broker, "alice", topic) == [b"from alice"]


def test_a_prefixed_acl_covers_the_topics_it_prefixes(broker: SecuredBroker, admin: Admin) -> None:
    mine, other = new_topic(admin, "bob-"), new_topic(admin, "bobby")
    admin.create_acls(
        [
            allow("bob", AclOperation.WRITE, "bob-", pattern=PatternType.PREFIXED),
            allow("bob", AclOperation.READ, "bob-", pattern=PatternType.PREFIXED),
        ]
    )
    assert produce(broker, "bob", mine, b"b") == 0
    assert consume(broker, "bob", mine) == [b"b"]
    # "bobby0" does not start with "bob-": the prefix is matched as written.
    with pytest.raises(TopicAuthorizationError, match="User:bob"):
        produce(broker, "bob", other, b"b")
    # The ACL is bob's: alice gets nothing from it.
    with pytest.raises(TopicAuthorizationError, match="User:alice"):
        produce(broker, "alice", mine, b"a")


def test_a_super_user_needs_no_acl(tmp_path: Path) -> None:
    served = start(tmp_path, **{"super.users": f"{OS_USER};User:alice"})
    try:
        # Topic creation, produce, consume and ACL administration, with no ACL at all.
        with Admin(**FAST, **as_user(served, "alice")) as alice:
            alice.create_topic("anything")
            alice.create_acls([allow("bob", AclOperation.READ, "anything")])
            assert [b.entry.principal for b in alice.describe_acls(AclBindingFilter())] == [
                "User:bob"
            ]
        assert produce(served, "alice", "anything", b"a") == 0
        assert consume(served, "alice", "anything") == [b"a"]
        # bob, not a super user, has only his Read: he reads, and may not create a topic.
        assert consume(served, "bob", "anything") == [b"a"]
        with (
            Admin(**FAST, **as_user(served, "bob")) as bob,
            pytest.raises(TopicAuthorizationError, match="User:bob"),
        ):
            bob.create_topic("other")
    finally:
        served.stop()
