"""__consumer_offsets on real storage: lazy creation, where a group's records go, loading
them back, and compaction keeping the newest commit per key."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.coordinator import GroupCoordinator
from spark_mq.broker.group.offsets import OffsetCommit
from spark_mq.broker.group.offsets_topic import OFFSETS_TOPIC, OffsetsTopic, partition_for
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.storage.log_manager import LogManager

NOW = 1_700_000_000_000


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(tmp_path / "mq")
    yield ReplicaManager(logs, node_id=0, leader_epoch=1, num_partitions=1, auto_create_topics=True)
    logs.close()


def keys_in(log_records: object) -> list[bytes]:
    return list(log_records.column("key").to_pylist())  # type: ignore[attr-defined]


def test_ensure_creates_a_compacted_topic_once(replicas):
    config = GroupConfig(offsets_topic_num_partitions=3, offsets_topic_segment_bytes=4096)
    topic = OffsetsTopic(replicas, config)
    assert not replicas.logs.topic_exists(OFFSETS_TOPIC)
    assert topic.load().records == 0  # loading does not create it
    assert not replicas.logs.topic_exists(OFFSETS_TOPIC)
    assert topic.ensure() == 3
    info = replicas.logs.describe_topic(OFFSETS_TOPIC)
    assert info.config.compact and info.config.segment_bytes == 4096
    # An existing topic keeps its partition count: changing it would move groups.
    assert OffsetsTopic(replicas, GroupConfig(offsets_topic_num_partitions=7)).ensure() == 3


def test_records_go_to_the_groups_partition_and_load_back(replicas):
    config = GroupConfig(offsets_topic_num_partitions=5)
    topic = OffsetsTopic(replicas, config)
    topic.ensure()
    coordinator = GroupCoordinator(config, topic)
    for group in ("alpha", "beta", "gamma"):
        commits = [OffsetCommit("t", p, 100 + p) for p in range(2)]
        assert coordinator.commit_offsets(group, commits, now_ms=NOW) == [None, None]
        log = replicas.logs.get_log(OFFSETS_TOPIC, partition_for(group, 5))
        assert log.high_watermark >= 2
    assert coordinator.delete_groups(["beta"], now_ms=NOW)[0].error_code == 0
    loaded = OffsetsTopic(replicas, config).load()
    assert set(loaded.offsets) == {"alpha", "gamma"}
    assert {tp: e.offset for tp, e in loaded.offsets["alpha"].items()} == {
        ("t", 0): 100,
        ("t", 1): 101,
    }
    back = GroupCoordinator(config, topic)
    back.load(loaded, NOW)
    assert [f.entry.offset for f in back.fetch_offsets("gamma")] == [100, 101]


def test_compaction_keeps_the_newest_commit_per_key(replicas):
    config = GroupConfig(offsets_topic_num_partitions=1, offsets_topic_segment_bytes=4096)
    topic = OffsetsTopic(replicas, config)
    topic.ensure()
    coordinator = GroupCoordinator(config, topic)
    for i in range(60):
        commits = [OffsetCommit("t", i % 3, i)]
        assert coordinator.commit_offsets("g", commits, now_ms=NOW + i) == [None]
    log = replicas.logs.get_log(OFFSETS_TOPIC, 0)
    assert log.num_segments > 3
    log.roll()  # the active segment is never cleaned; make every commit cleanable
    stats = replicas.logs.clean_logs(now_ms=NOW + 10_000)
    assert stats.records_read == 60 and stats.records_kept == 3
    keys = []
    position = log.log_start_offset
    while position < log.high_watermark:
        table, position = log.read_records_with_next(position)
        keys += keys_in(table)
    assert sorted(Counter(keys).values()) == [1, 1, 1]  # one record per partition key
    loaded = OffsetsTopic(replicas, config).load()
    assert {tp: e.offset for tp, e in loaded.offsets["g"].items()} == {
        ("t", 0): 57,
        ("t", 1): 58,
        ("t", 2): 59,
    }
