"""Retention decisions (spark_mq.storage.log_retention) on a list of segments.

The deletions themselves, through ``PartitionLog.apply_retention`` and
``delete_records_before``, are tested in test_log.py; here only which prefix a rule condemns.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from log_testing import START_MS, OpenLog

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
