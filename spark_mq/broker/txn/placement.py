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

States of one partition (absent: not led here)::

    (absent) --elect--> Loading --install--> Loaded
    Loading|Loaded --resign--> (absent)
    Loading|Loaded --elect with a newer epoch--> Loading   (unloaded first)

A single node never uses this: its coordinator owns every partition from the start.

Threads: the event loop thread only.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable
from typing import Final

from spark_mq.broker.txn.coordinator import TransactionCoordinator
from spark_mq.broker.txn.state_topic import LoadedTransactions
from spark_mq.errors import CoordinatorLoadInProgressError, NotCoordinatorError

logger = logging.getLogger("spark_mq.broker.txn")


class LoadState(enum.Enum):
    LOADING = "Loading"
    LOADED = "Loaded"


#: The legal moves of a partition led here (None: not led here).
TRANSITIONS: Final[dict[LoadState | None, frozenset[LoadState | None]]] = {
    None: frozenset({LoadState.LOADING}),
    LoadState.LOADING: frozenset({LoadState.LOADED, LoadState.LOADING, None}),
    LoadState.LOADED: frozenset({LoadState.LOADING, None}),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Led:
    """A partition this broker leads: its load state and leader (coordinator) epoch."""

    state: LoadState
    epoch: int


class TxnPlacement:
    """The load state of every ``__transaction_state`` partition this broker leads."""

    def __init__(
        self, coordinator: TransactionCoordinator, partition_for: Callable[[str], int]
    ) -> None:
        self.coordinator = coordinator
        self._partition_for = partition_for
        self.led: dict[int, Led] = {}

    def _move(self, partition: int, to: Led | None) -> None:
        current = self.led.get(partition)
        before = current.state if current is not None else None
        after = to.state if to is not None else None
        if after not in TRANSITIONS[before]:
            raise AssertionError(f"__transaction_state-{partition}: {before} -> {after}")
        if to is None:
            self.led.pop(partition, None)
        else:
            self.led[partition] = to

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
        self._move(partition, Led(LoadState.LOADING, epoch))
        return True

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
        self._move(partition, Led(LoadState.LOADED, epoch))
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
        self._move(partition, None)
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
        partition = self._partition_for(key)
        led = self.led.get(partition)
        if led is None:
            raise NotCoordinatorError(
                f"this broker is not the transaction coordinator of {key!r} (it does not lead "
                f"__transaction_state-{partition}); find the coordinator again and retry"
            )
        if led.state is LoadState.LOADING:
            raise CoordinatorLoadInProgressError(
                f"the transaction coordinator is loading __transaction_state-{partition} "
                f"(coordinator epoch {led.epoch}), where {key!r} is kept; retry shortly"
            )

    def loaded(self, partition: int) -> bool:
        led = self.led.get(partition)
        return led is not None and led.state is LoadState.LOADED

    def coordinates(self, key: str) -> bool:
        led = self.led.get(self._partition_for(key))
        return led is not None and led.state is LoadState.LOADED
