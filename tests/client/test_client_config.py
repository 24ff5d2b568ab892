"""Client settings: Kafka keys, underscore keywords, did-you-mean, cross-checks."""

from __future__ import annotations

from typing import Any

import pytest

from spark_mq.client import Admin, Consumer, Producer
from spark_mq.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from spark_mq.errors import ConfigError


def test_dotted_keys_and_underscore_keywords_are_the_same() -> None:
    dotted = ProducerConfig.from_properties({"linger.ms": 7, "batch.size": "1024"})
    underscored = ProducerConfig.from_properties(linger_ms=7, batch_size=1024)
    assert dotted == underscored
    assert (dotted.linger_ms, dotted.batch_size) == (7, 1024)


def test_kafka_defaults() -> None:
    cfg = ProducerConfig()
    assert cfg.acks == -1 and cfg.enable_idempotence
    assert (cfg.batch_size, cfg.linger_ms, cfg.buffer_memory) == (16384, 5, 33554432)
    assert cfg.max_request_size == 1048576
    assert cfg.max_in_flight_requests_per_connection == 5
    assert cfg.partitioner == "murmur3"
    assert ConsumerConfig().isolation_level == "read_committed"
    assert ConsumerConfig().auto_offset_reset == "latest"


@pytest.mark.parametrize(
    ("cls", "typo", "suggestion"),
    [
        (ProducerConfig, "lingr_ms", "linger.ms"),
        (ProducerConfig, "compresion.type", "compression.type"),
        (ConsumerConfig, "auto_offset_rest", "auto.offset.reset"),
        (ConsumerConfig, "isolation.levl", "isolation.level"),
        (AdminConfig, "bootstrap_server", "bootstrap.servers"),
    ],
)
def test_unknown_key_names_the_closest_valid_one(cls: Any, typo: str, suggestion: str) -> None:
    with pytest.raises(ConfigError, match=f"did you mean '{suggestion}'") as info:
        cls.from_properties({typo: 1})
    assert info.value.key == typo


def test_bad_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"compression\.type") as info:
        ProducerConfig.from_properties(compression_type="brotli")
    assert info.value.key == "compression.type"
    with pytest.raises(ConfigError, match="acks"):
        ProducerConfig.from_properties(acks=2)
    with pytest.raises(ConfigError, match="partitioner"):
        ProducerConfig.from_properties(partitioner="crc32")
    with pytest.raises(ConfigError, match=r"auto\.offset\.reset"):
        ConsumerConfig.from_properties(auto_offset_reset="smallest")


def test_acks_spellings() -> None:
    for spelling in ("all", "ALL", "-1", -1):
        assert ProducerConfig.from_properties(acks=spelling).acks == -1
    assert ProducerConfig.from_properties(acks="1", enable_idempotence=False).acks == 1


def test_one_setting_spelled_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        ProducerConfig.from_properties({"linger.ms": 1}, linger_ms=2)


def test_idempotence_is_turned_off_by_conflicting_settings_unless_asked_for() -> None:
    assert not ProducerConfig.from_user({"acks": 1}).enable_idempotence
    assert not ProducerConfig.from_user({"acks": "0"}).enable_idempotence
    assert ProducerConfig.from_user({"acks": "all"}).enable_idempotence
    with pytest.raises(ConfigError, match=r"enable\.idempotence=true needs acks all"):
        ProducerConfig.from_user({"acks": 1, "enable.idempotence": True})


def test_delivery_timeout_must_cover_linger_and_request_timeout() -> None:
    with pytest.raises(ConfigError, match=r"delivery\.timeout\.ms"):
        ProducerConfig.from_properties(delivery_timeout_ms=1000, request_timeout_ms=5000)


def test_partitioner_accepts_a_callable() -> None:
    def fn(topic: str, key: bytes | None, count: int) -> int:
        return 0

    assert ProducerConfig.from_properties(partitioner=fn).partitioner is fn


def test_interceptors_from_objects_classes_and_names() -> None:
    class Counter:
        def on_send(self, record: object) -> None:
            pass

    instance = Counter()
    cfg = ProducerConfig.from_properties(interceptors=[instance, Counter])
    assert cfg.interceptors[0] is instance and isinstance(cfg.interceptors[1], Counter)
    named = ProducerConfig.from_properties(interceptors="collections.OrderedDict")
    assert type(named.interceptors[0]).__name__ == "OrderedDict"
    with pytest.raises(ConfigError, match="cannot import"):
        ProducerConfig.from_properties(interceptors="no.such.Module")


def test_bootstrap_servers_as_string_or_list() -> None:
    cfg = ConsumerConfig.from_properties(bootstrap_servers=["a:1", "b:2"])
    assert cfg.bootstrap_servers == "a:1,b:2"
    assert [str(a) for a in cfg.bootstrap_addresses()] == ["a:1", "b:2"]


@pytest.mark.parametrize("client", [Producer, Consumer, Admin])
def test_exactly_one_endpoint(client: type, tmp_path: object) -> None:
    with pytest.raises(ConfigError, match="exactly one of path=DIR"):
        client()
    with pytest.raises(ConfigError, match="got both"):
        client(path=str(tmp_path), bootstrap_servers="localhost:9092")
    with pytest.raises(ConfigError, match="host:port"):
        client(bootstrap_servers="localhost")


@pytest.mark.parametrize("client", [Producer, Consumer, Admin])
def test_clients_refuse_unknown_keywords_before_connecting(client: type) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'request\.timeout\.ms'"):
        client(path="/nonexistent", request_timeout=5)


def test_dotted_keys_through_kwargs() -> None:
    # The constructor accepts **{"linger.ms": 5}; checked without starting a broker.
    cfg = ProducerConfig.from_user({"path": "/x", "linger.ms": 5})
    assert cfg.linger_ms == 5 and cfg.path == "/x"
