"""What an append does to producer state: duplicates, staging, and applying after the write.

The rules live in :mod:`~spark_mq.storage.producer_state`; this module is how
:meth:`~spark_mq.storage.log.PartitionLog.append` applies them, under the log's lock, in
three steps:

1. :func:`find_duplicate`: a retried batch of an idempotent producer (same epoch, same
   sequence range as one of its last five) is answered with the original offsets and nothing
   is written.
2. :func:`stage_producer_state`: after offsets are assigned, every batch's effect on its
   producer is validated and staged (sequence, epoch, transaction state, the coordinator
   epoch of markers). A failure raises before anything is written.
3. :func:`apply_producer_state`: after the write, the staged state is applied; every
   aborted transaction gets its entry in the ``.txnindex`` of the segment holding its marker
   (producer id, first offset, marker offset, and the last stable offset right after), and
   completed transactions leave the set of open ones, which moves the last stable offset.

Rebuilding the same state from the log after a restart is the mirror image, in
:mod:`~spark_mq.storage.producer_state_replay`.
"""

from __future__ import annotations

from typing import NamedTuple

from spark_mq.storage.batch_decoder import read_control_record
from spark_mq.storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from spark_mq.storage.record_batch import BatchHeader
from spark_mq.storage.segment import BatchPosition, LogSegment
from spark_mq.storage.txn_index import AbortedTxn

__all__ = ["StagedProducerState", "apply_producer_state", "find_duplicate", "stage_producer_state"]


class StagedProducerState(NamedTuple):
    """The validated, not yet applied, effect of an append on its producers."""

    infos: dict[int, ProducerAppendInfo]
    completed: list[CompletedTxn]


def find_duplicate(state: ProducerStateManager, header: BatchHeader) -> BatchMetadata | None:
    """The original of a retried batch of an idempotent producer, or None."""
    if not header.has_producer_id or header.base_sequence < 0:
        return None
    return state.find_duplicate_batch(header)


def stage_producer_state(
    state: ProducerStateManager,
    view: memoryview,
    batches: list[BatchPosition],
    origin: AppendOrigin,
) -> StagedProducerState:
    """Stage every batch's effect on its producer's state; raises before any write."""
    infos: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    for batch in batches:
        header = batch.header
        if not header.has_producer_id:
            continue
        info = infos.get(header.producer_id)
        if info is None:
            info = state.prepare_update(header.producer_id, origin)
            infos[header.producer_id] = info
        if header.is_control:
            marker = read_control_record(view, batch.position, header)
            completed.append(
                info.append_end_txn_marker(
                    marker,
                    producer_epoch=header.producer_epoch,
                    offset=header.base_offset,
                    timestamp_ms=header.max_timestamp,
                )
            )
        else:
            info.append_data_batch(header)
    return StagedProducerState(infos, completed)


def apply_producer_state(
    state: ProducerStateManager,
    segment: LogSegment,
    staged: StagedProducerState,
    *,
    log_end_offset: int,
) -> None:
    """After the write: apply staged state, index aborted transactions, close them."""
    for info in staged.infos.values():
        state.update(info)
    for txn in staged.completed:
        if txn.is_aborted:
            segment.txn_index.append(
                AbortedTxn(
                    txn.producer_id,
                    txn.first_offset,
                    txn.last_offset,
                    state.last_stable_offset(txn),
                )
            )
        state.complete_txn(txn)
    state.update_map_end_offset(log_end_offset)
