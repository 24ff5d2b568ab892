"""Kafka's AclAuthorizer rules (spark_mq/broker/acl/authorizer.py), the ACL filters
(protocol/acls.py) and the single node's ACL file (broker/acl/store.py), without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_mq.broker.acl.authorizer import AclAuthorizer
from spark_mq.broker.acl.config import AuthorizerConfig
from spark_mq.broker.acl.store import ACL_FILE, FileAclStore
from spark_mq.errors import ConfigError, CorruptCheckpointError
from spark_mq.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

Op = AclOperation
RT = ResourceType
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
ON = "kafka.security.authorizer.AclAuthorizer"


def binding(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    principal: str = "User:alice",
    *,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, host, op, permission)
    )


def authorizer(*bindings: AclBinding, **settings: str) -> AclAuthorizer:
    config = AuthorizerConfig.from_properties({"authorizer.class.name": ON, **settings})
    auth = AclAuthorizer(config)
    auth.replace_all(bindings)
    return auth


def allowed(auth: AclAuthorizer, op: AclOperation, name: str = "orders", **kw: str) -> bool:
    return auth.authorize(
        kw.get("principal", "User:alice"), kw.get("host", "10.0.0.1"), op, RT.TOPIC, name
    )


def test_off_by_default_allows_everything() -> None:
    auth = AclAuthorizer(AuthorizerConfig())
    assert auth.enabled is False
    assert auth.authorize("User:ANONYMOUS", "1.2.3.4", Op.DELETE, RT.TOPIC, "t")


def test_no_acl_denies_unless_allow_everyone() -> None:
    assert not allowed(authorizer(), Op.READ)
    everyone = authorizer(**{"allow.everyone.if.no.acl.found": "true"})
    assert allowed(everyone, Op.READ)
    # Once any ACL names the resource, the setting no longer applies to it.
    named = authorizer(
        binding(RT.TOPIC, "orders", Op.READ, "User:bob"),
        **{"allow.everyone.if.no.acl.found": "true"},
    )
    assert not allowed(named, Op.READ)
    assert allowed(named, Op.READ, "other")


def test_literal_wildcard_and_prefixed_patterns() -> None:
    auth = authorizer(
        binding(RT.TOPIC, "orders", Op.READ),
        binding(RT.TOPIC, "*", Op.WRITE),
        binding(RT.TOPIC, "logs-", Op.DELETE, pattern=PatternType.PREFIXED),
    )
    assert allowed(auth, Op.READ, "orders")
    assert not allowed(auth, Op.READ, "orders2")
    assert allowed(auth, Op.WRITE, "anything")
    assert allowed(auth, Op.DELETE, "logs-eu")
    assert not allowed(auth, Op.DELETE, "log")
    # A prefixed pattern is not a literal one: 'logs-' itself is covered, 'logs' is not.
    assert allowed(auth, Op.DELETE, "logs-")


def test_deny_wins_over_allow() -> None:
    auth = authorizer(
        binding(RT.TOPIC, "*", Op.ALL),
        binding(RT.TOPIC, "secret-", Op.READ, pattern=PatternType.PREFIXED, permission=DENY),
    )
    assert allowed(auth, Op.READ, "public")
    assert not allowed(auth, Op.READ, "secret-payroll")
    assert allowed(auth, Op.WRITE, "secret-payroll")


def test_implied_operations() -> None:
    auth = authorizer(
        binding(RT.TOPIC, "r", Op.READ),
        binding(RT.TOPIC, "w", Op.WRITE),
        binding(RT.TOPIC, "c", Op.ALTER_CONFIGS),
    )
    assert allowed(auth, Op.DESCRIBE, "r") and allowed(auth, Op.DESCRIBE, "w")
    assert not allowed(auth, Op.WRITE, "r")
    assert allowed(auth, Op.DESCRIBE_CONFIGS, "c")
    assert not allowed(auth, Op.DESCRIBE, "c")


def test_principal_wildcard_host_and_super_users() -> None:
    auth = authorizer(
        binding(RT.TOPIC, "t", Op.READ, "User:*"),
        binding(RT.TOPIC, "t", Op.WRITE, host="10.0.0.1"),
        **{"super.users": "User:admin;User:ops"},
    )
    assert allowed(auth, Op.READ, "t", principal="User:anyone")
    assert allowed(auth, Op.WRITE, "t", host="10.0.0.1")
    assert not allowed(auth, Op.WRITE, "t", host="10.0.0.2")
    assert allowed(auth, Op.DELETE, "t", principal="User:ops")
    assert not allowed(auth, Op.DELETE, "t", principal="User:bob")


def test_a_change_replaces_cached_answers() -> None:
    auth = authorizer()
    assert not allowed(auth, Op.READ)
    auth.set_resource(
        ResourcePattern(RT.TOPIC, "orders"),
        [AccessControlEntry("User:alice", "*", Op.READ, ALLOW)],
    )
    assert allowed(auth, Op.READ)
    auth.set_resource(ResourcePattern(RT.TOPIC, "orders"), [])
    assert not allowed(auth, Op.READ)


def test_authorize_any_for_idempotent_producers() -> None:
    auth = authorizer(binding(RT.TOPIC, "t", Op.WRITE))
    assert auth.authorize_any("User:alice", "h", Op.WRITE, RT.TOPIC)
    assert not auth.authorize_any("User:bob", "h", Op.WRITE, RT.TOPIC)


def test_filters_match_as_kafkas() -> None:
    literal = binding(RT.TOPIC, "orders", Op.READ)
    prefixed = binding(RT.TOPIC, "ord", Op.READ, pattern=PatternType.PREFIXED)
    wildcard = binding(RT.TOPIC, "*", Op.READ)
    group = binding(RT.GROUP, "orders", Op.READ)
    every = [literal, prefixed, wildcard, group]
    match = AclBindingFilter(RT.TOPIC, "orders", PatternType.MATCH)
    assert [b for b in every if match.matches(b)] == [literal, prefixed, wildcard]
    exact = AclBindingFilter(RT.TOPIC, "orders", PatternType.ANY)
    assert [b for b in every if exact.matches(b)] == [literal]
    by_principal = AclBindingFilter(principal="User:bob")
    assert not any(by_principal.matches(b) for b in every)


def test_file_store_survives_a_restart_and_refuses_bad_bindings(tmp_path: Path) -> None:
    auth = authorizer()
    store = FileAclStore(tmp_path, auth)
    store.load()
    store.create([binding(RT.TOPIC, "orders", Op.READ), binding(RT.GROUP, "g", Op.READ)])
    with pytest.raises(ConfigError, match="Cluster resource"):
        store.create([binding(RT.CLUSTER, "other", Op.ALTER)])
    again = authorizer()
    FileAclStore(tmp_path, again).load()
    assert again.bindings() == auth.bindings() and len(again.bindings()) == 2
    removed = store.delete([AclBindingFilter(RT.GROUP)])
    assert removed == [[binding(RT.GROUP, "g", Op.READ)]]
    third = authorizer()
    FileAclStore(tmp_path, third).load()
    assert third.bindings() == [binding(RT.TOPIC, "orders", Op.READ)]


def test_corrupt_acl_file_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / ACL_FILE).write_text('{"version": 1, "resources": [{"name": 3}]}')
    with pytest.raises(CorruptCheckpointError, match="ACL file"):
        FileAclStore(tmp_path, authorizer()).load()


def test_config_refuses_unknown_authorizer_and_bad_super_users() -> None:
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name"):
        AuthorizerConfig.from_properties({"authorizer.class.name": "com.example.Mine"})
    with pytest.raises(ConfigError, match="User:<name>"):
        AuthorizerConfig.from_properties({"super.users": "admin"})


def test_docstring_examples_run() -> None:
    import doctest

    import spark_mq.broker.acl.config
    import spark_mq.client.acl_admin
    import spark_mq.protocol.acls

    for module in (spark_mq.protocol.acls, spark_mq.broker.acl.config, spark_mq.client.acl_admin):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_every_api_is_classified_for_authorization() -> None:
    """Each API has a check, a filter, or is deliberately unchecked: a new API added without
    one is refused to everyone but super users (never open by omission), and this test
    names it so its check gets written."""
    from spark_mq.broker.acl.checks import CHECKS, FILTERS, UNCHECKED
    from spark_mq.protocol.api import ApiKey

    classified = set(CHECKS) | set(FILTERS) | UNCHECKED
    assert [k.name for k in ApiKey if k not in classified] == []
    assert not set(CHECKS) & set(FILTERS) and not (set(CHECKS) | set(FILTERS)) & UNCHECKED


def test_an_api_without_a_check_is_for_super_users_only() -> None:
    from spark_mq.broker.acl.checks import Subject, _unclassified
    from spark_mq.errors import ClusterAuthorizationError
    from spark_mq.protocol.api import ApiKey

    auth = authorizer(binding(RT.TOPIC, "*", Op.ALL), **{"super.users": "User:admin"})
    check = _unclassified(ApiKey.PRODUCE)
    check(Subject(auth, "User:admin", "h"), None)
    with pytest.raises(ClusterAuthorizationError, match="no ACL check of its own"):
        check(Subject(auth, "User:alice", "h"), None)
