"""The broker's own SASL settings on a SASL inter-broker listener (broker/inter_broker.py):
the mechanism and the credentials of listener.name.<listener>.<mechanism>.sasl.jaas.config
become the transport's SaslCredentials; a missing or bad setting is a ConfigError naming the
key at start, never quoting the password; the password shows in no repr."""

from __future__ import annotations

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.inter_broker import inter_broker_transport
from spark_mq.errors import ConfigError

SECRET = "Broker-Secret-31f0"
JAAS_KEY = "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="broker" password="{SECRET}";'
)


def config(**extra: str) -> ServerConfig:
    return ServerConfig.from_properties(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "zookeeper.connect": "127.0.0.1:2181",
            **extra,
        }
    )


def test_the_transport_logs_in_with_the_listener_jaas_config() -> None:
    server = config(**{JAAS_KEY: JAAS})
    transport = inter_broker_transport(server)
    assert transport.sasl is not None
    assert (transport.sasl.mechanism, transport.sasl.username) == ("SCRAM-SHA-512", "broker")
    assert transport.sasl.password.value == SECRET
    assert SECRET not in repr(transport)
    assert SECRET not in repr(server)
    # Carried over a with_overrides copy, though not among the described properties.
    assert SECRET not in str(server.to_properties())
    copy = server.with_overrides({"broker.shutdown.timeout.ms": "5000"})
    assert inter_broker_transport(copy).sasl == transport.sasl


def test_a_plain_mechanism_reads_its_own_key() -> None:
    key = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    text = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="b" password="p";'
    )
    server = config(
        **{
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            key: text,
        }
    )
    sasl = inter_broker_transport(server).sasl
    assert sasl is not None and (sasl.mechanism, sasl.username) == ("PLAIN", "b")


def test_a_missing_jaas_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match=JAAS_KEY.replace(".", r"\.")) as error:
        inter_broker_transport(config())
    assert error.value.key == JAAS_KEY


def test_a_mechanism_that_is_not_enabled_is_refused() -> None:
    server = config(
        **{
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            JAAS_KEY: JAAS,
        }
    )
    with pytest.raises(ConfigError, match=r"not in sasl\.enabled\.mechanisms") as error:
        inter_broker_transport(server)
    assert error.value.key == "sasl.mechanism.inter.broker.protocol"


def test_an_unknown_mechanism_is_refused() -> None:
    with pytest.raises(ConfigError, match="GSSAPI"):
        config(**{"sasl.mechanism.inter.broker.protocol": "GSSAPI"})
    with pytest.raises(ConfigError, match=r"listener\.name"):
        config(**{"listener.name.sasl_plaintext.gssapi.sasl.jaas.config": JAAS})


def test_a_jaas_config_of_the_wrong_module_names_the_key_not_the_password() -> None:
    wrong = JAAS.replace("scram.ScramLoginModule", "plain.PlainLoginModule")
    with pytest.raises(ConfigError, match="ScramLoginModule") as error:
        inter_broker_transport(config(**{JAAS_KEY: wrong}))
    assert error.value.key == JAAS_KEY
    assert SECRET not in str(error.value)


def test_a_plaintext_inter_broker_listener_has_no_sasl() -> None:
    server = ServerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "zookeeper.connect": "127.0.0.1:2181"}
    )
    assert inter_broker_transport(server).sasl is None
