"""Transaction-aware compaction: the cleaner's default retention rules.

:class:`TransactionalCleanerFilter` is the :class:`~spark_mq.storage.cleaner_filter.CleanerFilter`
that every :class:`~spark_mq.storage.log_cleaner.LogCleaner` pass uses unless told otherwise.
It follows Kafka's ``LogCleaner`` and ``CleanedTransactionMetadata``. What it knows, taken
under the log's lock when the pass starts:

- the **aborted transactions** of the log, from every segment's ``.txnindex`` (producer id,
  first offset, marker offset). A transactional batch of producer P at base offset b is
  aborted iff an entry of P has ``first offset <= b <= marker offset``: a producer has one
  transaction open at a time, so nothing else of P lies in that span. Every transaction with
  data below the end of the pass's offset map is decided, because the map never passes the
  last stable offset, so its entry exists already (in a later segment, perhaps the active one);
- each producer's **last record** (:class:`~spark_mq.storage.producer_state.LastRecord`): the
  last offset of its last data batch, or, with none in its current epoch, that epoch.

The rules, for batches below the end of the offset map (everything past it is copied):

- **Aborted data** is removed, whole batches (``DELETE``), and never enters the offset map, so
  it cannot shadow an older committed record of its key.
- **Committed transactional data** is compacted like any other data: in the map, and kept per
  record by the newest-offset and tombstone rules.
- **A producer's last batch** is kept, empty if none of its records stays (``RETAIN_EMPTY``,
  or ``EMPTY`` when it is aborted data), so that a replay of the log (a restart without a
  usable snapshot) still finds the producer's last sequence, epoch and timestamp and rejects
  a retry of that batch as a duplicate. A producer without a data batch in its current epoch
  keeps its markers of that epoch, which carry the epoch (fencing).
- **A marker** (commit or abort) is kept while any batch of the transaction it closes is
  kept by this pass (an emptied one included: a replay must see the transaction closed), and
  while its segment is newer than the delete horizon, the rule tombstones follow: the
  horizon is the largest timestamp of the clean section minus ``delete.retention.ms``. Only
  a marker past the horizon whose transaction kept nothing goes. The cleaner walks batches
  in offset order and a marker comes after all its transaction's data, so when the marker is
  decided, the fate of that data in this pass is known: unlike Kafka, which keeps a marker
  one more pass after its data went, a marker can go in the pass that removes its last data.
  (Kafka's KIP-534 gives each marker its own delete horizon in the batch header; the format
  has no room for it, so the segment's largest timestamp stands in, as for tombstones.)
- **The ``.txnindex``** of a cleaned segment keeps exactly the entries whose marker is past
  the map's end (not cleaned) or whose transaction kept a batch in this pass. A marker kept
  only for the horizon loses its entry: its data is gone, so ``read_committed`` readers have
  nothing to drop, and an entry never outlives its marker, which readers rely on (an entry
  whose marker is gone would make them drop that producer's later transactions). Entries
  whose data is gone would be harmless, but every reader would collect them for nothing.

Why this is safe across crashes and concurrent appends: the map never reaches an open
transaction; the marker of a kept batch is always kept, so a replay never sees a transaction
left open; before a group that drops a marker is swapped in, the cleaner deletes the producer
state snapshots at or below it (``PartitionLog.delete_producer_snapshots_through``), since a
replay from one taken while that transaction was open would never see it close; groups are
swapped in offset order and a marker always follows its data, so a crash (which leaves the
log cleaned below some segment boundary and uncleaned above it,
:mod:`~spark_mq.storage.cleaner_swap`) may leave a marker whose data is gone, never data whose
marker is gone. Producers that write after the pass started have their last batch in the
active segment, which is never cleaned; their older last batch is merely kept once more.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from spark_mq.storage.cleaner_filter import BatchRetention, CleanerFilter
from spark_mq.storage.producer_state import LastRecord
from spark_mq.storage.record_batch import BatchHeader
from spark_mq.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from spark_mq.storage.log import PartitionLog

__all__ = ["AbortedTransactions", "TransactionalCleanerFilter"]


class AbortedTransactions:
    """The aborted transactions of a log, by producer: which batch is aborted data, and
    which marker closes which aborted transaction.

    >>> aborted = AbortedTransactions([AbortedTxn(7, 10, 20, 21)])
    >>> [aborted.containing(7, offset) is not None for offset in (9, 10, 20, 21)]
    [False, True, True, False]
    >>> aborted.closed_by(7, 20)
    AbortedTxn(producer_id=7, first_offset=10, last_offset=20, last_stable_offset=21)
    """

    def __init__(self, txns: Iterable[AbortedTxn]) -> None:
        by_producer: dict[int, list[AbortedTxn]] = defaultdict(list)
        self._by_marker: dict[tuple[int, int], AbortedTxn] = {}
        for txn in txns:
            by_producer[txn.producer_id].append(txn)
            self._by_marker[(txn.producer_id, txn.last_offset)] = txn
        self._txns = {
            pid: sorted(t, key=lambda x: x.first_offset) for pid, t in by_producer.items()
        }
        self._firsts = {pid: [t.first_offset for t in txns] for pid, txns in self._txns.items()}

    def __len__(self) -> int:
        return len(self._by_marker)

    def containing(self, producer_id: int, offset: int) -> AbortedTxn | None:
        """The aborted transaction of ``producer_id`` whose span holds ``offset``, if any."""
        firsts = self._firsts.get(producer_id)
        if not firsts:
            return None
        i = bisect.bisect_right(firsts, offset) - 1
        if i < 0:
            return None
        txn = self._txns[producer_id][i]
        return txn if offset <= txn.last_offset else None

    def closed_by(self, producer_id: int, marker_offset: int) -> AbortedTxn | None:
        """The aborted transaction whose abort marker is at ``marker_offset``, if any."""
        return self._by_marker.get((producer_id, marker_offset))


class TransactionalCleanerFilter(CleanerFilter):
    """The transaction-aware retention rules of one cleaning pass (module docstring)."""

    def __init__(
        self, aborted: Iterable[AbortedTxn], last_records: Mapping[int, LastRecord]
    ) -> None:
        self._aborted = AbortedTransactions(aborted)
        self._last_records = dict(last_records)
        # Producers whose current non-aborted transaction has kept a batch in this pass; reset
        # at each of their markers.
        self._kept_committed: set[int] = set()
        # (producer id, marker offset) of aborted transactions that kept a batch in this pass.
        self._kept_aborted: set[tuple[int, int]] = set()

    @classmethod
    def for_log(cls, log: PartitionLog) -> TransactionalCleanerFilter:
        """The rules for a pass over ``log`` as it is now (the cleaner's default factory)."""
        segments = log.segments
        # Every entry: an aborted transaction with data in the cleaned segments may have its
        # marker (and entry) in any later segment, the active one included.
        aborted = log.collect_aborted_transactions(segments[0].base_offset, log.log_end_offset + 1)
        return cls(aborted, log.producer_last_records())

    # -----------------------------------------------------------------------------------------
    # The rules

    def _aborted_txn(self, header: BatchHeader) -> AbortedTxn | None:
        if not header.is_transactional or header.is_control:
            return None
        return self._aborted.containing(header.producer_id, header.base_offset)

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        """Kafka's ``isBatchLastRecordOfProducer``: the batch holds what a replay needs."""
        if not header.has_producer_id:
            return False
        last = self._last_records.get(header.producer_id)
        if last is None:
            return False  # expired, or unknown: nothing to preserve
        if last.last_data_offset >= 0:
            return not header.is_control and header.last_offset == last.last_data_offset
        return header.is_control and header.producer_epoch == last.producer_epoch

    def include_in_map(self, header: BatchHeader) -> bool:
        return not header.is_control and self._aborted_txn(header) is None

    def check_batch(self, header: BatchHeader, *, retain_deletes: bool = True) -> BatchRetention:
        if header.is_control:
            return self._check_marker(header, retain_deletes=retain_deletes)
        last = self._is_last_of_producer(header)
        if self._aborted_txn(header) is not None:
            return BatchRetention.EMPTY if last else BatchRetention.DELETE
        return BatchRetention.RETAIN_EMPTY if last else BatchRetention.DELETE_EMPTY

    def _check_marker(self, header: BatchHeader, *, retain_deletes: bool) -> BatchRetention:
        pid = header.producer_id
        if self._aborted.closed_by(pid, header.base_offset) is not None:
            data_kept = (pid, header.base_offset) in self._kept_aborted
        else:
            # A commit (or an abort the index does not know, whose data was then treated as
            # committed and kept or compacted accordingly).
            data_kept = pid in self._kept_committed
        if data_kept or retain_deletes or self._is_last_of_producer(header):
            return BatchRetention.COPY
        return BatchRetention.DELETE

    def batch_retained(self, header: BatchHeader, retained: bool) -> None:
        pid = header.producer_id
        if header.is_control:
            # Whatever its fate, the marker closes the producer's transaction.
            self._kept_committed.discard(pid)
            return
        if not retained or not header.is_transactional:
            return
        txn = self._aborted_txn(header)
        if txn is None:
            self._kept_committed.add(pid)
        else:
            self._kept_aborted.add((pid, txn.last_offset))

    def retained_txn_index(
        self, entries: Sequence[AbortedTxn], *, map_end_offset: int
    ) -> list[AbortedTxn]:
        return [
            txn
            for txn in entries
            if txn.last_offset >= map_end_offset
            or (txn.producer_id, txn.last_offset) in self._kept_aborted
        ]
