"""LogManager: topic administration, reopening, crash handling and the clean-shutdown marker."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import spark_mq
from spark_mq.errors import (
    ConfigError,
    CorruptCheckpointError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogClosedError,
    LogDirectoryFullError,
    LogDirectoryLockedError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from spark_mq.storage import log_manager
from spark_mq.storage.checkpoint_file import OffsetCheckpointFile
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogManager,
)
from spark_mq.storage.record_batch import encode_batch

REPO_ROOT = str(Path(spark_mq.__file__).resolve().parent.parent)


class Clock:
    """An injected clock: tests move time, nothing sleeps."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def manager(root: Path, clock: Clock) -> Iterator[LogManager]:
    with LogManager(root, time_ms=clock) as m:
        yield m


@pytest.fixture
def open_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Spy on PartitionLog.open: the keyword arguments of every call, in order."""
    calls: list[dict[str, Any]] = []
    real_open = PartitionLog.open.__func__  # type: ignore[attr-defined]

    def spy(cls: type[PartitionLog], directory: Any, *args: Any, **kwargs: Any) -> PartitionLog:
        calls.append({"directory": Path(directory), **kwargs})
        log: PartitionLog = real_open(cls, directory, *args, **kwargs)
        return log

    monkeypatch.setattr(PartitionLog, "open", classmethod(spy))
    return calls


def batch(*values: bytes, timestamp_ms: int | None = None) -> bytes:
    stamps = None if timestamp_ms is None else pa.array([timestamp_ms] * len(values), pa.int64())
    return encode_batch(pa.array(list(values), pa.binary()), timestamp=stamps)


def reopen(root: Path, clock: Clock, **kwargs: Any) -> LogManager:
    return LogManager(root, time_ms=clock, **kwargs)


# ---------------------------------------------------------------------------------------------
# Administration


def test_create_describe_and_list(manager: LogManager, root: Path, clock: Clock) -> None:
    info = manager.create_topic(
        "orders", partitions=3, config={"retention.ms": 1000, "cleanup_policy": "compact"}
    )
    assert info.name == "orders"
    assert len(info.topic_id) == 32
    assert info.partition_count == 3
    assert dict(info.config_overrides) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert info.config.retention_ms == 1000 and info.config.compact
    assert info.created_ms == clock.now_ms
    assert [(p.partition, p.log_start_offset, p.log_end_offset) for p in info.partitions] == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 0),
    ]
    assert all(p.num_segments == 1 and p.size_bytes == 0 for p in info.partitions)
    for p in range(3):
        assert (root / f"orders-{p}").is_dir()
        assert manager.get_log("orders", p).config.retention_ms == 1000
    meta = json.loads((root / "__meta" / "topics" / "orders.json").read_text())
    assert meta == {
        "version": 0,
        "name": "orders",
        "topic_id": info.topic_id,
        "partitions": 3,
        "config": {"cleanup.policy": "compact", "retention.ms": "1000"},
        "created_ms": clock.now_ms,
    }
    manager.create_topic("audit")
    assert manager.list_topics() == ["audit", "orders"]
    assert manager.topic_exists("audit") and not manager.topic_exists("nope")
    assert [(log.topic, log.partition) for log in manager.logs()] == [
        ("audit", 0),
        ("orders", 0),
        ("orders", 1),
        ("orders", 2),
    ]
    assert manager.describe_topic("orders") == info


def test_describe_reports_offsets_and_sizes(manager: LogManager) -> None:
    manager.create_topic("t")
    log = manager.get_log("t", 0)
    log.append(batch(b"a", b"b"))
    log.append(batch(b"c"))
    (p,) = manager.describe_topic("t").partitions
    assert (p.log_start_offset, p.log_end_offset, p.high_watermark) == (0, 3, 3)
    assert p.size_bytes == log.size_bytes > 0
    assert p.num_segments == 1


def test_create_existing_topic_is_refused(manager: LogManager) -> None:
    manager.create_topic("t")
    with pytest.raises(TopicExistsError, match="already exists") as info:
        manager.create_topic("t", partitions=2)
    assert info.value.topic == "t"
    assert manager.describe_topic("t").partition_count == 1


@pytest.mark.parametrize("name", ["", "..", "a b", "x" * 250])
def test_create_refuses_invalid_names(manager: LogManager, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        manager.create_topic(name)
    assert manager.list_topics() == []


@pytest.mark.parametrize("partitions", [0, -1, True, 1.0, 10_001])
def test_create_refuses_invalid_partition_counts(
    manager: LogManager, root: Path, partitions: Any
) -> None:
    with pytest.raises(InvalidPartitionsError, match="number of partitions") as info:
        manager.create_topic("t", partitions=partitions)
    assert info.value.topic == "t"
    assert not manager.topic_exists("t")
    assert not (root / "t-0").exists()


@pytest.mark.parametrize(
    ("config", "key", "fragment"),
    [
        ({"retention.ms": "soon"}, "retention.ms", "must be an integer"),
        ({"segment_bytes": 1}, "segment.bytes", "must be at least"),
        ({"cleanup.policy": "shred"}, "cleanup.policy", "delete, compact"),
        ({"retention.mss": 1}, "retention.mss", "did you mean 'retention.ms'"),
    ],
)
def test_config_errors_name_the_key(
    manager: LogManager, root: Path, config: dict[str, object], key: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        manager.create_topic("t", config=config)
    assert info.value.key == key
    assert key in str(info.value) and fragment in str(info.value)
    assert not manager.topic_exists("t")
    assert not (root / "t-0").exists()


def test_alter_config_sets_and_removes_overrides(manager: LogManager, root: Path) -> None:
    default_retention = LogConfig().retention_ms
    manager.create_topic("t", partitions=2, config={"retention.ms": 1000, "segment.ms": 5000})
    info = manager.alter_topic_config("t", {"retention_ms": "2000", "segment.ms": None})
    assert dict(info.config_overrides) == {"retention.ms": "2000"}
    assert info.config.segment_ms == LogConfig().segment_ms
    for p in range(2):
        assert manager.get_log("t", p).config.retention_ms == 2000
    manager.alter_topic_config("t", {"retention.ms": None})
    assert manager.get_log("t", 1).config.retention_ms == default_retention
    assert dict(manager.describe_topic("t").config_overrides) == {}
    meta = json.loads((root / "__meta" / "topics" / "t.json").read_text())
    assert meta["config"] == {}


def test_alter_config_errors_change_nothing(manager: LogManager) -> None:
    manager.create_topic("t", config={"retention.ms": 1000})
    with pytest.raises(ConfigError) as info:
        manager.alter_topic_config("t", {"retention.ms": 5, "max.message.bytes": "big"})
    assert info.value.key == "max.message.bytes"
    with pytest.raises(ConfigError) as info:
        manager.alter_topic_config("t", {"no.such.key": None})
    assert info.value.key == "no.such.key"
    assert manager.get_log("t", 0).config.retention_ms == 1000
    assert dict(manager.describe_topic("t").config_overrides) == {"retention.ms": "1000"}


def test_default_config_applies_below_overrides(root: Path, clock: Clock) -> None:
    default = LogConfig(retention_ms=111, segment_ms=222)
    with LogManager(root, default, time_ms=clock) as m:
        info = m.create_topic("t", config={"segment.ms": 333})
        assert (info.config.retention_ms, info.config.segment_ms) == (111, 333)
        assert m.default_config is default


def test_add_partitions(manager: LogManager, root: Path) -> None:
    topic_id = manager.create_topic("t").topic_id
    manager.get_log("t", 0).append(batch(b"kept"))
    info = manager.add_partitions("t", 3)
    assert info.partition_count == 3 and info.topic_id == topic_id
    assert manager.get_log("t", 2).log_end_offset == 0
    assert manager.get_log("t", 0).log_end_offset == 1
    assert (root / "t-2").is_dir()
    assert json.loads((root / "__meta" / "topics" / "t.json").read_text())["partitions"] == 3


@pytest.mark.parametrize("total", [3, 2, 0])
def test_partitions_can_only_be_added(manager: LogManager, total: int) -> None:
    manager.create_topic("t", partitions=3)
    with pytest.raises(InvalidPartitionsError, match="can only be added") as info:
        manager.add_partitions("t", total)
    assert (info.value.topic, info.value.current, info.value.requested) == ("t", 3, total)
    assert manager.describe_topic("t").partition_count == 3


def test_delete_topic(manager: LogManager, root: Path) -> None:
    manager.create_topic("t", partitions=2)
    manager.create_topic("other")
    old_log = manager.get_log("t", 0)
    old_log.append(batch(b"x"))
    manager.delete_topic("t")
    assert manager.list_topics() == ["other"]
    assert not (root / "t-0").exists() and not (root / "t-1").exists()
    assert not (root / "__meta" / "topics" / "t.json").exists()
    assert list((root / "__meta" / "deleting").iterdir()) == []
    assert not [p for p in root.iterdir() if p.name.endswith(".deleted")]
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log("t", 0)
    with pytest.raises(LogClosedError):
        old_log.append(batch(b"too late"))


def test_recreated_topic_is_new_and_empty(manager: LogManager) -> None:
    first = manager.create_topic("t")
    manager.get_log("t", 0).append(batch(b"old"))
    manager.delete_topic("t")
    second = manager.create_topic("t")
    assert second.topic_id != first.topic_id
    assert manager.get_log("t", 0).log_end_offset == 0


def test_unknown_topics_and_partitions(manager: LogManager) -> None:
    manager.create_topic("t", partitions=2)
    for call in (
        lambda: manager.get_log("nope", 0),
        lambda: manager.describe_topic("nope"),
        lambda: manager.delete_topic("nope"),
        lambda: manager.alter_topic_config("nope", {"retention.ms": 1}),
        lambda: manager.add_partitions("nope", 5),
    ):
        with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist") as info:
            call()
        assert info.value.topic == "nope" and info.value.partition is None
        assert "existing topics: t" in str(info.value)
    with pytest.raises(UnknownTopicOrPartitionError) as info:
        manager.get_log("t", 2)
    assert (info.value.topic, info.value.partition) == ("t", 2)
    assert "partitions 0 to 1; partition 2 does not exist" in str(info.value)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log("t", -1)


def test_unusual_but_legal_names_survive_reopen_and_delete(root: Path, clock: Clock) -> None:
    # A 249-character name still fits every file name the manager derives from it
    # (partition directories, metadata and its temporary file, .deleted directories).
    names = [".hidden", "x.json", "a-1", "z" * 249]
    with LogManager(root, time_ms=clock) as m:
        for name in names:
            m.create_topic(name, partitions=2)
            m.get_log(name, 1).append(batch(b"v"))
    with reopen(root, clock) as m:
        assert m.list_topics() == sorted(names)
        assert m.get_log("a-1", 1).log_end_offset == 1
        assert m.get_log("a-1", 0).log_end_offset == 0
        for name in names:
            m.delete_topic(name)
        assert m.list_topics() == []
    assert sorted(p.name for p in root.iterdir()) == [
        ".clean_shutdown",
        ".lock",
        "__meta",
        LOG_START_OFFSET_CHECKPOINT,
        RECOVERY_POINT_CHECKPOINT,
        REPLICATION_OFFSET_CHECKPOINT,
    ]


def test_concurrent_creates_all_land(manager: LogManager) -> None:
    errors: list[BaseException] = []

    def create(i: int) -> None:
        try:
            manager.create_topic(f"t{i}", partitions=2)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert manager.list_topics() == sorted(f"t{i}" for i in range(8))


# ---------------------------------------------------------------------------------------------
# Lifecycle, lock and maintenance


def test_second_manager_on_the_same_directory_is_refused(root: Path, clock: Clock) -> None:
    with (
        LogManager(root, time_ms=clock, owner="broker 1"),
        pytest.raises(LogDirectoryLockedError, match="owner 'broker 1'"),
    ):
        LogManager(root, time_ms=clock)
    with LogManager(root, time_ms=clock):
        pass


def test_closed_manager_refuses_everything(root: Path, clock: Clock) -> None:
    m = LogManager(root, time_ms=clock)
    m.create_topic("t")
    log = m.get_log("t", 0)
    m.close()
    m.close()  # idempotent
    assert m.closed
    for call in (
        lambda: m.create_topic("u"),
        lambda: m.get_log("t", 0),
        lambda: m.describe_topic("t"),
        m.list_topics,
        lambda: m.topic_exists("t"),
        m.logs,
        m.checkpoint,
        m.flush_all,
        m.apply_retention,
        lambda: m.add_partitions("t", 2),
        lambda: m.alter_topic_config("t", {}),
        lambda: m.delete_topic("t"),
    ):
        with pytest.raises(LogClosedError, match="is closed"):
            call()
    with pytest.raises(LogClosedError):
        log.append(batch(b"x"))


def test_reopen_keeps_topics_config_and_data(root: Path, clock: Clock) -> None:
    with LogManager(root, time_ms=clock) as m:
        created = m.create_topic("t", partitions=2, config={"retention.ms": 123456})
        m.create_topic("u")
        log = m.get_log("t", 1)
        log.append(batch(b"a", b"b"))
        log.append(batch(b"c"))
    with reopen(root, clock) as m:
        assert m.had_clean_shutdown
        assert m.list_topics() == ["t", "u"]
        info = m.describe_topic("t")
        assert info.topic_id == created.topic_id
        assert info.created_ms == created.created_ms
        assert dict(info.config_overrides) == {"retention.ms": "123456"}
        log = m.get_log("t", 1)
        assert log.config.retention_ms == 123456
        assert log.log_end_offset == 3
        assert log.read_records(0).column("value").to_pylist() == [b"a", b"b", b"c"]
        assert m.get_log("t", 0).log_end_offset == 0
        log.append(batch(b"d"))
    with reopen(root, clock) as m:
        assert m.get_log("t", 1).log_end_offset == 4


def test_close_writes_checkpoints_and_the_marker(root: Path, clock: Clock) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("t", partitions=2)
        m.get_log("t", 0).append(batch(b"a", b"b", b"c"))
        m.get_log("t", 0).delete_records_before(1)
    assert OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT).read() == {
        ("t", 0): 3,
        ("t", 1): 0,
    }
    assert OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT).read() == {
        ("t", 0): 1,
        ("t", 1): 0,
    }
    marker = json.loads((root / CLEAN_SHUTDOWN_FILE).read_text())
    assert marker == {"version": 0, "shutdown_ms": clock.now_ms}


def test_a_lost_directory_is_abandoned_without_a_write_to_its_path(
    root: Path, clock: Clock
) -> None:
    """close() writes checkpoints and the marker by path; after the directory was replaced,
    that would be into the new one. abandon() writes nothing and releases the lock."""
    m = LogManager(root, time_ms=clock)
    m.create_topic("t", partitions=2)
    m.get_log("t", 0).append(batch(b"a", b"b"))
    assert m.directory_lost() is None
    shutil.rmtree(root)
    root.mkdir()
    assert m.directory_lost() is not None
    m.abandon()
    assert m.closed
    assert list(root.iterdir()) == []
    m.abandon()  # idempotent
    # The new directory is free for a manager of its own.
    with LogManager(root, time_ms=clock) as again:
        assert again.list_topics() == []


def test_checkpoint_and_flush_all(manager: LogManager, root: Path) -> None:
    manager.create_topic("t")
    log = manager.get_log("t", 0)
    log.append(batch(b"a", b"b"))
    manager.flush_all()
    assert log.recovery_point == 2
    manager.checkpoint()
    assert OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 2}
    assert OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 0}


def test_log_start_offset_survives_reopen(root: Path, clock: Clock) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("t")
        m.get_log("t", 0).append(batch(b"a", b"b", b"c"))
        m.get_log("t", 0).delete_records_before(2)
    with reopen(root, clock) as m:
        assert m.get_log("t", 0).log_start_offset == 2


def test_apply_retention_counts_deleted_segments(manager: LogManager, clock: Clock) -> None:
    # One batch per segment, so every old batch is a whole deletable segment.
    config = {"segment.bytes": 1000, "retention.ms": 1000}
    manager.create_topic("t", partitions=2, config=config)
    for p in range(2):
        for i in range(3):
            manager.get_log("t", p).append(batch(b"x" * 64, timestamp_ms=clock.now_ms + i))
    before = sum(p.num_segments for p in manager.describe_topic("t").partitions)
    assert manager.apply_retention() == 0
    clock.now_ms += 10_000
    deleted = manager.apply_retention()
    # Every segment expired, the active one included (the log rolls a new, empty one first).
    assert deleted == before == 6
    partitions = manager.describe_topic("t").partitions
    assert [(p.log_start_offset, p.log_end_offset, p.num_segments) for p in partitions] == [
        (3, 3, 1),
        (3, 3, 1),
    ]
    assert manager.apply_retention() == 0


# ---------------------------------------------------------------------------------------------
# Clean shutdown and crashes


def test_clean_shutdown_marker_semantics(
    root: Path, clock: Clock, open_calls: list[dict[str, Any]]
) -> None:
    marker = root / CLEAN_SHUTDOWN_FILE
    with LogManager(root, time_ms=clock) as m:
        assert not m.had_clean_shutdown  # a new directory has no marker
        m.create_topic("t", partitions=2)
        assert not marker.exists()
    assert marker.exists()
    open_calls.clear()
    m = reopen(root, clock)
    assert m.had_clean_shutdown
    # Read and deleted at once, so that a crash from here on counts as unclean.
    assert not marker.exists()
    assert [c["had_clean_shutdown"] for c in open_calls] == [True, True]
    m._simulate_crash()
    open_calls.clear()
    with reopen(root, clock) as m:
        assert not m.had_clean_shutdown
        assert [c["had_clean_shutdown"] for c in open_calls] == [False, False]


def test_reopen_after_crash_recovers_data(
    root: Path, clock: Clock, open_calls: list[dict[str, Any]]
) -> None:
    m = LogManager(root, time_ms=clock)
    m.create_topic("t")
    m.get_log("t", 0).append(batch(b"a", b"b"))
    m.checkpoint()  # recovery point 0 checkpointed, before the flush
    m.get_log("t", 0).flush()
    m._simulate_crash()
    with pytest.raises(LogClosedError):
        m.get_log("t", 0)
    open_calls.clear()
    with reopen(root, clock) as m:
        assert not m.had_clean_shutdown
        (call,) = open_calls
        assert call["had_clean_shutdown"] is False
        assert call["recovery_point"] == 0
        assert m.get_log("t", 0).read_records(0).column("value").to_pylist() == [b"a", b"b"]


def test_checkpointed_offsets_are_passed_to_the_logs(
    root: Path, clock: Clock, open_calls: list[dict[str, Any]]
) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("t")
        m.get_log("t", 0).append(batch(b"a", b"b", b"c"))
        m.get_log("t", 0).delete_records_before(1)
    open_calls.clear()
    with reopen(root, clock, flush_executor=None):
        (call,) = open_calls
        assert call["recovery_point"] == 3
        assert call["log_start_offset"] == 1
        assert call["had_clean_shutdown"] is True
        assert call["time_ms"] is clock


def test_corrupt_recovery_checkpoint_forces_recovery(
    root: Path, clock: Clock, open_calls: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("t")
        m.get_log("t", 0).append(batch(b"a"))
    (root / RECOVERY_POINT_CHECKPOINT).write_bytes(b"0\n1\nt 0 banana\n")
    open_calls.clear()
    with caplog.at_level(logging.WARNING), reopen(root, clock) as m:
        assert not m.had_clean_shutdown
        assert open_calls[0]["recovery_point"] == 0
        assert m.get_log("t", 0).log_end_offset == 1
    assert "line 3" in caplog.text and RECOVERY_POINT_CHECKPOINT in caplog.text


def test_stale_offsets_of_a_deleted_topic_do_not_reach_its_successor(
    root: Path, clock: Clock
) -> None:
    m = LogManager(root, time_ms=clock)
    m.create_topic("t")
    m.get_log("t", 0).append(batch(b"a", b"b", b"c", b"d"))
    m.get_log("t", 0).delete_records_before(3)
    m.checkpoint()  # log start offset 3 is now on disk for ("t", 0)
    m.delete_topic("t")
    m.create_topic("t")
    m.get_log("t", 0).append(batch(b"new0", b"new1", b"new2", b"new3", b"new4"))
    m.get_log("t", 0).flush()
    m._simulate_crash()
    with reopen(root, clock) as m:
        log = m.get_log("t", 0)
        assert (log.log_start_offset, log.log_end_offset) == (0, 5)


def test_failed_create_leaves_nothing(
    manager: LogManager, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(self: LogManager, meta: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LogManager, "_write_metadata", disk_full)
    with pytest.raises(LogDirectoryFullError, match="creating topic 't'"):
        manager.create_topic("t", partitions=2)
    monkeypatch.undo()
    assert not manager.topic_exists("t")
    assert not (root / "t-0").exists() and not (root / "t-1").exists()
    manager.create_topic("t", partitions=2)


def test_crash_mid_create_leaves_an_empty_orphan_that_create_reuses(
    root: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    LogManager(root, time_ms=clock).close()
    # What a crash between the partition directories and the metadata file leaves behind.
    PartitionLog.open(root / "fresh-0", LogConfig(), topic="fresh", partition=0).close()
    with caplog.at_level(logging.WARNING), reopen(root, clock) as m:
        assert "orphan partition directory" in caplog.text and "fresh-0" in caplog.text
        assert m.list_topics() == []
        assert (root / "fresh-0").is_dir()  # left alone
        m.create_topic("fresh", partitions=2)
        assert m.get_log("fresh", 0).log_end_offset == 0


def test_orphan_with_data_is_never_adopted_or_removed(
    root: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("src")
        m.get_log("src", 0).append(batch(b"precious"))
    # Someone drops a partition directory with data into the log directory.
    shutil.copytree(root / "src-0", root / "ghost-0")
    with caplog.at_level(logging.WARNING), reopen(root, clock) as m:
        assert "ghost-0" in caplog.text
        with pytest.raises(TopicExistsError, match="holds data") as info:
            m.create_topic("ghost")
        assert str(root / "ghost-0") in str(info.value)
        assert not m.topic_exists("ghost")
    assert (root / "ghost-0").is_dir()
    with reopen(root, clock) as m:
        assert m.list_topics() == ["src"]


def test_missing_partition_directory_is_recreated_empty(
    root: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("t", partitions=2)
        m.get_log("t", 1).append(batch(b"lost"))
    shutil.rmtree(root / "t-1")
    with caplog.at_level(logging.WARNING), reopen(root, clock) as m:
        assert "t-1 of topic 't' is missing" in caplog.text
        assert m.get_log("t", 1).log_end_offset == 0
        assert (root / "t-1").is_dir()


def test_interrupted_delete_is_finished_at_startup(root: Path, clock: Clock) -> None:
    with LogManager(root, time_ms=clock) as m:
        topic_id = m.create_topic("t", partitions=2).topic_id
        m.create_topic("keep")
        m.get_log("t", 0).append(batch(b"doomed"))
    # A crash right after the commit point of delete_topic: the metadata is in deleting/,
    # the partition directories are still in place, one already renamed.
    os.replace(
        root / "__meta" / "topics" / "t.json", root / "__meta" / "deleting" / f"{topic_id}.json"
    )
    os.rename(root / "t-1", root / f"t-1.{'0' * 32}.deleted")
    with reopen(root, clock) as m:
        assert m.list_topics() == ["keep"]
    names = sorted(p.name for p in root.iterdir())
    assert "t-0" not in names and not [n for n in names if n.endswith(".deleted")]
    assert list((root / "__meta" / "deleting").iterdir()) == []


def test_deleted_leftovers_and_tmp_files_are_removed(root: Path, clock: Clock) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("t")
    leftover = root / f"t-0.{'ab' * 16}.deleted"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"old")
    (root / f"{RECOVERY_POINT_CHECKPOINT}.tmp").write_bytes(b"torn")
    (root / "__meta" / "topics" / "u.tmp").write_bytes(b"{torn")
    with reopen(root, clock) as m:
        assert m.list_topics() == ["t"]
    assert not leftover.exists()
    assert not (root / f"{RECOVERY_POINT_CHECKPOINT}.tmp").exists()
    assert not (root / "__meta" / "topics" / "u.tmp").exists()


def test_delete_interrupted_after_commit_in_process(
    manager: LogManager, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager.create_topic("t")

    def fail(root: object, deleting_dir: object, meta: object, record: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(log_manager, "carry_out_deletion", fail)
    with pytest.raises(StorageError, match="deleting topic 't'"):
        manager.delete_topic("t")
    monkeypatch.undo()
    # The deletion was committed: the topic is gone, and the next create finishes the job.
    assert not manager.topic_exists("t")
    assert (root / "t-0").exists()
    manager.create_topic("t")
    assert manager.get_log("t", 0).log_end_offset == 0
    assert list((root / "__meta" / "deleting").iterdir()) == []


def test_corrupt_topic_metadata_refuses_to_open_and_unlocks(root: Path, clock: Clock) -> None:
    with LogManager(root, time_ms=clock) as m:
        m.create_topic("t")
    path = root / "__meta" / "topics" / "t.json"
    path.write_text('{"version": 0, "name": "t"')
    with pytest.raises(CorruptCheckpointError, match="corrupt topic metadata file") as info:
        reopen(root, clock)
    assert info.value.path == str(path)
    path.write_text(json.dumps({"version": 0, "name": "other"}))
    with pytest.raises(CorruptCheckpointError, match="topic_id"):
        reopen(root, clock)
    path.unlink()
    with reopen(root, clock) as m:  # the failed opens released the lock
        assert m.list_topics() == []


# ---------------------------------------------------------------------------------------------
# A real crash: a child process killed with SIGKILL while it owns the directory.

CHILD = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from spark_mq.storage.log_manager import LogManager
    from spark_mq.storage.record_batch import encode_batch
    manager = LogManager(sys.argv[1], owner="doomed child")
    manager.create_topic("events", partitions=2, config={"retention.ms": 86400000})
    log = manager.get_log("events", 1)
    log.append(encode_batch(pa.array([b"v1", b"v2"])))
    log.append(encode_batch(pa.array([b"v3"])))
    log.flush()
    print("ready", flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.slow
def test_killed_owner_then_reopen(
    root: Path, clock: Clock, open_calls: list[dict[str, Any]]
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO_ROOT},
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line == "ready\n", proc.stderr.read()
        with pytest.raises(LogDirectoryLockedError, match="owner 'doomed child'"):
            LogManager(root, time_ms=clock)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    open_calls.clear()
    with reopen(root, clock) as m:
        assert not m.had_clean_shutdown
        assert [c["had_clean_shutdown"] for c in open_calls] == [False, False]
        assert m.list_topics() == ["events"]
        assert m.get_log("events", 0).config.retention_ms == 86400000
        log = m.get_log("events", 1)
        assert log.read_records(0).column("value").to_pylist() == [b"v1", b"v2", b"v3"]
