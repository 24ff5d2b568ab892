"""Reading an internal topic's partition batch by batch, headers included.

The coordinators rebuild their state from their compacted topics at startup, and need more
than the records: which producer wrote a batch, whether it is transactional, and the
commit/abort markers (``__consumer_offsets`` holds transactional offset commits). The
decoding reader of the log drops all of that, so this one walks the raw batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from spark_mq.storage.batch_decoder import decode_body, iter_batches, read_control_record
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_read import FetchIsolation
from spark_mq.storage.record_batch import BatchHeader, ControlRecord


class LoadedBatch(NamedTuple):
    """One batch: its header, and its (key, value) records or its marker."""

    header: BatchHeader
    records: list[tuple[bytes | None, bytes | None]]
    marker: ControlRecord | None


def read_batches(
    log: PartitionLog, buffer_bytes: int, *, to_log_end: bool = False
) -> Iterator[LoadedBatch]:
    """Every batch from the log start to the high watermark (``to_log_end``: to the log
    end, which a newly elected leader's followers will truncate to), ``buffer_bytes`` at a
    time."""
    end = log.log_end_offset if to_log_end else log.high_watermark
    position = log.log_start_offset
    while position < end:
        # Only a read to the log end names its isolation: the default read is the log's own
        # (callers may pass a view of a log with the plain read(position, max_bytes)).
        if to_log_end:
            info = log.read(position, buffer_bytes, isolation=FetchIsolation.LOG_END)
        else:
            info = log.read(position, buffer_bytes)
        if info.records is None:
            # Offsets compaction emptied: the decoding reader knows where to go on.
            if to_log_end:
                following = log.read_records_with_next(
                    position, buffer_bytes, isolation=FetchIsolation.LOG_END
                ).next_offset
            else:
                following = log.read_records_with_next(position, buffer_bytes).next_offset
            if following <= position:
                return
            position = following
            continue
        with info.records as file_range:
            data = file_range.read()
        moved = False
        for header, pos in iter_batches(data):
            if header.last_offset < position or header.base_offset >= end:
                continue
            moved = True
            position = header.next_offset
            if header.is_control:
                yield LoadedBatch(header, [], read_control_record(data, pos, header))
                continue
            if header.record_count == 0:
                continue
            body = decode_body(data, pos, header)
            keys = body.column(2).to_pylist()
            values = body.column(3).to_pylist()
            yield LoadedBatch(header, list(zip(keys, values, strict=True)), None)
        if not moved:
            return
