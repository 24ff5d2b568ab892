"""``spark-mq acls add|remove|list`` (kafka-acls' options) against a local broker with the
authorizer on, whose Unix-socket user (the OS user) is a super user."""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker import ensure_broker, stop_broker


@pytest.fixture(scope="module")
def acl_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("cli-acls") / "mq"
    ensure_broker(
        directory,
        config={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": f"User:{getpass.getuser()}",
        },
    )
    yield str(directory)
    stop_broker(directory)


def _listed(cli: Any, path: str, *options: str) -> list[dict[str, str]]:
    result = cli("acls", "list", "--path", path, "--json", *options)
    assert result.code == 0, result.err
    return json.loads(result.out)  # type: ignore[no-any-return]


def test_add_list_remove(cli: Any, acl_path: str) -> None:
    added = cli(
        "acls", "add", "--path", acl_path, "--allow-principal", "User:alice",
        "--operation", "Read", "--operation", "Describe", "--topic", "orders",
    )  # fmt: skip
    assert added.code == 0, added.err
    assert "Added 2 ACLs" in added.out
    producer = cli(
        "acls", "add", "--path", acl_path, "--allow-principal", "User:etl", "--producer",
        "--topic", "out-", "--transactional-id", "etl-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert producer.code == 0, producer.err
    # MATCH: every ACL that applies to the topic out-eu, the prefixed ones included.
    matching = _listed(cli, acl_path, "--topic", "out-eu", "--resource-pattern-type", "match")
    assert sorted(a["operation"] for a in matching) == ["Create", "Describe", "Write"]
    assert {a["pattern_type"] for a in matching} == {"PREFIXED"}
    alice = _listed(cli, acl_path, "--principal", "User:alice")
    assert sorted(a["operation"] for a in alice) == ["Describe", "Read"]
    removed = cli(
        "acls", "remove", "--path", acl_path, "--allow-principal", "User:alice",
        "--operation", "Read", "--topic", "orders",
    )  # fmt: skip
    assert removed.code == 0 and "Removed 1 ACL" in removed.out
    assert [a["operation"] for a in _listed(cli, acl_path, "--topic", "orders")] == ["Describe"]
    everything = cli("acls", "remove", "--path", acl_path, "--topic", "out-",
                     "--resource-pattern-type", "prefixed")  # fmt: skip
    assert "Removed 3 ACLs" in everything.out
    kept = Path(acl_path, "acls.json").read_text()
    assert "out-" not in kept and "etl-" in kept


def test_bad_options_are_usage_errors(cli: Any, acl_path: str) -> None:
    bad_op = cli("acls", "add", "--path", acl_path, "--allow-principal", "User:a",
                 "--operation", "Rea", "--topic", "t")  # fmt: skip
    assert bad_op.code == 2 and "Read" in bad_op.err
    no_resource = cli("acls", "add", "--path", acl_path, "--allow-principal", "User:a")
    assert no_resource.code == 2 and "--topic" in no_resource.err
    bad_principal = cli("acls", "add", "--path", acl_path, "--allow-principal", "alice",
                        "--topic", "t")  # fmt: skip
    assert bad_principal.code == 2 and "User:<name>" in bad_principal.err
