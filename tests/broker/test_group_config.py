"""GroupConfig: Kafka's keys and defaults, read through the broker's ServerConfig."""

from __future__ import annotations

import pytest

from spark_mq.broker.config import ServerConfig
from spark_mq.broker.group.config import GroupConfig
from spark_mq.errors import ConfigError

KAFKA_DEFAULTS = {
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offsets.commit.timeout.ms": "5000",
    "offset.metadata.max.bytes": "4096",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.max.size": "2147483647",
}


def test_defaults_are_kafkas():
    assert GroupConfig().to_properties() == KAFKA_DEFAULTS
    assert GroupConfig().offsets_retention_ms == 7 * 24 * 3600 * 1000


def test_server_config_routes_group_keys_and_lists_them():
    cfg = ServerConfig.from_properties(
        {"log.dirs": "/tmp/mq", "group.initial.rebalance.delay.ms": "0", "group_max_size": "9"}
    )
    assert cfg.groups.group_initial_rebalance_delay_ms == 0 and cfg.groups.group_max_size == 9
    props = cfg.to_properties()
    assert props["offsets.topic.num.partitions"] == "50"
    assert cfg.to_properties(only_set=True)["group.initial.rebalance.delay.ms"] == "0"
    assert "first rebalance" in (
        ServerConfig.documentation("group.initial.rebalance.delay.ms") or ""
    )
    again = cfg.with_overrides({"offsets.retention.minutes": "1"})
    assert (again.groups.offsets_retention_ms, again.groups.group_max_size) == (60_000, 9)


def test_bad_values_name_the_key():
    with pytest.raises(ConfigError, match=r"did you mean 'group\.max\.size'"):
        ServerConfig.from_properties({"group.max.sise": "3"})
    with pytest.raises(ConfigError, match=r"offsets\.topic\.num\.partitions") as info:
        ServerConfig.from_properties({"offsets.topic.num.partitions": "0"})
    assert info.value.key == "offsets.topic.num.partitions"
    with pytest.raises(ConfigError, match=r"group\.min\.session\.timeout\.ms"):
        GroupConfig(group_min_session_timeout_ms=10, group_max_session_timeout_ms=5)
