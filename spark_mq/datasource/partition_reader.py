"""``read()``: one Spark task reads one :class:`PartitionRange` into Arrow record batches.

The task runs in a Python worker, not in the driver's process, so it opens its own
:class:`~spark_mq.Consumer` from the range's settings, assigns the one partition, seeks to the
range start and takes whole fetched tables with ``poll_batch()`` until the position reaches
the range end; rows at or past the end are cut off with one binary search on the offset
column. Positions advance over offsets that hold no record (transaction markers, aborted
data, compaction), so a range ends at its end offset even when its last offsets are empty.

Data loss: a start below the log start (retention or ``delete_records`` removed unread
records), or a log that ends before the range end (the topic was deleted or recreated),
raises :class:`~spark_mq.errors.DataLossError` naming the topic, partition and missing range
with ``failOnDataLoss=true``; with ``false`` the reader logs a warning and skips to the log
start, or stops at the log end.

Corrupt data: the consumer returns the records before a corrupt batch, then raises
:class:`~spark_mq.errors.CorruptRecordError`. With ``failOnDataLoss=true`` the task fails with
it, naming the topic, partition and offset of the batch and where intact data resumes; with
``false`` the batch's records count as lost: the reader logs a warning and goes on after it,
when its end is known.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from spark_mq.client.consumer import Consumer
from spark_mq.client.records import TopicPartition
from spark_mq.datasource.offsets import PartitionRange
from spark_mq.datasource.options import EARLIEST
from spark_mq.datasource.schema import to_spark_batches
from spark_mq.errors import (
    CorruptRecordError,
    DataLossError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from spark_mq.storage.arrow_arrays import to_numpy

log = logging.getLogger(__name__)

#: Longest single wait in poll_batch(), so a vanished log is noticed well before the timeout.
_POLL_SLICE_MS = 1000
#: Fewest rows per Arrow batch handed to Spark (unless the range ends first). A fetch decodes
#: into one chunk per stored batch; a chunk this big goes to Spark as it is, with no copy (its
#: columns point into the fetch buffer), while smaller chunks (a producer that sent tiny
#: batches) are joined until they reach it, because Spark's cost per Arrow batch would
#: dominate them. Copying every chunk into large batches instead cost a noticeable part of
#: the read (benchmarks/bench_source.py; the figure is in docs/benchmarks.md).
MIN_BATCH_ROWS = 4096
#: Fetch sizes of reader tasks unless kafka.* options say otherwise: a task reads one
#: partition as fast as it can, so large responses cost fewer round trips.
READER_FETCH_DEFAULTS = {
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "fetch.max.wait.ms": 100,
}


def _data_loss(rng: PartitionRange, start: int, end: int, why: str) -> None:
    """Raise DataLossError, or with failOnDataLoss=false log the skipped range."""
    where = f"{rng.topic}-{rng.partition} offsets [{start}, {end})"
    if rng.settings.fail_on_data_loss:
        raise DataLossError(
            f"{where} are gone before being read: {why}. Set failOnDataLoss=false to skip "
            "them and go on (losing those records), or restart the query from a new "
            "checkpoint",
            topic=rng.topic,
            partition=rng.partition,
            start_offset=start,
            end_offset=end,
        )
    log.warning("skipping %s: %s (failOnDataLoss=false)", where, why)


def _log_start(consumer: Consumer, tp: TopicPartition) -> int | None:
    try:
        return consumer.beginning_offsets([tp])[tp]
    except UnknownTopicOrPartitionError:
        return None


def _log_end(consumer: Consumer, tp: TopicPartition) -> int | None:
    try:
        return consumer.end_offsets([tp])[tp]
    except UnknownTopicOrPartitionError:
        return None


def read_partition_range(rng: PartitionRange) -> Iterator[pa.RecordBatch]:
    """The records of ``rng`` as record batches of the source's Arrow schema, at least
    ``MIN_BATCH_ROWS`` rows each (but the last)."""
    include_headers = rng.settings.include_headers
    pending: list[pa.RecordBatch] = []
    rows = 0
    for table in _range_tables(rng):
        for batch in to_spark_batches(table, include_headers):
            if not pending and batch.num_rows >= MIN_BATCH_ROWS:
                yield batch
                continue
            pending.append(batch)
            rows += batch.num_rows
            if rows >= MIN_BATCH_ROWS:
                yield _joined(pending)
                pending, rows = [], 0
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One record batch of small ones (one copy of their data)."""
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _range_tables(rng: PartitionRange) -> Iterator[pa.Table]:
    """The consumer's tables of ``rng``, cut at its end."""
    settings = rng.settings
    props = {**READER_FETCH_DEFAULTS, **settings.client_properties()}
    tp = rng.tp
    with Consumer(config=props) as consumer:
        consumer.assign([tp])
        start = rng.start
        if start == EARLIEST:
            # A partition the query had not seen before this batch: from its log start.
            found = _log_start(consumer, tp)
            if found is None:
                _data_loss(rng, 0, rng.end, "the topic or partition no longer exists")
                return
            start = found
        position = start
        if position >= rng.end:
            return
        consumer.seek(tp, position)
        deadline = time.monotonic() + settings.poll_timeout_ms / 1000
        while position < rng.end:
            try:
                table = consumer.poll_batch(timeout_ms=_POLL_SLICE_MS)
            except OffsetOutOfRangeError:
                position = _skip_to_log_start(consumer, rng, position)
                if position >= rng.end:
                    return
                consumer.seek(tp, position)
                continue
            except CorruptRecordError as exc:
                position = _skip_corrupt_batch(rng, exc, consumer.position(tp))
                if position >= rng.end:
                    return
                consumer.seek(tp, position)
                continue
            moved_to = consumer.position(tp)
            if table.num_rows:
                offsets = table.column("offset")
                if offsets[-1].as_py() >= rng.end:
                    flat = to_numpy(offsets)
                    table = table.slice(0, int(np.searchsorted(flat, rng.end)))
                yield table
            if moved_to > position:
                position = moved_to
                deadline = time.monotonic() + settings.poll_timeout_ms / 1000
                continue
            end = _log_end(consumer, tp)
            if end is None or end <= position:
                why = (
                    "the topic or partition was deleted"
                    if end is None
                    else f"the log now ends at {end} (the topic was recreated or truncated)"
                )
                _data_loss(rng, position, rng.end, why)
                return
            if time.monotonic() >= deadline:
                raise RequestTimedOutError(
                    f"reading {tp} from offset {position} (up to {rng.end}) made no progress "
                    f"for {settings.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); is the "
                    "broker reachable?"
                )


def _skip_corrupt_batch(rng: PartitionRange, exc: CorruptRecordError, position: int) -> int:
    """After a corrupt batch at ``position``: where to go on from, or the error again, for
    the Spark user (what the consumer's message says to do is for consumer code)."""
    batch = exc.offset if exc.offset is not None else position
    resume = exc.next_offset
    cause = exc.__cause__ or exc
    if not rng.settings.fail_on_data_loss and resume is not None and resume > position:
        _data_loss(rng, position, min(resume, rng.end), f"the record batch at {batch} is corrupt")
        return resume
    where = (
        f"intact data resumes at offset {resume}"
        if resume is not None
        else "where intact data resumes is unknown (spark-mq log verify --dir DIR shows it)"
    )
    advice = (
        "set failOnDataLoss=false to skip it, losing its records"
        if resume is not None
        else "find where intact data resumes with spark-mq log verify and start a new query "
        "from there (startingOffsets)"
    )
    raise CorruptRecordError(
        f"{rng.tp}: the record batch at offset {batch} is corrupt and cannot be read; {where}. "
        f"The records before it were read. To go on, {advice}. Cause: {cause}",
        topic=rng.topic,
        partition=rng.partition,
        offset=batch,
        next_offset=resume,
    ) from exc


def _skip_to_log_start(consumer: Consumer, rng: PartitionRange, position: int) -> int:
    """After an out-of-range fetch: where to go on from, or DataLossError."""
    tp = rng.tp
    log_start = _log_start(consumer, tp)
    log_end = _log_end(consumer, tp)
    if log_start is None or log_end is None:
        _data_loss(rng, position, rng.end, "the topic or partition was deleted")
        return rng.end
    if position < log_start:
        _data_loss(rng, position, min(log_start, rng.end), f"the log now starts at {log_start}")
        return log_start
    _data_loss(rng, position, rng.end, f"the log now ends at {log_end} (the topic was recreated)")
    return rng.end
