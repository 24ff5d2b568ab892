"""The transaction coordinator: every transactional id of this broker and its transaction.

A synchronous core driven from the event loop (``TransactionService`` gives it the time and
runs its periodic jobs); tests drive it directly with a fake store and marker writer.

The rule that makes it crash-safe: every state change is first appended to
``__transaction_state`` (:class:`~spark_mq.broker.txn.state_topic.TransactionStateTopic`)
as a changed copy of the metadata, and only then installed; a decision (PrepareCommit /
PrepareAbort) is durable before the first marker is written; the Complete* record is
written once every marker is. So after a restart (:meth:`TransactionCoordinator.recover`):

- an **Ongoing** transaction is aborted, its producer fenced (epoch bump): the client cannot
  know whether everything it sent arrived;
- a **Prepared** transaction stays Prepared: that is the promise of two-phase commit;
- a **decided** transaction (PrepareCommit / PrepareAbort, or named by a two-phase decision
  record) gets its markers written and is completed.

Markers that cannot be written now leave the transaction decided; they are retried by the
periodic job and before any later request of the same transactional id, which meanwhile
gets CONCURRENT_TRANSACTIONS (retriable). Two-phase commit lives in
:mod:`~spark_mq.broker.txn.two_phase`; what the coordinator aborts and forgets on its own
(timeouts, quiet two-phase owners, expired ids) in :mod:`~spark_mq.broker.txn.timeouts`.

In a cluster the coordinator holds the transactional ids of the ``__transaction_state``
partitions this broker leads (:mod:`~spark_mq.broker.txn.placement` loads and unloads them),
marks with each partition's coordinator epoch (:attr:`TransactionCoordinator.epochs`), and
writes no marker before its decision is replicated (``durable``).

Crash point ``txn.after_decision`` (:mod:`spark_mq.crash_points`): right after a request's
decision is durable and before any marker is written, so that tests can crash exactly there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol

from spark_mq import crash_points
from spark_mq.broker.coordinator_topic import Record
from spark_mq.broker.producer_ids import MAX_PRODUCER_EPOCH
from spark_mq.broker.txn import timeouts
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.broker.txn.guards import TwoPhaseGuards
from spark_mq.broker.txn.owners import OwnerRegistry
from spark_mq.broker.txn.records import (
    Decision,
    decision_key,
    encode_decision,
    encode_txn_value,
    owner_key,
    txn_key,
)
from spark_mq.broker.txn.state import TopicPartition, TxnMetadata, TxnState
from spark_mq.broker.txn.state_topic import LoadedTransactions
from spark_mq.crash_points import CrashPoints
from spark_mq.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    ProducerFencedError,
    StorageError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from spark_mq.rate_limited_log import RateLimitedLog

logger = logging.getLogger("spark_mq.broker.txn")
#: Failures to write __transaction_state, logged once per kind with a count of repeats.
_FAILURES: Final = RateLimitedLog(logger)

#: What a failed write of __transaction_state raises (defined with the jobs that retry it).
WRITE_FAILED: Final = timeouts.WRITE_FAILED

#: The crash point between a durable decision and its markers.
CRASH_AFTER_DECISION: Final = "txn.after_decision"


class TxnStore(Protocol):
    """Where the coordinator writes (the real one is ``TransactionStateTopic``)."""

    def append(self, key: str, records: Sequence[Record], now_ms: int) -> None: ...

    def partition_for(self, key: str) -> int: ...


class MarkerSink(Protocol):
    """Writes markers (the real one is ``MarkerWriter``); returns the failed partitions."""

    def write(
        self,
        partitions: Iterable[TopicPartition],
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int | None = None,
    ) -> dict[TopicPartition, Exception]: ...


def validate_transactional_id(transactional_id: str | None) -> str:
    if not transactional_id:
        raise InvalidRequestError(
            "transactional.id must be a non-empty string; set it on the producer"
        )
    return transactional_id


class TransactionCoordinator:
    """Transactional ids, their producers and transactions; see the module docstring."""

    def __init__(
        self,
        config: TxnConfig,
        store: TxnStore,
        markers: MarkerSink,
        *,
        new_producer_id: Callable[[], int],
        crash_points: CrashPoints = crash_points.ACTIVE,
        durable: Callable[[str], bool] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.markers = markers
        self._new_producer_id = new_producer_id
        #: Whether the last state record of a transactional id's partition is replicated
        #: (a cluster's acks=all); on one node every appended record is.
        self._durable = durable if durable is not None else (lambda _tid: True)
        #: The coordinator epoch of each ``__transaction_state`` partition this broker leads
        #: in a cluster (its leader epoch); empty on one node, whose markers carry the
        #: broker epoch.
        self.epochs: dict[int, int] = {}
        self.crash_points = crash_points
        self.txns: dict[str, TxnMetadata] = {}
        #: The two-phase owners: their records, closed prefixes and activity.
        self.owners = OwnerRegistry()
        #: Decisions without an owner whose markers are not all written yet.
        self.anonymous: dict[str, Decision] = {}
        self._decision_counter = 0
        #: Two-phase decisions spanning coordinators: what a cluster keeps in memory.
        self.guards = TwoPhaseGuards()

    # -----------------------------------------------------------------------------------------
    # Writing state

    def write(self, txns: Sequence[TxnMetadata], now_ms: int) -> None:
        """Append ``txns`` (one batch per ``__transaction_state`` partition), installing each
        partition's transactions once its append succeeded."""
        by_partition: dict[int, list[TxnMetadata]] = {}
        for txn in txns:
            by_partition.setdefault(self.store.partition_for(txn.transactional_id), []).append(txn)
        for group in by_partition.values():
            records: list[Record] = [
                (txn_key(t.transactional_id), encode_txn_value(t)) for t in group
            ]
            self._append(group[0].transactional_id, records, now_ms)
            for t in group:
                self.txns[t.transactional_id] = t

    def _append(self, key: str, records: Sequence[Record], now_ms: int) -> None:
        try:
            self.store.append(key, records, now_ms)
        except NotLeaderOrFollowerError as exc:
            # Kafka's mapping: the partition moved, so did the coordinator.
            raise NotCoordinatorError(
                f"this broker no longer leads the __transaction_state partition of {key!r} "
                f"({exc}); find the coordinator again and retry"
            ) from exc
        except (NotEnoughReplicasError, UnknownTopicOrPartitionError) as exc:
            raise CoordinatorNotAvailableError(
                f"the transaction coordinator cannot write __transaction_state acks=all now "
                f"({exc}); nothing changed, retry"
            ) from exc
        except (OSError, StorageError) as exc:
            # The disk's failures are retriable; a bug is raised as it is (not retriable).
            # A full disk fails every transactional request the same way: once per kind.
            _FAILURES.failure(exc, "writing __transaction_state failed: %s", exc)
            raise CoordinatorNotAvailableError(
                f"the transaction coordinator could not write __transaction_state "
                f"({type(exc).__name__}: {exc}); nothing changed, retry"
            ) from exc

    def write_decision(
        self, owner: str | None, decision: Decision, now_ms: int, *, name: str | None = None
    ) -> str:
        """Append one decision record (the commit point of a two-phase decision); the key it
        went under (the owner, or a decision id). ``name`` (from :meth:`decision_name_near`)
        also records the decision under that decision id, in the same batch: what its
        participants on other coordinators must still be told
        (:mod:`~spark_mq.broker.txn.participants`), kept until each acknowledged."""
        delivery = name
        if owner is not None:
            key = owner
            moved = self.owners.after(owner, decision)  # refuses an illegal move unwritten
            records: list[Record] = [(owner_key(owner), _encode(decision))]
            if delivery is not None:
                records.append((decision_key(delivery), _encode(decision)))
            self._append(owner, records, now_ms)
            self.owners.install(moved)
        else:
            key = name if name is not None else self._decision_name(decision, now_ms)
            self._append(key, [(decision_key(key), _encode(decision))], now_ms)
            self.anonymous[key] = decision
        if delivery is not None:
            # Kept until every participant acknowledged, not only the local transactions.
            self.guards.remote_deliveries.add(delivery)
            self.anonymous[delivery] = decision
        return key

    def decision_name_near(self, key: str) -> str:
        """A new decision id on the ``__transaction_state`` partition of ``key``."""
        target = self.store.partition_for(key)
        while True:
            self._decision_counter += 1
            name = f"{key}@{os.getpid()}-{self._decision_counter}"
            if self.store.partition_for(name) == target:
                return name

    def _decision_name(self, decision: Decision, now_ms: int) -> str:
        """A new decision id. In a cluster it is drawn until it lands on the partition of
        the first transaction it decides, which this broker leads (a name on another
        broker's partition could not be written)."""
        target = None
        if self.epochs and decision.entries:
            target = self.store.partition_for(decision.entries[0].transactional_id)
        while True:
            self._decision_counter += 1
            name = f"{now_ms}-{os.getpid()}-{self._decision_counter}"
            if target is None or self.store.partition_for(name) == target:
                return name

    def check_not_closed(self, transactional_id: str) -> None:
        """Refuse a transactional id under a prefix its two-phase owner closed: the owner's
        job is over (committed or aborted as a whole), so a late task of it must not start,
        grow or prepare a transaction that nothing would ever complete."""
        owner = self.owners.closer_of(transactional_id)
        if owner is not None:
            raise ProducerFencedError(
                f"transactional id {transactional_id!r} belongs to two-phase owner "
                f"{owner!r}, which is closed: its job already committed or aborted as a "
                "whole, so this late attempt can write nothing; close this producer"
            )

    # -----------------------------------------------------------------------------------------
    # Deciding and completing

    def decide(
        self,
        decisions: Sequence[tuple[TxnMetadata, bool]],
        now_ms: int,
        *,
        fence: bool = False,
        from_request: bool = True,
    ) -> list[TxnMetadata]:
        """Record each transaction's decision (True: commit), then write its markers and
        complete it. With ``fence``, an Ongoing transaction that is aborted gets its epoch
        bumped first (timeouts, a new incarnation, an administrator's abort). Returns the
        decided transactions as they ended up (Complete*, or still decided when a marker
        failed)."""
        prepared = [
            self._prepare_abort(txn, now_ms, fence=fence)
            if not commit
            else txn.transition(TxnState.PREPARE_COMMIT, now_ms)
            for txn, commit in decisions
        ]
        self.write(prepared, now_ms)
        if from_request and prepared:
            self.crash_points.reach(CRASH_AFTER_DECISION)
        return [self.complete(txn, now_ms) for txn in prepared]

    def _prepare_abort(self, txn: TxnMetadata, now_ms: int, *, fence: bool) -> TxnMetadata:
        if not (fence and txn.state is TxnState.ONGOING):
            return txn.transition(TxnState.PREPARE_ABORT, now_ms)
        fencing = txn.transition(TxnState.PREPARE_EPOCH_FENCE, now_ms)
        epoch = txn.producer_epoch
        if epoch >= MAX_PRODUCER_EPOCH:
            # No epoch left to fence with: the next InitProducerId moves to a new producer id,
            # which fences the old one by itself.
            return fencing.transition(TxnState.PREPARE_ABORT, now_ms)
        return fencing.transition(
            TxnState.PREPARE_ABORT, now_ms, producer_epoch=epoch + 1, last_producer_epoch=epoch
        )

    def complete(self, txn: TxnMetadata, now_ms: int) -> TxnMetadata:
        """Write the markers of a decided transaction and its Complete* record; on failure it
        stays decided (retried later)."""
        if not self._durable(txn.transactional_id):
            # A new leader of the partition might not have the decision: no marker may
            # publish it before it is on every in-sync replica (retried once it is).
            return txn
        commit = txn.state is TxnState.PREPARE_COMMIT
        failed = self.markers.write(
            txn.partitions,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            commit=commit,
            coordinator_epoch=self.epochs.get(self.store.partition_for(txn.transactional_id)),
        )
        if failed:
            return txn
        done = txn.transition(
            TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, now_ms
        )
        try:
            self.write([done], now_ms)
        except WRITE_FAILED:
            return txn  # the markers are idempotent to rewrite: retried later
        logger.debug(
            "transaction of %r %s", txn.transactional_id, "committed" if commit else "aborted"
        )
        return done

    def retry_pending(self, now_ms: int) -> int:
        """Complete every decided transaction whose markers are not all written; forget the
        anonymous decisions whose transactions are all complete. How many completed."""
        done = 0
        for txn in list(self.txns.values()):
            if txn.state.is_decided and not self.complete(txn, now_ms).state.is_decided:
                done += 1
        for name, decision in list(self.anonymous.items()):
            if name in self.guards.remote_deliveries:
                continue  # participants elsewhere have not all acknowledged it
            if all(not self._still_pending(e.transactional_id) for e in decision.entries):
                try:
                    self._append(name, [(decision_key(name), None)], now_ms)
                except WRITE_FAILED:
                    continue
                del self.anonymous[name]
        return done

    def _still_pending(self, transactional_id: str) -> bool:
        txn = self.txns.get(transactional_id)
        return txn is not None and txn.state.is_decided

    # -----------------------------------------------------------------------------------------
    # Loading and recovery

    def load(self, loaded: LoadedTransactions, now_ms: int) -> None:
        """Install what ``__transaction_state`` holds, then let every two-phase decision
        decide the transactions it names that are still open with the same producer id,
        epoch and transaction number (the crash fell between the decision and their own
        records)."""
        self.txns = dict(loaded.txns)
        self.owners.load(loaded.owners, now_ms)
        self.anonymous = dict(loaded.decisions)
        self.apply_decisions(now_ms)
        logger.info(
            "loaded %d transactional ids and %d two-phase owners from %d records (%d skipped)",
            len(self.txns),
            len(loaded.owners),
            loaded.records,
            loaded.skipped,
        )

    def apply_decisions(self, now_ms: int) -> None:
        """Let every two-phase decision decide the loaded transactions it names that are
        still open with the same producer id, epoch and transaction number."""
        for decision in [*self.owners.records(), *self.anonymous.values()]:
            for e in decision.entries:
                txn = self.txns.get(e.transactional_id)
                if (
                    txn is not None
                    and txn.state.is_open
                    and (txn.producer_id, txn.producer_epoch, txn.txn_number)
                    == (e.producer_id, e.producer_epoch, e.txn_number)
                ):
                    new = TxnState.PREPARE_COMMIT if e.commit else TxnState.PREPARE_ABORT
                    self.txns[e.transactional_id] = txn.transition(new, now_ms)

    def recover(self, now_ms: int) -> tuple[int, int]:
        """After :meth:`load`: abort every Ongoing transaction (fencing its producer) and
        finish every decided one. Returns (aborted, finished)."""
        ongoing = [t for t in self.txns.values() if t.state is TxnState.ONGOING]
        if ongoing:
            self.decide([(t, False) for t in ongoing], now_ms, fence=True, from_request=False)
        finished = self.retry_pending(now_ms)
        if ongoing or finished:
            logger.info(
                "recovery: aborted %d open transactions, finished %d decided ones",
                len(ongoing),
                finished,
            )
        return len(ongoing), finished

    # -----------------------------------------------------------------------------------------
    # Producer checks

    def producer_txn(
        self, transactional_id: str, producer_id: int, epoch: int, now_ms: int
    ) -> TxnMetadata:
        """The id's metadata after checking the producer, with a pending completion retried;
        CONCURRENT_TRANSACTIONS while its previous transaction still completes."""
        txn = self.txns.get(validate_transactional_id(transactional_id))
        if txn is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has no producer (never initialised, "
                "or expired after transactional.id.expiration.ms): call InitProducerId"
            )
        check_producer(txn, producer_id, epoch)
        self.owners.client_seen(transactional_id, now_ms)
        if txn.state.is_decided:
            txn = self.complete(txn, now_ms)
            if txn.state.is_decided:
                raise ConcurrentTransactionsError(
                    f"the previous transaction of {transactional_id!r} is still completing; retry"
                )
        return txn

    def owner_heartbeat(self, owner_prefix: str, now_ms: int) -> None:
        """A write task of the owner whose transactions start with ``owner_prefix`` is still
        running: the owner-prefix rule of :meth:`abort_timed_out` counts it as activity."""
        if not owner_prefix:
            raise InvalidRequestError("an owner heartbeat needs a non-empty owner prefix")
        self.owners.heartbeat(owner_prefix, now_ms)

    # -----------------------------------------------------------------------------------------
    # InitProducerId

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> tuple[int, int]:
        """A transactional producer's id and epoch: a new id on first use, otherwise the
        epoch bumped (a new id once epochs run out), fencing every older incarnation and
        aborting what it left open (Ongoing or Prepared) first."""
        tid = validate_transactional_id(transactional_id)
        self.check_not_closed(tid)
        limit = self.config.transaction_max_timeout_ms
        if not 1 <= timeout_ms <= limit:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} is not within 1..{limit} "
                "(transaction.max.timeout.ms of the broker); lower it"
            )
        txn = self.txns.get(tid)
        if txn is None:
            new = TxnMetadata(tid, self._new_producer_id(), 0, timeout_ms, last_update_ms=now_ms)
            self.write([new], now_ms)
            self.owners.client_seen(tid, now_ms)
            return new.producer_id, new.producer_epoch
        if producer_id >= 0 and (producer_id, producer_epoch) not in (
            (txn.producer_id, txn.producer_epoch),
            (txn.last_producer_id, txn.last_producer_epoch),
        ):
            raise ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} is not the current producer of "
                f"{tid!r} (producer {txn.producer_id} epoch {txn.producer_epoch}): a newer "
                "incarnation fenced it; close this producer"
            )
        if txn.state.is_decided:
            txn = self.complete(txn, now_ms)
        if txn.state.is_open and self.guards.held(tid, now_ms):
            raise ConcurrentTransactionsError(
                f"the prepared transaction of {tid!r} voted for a two-phase decision that is "
                "on its way; retry"
            )
        if txn.state.is_open:
            (txn,) = self.decide([(txn, False)], now_ms, fence=True, from_request=False)
        if txn.state.is_decided:
            raise ConcurrentTransactionsError(
                f"the previous transaction of {tid!r} is still completing; retry"
            )
        if txn.producer_epoch + 1 > MAX_PRODUCER_EPOCH:
            pid, epoch = self._new_producer_id(), 0
        else:
            pid, epoch = txn.producer_id, txn.producer_epoch + 1
        new = txn.transition(
            TxnState.EMPTY,
            now_ms,
            producer_id=pid,
            producer_epoch=epoch,
            last_producer_id=txn.producer_id,
            last_producer_epoch=txn.producer_epoch,
            timeout_ms=timeout_ms,
        )
        self.write([new], now_ms)
        self.owners.client_seen(tid, now_ms)
        return pid, epoch

    # -----------------------------------------------------------------------------------------
    # AddPartitionsToTxn / AddOffsetsToTxn / EndTxn

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> None:
        """Register partitions with the producer's transaction, beginning one if needed."""
        txn = self.producer_txn(transactional_id, producer_id, producer_epoch, now_ms)
        self.check_not_closed(transactional_id)
        if txn.state is TxnState.PREPARED:
            raise InvalidTxnStateError(
                f"the transaction of {transactional_id!r} is prepared: it takes no more "
                "partitions; commit or abort it first",
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        wanted = txn.partitions | frozenset(partitions)
        if txn.state is TxnState.ONGOING:
            if wanted == txn.partitions:
                return
            new = txn.transition(TxnState.ONGOING, now_ms, partitions=wanted)
        else:
            new = txn.transition(
                TxnState.ONGOING,
                now_ms,
                partitions=wanted,
                txn_start_ms=now_ms,
                txn_number=txn.txn_number + 1,
            )
        self.write([new], now_ms)

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> None:
        """Commit or abort the producer's transaction; returns once the decision is durable
        (the markers are attempted right after, and retried if they fail)."""
        txn = self.txns.get(validate_transactional_id(transactional_id))
        if txn is None:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has no producer: call InitProducerId"
            )
        check_producer(txn, producer_id, producer_epoch)
        self.owners.client_seen(transactional_id, now_ms)
        wanted = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if txn.state is wanted:
            self.complete(txn, now_ms)  # a retry: the decision is already durable
            return
        if txn.state is done:
            return
        if txn.state.is_decided:
            raise ConcurrentTransactionsError(
                f"the previous transaction of {transactional_id!r} is still completing; retry"
            )
        if not txn.state.is_open:
            raise InvalidTxnStateError(
                f"{transactional_id!r} has no open transaction to "
                f"{'commit' if commit else 'abort'} (it is {txn.state.value}); add a partition "
                "or offsets first",
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        self.decide([(txn, commit)], now_ms)

    # -----------------------------------------------------------------------------------------
    # What the produce path and TxnOffsetCommit check

    def check_write(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        """Whether the producer may write to ``tp`` now: its transaction is Ongoing and the
        partition was added to it."""
        txn = self.txns.get(transactional_id)
        if txn is None:
            raise TransactionalIdNotFoundError(
                f"transactional id {transactional_id!r} is unknown to the coordinator; call "
                "InitProducerId first"
            )
        check_producer(txn, producer_id, producer_epoch)
        if txn.state is not TxnState.ONGOING or tp not in txn.partitions:
            raise InvalidTxnStateError(
                f"{tp[0]}-{tp[1]} is not in an open transaction of {transactional_id!r} (it is "
                f"{txn.state.value}); add the partition with AddPartitionsToTxn (or the group "
                "with AddOffsetsToTxn) before writing to it",
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )

    # -----------------------------------------------------------------------------------------
    # DescribeTransactions / ListTransactions

    def describe(self, transactional_id: str) -> TxnMetadata:
        txn = self.txns.get(transactional_id)
        if txn is None:
            raise TransactionalIdNotFoundError(
                f"transactional id {transactional_id!r} is unknown to the coordinator (never "
                "used, or expired after transactional.id.expiration.ms)"
            )
        return txn

    def list(
        self,
        *,
        states: Sequence[str] = (),
        producer_ids: Sequence[int] = (),
        duration_ms: int = -1,
        prefix: str | None = None,
        now_ms: int,
    ) -> list[TxnMetadata]:
        """The transactions matching every filter given, by transactional id."""
        known = {s.value for s in TxnState}
        unknown = sorted(set(states) - known)
        if unknown:
            raise InvalidRequestError(
                f"unknown transaction states {unknown}; valid: {', '.join(sorted(known))}"
            )
        out = []
        for tid in sorted(self.txns):
            txn = self.txns[tid]
            if states and txn.state.value not in states:
                continue
            if producer_ids and txn.producer_id not in producer_ids:
                continue
            if prefix is not None and not tid.startswith(prefix):
                continue
            if duration_ms >= 0 and (
                txn.txn_start_ms < 0 or now_ms - txn.txn_start_ms <= duration_ms
            ):
                continue
            out.append(txn)
        return out

    # -----------------------------------------------------------------------------------------
    # Timeouts and expiry (spark_mq/broker/txn/timeouts.py)

    def abort_timed_out(self, now_ms: int) -> int:
        """Abort the transactions past their timeouts (or whose two-phase owner went quiet);
        how many: :func:`~spark_mq.broker.txn.timeouts.abort_timed_out`."""
        return timeouts.abort_timed_out(self, now_ms)

    def waits_on_owners(self) -> int:
        """How many Prepared transactions named an owner prefix:
        :func:`~spark_mq.broker.txn.timeouts.waits_on_owners`."""
        return timeouts.waits_on_owners(self)

    def expire_ids(self, now_ms: int) -> int:
        """Forget expired transactional ids and closed owners; how many:
        :func:`~spark_mq.broker.txn.timeouts.expire_ids`."""
        return timeouts.expire_ids(self, now_ms)


def check_producer(txn: TxnMetadata, producer_id: int, producer_epoch: int) -> None:
    """The request's producer must be the id's current one (same id, same epoch)."""
    if producer_id != txn.producer_id:
        if producer_id == txn.last_producer_id:
            raise ProducerFencedError(
                f"producer {producer_id} of {txn.transactional_id!r} was replaced by producer "
                f"{txn.producer_id}: a newer incarnation fenced it; close this producer"
            )
        raise InvalidProducerIdMappingError(
            f"producer id {producer_id} does not belong to transactional id "
            f"{txn.transactional_id!r} (its producer is {txn.producer_id}); call InitProducerId"
        )
    if producer_epoch != txn.producer_epoch:
        raise ProducerFencedError(
            f"producer {producer_id} epoch {producer_epoch} of {txn.transactional_id!r} is "
            f"fenced: the current epoch is {txn.producer_epoch} (a newer incarnation started, "
            "or the coordinator aborted a timed-out transaction); close this producer"
        )


def _encode(decision: Decision) -> bytes:
    return encode_decision(decision)
