"""``spark-mq users add|list|remove --zookeeper`` (Kafka's ``kafka-configs --zookeeper``): the
way to create a SASL inter-broker listener's broker user before any broker runs. Against a
real ZooKeeper: the znode holds Kafka's salted credential and never the password, list reads
it back, remove takes it away, and --zookeeper with a broker address is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from spark_mq.broker.sasl.credential_store import decode_user_config
from spark_mq.cli import main

PASSWORD = "Broker-Bootstrap-6e2a"


def _znode(zk_connect: str, path: str) -> dict[str, str] | None:
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        if zk.exists(path) is None:
            return None
        config: dict[str, str] = json.loads(zk.get(path)[0])["config"]
        return config
    finally:
        zk.stop()
        zk.close()


def test_add_list_remove_through_zookeeper(
    zk_connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "broker.secret"
    secret.write_text(PASSWORD + "\n")
    added = main(
        ["users", "add", "broker", "--zookeeper", zk_connect, "--password-file", str(secret),
         "--mechanism", "SCRAM-SHA-512"]
    )  # fmt: skip
    assert added == 0, capsys.readouterr().err
    config = _znode(zk_connect, "/config/users/broker")
    assert config is not None and PASSWORD not in json.dumps(config)
    (credential,) = decode_user_config("broker", config).values()
    assert credential.mechanism == "SCRAM-SHA-512" and credential.verify_password(PASSWORD)

    capsys.readouterr()
    assert main(["users", "list", "--zookeeper", zk_connect, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["users"]
    assert listed == {"broker": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}

    assert main(["users", "remove", "broker", "--zookeeper", zk_connect]) == 0
    assert decode_user_config("broker", _znode(zk_connect, "/config/users/broker") or {}) == {}
    capsys.readouterr()
    again = main(["users", "remove", "broker", "--zookeeper", zk_connect])
    err = capsys.readouterr().err
    assert again != 0 and "no SCRAM credential" in err and "broker" in err


def test_zookeeper_and_a_broker_address_are_refused_together(
    zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["users", "list", "--zookeeper", zk_connect, "--bootstrap-server", "127.0.0.1:9092"]
    )
    assert code != 0 and "not both" in capsys.readouterr().err
