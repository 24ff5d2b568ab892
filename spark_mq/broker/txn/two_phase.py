"""Two-phase commit for an external coordinator (KIP-939 in spirit): PrepareTxn,
CompletePreparedTxns and DescribeTxnOwner, over the :class:`TransactionCoordinator`.

- **Prepare** moves the producer's Ongoing transaction to Prepared (an empty one, with no
  partition, is prepared too). A Prepared transaction takes no more partitions, is not
  aborted by ``transaction.timeout.ms`` (only by ``transaction.prepared.max.timeout.ms``, or,
  when the prepare named an ``owner_prefix``, once its owner has been quiet for the
  transaction's timeout, no request for an id under the prefix and no OwnerHeartbeat: its
  decider is presumed gone),
  survives a broker restart as it is, and is completed by :func:`complete_prepared` (or by
  its producer's EndTxn, or aborted by a new incarnation's InitProducerId).
- **Complete** commits or aborts a list of prepared transactions as one decision. A commit is
  all or nothing: every named transaction must be Prepared with the given producer id and
  epoch, or nothing happens and the results say why. The decision's commit point is *one*
  record (:class:`~spark_mq.broker.txn.records.Decision`, under the owner's key, or under a
  decision key of its own without an owner) listing every transaction it commits and every
  one ``abort_prefix`` aborts; the transactions' own PrepareCommit / PrepareAbort records,
  markers and Complete* records follow, and after a crash the loaded decision record
  re-decides the transactions it names that are still open.
- **Idempotence**: a commit whose ``sequence`` is not above the owner's last recorded one is a
  replay. Its transactions are aborted instead and the answer says ``already_committed``: a
  replayed batch never doubles its output.
- **Binding an owner to an instance** (``instance``, for an owner whose sequences restart
  with a new instance of it: a Spark streaming query from a new checkpoint numbers its
  batches from 0 again): the owner's first commit that names an instance binds the owner to
  it, in the decision record. A later decision (commit or abort) of that owner from another
  instance is refused whole with :class:`~spark_mq.errors.OwnerInstanceConflictError`, so
  the new instance's batches are neither taken as replays and dropped nor able to abort the
  bound instance's open transactions. Decisions without an instance are not checked.
- **Closing an owner** (``close_owner``, for a job that decides once, such as a Spark batch
  write): the decision record also closes ``abort_prefix`` for good. From then on the
  coordinator refuses InitProducerId, AddPartitionsToTxn and PrepareTxn for ids under it
  (PRODUCER_FENCED), so a task still running when its job was aborted cannot prepare a
  transaction after the abort that would then hang until
  ``transaction.prepared.max.timeout.ms``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from spark_mq.broker.txn.coordinator import TransactionCoordinator, check_producer
from spark_mq.broker.txn.records import Decision, DecisionEntry
from spark_mq.broker.txn.state import TopicPartition, TxnMetadata, TxnState
from spark_mq.errors import (
    InvalidRequestError,
    InvalidTxnStateError,
    OwnerInstanceConflictError,
    SparkMQError,
    TransactionalIdNotFoundError,
)
from spark_mq.protocol.transactions import PreparedTxnRef, owner_prefix_problem


@dataclasses.dataclass(frozen=True, slots=True)
class CompletionOutcome:
    """What :func:`complete_prepared` did."""

    #: Per named transaction, in request order: None (done) or why not.
    results: list[tuple[str, SparkMQError | None]]
    committed: bool
    already_committed: bool
    last_sequence: int
    aborted_others: list[str]

    @property
    def first_error(self) -> SparkMQError | None:
        return next((e for _, e in self.results if e is not None), None)


def prepare(
    coordinator: TransactionCoordinator,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    now_ms: int,
    *,
    owner_prefix: str | None = None,
) -> frozenset[TopicPartition]:
    """Ongoing (or no transaction) -> Prepared; the transaction's partitions. Preparing a
    Prepared transaction again answers the same. ``owner_prefix`` (a strict prefix of the
    id) names the transactions the same decision completes: the coordinator aborts the
    prepared transaction once their owner has been quiet for its timeout
    (:meth:`TransactionCoordinator.abort_timed_out`)."""
    problem = owner_prefix_problem(owner_prefix, transactional_id)
    if problem is not None:
        raise InvalidRequestError(problem)
    txn = coordinator.producer_txn(transactional_id, producer_id, producer_epoch, now_ms)
    if txn.state is TxnState.PREPARED:
        return txn.partitions
    coordinator.check_not_closed(transactional_id)
    if txn.state is TxnState.ONGOING:
        new = txn.transition(
            TxnState.PREPARED, now_ms, prepared_ms=now_ms, owner_prefix=owner_prefix
        )
    elif txn.state.is_complete:
        new = txn.transition(
            TxnState.PREPARED,
            now_ms,
            prepared_ms=now_ms,
            txn_start_ms=now_ms,
            txn_number=txn.txn_number + 1,
            owner_prefix=owner_prefix,
        )
    else:
        raise InvalidTxnStateError(
            f"{transactional_id!r} is {txn.state.value}: only an open transaction can be prepared",
            producer_id=producer_id,
            producer_epoch=producer_epoch,
        )
    coordinator.write([new], now_ms)
    return new.partitions


def last_sequence(coordinator: TransactionCoordinator, owner: str) -> int:
    """The newest sequence recorded for ``owner`` (-1: none)."""
    decision = coordinator.owners.get(owner)
    return -1 if decision is None else decision.sequence


def _check_ref(
    coordinator: TransactionCoordinator, ref: PreparedTxnRef, allowed: frozenset[TxnState]
) -> TxnMetadata:
    txn = coordinator.txns.get(ref.transactional_id)
    if txn is None:
        raise TransactionalIdNotFoundError(
            f"transactional id {ref.transactional_id!r} is unknown to the coordinator (never "
            "used, expired, or its transaction was already completed and forgotten)"
        )
    check_producer(txn, ref.producer_id, ref.producer_epoch)
    if txn.state not in allowed:
        raise InvalidTxnStateError(
            f"the transaction of {ref.transactional_id!r} is {txn.state.value}, not "
            f"{' or '.join(sorted(s.value for s in allowed))}",
            producer_id=ref.producer_id,
            producer_epoch=ref.producer_epoch,
        )
    return txn


def _validate(
    refs: Sequence[PreparedTxnRef],
    *,
    commit: bool,
    owner: str | None,
    sequence: int,
    abort_prefix: str | None,
    close_owner: bool,
    instance: str | None,
) -> None:
    names = [r.transactional_id for r in refs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("a transactional id is named twice in one decision")
    if owner is not None and not owner:
        raise InvalidRequestError("owner must be a non-empty string, or unset")
    if close_owner and (owner is None or not abort_prefix):
        raise InvalidRequestError(
            "close_owner needs an owner and an abort_prefix: the prefix is what it closes"
        )
    if instance is not None and (owner is None or not instance):
        raise InvalidRequestError(
            "instance must be a non-empty string, and needs an owner: it is the owner's"
        )
    if commit and owner is not None and sequence < 0:
        raise InvalidRequestError(
            f"a commit tagged with owner {owner!r} needs a sequence >= 0, got {sequence}"
        )


_ABORTABLE = frozenset({TxnState.ONGOING, TxnState.PREPARED})


def complete_prepared(
    coordinator: TransactionCoordinator,
    refs: Sequence[PreparedTxnRef],
    *,
    commit: bool,
    owner: str | None,
    sequence: int,
    abort_prefix: str | None,
    now_ms: int,
    close_owner: bool = False,
    instance: str | None = None,
) -> CompletionOutcome:
    """Commit (all or nothing) or abort ``refs`` as one decision; see the module docstring."""
    _validate(
        refs,
        commit=commit,
        owner=owner,
        sequence=sequence,
        abort_prefix=abort_prefix,
        close_owner=close_owner,
        instance=instance,
    )
    # A closed owner stays closed, and a bound one bound: every record of the owner carries
    # both (the newest record is the one compaction keeps).
    previous = coordinator.owners.get(owner) if owner is not None else None
    bound = previous.instance if previous is not None else None
    if previous is not None and bound is not None and instance not in (None, bound):
        raise OwnerInstanceConflictError(
            f"owner {owner!r} belongs to instance {bound!r} (its last committed sequence is "
            f"{previous.sequence}), not to {instance!r}: "
            "nothing was decided. For the Spark sink, another checkpoint's streaming query "
            "already writes as this sink.id, and a query from a new checkpoint numbers its "
            "batches from 0 again, so its commits would be taken as replays and dropped. "
            "Give each checkpoint its own sink.id (or leave the option unset: the default is "
            "derived from the query's id)."
        )
    already_closed = previous.closed_prefix if previous is not None else None
    if close_owner and already_closed not in (None, abort_prefix):
        raise InvalidRequestError(
            f"owner {owner!r} already closed prefix {already_closed!r}; it cannot close "
            f"{abort_prefix!r} too"
        )
    closing = close_owner and already_closed is None
    closed_prefix = abort_prefix if closing else already_closed
    last = last_sequence(coordinator, owner) if owner is not None else -1
    replay = commit and owner is not None and sequence <= last
    results: list[tuple[str, SparkMQError | None]] = []
    decisions: list[tuple[TxnMetadata, bool]] = []
    if commit and not replay:
        for ref in refs:
            try:
                txn = _check_ref(coordinator, ref, frozenset({TxnState.PREPARED}))
            except SparkMQError as exc:
                results.append((ref.transactional_id, exc))
                continue
            results.append((ref.transactional_id, None))
            decisions.append((txn, True))
        if any(e is not None for _, e in results):
            return CompletionOutcome(results, False, False, last, [])
    else:
        for ref in refs:
            known = coordinator.txns.get(ref.transactional_id)
            if (
                known is not None
                and known.state is TxnState.COMPLETE_ABORT
                and known.producer_id == ref.producer_id
                and ref.producer_epoch in (known.producer_epoch, known.last_producer_epoch)
            ):
                results.append((ref.transactional_id, None))  # aborted already
                continue
            try:
                txn = _check_ref(coordinator, ref, _ABORTABLE)
            except SparkMQError as exc:
                results.append((ref.transactional_id, exc))
                continue
            results.append((ref.transactional_id, None))
            decisions.append((txn, False))
    named = {r.transactional_id for r in refs}
    others: list[str] = []
    if abort_prefix:
        for tid in sorted(coordinator.txns):
            txn = coordinator.txns[tid]
            if tid.startswith(abort_prefix) and tid not in named and txn.state.is_open:
                decisions.append((txn, False))
                others.append(tid)
    committing = commit and not replay
    if (committing and (owner is not None or len(decisions) > 1)) or closing:
        entries = tuple(
            DecisionEntry(t.transactional_id, t.producer_id, t.producer_epoch, t.txn_number, c)
            for t, c in decisions
        )
        if committing and owner is not None:
            last = sequence
        coordinator.write_decision(
            owner,
            Decision(
                last if owner else -1,
                now_ms,
                entries,
                closed_prefix,
                (bound or instance) if committing else bound,
            ),
            now_ms,
        )
    if decisions:
        coordinator.decide(decisions, now_ms, fence=True)
        coordinator.retry_pending(now_ms)
    return CompletionOutcome(results, committing, replay, last, others)
