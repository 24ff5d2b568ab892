"""Retention: which whole segments a partition log deletes, oldest first.

:meth:`~spark_mq.storage.log.PartitionLog.apply_retention` (the broker schedules it) and
:meth:`~spark_mq.storage.log.PartitionLog.delete_records_before` delete the longest prefix of
segments that a rule condemns, as Kafka's ``deleteOldSegments`` does:

- **log start** (always): segments whose every offset is below the log start offset, which
  ``delete_records_before`` (Kafka's DeleteRecords) and retention move;
- **retention.ms** (``cleanup.policy`` containing ``delete``, ``retention.ms`` >= 0):
  segments whose newest timestamp is more than ``retention.ms`` old;
- **retention.bytes** (same policy, ``retention.bytes`` >= 0): the oldest segments, while the
  partition without them would still be at least ``retention.bytes``.

Whatever the rule, a segment holding data at or above the high watermark is never deleted
(readers have not seen it, and with replication it may not be committed), nor is an empty
active segment. The log then deletes the segments (renamed to ``.deleted`` first, so a crash
leaves no half-deleted segment), rolling first if every segment goes, moves the log start to
the first remaining segment and forgets producers whose data is all gone. Those steps need the
log's state and lock; this module only decides, from the segment list and a few offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spark_mq.storage.segment import LogSegment

__all__ = [
    "Condemns",
    "below_log_start",
    "deletable_prefix",
    "older_than_retention",
    "over_retention_bytes",
]

#: A rule: ``condemns(segment, upper_offset)``, where ``upper_offset`` is the base offset of
#: the next segment (the log end for the active one).
Condemns = Callable[[LogSegment, int], bool]


def deletable_prefix(
    segments: Sequence[LogSegment],
    condemns: Condemns,
    *,
    log_end_offset: int,
    high_watermark: int,
    allow_active: bool = True,
) -> list[LogSegment]:
    """The longest prefix of ``segments`` that ``condemns`` and that may go (module doc)."""
    doomed: list[LogSegment] = []
    for i, segment in enumerate(segments):
        is_active = i == len(segments) - 1
        upper = log_end_offset if is_active else segments[i + 1].base_offset
        if upper > high_watermark or (is_active and (not allow_active or segment.size_bytes == 0)):
            break
        if not condemns(segment, upper):
            break
        doomed.append(segment)
    return doomed


def below_log_start(log_start_offset: int) -> Condemns:
    """Segments whose every offset is below the log start."""
    return lambda _segment, upper: upper <= log_start_offset


def older_than_retention(retention_ms: int, now_ms: int) -> Condemns:
    """Segments whose newest timestamp is more than ``retention_ms`` before ``now_ms``."""
    return lambda segment, _upper: now_ms - segment.largest_timestamp_ms > retention_ms


def over_retention_bytes(retention_bytes: int, total_bytes: int) -> Condemns:
    """The oldest segments while the log without them still holds ``retention_bytes``.

    Stateful: it counts the segments it condemned, so use it for one prefix only.
    """
    excess = total_bytes - retention_bytes

    def condemns(segment: LogSegment, _upper: int) -> bool:
        nonlocal excess
        if excess - segment.size_bytes >= 0:
            excess -= segment.size_bytes
            return True
        return False

    return condemns
