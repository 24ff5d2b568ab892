"""The Spark source and sink pass ``kafka.security.protocol`` and ``kafka.sasl.*`` through to
their clients exactly as Spark's Kafka connector users write them, and a bad
``kafka.sasl.jaas.config`` fails on the driver without quoting the password."""

from __future__ import annotations

import pickle

import pytest

from spark_mq.client.config import ConsumerConfig, ProducerConfig
from spark_mq.datasource.options import parse_source_options
from spark_mq.errors import ConfigError
from spark_mq.sink.options import parse_sink_options

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="spark" password="spark-secret";'
)
SASL_OPTIONS = {
    "kafka.bootstrap.servers": "127.0.0.1:9093",
    "kafka.security.protocol": "SASL_PLAINTEXT",
    "kafka.sasl.mechanism": "SCRAM-SHA-256",
    "kafka.sasl.jaas.config": JAAS,
}


def test_source_passes_sasl_settings_to_its_consumer() -> None:
    parsed = parse_source_options({**SASL_OPTIONS, "subscribe": "t"}, streaming=True)
    config = ConsumerConfig.from_properties(parsed.consumer_properties())
    creds = config.sasl_credentials()
    assert creds is not None
    assert (creds.mechanism, creds.username, creds.password.value) == (
        "SCRAM-SHA-256",
        "spark",
        "spark-secret",
    )


def test_sink_passes_sasl_settings_to_its_producer() -> None:
    parsed = parse_sink_options({**SASL_OPTIONS, "topic": "t"})
    config = ProducerConfig.from_properties(parsed.producer_props())
    creds = config.sasl_credentials()
    assert creds is not None and creds.username == "spark"


@pytest.mark.parametrize("parse", ["source", "sink"])
def test_bad_jaas_fails_on_the_driver(parse: str) -> None:
    options = {**SASL_OPTIONS, "kafka.sasl.jaas.config": 'Nope required password="spark-secret";'}
    with pytest.raises(ConfigError, match="login module") as info:
        if parse == "source":
            parse_source_options({**options, "subscribe": "t"}, streaming=True)
        else:
            parse_sink_options({**options, "topic": "t"})
    assert "spark-secret" not in str(info.value)


@pytest.mark.parametrize(
    "secret_key", ["kafka.sasl.jaas.config", "kafka.sasl.password", "kafka.ssl.key.password"]
)
def test_parsed_options_never_print_a_secret_and_keep_it_across_pickling(secret_key: str) -> None:
    """The parsed options travel to executors (pickled in input partitions and writers) and
    end up in logs and tracebacks: the secret must not show in them, yet reach the client."""
    secret = "spark-secret" if secret_key != "kafka.sasl.jaas.config" else JAAS
    options = {
        "kafka.bootstrap.servers": "127.0.0.1:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        secret_key: secret,
    }
    if secret_key != "kafka.sasl.jaas.config":
        options["kafka.sasl.username"] = "spark"
    if secret_key == "kafka.ssl.key.password":
        options["kafka.sasl.password"] = "another"
    source = parse_source_options({**options, "subscribe": "t"}, streaming=True)
    sink = parse_sink_options({**options, "topic": "t"})
    for parsed in (source, sink):
        assert "spark-secret" not in repr(parsed) and "spark-secret" not in str(parsed)
        assert pickle.loads(pickle.dumps(parsed)) == parsed
    consumer = ConsumerConfig.from_properties(source.consumer_properties())
    producer = ProducerConfig.from_properties(sink.producer_props())
    for config in (consumer, producer):
        if secret_key == "kafka.ssl.key.password":
            assert config.ssl_key_password.value == secret
        else:
            creds = config.sasl_credentials()
            assert creds is not None and creds.password.value == "spark-secret"
    # The sink's producer settings hold kafka.<key> options too.
    assert "spark-secret" not in repr(sink.producer_settings)
