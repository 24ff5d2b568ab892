"""A client's SASL settings (spark_mq/client/sasl.py, client/config.py): sasl.jaas.config in
the Java form, librdkafka's sasl.username / sasl.password, and secrets that never show."""

from __future__ import annotations

import pytest

from spark_mq.client.config import ProducerConfig
from spark_mq.client.sasl import parse_jaas
from spark_mq.errors import ConfigError

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def config(**props: object) -> ProducerConfig:
    return ProducerConfig.from_properties(
        {"bootstrap.servers": "h:9092", "security.protocol": "SASL_PLAINTEXT", **props}
    )


def test_username_and_password() -> None:
    creds = config(**{"sasl.username": "alice", "sasl.password": "s3"}).sasl_credentials()
    assert creds is not None
    assert (creds.mechanism, creds.username, creds.password.value) == (
        "SCRAM-SHA-512",
        "alice",
        "s3",
    )


@pytest.mark.parametrize(
    ("mechanism", "jaas"),
    [
        ("SCRAM-SHA-256", f'{SCRAM} required username="alice" password="p;w \\"q\\"";'),
        ("PLAIN", f"{PLAIN} required username=alice password=pw"),
        ("SCRAM-SHA-512", f'  {SCRAM}  required\n  username="alice"\n  password="pw" ;  '),
    ],
)
def test_jaas_config(mechanism: str, jaas: str) -> None:
    creds = config(**{"sasl.mechanism": mechanism, "sasl.jaas.config": jaas}).sasl_credentials()
    assert creds is not None and creds.username == "alice"
    assert creds.password.value in ('p;w "q"', "pw")


@pytest.mark.parametrize(
    ("mechanism", "jaas", "match"),
    [
        ("PLAIN", f'{SCRAM} required username="a" password="p";', "needs .*PlainLoginModule"),
        ("SCRAM-SHA-256", f'{SCRAM} maybe username="a" password="p";', "must look like"),
        ("SCRAM-SHA-256", f'{SCRAM} required username="a";', "lacks password"),
        ("SCRAM-SHA-256", f'{SCRAM} required username="a" password="p', "cannot read"),
        ("SCRAM-SHA-256", "", "must look like"),
    ],
)
def test_bad_jaas_config_names_the_problem_not_the_password(
    mechanism: str, jaas: str, match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        parse_jaas(jaas, mechanism)
    assert info.value.key == "sasl.jaas.config"
    assert '"p"' not in str(info.value) and info.value.value is None


def test_sasl_protocol_needs_credentials_once() -> None:
    with pytest.raises(ConfigError, match="needs credentials"):
        config().check_endpoint()
    with pytest.raises(ConfigError, match="not both"):
        config(
            **{
                "sasl.username": "a",
                "sasl.password": "p",
                "sasl.jaas.config": f'{SCRAM} required username="a" password="p";',
            }
        ).check_endpoint()


def test_unknown_mechanism_and_protocol_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.mechanism"):
        config(**{"sasl.mechanism": "GSSAPI", "sasl.username": "a", "sasl.password": "p"})
    with pytest.raises(ConfigError, match=r"security\.protocol"):
        ProducerConfig.from_properties({"bootstrap.servers": "h:1", "security.protocol": "SASL"})


def test_plaintext_needs_no_credentials() -> None:
    plain = ProducerConfig.from_properties({"bootstrap.servers": "h:9092"})
    assert plain.sasl_credentials() is None


def test_secrets_never_show() -> None:
    jaas = f'{SCRAM} required username="alice" password="jaas-secret";'
    for cfg in (
        config(**{"sasl.username": "alice", "sasl.password": "pw-secret"}),
        config(**{"sasl.jaas.config": jaas}),
    ):
        shown = repr(cfg) + str(cfg.to_properties()) + repr(cfg.sasl_credentials())
        assert "pw-secret" not in shown and "jaas-secret" not in shown
