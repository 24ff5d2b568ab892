"""LogManager of a cluster broker: it hosts only some partitions of a topic (the replicas the
controller assigned to it), gains and loses them, and reopens exactly those after a restart."""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from log_testing import Clock

from spark_mq.errors import (
    CorruptCheckpointError,
    InvalidPartitionsError,
    LogClosedError,
    LogDirectoryFullError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from spark_mq.storage import log_manager
from spark_mq.storage.log_manager import RECOVERY_POINT_CHECKPOINT, LogManager
from spark_mq.storage.record_batch import encode_batch


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def manager(root: Path, clock: Clock) -> Iterator[LogManager]:
    with LogManager(root, time_ms=clock) as m:
        yield m


def batch(*values: bytes) -> bytes:
    return encode_batch(pa.array(list(values), pa.binary()))


def metadata(root: Path, topic: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((root / "__meta" / "topics" / f"{topic}.json").read_text())
    return loaded


def partition_dirs(root: Path, topic: str) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(f"{topic}-"))


def test_create_hosting_a_subset(manager: LogManager, root: Path, clock: Clock) -> None:
    info = manager.create_topic("t", partitions=4, hosted=[2, 0])
    assert info.partition_count == 4
    assert [p.hosted for p in info.partitions] == [True, False, True, False]
    assert info.partitions[1].log_end_offset == -1
    assert partition_dirs(root, "t") == ["t-0", "t-2"]
    assert manager.hosted_partitions("t") == [0, 2]
    assert [(log.topic, log.partition) for log in manager.logs()] == [("t", 0), ("t", 2)]
    manager.get_log("t", 2).append(batch(b"a"))
    with pytest.raises(NotLeaderOrFollowerError, match=r"hosts no replica of t-1.*refresh"):
        manager.get_log("t", 1)
    # A partition the topic does not have at all is still unknown, not "not hosted".
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_log("t", 4)
    assert metadata(root, "t") == {
        "version": 1,
        "name": "t",
        "topic_id": info.topic_id,
        "partitions": 4,
        "hosted": [0, 2],
        "config": {},
        "created_ms": clock.now_ms,
    }


def test_hosting_every_partition_writes_the_single_node_layout(
    manager: LogManager, root: Path
) -> None:
    manager.create_topic("t", partitions=2, hosted=[0, 1])
    assert metadata(root, "t")["version"] == 0 and "hosted" not in metadata(root, "t")
    manager.create_topic("u", partitions=2)
    assert metadata(root, "u")["version"] == 0


def test_create_refuses_hosting_a_partition_beyond_the_count(
    manager: LogManager, root: Path
) -> None:
    with pytest.raises(InvalidPartitionsError, match="cannot host partition 3"):
        manager.create_topic("t", partitions=2, hosted=[0, 3])
    with pytest.raises(InvalidPartitionsError, match="ints from 0"):
        manager.create_topic("t", partitions=2, hosted=[-1])
    assert not manager.topic_exists("t")
    assert partition_dirs(root, "t") == []


def test_restart_reopens_exactly_the_hosted_partitions(root: Path, clock: Clock) -> None:
    with LogManager(root, time_ms=clock) as manager:
        manager.create_topic("t", partitions=3, hosted=[1])
        manager.get_log("t", 1).append(batch(b"x", b"y"))
        # A directory of a partition not hosted (a stopped replica's, or copied in) is not
        # opened by a restart.
        (root / "t-2").mkdir()
    with LogManager(root, time_ms=clock) as manager:
        assert manager.hosted_partitions("t") == [1]
        assert manager.get_log("t", 1).log_end_offset == 2
        for p in (0, 2):
            with pytest.raises(NotLeaderOrFollowerError):
                manager.get_log("t", p)
        assert not (root / "t-0").exists()


@pytest.mark.parametrize(
    ("layout", "hosted"),
    [
        # Version 0, every layout before hosting existed: every partition is local.
        ({"version": 0, "partitions": 2}, [0, 1]),
        ({"version": 1, "partitions": 2, "hosted": [1]}, [1]),
        ({"version": 1, "partitions": 2, "hosted": []}, []),
    ],
)
def test_every_metadata_layout_loads(
    root: Path, clock: Clock, layout: dict[str, Any], hosted: list[int]
) -> None:
    topics = root / "__meta" / "topics"
    topics.mkdir(parents=True)
    content = {"name": "t", "topic_id": "ab" * 16, "config": {}, "created_ms": 5, **layout}
    (topics / "t.json").write_text(json.dumps(content))
    with LogManager(root, time_ms=clock) as manager:
        assert manager.hosted_partitions("t") == hosted
        assert manager.describe_topic("t").partition_count == 2
        assert partition_dirs(root, "t") == [f"t-{p}" for p in hosted]


@pytest.mark.parametrize("hosted", [[2], [1, 0], [0, 0], "0", [True], None, [-1]], ids=repr)
def test_a_bad_hosted_list_is_refused(root: Path, clock: Clock, hosted: object) -> None:
    topics = root / "__meta" / "topics"
    topics.mkdir(parents=True)
    content = {
        "version": 1,
        "name": "t",
        "topic_id": "ab" * 16,
        "partitions": 2,
        "hosted": hosted,
        "config": {},
        "created_ms": 5,
    }
    (topics / "t.json").write_text(json.dumps(content))
    with pytest.raises(CorruptCheckpointError, match=r"hosted .* not a sorted list"):
        LogManager(root, time_ms=clock)


def test_host_partitions_creates_then_grows(manager: LogManager, root: Path) -> None:
    info = manager.host_partitions("t", [1], config={"retention.ms": 5000})
    assert info.partition_count == 2
    assert manager.hosted_partitions("t") == [1]
    assert manager.get_log("t", 1).config.retention_ms == 5000
    log = manager.get_log("t", 1)
    log.append(batch(b"a"))
    # Growing: partition 4 is beyond the count; partition 1 is left as it is.
    info = manager.host_partitions("t", [1, 4], partition_count=6)
    assert info.partition_count == 6
    assert manager.hosted_partitions("t") == [1, 4]
    assert manager.get_log("t", 1) is log and log.log_end_offset == 1
    assert partition_dirs(root, "t") == ["t-1", "t-4"]
    assert metadata(root, "t")["hosted"] == [1, 4] and metadata(root, "t")["partitions"] == 6
    # Asking again changes nothing; the count never shrinks.
    assert manager.host_partitions("t", [4], partition_count=2).partition_count == 6


def test_host_partitions_of_a_single_node_topic_keeps_it_whole(manager: LogManager) -> None:
    manager.create_topic("t", partitions=2)
    manager.host_partitions("t", [3])
    assert manager.hosted_partitions("t") == [0, 1, 3]
    with pytest.raises(NotLeaderOrFollowerError):
        manager.get_log("t", 2)


def test_stop_hosting_keeps_the_log_and_hosting_again_reopens_it(
    manager: LogManager, root: Path
) -> None:
    manager.create_topic("t", partitions=2, hosted=[0, 1])
    log = manager.get_log("t", 1)
    log.append(batch(b"a", b"b", b"c"))
    assert manager.stop_hosting("t", 1, delete=False) is True
    with pytest.raises(LogClosedError):
        log.read(0, 1000)
    with pytest.raises(NotLeaderOrFollowerError):
        manager.get_log("t", 1)
    assert (root / "t-1").is_dir()
    assert metadata(root, "t")["hosted"] == [0]
    manager.checkpoint()
    recovery = (root / RECOVERY_POINT_CHECKPOINT).read_text()
    assert "t 1 " not in recovery and "t 0 " in recovery
    # Stopping again is no error (a controller may resend).
    assert manager.stop_hosting("t", 1, delete=False) is False
    manager.host_partitions("t", [1])
    assert manager.get_log("t", 1).log_end_offset == 3


def test_stop_hosting_with_delete_removes_the_directory(manager: LogManager, root: Path) -> None:
    manager.create_topic("t", partitions=3, hosted=[0, 2])
    manager.get_log("t", 2).append(batch(b"a"))
    assert manager.stop_hosting("t", 2, delete=True) is True
    assert partition_dirs(root, "t") == ["t-0"]
    assert metadata(root, "t")["hosted"] == [0]
    # Hosting it again starts an empty log: the records were deleted.
    manager.host_partitions("t", [2])
    assert manager.get_log("t", 2).log_end_offset == 0


def test_deleting_a_kept_directory(manager: LogManager, root: Path) -> None:
    manager.create_topic("t", partitions=2)
    manager.get_log("t", 1).append(batch(b"a"))
    manager.stop_hosting("t", 1, delete=False)
    assert manager.stop_hosting("t", 1, delete=True) is False
    assert partition_dirs(root, "t") == ["t-0"]
    assert manager.hosted_partitions("t") == [0]


def test_deleting_the_last_replica_deletes_the_topic(manager: LogManager, root: Path) -> None:
    manager.create_topic("t", partitions=2, hosted=[0, 1])
    manager.stop_hosting("t", 0, delete=True)
    assert manager.topic_exists("t")
    manager.stop_hosting("t", 1, delete=True)
    assert not manager.topic_exists("t")
    assert partition_dirs(root, "t") == []
    assert not (root / "__meta" / "topics" / "t.json").exists()
    assert list((root / "__meta" / "deleting").iterdir()) == []


def test_the_last_replica_stopped_without_delete_keeps_the_topic(manager: LogManager) -> None:
    manager.create_topic("t", partitions=1)
    manager.stop_hosting("t", 0, delete=False)
    assert manager.topic_exists("t") and manager.hosted_partitions("t") == []


def test_a_full_disk_while_hosting_leaves_nothing_behind(
    manager: LogManager, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager.create_topic("t", partitions=2, hosted=[0])
    before = metadata(root, "t")

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log_manager, "atomic_write_bytes", full)
    with pytest.raises(LogDirectoryFullError):
        manager.host_partitions("t", [1, 3])
    assert metadata(root, "t") == before
    assert manager.hosted_partitions("t") == [0]
    assert partition_dirs(root, "t") == ["t-0"]


def test_crash_after_hosting_directories_before_the_metadata(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with LogManager(root, time_ms=clock) as manager:
        manager.create_topic("t", partitions=2, hosted=[0])
    manager = LogManager(root, time_ms=clock)

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # stands for the process dying at the commit point

    monkeypatch.setattr(manager, "_write_metadata", crash)
    # A dead process undoes nothing.
    monkeypatch.setattr(log_manager, "discard", lambda opened: None)
    with pytest.raises(KeyboardInterrupt):
        manager.host_partitions("t", [1])
    monkeypatch.undo()
    manager._simulate_crash()
    assert (root / "t-1").is_dir()
    with caplog.at_level(logging.WARNING), LogManager(root, time_ms=clock) as manager:
        assert manager.hosted_partitions("t") == [0]
        assert "does not host a replica of t-1" in caplog.text
        manager.host_partitions("t", [1])
        assert manager.hosted_partitions("t") == [0, 1]


def test_crash_in_a_delete_before_the_metadata(
    root: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with LogManager(root, time_ms=clock) as manager:
        manager.create_topic("t", partitions=2, hosted=[0, 1])
        manager.get_log("t", 1).append(batch(b"a"))
    manager = LogManager(root, time_ms=clock)

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(manager, "_write_metadata", crash)
    with pytest.raises(KeyboardInterrupt):
        manager.stop_hosting("t", 1, delete=True)
    monkeypatch.undo()
    manager._simulate_crash()
    # The directory left the log before the metadata changed: startup removes what is left
    # of it and, as the metadata still hosts the partition, opens it empty (never the old
    # records of a replica the controller deleted).
    with caplog.at_level(logging.WARNING), LogManager(root, time_ms=clock) as manager:
        assert manager.hosted_partitions("t") == [0, 1]
        assert manager.get_log("t", 1).log_end_offset == 0
        assert "t-1 of topic 't' is missing" in caplog.text
        assert not [p for p in root.iterdir() if p.name.endswith(".deleted")]


def test_a_stray_replica_is_set_aside_and_kept(
    root: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    with LogManager(root, time_ms=clock) as manager:
        manager.create_topic("t", partitions=2)
        manager.get_log("t", 1).append(batch(b"a", b"b"))
        assert manager.stop_hosting("t", 1, delete=True, stray=True) is True
        (aside,) = [p for p in root.iterdir() if p.name.endswith(".stray")]
        assert aside.name.startswith("t-1.") and (aside / "00000000000000000000.log").stat().st_size
        assert partition_dirs(root, "t") == ["t-0", aside.name]
        # Hosting it again starts empty: a stray log is never adopted.
        manager.host_partitions("t", [1])
        assert manager.get_log("t", 1).log_end_offset == 0
        # The last replica of a topic set aside removes the topic, not the kept directory.
        manager.create_topic("u", partitions=1)
        manager.stop_hosting("u", 0, delete=True, stray=True)
        assert not manager.topic_exists("u")
    with caplog.at_level(logging.WARNING), LogManager(root, time_ms=clock):
        assert caplog.text.count("is kept, not served") == 2
    assert aside.is_dir()
