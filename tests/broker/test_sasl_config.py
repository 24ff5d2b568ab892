"""The broker's SASL settings (spark_mq/broker/sasl/sasl_config.py) as ServerConfig reads
them: ``connections.max.reauth.ms`` and its per-listener, per-mechanism form."""

from __future__ import annotations

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.errors import ConfigError

BASE = {"log.dirs": "/tmp/unused-by-parsing", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}


def test_reauthentication_is_off_by_default() -> None:
    config = ServerConfig.from_properties(BASE)
    assert config.sasl.connections_max_reauth_ms == 0
    assert config.max_reauth_ms_by_mechanism("SASL_PLAINTEXT") == {
        "PLAIN": 0,
        "SCRAM-SHA-512": 0,
    }


def test_a_listener_and_mechanism_override_the_broker_setting() -> None:
    config = ServerConfig.from_properties(
        {
            **BASE,
            "connections.max.reauth.ms": "3600000",
            "listener.name.external.scram-sha-512.connections.max.reauth.ms": "600000",
        }
    )
    assert config.max_reauth_ms_by_mechanism("EXTERNAL") == {
        "PLAIN": 3_600_000,
        "SCRAM-SHA-512": 600_000,
    }
    assert config.max_reauth_ms_by_mechanism("internal") == {
        "PLAIN": 3_600_000,
        "SCRAM-SHA-512": 3_600_000,
    }
    # Described, and carried over by with_overrides, under Kafka's key.
    props = config.to_properties()
    assert props["listener.name.external.scram-sha-512.connections.max.reauth.ms"] == "600000"
    assert props["connections.max.reauth.ms"] == "3600000"
    again = config.with_overrides({})
    assert again.max_reauth_ms_by_mechanism("EXTERNAL")["SCRAM-SHA-512"] == 600_000


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("connections.max.reauth.ms", "-1", "between 0"),
        ("connections.max.reauth.ms", "soon", "integer"),
        ("listener.name.external.gssapi.connections.max.reauth.ms", "1000", "mechanism among"),
        ("listener.name.external.plain.connections.max.reauth.ms", "-5", "between 0"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        ServerConfig.from_properties({**BASE, key: value})
    assert info.value.key == key
