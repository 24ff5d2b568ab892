"""Retention decisions (spark_mq.storage.log_retention) on a list of segments, and what the
log says when it deletes.

The deletions themselves, through ``PartitionLog.apply_retention`` and
``delete_records_before``, are tested in test_log.py; here which prefix a rule condemns, and
the INFO line each deletion logs (issue 27, point 8: the partition, the segments and offsets,
and the rule).
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from log_testing import START_MS, Clock, OpenLog

from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_retention import (
    below_log_start,
    deletable_prefix,
    older_than_retention,
    over_retention_bytes,
)
from spark_mq.storage.record_batch import encode_batch
from spark_mq.storage.segment import LogSegment


@pytest.fixture
def segments(open_log: OpenLog) -> list[LogSegment]:
    """Four segments of two records, one second apart, then an empty active segment."""
    log = open_log(LogConfig())
    for i in range(4):
        log.append(encode_batch(pa.array([b"a", b"b"]), timestamp=[START_MS + 1000 * i] * 2))
        log.roll()
    return list(log.segments)


def test_a_rule_condemns_the_longest_prefix_below_the_high_watermark(
    segments: list[LogSegment],
) -> None:
    def prefix(condemns, *, high_watermark: int = 8, allow_active: bool = True) -> list[int]:  # type: ignore[no-untyped-def]
        doomed = deletable_prefix(
            segments,
            condemns,
            log_end_offset=8,
            high_watermark=high_watermark,
            allow_active=allow_active,
        )
        return [s.base_offset for s in doomed]

    assert prefix(below_log_start(5)) == [0, 2]  # segment 4 holds offset 5
    assert prefix(below_log_start(5), high_watermark=3) == [0]  # 2..3 reach the watermark
    assert prefix(older_than_retention(1500, START_MS + 3000)) == [0, 2]
    assert prefix(older_than_retention(0, START_MS + 10_000)) == [0, 2, 4, 6]  # not the active
    assert prefix(lambda s, _upper: s.base_offset != 2) == [0]  # a prefix, never a hole
    total = sum(s.size_bytes for s in segments)
    one = segments[0].size_bytes
    assert prefix(over_retention_bytes(total - one, total)) == [0]
    assert prefix(over_retention_bytes(total - one - 1, total)) == [0]
    assert prefix(over_retention_bytes(total - 2 * one, total)) == [0, 2]
    assert prefix(over_retention_bytes(0, total)) == [0, 2, 4, 6]


def _retention_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "spark_mq.storage.log" and r.levelno == logging.INFO
    ]


def _four_segments(log) -> None:  # type: ignore[no-untyped-def]
    for i in range(4):
        log.append(encode_batch(pa.array([b"a", b"b"]), timestamp=[START_MS + 1000 * i] * 2))
        log.roll()


def test_retention_by_time_logs_the_partition_offsets_and_rule(
    open_log: OpenLog, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(LogConfig(retention_ms=1500))
    _four_segments(log)
    size = sum(s.size_bytes for s in log.segments[:2])
    clock.now_ms = START_MS + 3000
    caplog.set_level(logging.INFO, logger="spark_mq.storage.log")

    assert log.apply_retention() == 2

    assert _retention_lines(caplog) == [
        f"t-0: deleted 2 segments holding offsets 0 to 3 ({size} bytes) because their newest "
        "records are older than retention.ms=1500; the log start offset is now 4"
    ]


def test_retention_by_size_logs_the_partition_offsets_and_rule(
    open_log: OpenLog, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(LogConfig())
    _four_segments(log)
    total = log.size_bytes
    one = log.segments[0].size_bytes
    log.update_config(LogConfig(retention_bytes=total - one))
    caplog.set_level(logging.INFO, logger="spark_mq.storage.log")

    assert log.apply_retention() == 1

    assert _retention_lines(caplog) == [
        f"t-0: deleted 1 segment holding offsets 0 to 1 ({one} bytes) because the partition "
        f"held {total} bytes, over retention.bytes={total - one}; the log start offset is now 2"
    ]


def test_delete_records_logs_why_segments_went(
    open_log: OpenLog, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(LogConfig())
    _four_segments(log)
    one = log.segments[0].size_bytes
    caplog.set_level(logging.INFO, logger="spark_mq.storage.log")

    log.delete_records_before(3)

    assert _retention_lines(caplog) == [
        f"t-0: deleted 1 segment holding offsets 0 to 1 ({one} bytes) because DeleteRecords "
        "moved the log start offset to 3; the log start offset is now 3"
    ]


def test_a_retention_pass_that_deletes_nothing_logs_nothing(
    open_log: OpenLog, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(LogConfig(retention_ms=60_000, retention_bytes=1 << 30))
    _four_segments(log)
    caplog.set_level(logging.DEBUG)
    assert log.apply_retention() == 0
    assert _retention_lines(caplog) == []
