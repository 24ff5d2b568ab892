"""What a cleaning pass keeps: the retention rules the rewrite asks, batch by batch.

:func:`~spark_mq.storage.cleaner_swap.clean_group` walks the segments of a pass in offset
order and asks a :class:`CleanerFilter`:

1. :meth:`~CleanerFilter.check_batch` for every batch below the end of the offset map (a
   batch at or past it is not cleaned by the pass: it is copied and only reported through
   :meth:`~CleanerFilter.batch_retained`). The answer is a :class:`BatchRetention`. Data
   batches of a run of batches are checked before any of the run is written; a control
   batch (a transaction marker) is checked only after every batch before it has been
   decided, so its rule may depend on what happened to the data of its transaction.
2. :meth:`~CleanerFilter.retain_records` once per run, vectorised, for the records of the
   batches whose retention asks for a per-record decision (``DELETE_EMPTY``,
   ``RETAIN_EMPTY``).
3. :meth:`~CleanerFilter.batch_retained`, in offset order, with each batch's fate: kept
   (whole, re-encoded, or emptied) or removed.
4. :meth:`~CleanerFilter.retained_txn_index`, once per group, with the ``.txnindex`` entries of
   the group's old segments: the entries the new segment gets.

The offset map is built by a separate walk over the dirty section, which asks
:meth:`~CleanerFilter.include_in_map` of every batch that has records.

This base class is the transaction-*unaware* rule set (compaction's phase 1): transactional
and control batches are copied unchanged, never put in the map, and every ``.txnindex``
entry is carried over. Safe, but it neither removes aborted data nor deduplicates
transactional records. The cleaner's default is its subclass
:class:`~spark_mq.storage.cleaner_transactions.TransactionalCleanerFilter`.

Threads: a filter belongs to one cleaning pass on the cleaner's thread. A new filter is made
for every pass, so it may keep per-pass state.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from spark_mq.storage.record_batch import BatchHeader
from spark_mq.storage.txn_index import AbortedTxn

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["BatchRetention", "CleanerFilter", "RecordsToDecide"]


class BatchRetention(enum.Enum):
    """What happens to a batch before its records are looked at (Kafka's, plus two)."""

    COPY = "copy"  # keep the batch byte for byte; its records are not examined
    DELETE = "delete"  # drop the batch and all its records
    DELETE_EMPTY = "delete_empty"  # keep the records the record rule keeps; drop if none
    RETAIN_EMPTY = "retain_empty"  # as DELETE_EMPTY, but an emptied batch stays, empty
    EMPTY = "empty"  # drop every record but keep the batch, empty (never a control batch)


@dataclasses.dataclass(frozen=True, slots=True)
class RecordsToDecide:
    """The record rule's inputs for a run of batches, one entry per record."""

    offsets: Int64Array
    #: Newest offset of the record's key in the offset map; -1 if absent or null.
    latest: Int64Array
    has_key: BoolArray
    is_tombstone: BoolArray


class CleanerFilter:
    """The retention rules without transactions (the module docstring tells the protocol)."""

    def include_in_map(self, header: BatchHeader) -> bool:
        """Whether the records of this dirty batch go into the offset map."""
        # Without knowing which transactions aborted, transactional data must neither shadow
        # older records nor be removed: kept out of the map, copied.
        return not (header.is_transactional or header.is_control)

    def check_batch(self, header: BatchHeader, *, retain_deletes: bool = True) -> BatchRetention:
        """The batch's retention. ``retain_deletes`` is False when the batch's segment is past
        the delete horizon: its tombstones, and markers that govern nothing, may go."""
        if header.is_transactional or header.is_control:
            return BatchRetention.COPY
        return BatchRetention.DELETE_EMPTY

    def retain_records(
        self, records: RecordsToDecide, *, map_end_offset: int, retain_deletes: bool
    ) -> BoolArray:
        """Which records stay: the newest of their key, unless an expired tombstone; those
        past the map (not cleaned by this pass); and those without a key (never decided)."""
        keep = records.offsets >= records.latest
        if not retain_deletes:
            keep &= ~records.is_tombstone
        keep |= ~records.has_key
        keep |= records.offsets >= map_end_offset
        return keep

    def batch_retained(self, header: BatchHeader, retained: bool) -> None:
        """The final fate of a batch, reported in offset order (nothing to track here)."""

    def retained_txn_index(
        self, entries: Sequence[AbortedTxn], *, map_end_offset: int
    ) -> list[AbortedTxn]:
        """The ``.txnindex`` entries of the group's new segment, given its old segments'
        entries in order. Every marker is copied here, so every entry stays."""
        return list(entries)
