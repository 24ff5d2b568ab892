"""Which ``__transaction_state`` partitions this broker coordinates, in a cluster.

The transaction coordinator of a transactional id is the leader of the id's
``__transaction_state`` partition (as in Kafka). When the controller makes this broker the
leader of partition ``p`` with leader epoch ``e`` (:mod:`~spark_mq.broker.coordinator_leadership`),
``p`` starts Loading: its records are read on an executor thread while requests for its ids
answer COORDINATOR_LOAD_IN_PROGRESS; once read they are installed into the
:class:`~spark_mq.broker.txn.coordinator.TransactionCoordinator` with coordinator epoch ``e``
(Kafka's coordinatorEpoch is the partition's leader epoch: the markers carry it, and a data
partition refuses one older than it has seen), and ``p`` is Loaded. When the broker stops
leading ``p`` its ids, owners and decisions are unloaded: requests for them answer
NOT_COORDINATOR, and the periodic jobs no longer see them.

The states and their moves are :mod:`~spark_mq.broker.partition_loads`' (shared with the
half-message service's placement).

A single node never uses this: its coordinator owns every partition from the start.

Threads: the event loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.partition_loads import Led, LoadState, PartitionLoads
from spark_mq.broker.txn.coordinator import TransactionCoordinator
from spark_mq.broker.txn.state_topic import LoadedTransactions

logger = logging.getLogger("spark_mq.broker.txn")


class TxnPlacement(PartitionLoads):
    """The load state of every ``__transaction_state`` partition this broker leads, and
    what loading and unloading one does to the coordinator."""

    def __init__(
        self, coordinator: TransactionCoordinator, partition_for: Callable[[str], int]
    ) -> None:
        super().__init__(TRANSACTION_STATE_TOPIC)
        self.coordinator = coordinator
        self._partition_for = partition_for

    # -- leadership ---------------------------------------------------------------------

    def elect(self, partition: int, epoch: int) -> bool:
        """This broker leads ``partition`` with leader epoch ``epoch``; whether a load is to
        start (False: the same or an older epoch was announced already)."""
        current = self.led.get(partition)
        if current is not None and current.epoch >= epoch:
            return False
        if current is not None:
            # Re-elected with a newer epoch: the partition may have moved away and back,
            # so what is in memory may be stale; load it again.
            self._unload(partition)
        return self.begin(partition, epoch)

    def install(self, partition: int, epoch: int, loaded: LoadedTransactions, now_ms: int) -> bool:
        """Install the records read for ``partition`` if it is still Loading with ``epoch``
        (False: it resigned or was re-elected meanwhile, and the read is stale)."""
        if self.led.get(partition) != Led(LoadState.LOADING, epoch):
            return False
        c = self.coordinator
        c.txns.update(loaded.txns)
        c.owners.load_more(loaded.owners, now_ms)
        c.anonymous.update(loaded.decisions)
        for name, decision in loaded.decisions.items():
            # A decision naming transactions other brokers coordinate is kept until its
            # delivery to them is acknowledged again (TxnPeers.redrive).
            if any(
                self._partition_for(e.transactional_id) not in self.led for e in decision.entries
            ):
                c.guards.remote_deliveries.add(name)
        c.epochs[partition] = epoch
        c.apply_decisions(now_ms)
        self.finish(partition, epoch)
        logger.info(
            "became the transaction coordinator of __transaction_state-%d (coordinator epoch "
            "%d): loaded %d transactional ids, %d two-phase owners (%d records, %d skipped)",
            partition,
            epoch,
            len(loaded.txns),
            len(loaded.owners),
            loaded.records,
            loaded.skipped,
        )
        return True

    def resign(self, partition: int) -> int:
        """This broker no longer leads ``partition``: unload its ids; how many."""
        if partition not in self.led:
            return 0
        count = self._unload(partition)
        self.end(partition)
        logger.info(
            "no longer the transaction coordinator of __transaction_state-%d: unloaded %d "
            "transactional ids",
            partition,
            count,
        )
        return count

    def _unload(self, partition: int) -> int:
        c = self.coordinator
        mine = self._partition_for
        gone = [tid for tid in c.txns if mine(tid) == partition]
        for tid in gone:
            del c.txns[tid]
            c.owners.forget_id(tid)
        c.owners.drop([name for name in c.owners if mine(name) == partition])
        for name in [n for n in c.anonymous if mine(n) == partition]:
            del c.anonymous[name]
            c.guards.remote_deliveries.discard(name)
        c.epochs.pop(partition, None)
        return len(gone)

    # -- requests -----------------------------------------------------------------------

    def check(self, key: str) -> None:
        """Refuse a request for ``key`` (a transactional id or an owner) unless this broker
        coordinates it now: NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (retriable)."""
        self.require_loaded(
            self._partition_for(key),
            whose=f"the transaction coordinator of {key!r}",
            find_again="find the coordinator again (FindCoordinator)",
        )

    def coordinates(self, key: str) -> bool:
        return self.loaded(self._partition_for(key))
