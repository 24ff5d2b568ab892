"""TopicConfigSync against a real ZooKeeper and a real log directory: it applies
``/config/topics/<t>`` to the topics the directory hosts at start and on every change
notification, skips notifications of other entities and corrupt ones, and purges
notifications once they are older than 15 minutes by an injected clock; racing writers of
one topic's config lose no change (compare-and-set)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from waiting import wait_for

from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.config_changes import (
    CHANGE_EXPIRATION_MS,
    TopicConfigSync,
    change_topic_config,
    read_cluster_topic_config,
)
from spark_mq.broker.zk.partition_states import create_topic
from spark_mq.errors import UnknownTopicOrPartitionError
from spark_mq.storage.log_manager import LogManager


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    with LogManager(tmp_path / "logs") as manager:
        yield manager


def _setting(key: str, value: str | None) -> Callable[[Mapping[str, str]], dict[str, str]]:
    def update(current: Mapping[str, str]) -> dict[str, str]:
        new = dict(current)
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
        return new

    return update


def _overrides(logs: LogManager, topic: str) -> dict[str, str]:
    return dict(logs.describe_topic(topic).config_overrides)


def test_applies_zookeeper_overrides_to_hosted_topics(
    clients: Callable[[], ZkClient], logs: LogManager
) -> None:
    zk = clients()
    writer = clients()
    logs.create_topic("t", 1, {"segment.ms": "9000"})
    logs.create_topic("gone", 1)  # hosted here, but no longer in the cluster
    create_topic(zk, "t", znodes.TopicAssignment({0: (1,)}), {"retention.ms": "1000"})
    # Another broker's change made before this one starts is caught up at start.
    create_topic(zk, "elsewhere", znodes.TopicAssignment({0: (2,)}), {})
    change_topic_config(writer, "t", _setting("retention.ms", "2000"))
    now = [time.time_ns() // 1_000_000]
    sync = TopicConfigSync(zk, logs, wall_clock_ms=lambda: now[0])
    sync.start()
    try:
        # /config/topics/t replaces the directory's overrides whole: segment.ms goes.
        wait_for(lambda: _overrides(logs, "t") == {"retention.ms": "2000"}, timeout_s=10)
        assert _overrides(logs, "gone") == {}

        change_topic_config(writer, "t", _setting("segment.ms", "7000"))
        wait_for(lambda: _overrides(logs, "t") == {"retention.ms": "2000", "segment.ms": "7000"})
        assert read_cluster_topic_config(writer, "t") == _overrides(logs, "t")
        # A topic this broker does not host is not created here.
        change_topic_config(writer, "elsewhere", _setting("retention.ms", "5"))
        # Notifications it does not act on: another entity type, and garbage.
        writer.kazoo.create(
            "/config/changes/config_change_",
            b'{"version":2,"entity_path":"clients/app"}',
            sequence=True,
        )
        writer.kazoo.create("/config/changes/config_change_", b"garbage", sequence=True)
        change_topic_config(writer, "t", _setting("segment.ms", None))
        wait_for(lambda: _overrides(logs, "t") == {"retention.ms": "2000"})
        assert not logs.topic_exists("elsewhere")
        notices = writer.children(znodes.CONFIG_CHANGES)
        wait_for(lambda: sync.last_applied == znodes.config_change_sequence(notices[-1]))
        # Younger than 15 minutes: kept.
        assert writer.children(znodes.CONFIG_CHANGES) == notices

        now[0] += CHANGE_EXPIRATION_MS + 1000
        change_topic_config(writer, "t", _setting("retention.ms", "3000"))
        wait_for(lambda: _overrides(logs, "t") == {"retention.ms": "3000"})
        wait_for(lambda: writer.children(znodes.CONFIG_CHANGES) == [])
    finally:
        sync.close()


def test_racing_writers_lose_no_change(clients: Callable[[], ZkClient]) -> None:
    writers = [clients() for _ in range(3)]
    create_topic(writers[0], "t", znodes.TopicAssignment({0: (1,)}), {})
    rounds = 15

    def write(index: int) -> None:
        for i in range(rounds):
            change_topic_config(writers[index], "t", _setting(f"k{index}.{i}", "v"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    config = read_cluster_topic_config(writers[0], "t")
    assert sorted(config) == sorted(f"k{w}.{i}" for w in range(3) for i in range(rounds))
    # One notification per change.
    assert len(writers[0].children(znodes.CONFIG_CHANGES)) == 3 * rounds


def test_an_unknown_topic_is_refused_and_nothing_is_written(
    clients: Callable[[], ZkClient],
) -> None:
    zk = clients()
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist"):
        change_topic_config(zk, "nope", _setting("retention.ms", "1"))
    with pytest.raises(UnknownTopicOrPartitionError):
        read_cluster_topic_config(zk, "nope")
    assert zk.get(znodes.topic_config_path("nope")) is None
    assert zk.children(znodes.CONFIG_CHANGES) == []
