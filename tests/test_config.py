"""Tests for spark_mq.config through LogConfig, the first component config.

Defaults are compared with Kafka's documented topic-level defaults (the "Topic Configs"
table of the Kafka documentation), so a changed default is a visible decision.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.config import LONG_MAX, parse_bool, parse_float, parse_int, parse_list, parse_str
from spark_mq.errors import ConfigError
from spark_mq.storage.log_config import LogConfig

#: Kafka's topic defaults, as strings exactly as ``kafka-configs --describe`` prints them.
KAFKA_TOPIC_DEFAULTS = {
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "segment.jitter.ms": "0",
    "segment.index.bytes": "10485760",
    "index.interval.bytes": "4096",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "cleanup.policy": "delete",
    "delete.retention.ms": "86400000",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
    "file.delete.delay.ms": "60000",
    "compression.type": "producer",
    "message.timestamp.type": "CreateTime",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "preallocate": "false",
}
#: Topic settings of spark_mq's own, not in Kafka (each doc says so), with their defaults.
OWN_TOPIC_DEFAULTS = {
    "segment.drop.behind.bytes": "8388608",
}


# ---------------------------------------------------------------------------------------------
# Defaults


@pytest.mark.parametrize(("key", "value"), list(KAFKA_TOPIC_DEFAULTS.items()))
def test_default_equals_kafkas(key: str, value: str) -> None:
    assert LogConfig().to_properties()[key] == value


@pytest.mark.parametrize(("key", "value"), list(OWN_TOPIC_DEFAULTS.items()))
def test_own_setting_defaults(key: str, value: str) -> None:
    assert LogConfig().to_properties()[key] == value


def test_default_values_are_typed() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1_073_741_824
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 604_800_000
    assert config.retention_bytes == -1
    assert config.max_message_bytes == 1_048_588
    assert config.cleanup_policy == ("delete",)
    assert config.delete_retention_ms == 86_400_000
    assert config.min_cleanable_dirty_ratio == 0.5
    assert config.segment_index_bytes == 10_485_760
    assert config.file_delete_delay_ms == 60_000
    assert config.flush_messages == config.flush_ms == LONG_MAX == 2**63 - 1
    assert config.unclean_leader_election_enable is False
    assert config.preallocate is False
    assert config.delete
    assert not config.compact


def test_every_setting_has_a_kafka_key_and_a_doc() -> None:
    settings_ = LogConfig.settings()
    assert set(settings_) == set(KAFKA_TOPIC_DEFAULTS) | set(OWN_TOPIC_DEFAULTS)
    for key, field in settings_.items():
        assert field.metadata["key"] == key
        assert field.metadata["doc"].strip()
        if key in OWN_TOPIC_DEFAULTS:
            assert field.metadata["doc"].startswith("Not in Kafka.")
        assert field.name == key.replace(".", "_")


# ---------------------------------------------------------------------------------------------
# Parsing


def test_parse_from_strings() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "segment.ms": " 3600000 ",
            "retention.ms": "-1",
            "retention.bytes": "1_000_000",
            "cleanup.policy": "compact, delete",
            "min.cleanable.dirty.ratio": "0.25",
            "preallocate": "TRUE",
            "unclean.leader.election.enable": "false",
            "compression.type": "zstd",
            "message.timestamp.type": "LogAppendTime",
        }
    )
    assert config.segment_bytes == 1_048_576
    assert config.segment_ms == 3_600_000
    assert config.retention_ms == -1
    assert config.retention_bytes == 1_000_000
    assert config.cleanup_policy == ("compact", "delete")
    assert config.compact
    assert config.delete
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.preallocate is True
    assert config.unclean_leader_election_enable is False
    assert config.compression_type == "zstd"
    assert config.message_timestamp_type == "LogAppendTime"


def test_parse_from_underscore_names_and_python_values() -> None:
    config = LogConfig.from_properties(
        segment_bytes=2048,
        retention_ms="60000",
        cleanup_policy=["compact"],
        min_cleanable_dirty_ratio=1,
        preallocate=True,
        max_compaction_lag_ms=LONG_MAX,
    )
    assert config.segment_bytes == 2048
    assert config.retention_ms == 60_000
    assert config.cleanup_policy == ("compact",)
    assert config.compact
    assert not config.delete
    assert config.min_cleanable_dirty_ratio == 1.0
    assert isinstance(config.min_cleanable_dirty_ratio, float)
    assert config.preallocate is True


def test_underscore_keys_inside_a_mapping() -> None:
    config = LogConfig.from_properties({"segment_bytes": "4096", "index.interval.bytes": 10})
    assert config.segment_bytes == 4096
    assert config.index_interval_bytes == 10


def test_keyword_arguments_override_the_mapping() -> None:
    config = LogConfig.from_properties({"segment_ms": "5"}, segment_ms="6")
    assert config.segment_ms == 6


def test_one_setting_spelled_two_ways_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"segment\.bytes is given twice") as info:
        LogConfig.from_properties({"segment.bytes": "4096"}, segment_bytes=8192)
    assert info.value.key == "segment.bytes"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", ""),
        ("segment.bytes", "1.5"),
        ("segment.bytes", 1.5),
        ("segment.bytes", True),
        ("segment.bytes", "61"),
        ("segment.bytes", None),
        ("segment.ms", "0"),
        ("segment.jitter.ms", "-1"),
        ("segment.index.bytes", "4"),
        ("index.interval.bytes", "-1"),
        ("retention.ms", "-2"),
        ("retention.bytes", "-5"),
        ("flush.messages", "0"),
        ("flush.ms", "-1"),
        ("max.message.bytes", "-1"),
        ("cleanup.policy", "delete,archive"),
        ("cleanup.policy", ""),
        ("cleanup.policy", 5),
        ("cleanup.policy", [1, 2]),
        ("delete.retention.ms", "-1"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "-0.1"),
        ("min.cleanable.dirty.ratio", "nan"),
        ("min.cleanable.dirty.ratio", "half"),
        ("min.cleanable.dirty.ratio", False),
        ("min.compaction.lag.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("file.delete.delay.ms", "-1"),
        ("compression.type", "brotli"),
        ("compression.type", "none"),
        ("compression.type", 4),
        ("message.timestamp.type", "createtime"),
        ("min.insync.replicas", "0"),
        ("unclean.leader.election.enable", "yes"),
        ("preallocate", 1),
    ],
)
def test_bad_value_names_the_key(key: str, value: object) -> None:
    for spelling in (key, key.replace(".", "_")):
        with pytest.raises(ConfigError) as info:
            LogConfig.from_properties({spelling: value})
        assert info.value.key == key
        assert key in str(info.value)
        assert info.value.value is not None or value is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("segment_bytes", 10),
        ("segment_bytes", "abc"),
        ("preallocate", "yes"),
        ("cleanup_policy", ("archive",)),
        ("min_cleanable_dirty_ratio", 2.0),
        ("retention_ms", None),
    ],
)
def test_direct_construction_is_checked_too(field: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig(**{field: value})  # type: ignore[arg-type]
    assert info.value.key == field.replace("_", ".")


def test_direct_construction_normalises_values() -> None:
    config = LogConfig(segment_bytes="2048", cleanup_policy="compact,delete")  # type: ignore[arg-type]
    assert config.segment_bytes == 2048
    assert config.cleanup_policy == ("compact", "delete")


@pytest.mark.parametrize(
    ("given_name", "suggestion"),
    [
        ("segment.byte", "segment.bytes"),
        ("segmnet.bytes", "segment.bytes"),
        ("retention_msec", "retention.ms"),
        ("cleanup.polcy", "cleanup.policy"),
        ("message.timestamp.typ", "message.timestamp.type"),
    ],
)
def test_unknown_key_suggests_the_closest(given_name: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_properties({given_name: "1"})
    assert info.value.key == given_name
    message = str(info.value)
    assert repr(given_name) in message
    assert f"did you mean {suggestion!r}" in message


def test_unknown_key_without_a_close_match_lists_the_valid_keys() -> None:
    with pytest.raises(ConfigError) as info:
        LogConfig.from_properties(bootstrap_servers="localhost:9092")
    message = str(info.value)
    assert "did you mean" not in message
    for key in KAFKA_TOPIC_DEFAULTS:
        assert key in message


def test_parsers_directly() -> None:
    assert parse_int("k", " -1_024 ") == -1024
    assert parse_int("k", 3.0) == 3
    assert parse_float("k", "1e-3") == 0.001
    assert parse_float("k", 2) == 2.0
    assert parse_bool("k", " False ") is False
    assert parse_str("k", "  x ") == "x"
    assert parse_list("k", " a, ,b ,") == ("a", "b")
    assert parse_list("k", ("a", " b")) == ("a", "b")
    for parser, bad in [
        (parse_int, "x"),
        (parse_int, False),
        (parse_float, True),
        (parse_float, "x"),
        (parse_bool, "1"),
        (parse_str, 5),
        (parse_list, 5),
    ]:
        with pytest.raises(ConfigError, match=r"my\.key") as info:
            parser("my.key", bad)
        assert info.value.key == "my.key"
        assert info.value.value == bad


# ---------------------------------------------------------------------------------------------
# Serialisation, overrides, immutability


def test_to_properties_round_trip() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "1048576",
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.1",
            "unclean.leader.election.enable": "true",
            "retention.ms": "-1",
        }
    )
    props = config.to_properties()
    assert all(isinstance(v, str) for v in props.values())
    assert set(props) == set(KAFKA_TOPIC_DEFAULTS) | set(OWN_TOPIC_DEFAULTS)
    assert props["cleanup.policy"] == "compact,delete"
    assert props["unclean.leader.election.enable"] == "true"
    assert LogConfig.from_properties(props) == config
    assert LogConfig.from_properties(LogConfig().to_properties()) == LogConfig()


@settings(max_examples=50, deadline=None)
@given(
    segment_bytes=st.integers(62, 2**31 - 1),
    retention_ms=st.integers(-1, 2**62),
    ratio=st.floats(0.0, 1.0, allow_nan=False),
    policy=st.sampled_from(["delete", "compact", "compact,delete", "delete,compact"]),
    preallocate=st.booleans(),
)
def test_round_trip_property(
    segment_bytes: int, retention_ms: int, ratio: float, policy: str, preallocate: bool
) -> None:
    config = LogConfig.from_properties(
        segment_bytes=segment_bytes,
        retention_ms=retention_ms,
        min_cleanable_dirty_ratio=ratio,
        cleanup_policy=policy,
        preallocate=preallocate,
    )
    again = LogConfig.from_properties(config.to_properties())
    assert again == config
    assert math.isclose(again.min_cleanable_dirty_ratio, ratio)


def test_overrides_lists_only_what_differs() -> None:
    assert LogConfig().overrides() == {}
    config = LogConfig.from_properties(
        {"retention.ms": "1000", "cleanup.policy": "compact", "segment.bytes": "1073741824"}
    )
    assert config.overrides() == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert LogConfig.from_properties(config.overrides()) == config


def test_with_overrides_returns_a_checked_copy() -> None:
    base = LogConfig.from_properties(retention_ms=5000)
    changed = base.with_overrides({"segment.ms": "10"}, preallocate="true")
    assert changed.segment_ms == 10
    assert changed.preallocate is True
    assert changed.retention_ms == 5000
    assert base.segment_ms == 604_800_000
    with pytest.raises(ConfigError) as info:
        base.with_overrides(segment_ms="0")
    assert info.value.key == "segment.ms"
    with pytest.raises(ConfigError, match=r"did you mean 'segment\.ms'"):
        base.with_overrides({"segment.msx": "10"})


def test_config_is_frozen_and_hashable() -> None:
    config = LogConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.segment_bytes = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del config.retention_ms
    assert config == LogConfig()
    assert hash(config) == hash(LogConfig())
    assert {config: 1}[LogConfig()] == 1
