"""The half-message service's settings: RocketMQ's defaults, typed errors naming the key,
and the broker's configuration carrying them (properties file, docs, DescribeConfigs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.half.config import HalfMessageConfig
from spark_mq.broker.properties_file import read_properties_file
from spark_mq.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_defaults_are_rocketmqs() -> None:
    cfg = HalfMessageConfig()
    assert cfg.transaction_check_interval_ms == 30_000
    assert cfg.transaction_half_timeout_ms == 6_000
    assert cfg.transaction_check_max == 15


def test_the_broker_config_routes_and_reports_the_keys() -> None:
    cfg = ServerConfig.from_properties(
        {"log.dirs": "/x", "transaction.check.max": "4", "transaction.check.interval.ms": "250"}
    )
    assert cfg.half_messages.transaction_check_max == 4
    assert cfg.half_messages.transaction_check_interval_ms == 250
    props = cfg.to_properties()
    assert props["transaction.check.max"] == "4"
    assert props["transaction.half.timeout.ms"] == "6000"
    assert "RocketMQ" in (ServerConfig.documentation("transaction.check.max") or "")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("transaction.check.max", "0"),
        ("transaction.check.interval.ms", "0"),
        ("transaction.half.timeout.ms", "-5"),
        ("transaction.check.max", "many"),
    ],
)
def test_bad_values_name_their_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        ServerConfig.from_properties({"log.dirs": "/x", key: value})
    assert exc.value.key == key and key in str(exc.value)


def test_example_file_and_docs_carry_every_default() -> None:
    props = read_properties_file(REPO / "conf" / "broker.properties")
    doc = (REPO / "docs" / "broker.md").read_text(encoding="utf-8")
    for key, value in HalfMessageConfig().to_properties().items():
        assert props.get(key) == value, key
        assert f"| `{key}` | `{value}` |" in doc, key
