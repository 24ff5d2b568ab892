"""The read side of a partition log: isolation levels, what a read returns, and decoding it.

:meth:`~spark_mq.storage.log.PartitionLog.read` locates whole batches under the log's lock
and returns them as a :class:`FetchDataInfo` (a file range, the offsets that bound it, and
for ``read_committed`` the aborted transactions it may meet). Everything after that runs
outside the lock and lives here:

- :func:`decode_fetch` turns a fetch into Arrow records and the offset to fetch next
  (:class:`RecordsRead`). The next offset comes from batch headers, never from record
  offsets: compaction leaves batches whose last records are gone (they keep their
  ``lastOffsetDelta``), batches with no records at all (a producer's last batch), and ranges
  holding nothing but markers or aborted data, and a reader that continued after its last
  record would read the same batches forever.
- :func:`offset_after` bounds the aborted transactions a ``read_committed`` fetch collects.
- :func:`largest_timestamp` and :func:`find_offset_by_timestamp` answer ListOffsets.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

import pyarrow as pa

from spark_mq.storage.arrow_arrays import to_numpy
from spark_mq.storage.batch_decoder import decode_body, decode_records
from spark_mq.storage.file_records import FileRange
from spark_mq.storage.record_batch import HEADER_SIZE, LOG_OVERHEAD, RECORD_SCHEMA, BatchHeader
from spark_mq.storage.segment import LogSegment, TimestampAndOffset
from spark_mq.storage.txn_index import AbortedTxn

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchDataInfo",
    "FetchIsolation",
    "RecordsRead",
    "decode_fetch",
    "fetch_end_offset",
    "find_offset_by_timestamp",
    "largest_timestamp",
    "offset_after",
]

#: Special timestamps of ListOffsets, as in Kafka.
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
MAX_TIMESTAMP: Final = -3

_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_OFFSET_AND_LENGTH = struct.Struct(">qi")


class FetchIsolation(enum.Enum):
    """How far a read may go: Kafka's FetchIsolation."""

    LOG_END = "log_end"  # followers replicating the log
    HIGH_WATERMARK = "high_watermark"  # consumers, read_uncommitted
    TXN_COMMITTED = "txn_committed"  # consumers, read_committed: up to the last stable offset


@dataclasses.dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The result of :meth:`PartitionLog.read`: a file range of whole batches (or none)."""

    fetch_offset: int
    records: FileRange | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    #: For TXN_COMMITTED reads: the aborted transactions overlapping the range, whose data
    #: the reader must drop (None for other isolation levels).
    aborted_transactions: tuple[AbortedTxn, ...] | None = None

    @property
    def size_bytes(self) -> int:
        return 0 if self.records is None else self.records.size


class RecordsRead(NamedTuple):
    """What :meth:`PartitionLog.read_records_with_next` returns: records and where to go on.

    ``next_offset`` is the offset to read from next: one past the last batch the read
    examined (its header's ``baseOffset + lastOffsetDelta + 1``, whether or not any of its
    records were returned). When the read found no batch below its bound, it is the bound
    (nothing lies in between), or the base offset of a batch that straddles the bound and
    cannot be returned until the bound moves past it; a read at or past its bound returns the
    start offset itself. So it never moves backwards, moves forwards whenever something below
    the bound was examined, and never passes the bound, and a loop reading until
    ``next_offset`` reaches the bound always ends, across offset gaps, emptied batches,
    markers and aborted data.
    """

    records: pa.Table
    next_offset: int


def fetch_end_offset(info: FetchDataInfo, isolation: FetchIsolation, max_offset: int | None) -> int:
    """The offset a fetch's records must stay below: its isolation bound, or ``max_offset``."""
    if isolation is FetchIsolation.TXN_COMMITTED:
        end = info.last_stable_offset
    elif isolation is FetchIsolation.LOG_END:
        end = info.log_end_offset
    else:
        end = info.high_watermark
    return end if max_offset is None else min(end, max_offset)


def _last_batch_next_offset(data: bytes) -> int | None:
    """``baseOffset + lastOffsetDelta + 1`` of the last whole batch in ``data``, if any.

    Walks the 12-byte prefixes from batch to batch (the range is whole batches; a torn tail
    is ignored, as the decoder ignores it) and unpacks only the last header.
    """
    last = None
    here = 0
    end = len(data)
    while end - here >= HEADER_SIZE:
        _, length = _OFFSET_AND_LENGTH.unpack_from(data, here)
        size = length + LOG_OVERHEAD
        if size < HEADER_SIZE or here + size > end:
            break
        last, here = here, here + size
    return None if last is None else BatchHeader.unpack_from(data, last).next_offset


def decode_fetch(
    info: FetchDataInfo,
    *,
    isolation: FetchIsolation,
    max_offset: int | None = None,
    next_offset_if_empty: int | None = None,
) -> RecordsRead:
    """Decode the batches of ``info`` (and close its range): records from its fetch offset.

    Every batch's CRC is checked; control records, and for ``read_committed`` the data of the
    aborted transactions, are dropped. ``next_offset_if_empty`` is the next offset to report
    when the fetch holds no range (the log works it out; see :class:`RecordsRead`); by default
    the fetch offset.
    """
    start = info.fetch_offset
    if info.records is None:
        return RecordsRead(
            RECORD_SCHEMA.empty_table(),
            start if next_offset_if_empty is None else max(start, next_offset_if_empty),
        )
    end = fetch_end_offset(info, isolation, max_offset)
    with info.records as file_range:
        data = file_range.read()
    table = decode_records(
        data,
        start_offset=start,
        end_offset=end,
        aborted_transactions=info.aborted_transactions,
    )
    after = _last_batch_next_offset(data)
    next_offset = start if after is None else max(start, min(after, end))
    return RecordsRead(table, next_offset)


def offset_after(segment: LogSegment, file_range: FileRange, start: int, bound: int) -> int:
    """The offset after the batches of ``file_range``, at most ``bound``.

    It bounds the aborted transactions a fetch collects, as in Kafka: bounded by the LSO
    instead, every fetch would collect every aborted transaction after it, which made a
    read_committed scan of a log quadratic in its aborted transactions.
    """
    upper = min(bound, segment.next_offset())
    end = file_range.position + file_range.size
    if end + _PREFIX.size <= segment.size_bytes:
        next_base = _PREFIX.unpack(segment.records.read(end, _PREFIX.size))[0]
        # A batch follows the range (one the fetch had no room for, or the one at the
        # bound); anything else would be damage, where the wider bound stays correct.
        if start < next_base < upper:
            upper = next_base
    return upper


# ---------------------------------------------------------------------------------------------
# Lookups by timestamp (ListOffsets)


def _max_timestamp_from(
    segment: LogSegment, header: BatchHeader, position: int, start_offset: int
) -> int | None:
    """Largest CreateTime timestamp of the batch's records at or after ``start_offset``."""
    body = decode_body(segment.records.read(position, header.size), 0, header)
    offsets = to_numpy(body.column(0)).astype("int64") + header.base_offset
    stamps = to_numpy(body.column(1))[offsets >= start_offset]
    return int(stamps.max()) if len(stamps) else None


def largest_timestamp(
    segments: Sequence[LogSegment], *, log_start_offset: int, high_watermark: int
) -> int | None:
    """The largest record timestamp in ``[log_start_offset, high_watermark)``, if any.

    Batch headers answer for whole batches; control batches and batches without records
    (whose header keeps the timestamps of records compaction removed) hold no record.
    """
    largest: int | None = None
    for segment in segments:
        for header, pos in segment.records.headers():
            if header.last_offset >= high_watermark:
                break
            if header.is_control or header.record_count == 0:
                continue
            if header.last_offset < log_start_offset:
                continue
            batch_max: int | None = header.max_timestamp
            if header.base_offset < log_start_offset and not header.timestamp_type:
                # The batch holding the log start: its maximum may lie below it.
                batch_max = _max_timestamp_from(segment, header, pos, log_start_offset)
            if batch_max is not None and (largest is None or batch_max > largest):
                largest = batch_max
    return largest


def find_offset_by_timestamp(
    segments: Sequence[LogSegment],
    timestamp_ms: int,
    *,
    log_start_offset: int,
    high_watermark: int,
) -> TimestampAndOffset | None:
    """The earliest record at or after the log start whose timestamp is >= ``timestamp_ms``,
    if it is below the high watermark."""
    for segment in segments:
        if segment.max_timestamp_so_far < timestamp_ms:
            continue
        found = segment.find_offset_by_timestamp(timestamp_ms, log_start_offset)
        if found is not None:
            return found if found.offset < high_watermark else None
    return None
