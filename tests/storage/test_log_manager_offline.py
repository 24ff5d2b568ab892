"""LogManager: a partition that cannot be opened is offline and the rest is served; what it
keeps of the offline partition (checkpoints, no clean-shutdown marker after an unclean start);
a create whose partition cannot be made leaves nothing behind."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_mq.errors import LogDirectoryFullError, PartitionOfflineError
from spark_mq.storage.checkpoint_file import OffsetCheckpointFile
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from spark_mq.storage.record_batch import encode_batch

SEGMENT = "00000000000000000000.log"


def _batch(*values: bytes) -> bytes:
    return encode_batch(pa.array(list(values), pa.binary()))


def _values(manager: LogManager, topic: str, partition: int) -> list[bytes]:
    log = manager.get_log(topic, partition)
    return log.read_records(log.log_start_offset).column("value").to_pylist()


def _make_unreadable(root: Path, partition_dir: str) -> Path:
    """Put a directory where the partition's segment file is (a file the loader cannot read);
    returns where the file went, to put it back."""
    segment = root / partition_dir / SEGMENT
    aside = root / f"{partition_dir}-{SEGMENT}.aside"
    segment.rename(aside)
    segment.mkdir()
    return aside


def _restore(root: Path, partition_dir: str, aside: Path) -> None:
    segment = root / partition_dir / SEGMENT
    segment.rmdir()
    aside.rename(segment)


def _filled(root: Path) -> LogManager:
    manager = LogManager(root)
    manager.create_topic("t", partitions=2)
    manager.create_topic("u")
    for topic, partition in (("t", 0), ("t", 1), ("u", 0)):
        log = manager.get_log(topic, partition)
        log.append(_batch(b"a", b"b", b"c"))
        log.delete_records_before(1)
    manager.flush_all()
    manager.checkpoint()
    return manager


def test_a_partition_that_cannot_be_opened_is_offline_and_the_rest_is_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "logs"
    _filled(root)._simulate_crash()
    aside = _make_unreadable(root, "t-1")

    with caplog.at_level(logging.ERROR):
        manager = LogManager(root)
    assert caplog.text.count("partition t-1 is offline") == 1
    assert _values(manager, "t", 0) == [b"b", b"c"]
    assert _values(manager, "u", 0) == [b"b", b"c"]
    with pytest.raises(PartitionOfflineError, match="t-1 is offline") as offline:
        manager.get_log("t", 1)
    assert (offline.value.topic, offline.value.partition) == ("t", 1)
    assert "Is a directory" in offline.value.reason
    assert [(p.topic, p.partition) for p in manager.offline_partitions()] == [("t", 1)]
    info = manager.describe_topic("t")
    assert info.partition_count == 2
    assert info.partitions[0].offline_reason is None
    assert "Is a directory" in (info.partitions[1].offline_reason or "")
    assert len(list(manager.logs())) == 2
    # Everything that walks the logs leaves the offline one alone.
    manager.flush_all()
    manager.apply_retention()
    manager.checkpoint()
    manager.close()

    # Its checkpointed offsets were kept, and, as it missed the recovery of this unclean
    # start, the next start is unclean too.
    starts = OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT).read()
    assert starts[("t", 1)] == 1
    assert ("t", 1) in OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT).read()
    assert not (root / CLEAN_SHUTDOWN_FILE).exists()

    _restore(root, "t-1", aside)
    with LogManager(root) as manager:
        assert not manager.had_clean_shutdown
        assert manager.offline_partitions() == []
        log = manager.get_log("t", 1)
        assert (log.log_start_offset, log.log_end_offset) == (1, 3)
        assert _values(manager, "t", 1) == [b"b", b"c"]


def test_an_offline_partition_after_a_clean_start_keeps_the_clean_marker(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    _filled(root).close()
    aside = _make_unreadable(root, "t-1")
    with LogManager(root) as manager:
        assert manager.had_clean_shutdown
        assert len(manager.offline_partitions()) == 1
    # Nothing touched it since the clean shutdown, so it is still clean.
    assert (root / CLEAN_SHUTDOWN_FILE).exists()
    _restore(root, "t-1", aside)
    with LogManager(root) as manager:
        assert _values(manager, "t", 1) == [b"b", b"c"]


def test_a_create_whose_partition_cannot_be_made_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "logs"
    real_open = PartitionLog.open

    def open_then_fail(cls: type[PartitionLog], directory: Any, *args: Any, **kwargs: Any) -> Any:
        log = real_open(directory, *args, **kwargs)
        if kwargs["partition"] == 1:
            # As a full disk met half-way through the partition's files would.
            log.close()
            raise LogDirectoryFullError("no room", path=str(directory))
        return log

    with LogManager(root) as manager:
        monkeypatch.setattr(PartitionLog, "open", classmethod(open_then_fail))
        with pytest.raises(LogDirectoryFullError):
            manager.create_topic("t", partitions=3)
        monkeypatch.undo()
        assert sorted(p.name for p in root.iterdir() if p.name.startswith("t-")) == []
        assert manager.list_topics() == []
        manager.create_topic("t", partitions=3)
