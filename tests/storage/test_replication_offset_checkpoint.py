"""replication-offset-checkpoint: each partition's high watermark survives a restart."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq.storage.checkpoint_file import OffsetCheckpointFile
from spark_mq.storage.log_manager import REPLICATION_OFFSET_CHECKPOINT, LogManager
from spark_mq.storage.record_batch import encode_batch

NOW_MS = 1_700_000_000_000


def clock() -> int:
    return NOW_MS


def batch(n: int = 2) -> bytes:
    return encode_batch(pa.array([b"v%d" % i for i in range(n)]))


def replicated(root: Path) -> LogManager:
    """A cluster broker's manager: high watermarks are replication's, not the log end."""
    return LogManager(root, time_ms=clock, high_watermark_follows_log_end=False)


def fill(manager: LogManager, high_watermark: int) -> None:
    manager.create_topic("events", partitions=2)
    for partition in (0, 1):
        log = manager.get_log("events", partition)
        for _ in range(3):
            log.append(batch(), leader_epoch=0)
    manager.get_log("events", 0).update_high_watermark(high_watermark)


def test_high_watermarks_are_checkpointed_and_restored(tmp_path: Path) -> None:
    with replicated(tmp_path) as manager:
        fill(manager, 4)
        manager.checkpoint()
        checkpoint = OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT)
        assert checkpoint.read() == {("events", 0): 4, ("events", 1): 0}
        assert checkpoint.path.read_bytes() == b"0\n2\nevents 0 4\nevents 1 0\n"
        manager.get_log("events", 1).update_high_watermark(6)
    with replicated(tmp_path) as manager:
        assert manager.get_log("events", 0).high_watermark == 4
        assert manager.get_log("events", 1).high_watermark == 6  # written at close
        assert manager.get_log("events", 0).log_end_offset == 6


def test_after_a_crash_the_last_checkpointed_high_watermark_is_used(tmp_path: Path) -> None:
    manager = replicated(tmp_path)
    fill(manager, 2)
    manager.checkpoint()
    manager.get_log("events", 0).update_high_watermark(6)
    manager._simulate_crash()
    with replicated(tmp_path) as reopened:
        # Lower than it was, never higher: a reader may see less for a moment, never records
        # that replication had not committed.
        assert reopened.get_log("events", 0).high_watermark == 2


def test_a_checkpointed_high_watermark_past_the_log_end_is_clamped(tmp_path: Path) -> None:
    with replicated(tmp_path) as manager:
        fill(manager, 6)
    OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT).write(
        {("events", 0): 1000, ("events", 1): 3}
    )
    with replicated(tmp_path) as manager:
        assert manager.get_log("events", 0).high_watermark == 6
        assert manager.get_log("events", 1).high_watermark == 3


def test_missing_or_corrupt_checkpoint_starts_at_the_log_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with replicated(tmp_path) as manager:
        fill(manager, 6)
        manager.get_log("events", 0).delete_records_before(2)
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n2\nevents 0 6\n")  # torn: the count says two entries
    with caplog.at_level(logging.WARNING), replicated(tmp_path) as manager:
        assert manager.get_log("events", 0).high_watermark == 2
        assert manager.get_log("events", 1).high_watermark == 0
    assert "corrupt checkpoint file" in caplog.text
    # close() rewrote it from the live logs.
    assert OffsetCheckpointFile(path).read() == {("events", 0): 2, ("events", 1): 0}


def test_a_single_node_log_follows_its_log_end_whatever_the_checkpoint(tmp_path: Path) -> None:
    with LogManager(tmp_path, time_ms=clock) as manager:
        fill(manager, 6)
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    assert OffsetCheckpointFile(path).read() == {("events", 0): 6, ("events", 1): 6}
    OffsetCheckpointFile(path).write({("events", 0): 1, ("events", 1): 1})
    with LogManager(tmp_path, time_ms=clock) as manager:
        assert manager.get_log("events", 0).high_watermark == 6
