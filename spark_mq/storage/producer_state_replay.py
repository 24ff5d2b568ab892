"""Rebuilding producer state and transaction indexes from the log, and collecting aborts.

Producer state is derived from the log: batch headers carry the producer id, epoch, sequence
and transactional bit, and markers carry the commit or abort decision in their one control
record. So the log can always rebuild it: load the newest snapshot at or below the offset
where replay must start, then replay every batch from the snapshot's offset to the log end.
Replaying also re-creates the ``.txnindex`` entries of aborted transactions whose markers lie
at or after ``txn_rebuild_from`` (the loader emptied those indexes because their segments
were recovered or failed a check); entries below it are already on disk.

:func:`collect_aborted_txns` answers what a ``read_committed`` reader needs besides the data:
the aborted transactions overlapping an offset range, gathered from the transaction indexes of
the segments from the one holding the start offset (Kafka's
``collectAbortedTransactions``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from spark_mq.storage.batch_decoder import read_control_record
from spark_mq.storage.producer_state import AppendOrigin, ProducerStateManager
from spark_mq.storage.segment import LogSegment
from spark_mq.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


def _segment_for(segments: Sequence[LogSegment], offset: int) -> LogSegment:
    chosen = segments[0]
    for segment in segments:
        if segment.base_offset <= offset:
            chosen = segment
        else:
            break
    return chosen


def rebuild_producer_state(
    state: ProducerStateManager,
    segments: Sequence[LogSegment],
    *,
    log_start_offset: int,
    log_end_offset: int,
    txn_rebuild_from: int,
) -> int:
    """Load the newest usable snapshot and replay the log after it; returns batches replayed.

    Replay starts at or below ``txn_rebuild_from`` so that every marker whose transaction
    index entry must be re-created is seen, and never below ``log_start_offset``.
    """
    start_limit = min(log_end_offset, txn_rebuild_from)
    snapshot = state.load_latest_snapshot(at_most=start_limit)
    start = log_start_offset if snapshot is None else max(snapshot, log_start_offset)
    if snapshot is None:
        state.reset()
    replayed = 0
    for segment in segments:
        if segment.next_offset() <= start:
            continue
        for header, position in segment.records.headers():
            # An empty batch that still spans offsets is a producer's last batch that
            # compaction emptied (encode_empty_batch): it carries the producer's last sequence,
            # epoch and timestamp and is replayed like any other. One spanning no offsets
            # (lastOffsetDelta -1) carries nothing.
            if header.last_offset < start or header.last_offset_delta < 0:
                continue
            if not header.has_producer_id:
                continue
            info = state.prepare_update(header.producer_id, AppendOrigin.REPLICATION)
            if header.is_control:
                data = segment.records.read(position, header.size)
                marker = read_control_record(data, 0, header)
                completed = info.append_end_txn_marker(
                    marker,
                    producer_epoch=header.producer_epoch,
                    offset=header.base_offset,
                    timestamp_ms=header.max_timestamp,
                )
                state.update(info)
                if completed.is_aborted and header.base_offset >= txn_rebuild_from:
                    segment.txn_index.append(
                        AbortedTxn(
                            completed.producer_id,
                            completed.first_offset,
                            completed.last_offset,
                            state.last_stable_offset(completed),
                        )
                    )
                state.complete_txn(completed)
            else:
                info.append_data_batch(header)
                state.update(info)
            replayed += 1
    state.update_map_end_offset(log_end_offset)
    if replayed:
        log.info(
            "%s: rebuilt producer state from offset %d (%d batches replayed)",
            state.directory,
            start,
            replayed,
        )
    return replayed


def collect_aborted_txns(
    segments: Sequence[LogSegment], start_offset: int, upper_bound_offset: int
) -> tuple[AbortedTxn, ...]:
    """Aborted transactions with data in ``[start_offset, upper_bound_offset)``, by first offset.

    An aborted transaction's marker comes after all its data, so its index entry is in the
    segment holding ``start_offset`` or a later one; the search stops early once an entry
    shows that every transaction open before the bound was already closed.
    """
    found: list[AbortedTxn] = []
    first = _segment_for(segments, start_offset)
    for segment in segments:
        if segment.base_offset < first.base_offset:
            continue
        result = segment.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
        found.extend(result.aborted_txns)
        if result.is_complete:
            break
    found.sort(key=lambda txn: txn.first_offset)
    return tuple(found)
