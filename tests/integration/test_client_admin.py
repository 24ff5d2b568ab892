"""Admin against a real broker: topics, partitions, configs, offsets, record deletion, and
the typed errors for each failure."""

from __future__ import annotations

from typing import Any

import pytest

from spark_mq.client import Admin, Consumer, Producer, TopicPartition
from spark_mq.errors import (
    ConfigError,
    InvalidPartitionsError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    UsageError,
)


def admin_for(broker: Any) -> Admin:
    return Admin(bootstrap_servers=str(broker.address))


def test_topic_lifecycle(broker: Any) -> None:
    with admin_for(broker) as admin:
        admin.create_topic("orders", partitions=2, config={"retention.ms": 3_600_000})
        with pytest.raises(TopicExistsError):
            admin.create_topic("orders")
        assert "orders" in admin.list_topics()
        described = admin.describe_topic("orders")
        assert described.partition_count == 2
        assert [p.partition for p in described.partitions] == [0, 1]
        assert all(p.leader >= 0 and p.leader in p.isr for p in described.partitions)
        assert described.configs == {"retention.ms": "3600000"}
        admin.create_partitions("orders", 4)
        assert admin.describe_topic("orders").partition_count == 4
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions("orders", 3)
        admin.delete_topic("orders")
        assert "orders" not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_topic("orders")
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topic("orders")


def test_configs(broker: Any) -> None:
    with admin_for(broker) as admin:
        admin.create_topic("c")
        default = admin.describe_configs("c")["retention.ms"]
        admin.alter_configs("c", {"retention.ms": 60_000, "cleanup.policy": "compact"})
        configs = admin.describe_configs("c")
        assert configs["retention.ms"] == "60000" and configs["cleanup.policy"] == "compact"
        admin.alter_configs("c", {"retention.ms": None})
        assert admin.describe_configs("c")["retention.ms"] == default
        assert admin.describe_topic("c").configs == {"cleanup.policy": "compact"}
        with pytest.raises(ConfigError):
            admin.alter_configs("c", {"retention.ms": "soon"})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.describe_configs("nope")


def test_list_offsets_and_delete_records(broker: Any) -> None:
    tp = TopicPartition("o", 0)
    with admin_for(broker) as admin:
        admin.create_topic("o")
        with Producer(bootstrap_servers=str(broker.address)) as producer:
            for i in range(10):
                producer.send("o", b"x", timestamp_ms=1_000 + i)
            producer.flush()
        assert admin.list_offsets({tp: "earliest"})[tp].offset == 0
        assert admin.list_offsets({tp: "latest"})[tp].offset == 10
        assert admin.list_offsets({tp: 1_004})[tp] == (4, 1_004)
        assert admin.list_offsets({tp: "max_timestamp"})[tp].offset == 9
        with pytest.raises(UsageError, match="spec"):
            admin.list_offsets({tp: "newest"})
        assert admin.delete_records({tp: 6}) == {tp: 6}
        assert admin.list_offsets({("o", 0): "earliest"})[tp].offset == 6
        with Consumer(bootstrap_servers=str(broker.address)) as consumer:
            assert consumer.beginning_offsets([tp]) == {tp: 6}
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.list_offsets({TopicPartition("none", 0): "latest"})


def test_closed_admin(broker: Any) -> None:
    admin = admin_for(broker)
    admin.close()
    with pytest.raises(UsageError, match="closed"):
        admin.create_topic("x")
