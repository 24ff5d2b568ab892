"""``spark-mq quotas alter|describe`` against the session's embedded broker (``--path``),
with kafka-configs' entity options. Only entities no other test's client matches are
given quotas, and they are removed at the end."""

from __future__ import annotations

import json
from typing import Any


def described(cli: Any, mq_path: str, *args: str) -> list[dict[str, Any]]:
    done = cli("quotas", "describe", "--path", mq_path, "--json", *args)
    assert done.code == 0, done.err
    return json.loads(done.out)["quotas"]  # type: ignore[no-any-return]


def test_alter_and_describe(cli: Any, mq_path: str) -> None:
    user = ["--entity-type", "users", "--entity-name", "cli-quota-user"]
    user_client = [*user, "--entity-type", "clients", "--entity-name", "cli-quota-app"]
    done = cli(
        "quotas", "alter", "--path", mq_path, *user,
        "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )  # fmt: skip
    assert done.code == 0, done.err
    assert "user=cli-quota-user" in done.out and "producer_byte_rate=1048576" in done.out
    done = cli(
        "quotas", "alter", "--path", mq_path, *user_client,
        "--add-config", "request_percentage=25.5",
    )  # fmt: skip
    assert done.code == 0, done.err

    assert described(cli, mq_path, *user) == [
        {
            "entity": {"user": "cli-quota-user"},
            "quotas": {"consumer_byte_rate": 2097152.0, "producer_byte_rate": 1048576.0},
        },
        {
            "entity": {"user": "cli-quota-user", "client-id": "cli-quota-app"},
            "quotas": {"request_percentage": 25.5},
        },
    ]
    table = cli("quotas", "describe", "--path", mq_path, *user_client).out
    assert "client-id=cli-quota-app" in table and "request_percentage=25.5" in table

    done = cli(
        "quotas", "alter", "--path", mq_path, *user, "--delete-config", "consumer_byte_rate"
    )  # fmt: skip
    assert done.code == 0, done.err
    assert described(cli, mq_path, *user)[0]["quotas"] == {"producer_byte_rate": 1048576.0}
    for entity, keys in ((user, "producer_byte_rate"), (user_client, "request_percentage")):
        done = cli("quotas", "alter", "--path", mq_path, *entity, "--delete-config", keys)
        assert done.code == 0, done.err
    assert described(cli, mq_path, *user) == []


def test_bad_input_is_refused_with_nothing_changed(cli: Any, mq_path: str) -> None:
    client = ["--entity-type", "clients", "--entity-name", "cli-quota-bad"]
    cases = [
        ([*client, "--add-config", "bytes_per_second=5"], "producer_byte_rate"),
        ([*client, "--add-config", "producer_byte_rate=fast"], "not a number"),
        ([*client, "--add-config", "producer_byte_rate=-1"], "positive"),
        ([*client, "--add-config", "producer_byte_rate=0"], "positive"),
        ([*client, "--add-config", "consumer_byte_rate=nan"], "positive"),
        ([*client, "--add-config", "request_percentage=inf"], "positive"),
        ([*client], "--add-config"),
        (["--entity-type", "clients", "--add-config", "producer_byte_rate=1"], "--entity-name"),
        (["--entity-name", "x", "--add-config", "producer_byte_rate=1"], "--entity-type"),
    ]
    for args, message in cases:
        done = cli("quotas", "alter", "--path", mq_path, *args)
        assert done.code != 0 and message in done.err, (args, done.err)
    assert described(cli, mq_path, *client) == []


def test_defaults_are_named_with_entity_default(cli: Any, mq_path: str) -> None:
    # A user default only under a user no other test authenticates as.
    entity = ["--entity-type", "users", "--entity-name", "cli-quota-owner"]
    entity += ["--entity-type", "clients", "--entity-default"]
    done = cli(
        "quotas", "alter", "--path", mq_path, *entity, "--add-config", "producer_byte_rate=7"
    )
    assert done.code == 0, done.err
    assert described(cli, mq_path, *entity) == [
        {
            "entity": {"user": "cli-quota-owner", "client-id": "<default>"},
            "quotas": {"producer_byte_rate": 7.0},
        }
    ]
    done = cli(
        "quotas", "alter", "--path", mq_path, *entity, "--delete-config", "producer_byte_rate"
    )
    assert done.code == 0, done.err


def test_quota_values_print_as_kafka_shows_them() -> None:
    from spark_mq.cli.quotas import _number

    assert [_number(v) for v in (1048576.0, 25.5, 1e308, 5e-324)] == [
        "1048576",
        "25.5",
        "1e+308",
        "5e-324",
    ]
