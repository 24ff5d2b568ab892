"""Two-phase commit for an external coordinator (KIP-939 in spirit): PrepareTxn,
CommitPreparedTxns, AbortTxns and DescribeTxnOwner, over the :class:`TransactionCoordinator`.

- **Prepare** moves the producer's Ongoing transaction to Prepared (an empty one, with no
  partition, is prepared too). A Prepared transaction takes no more partitions, is not
  aborted by ``transaction.timeout.ms`` (only by ``transaction.prepared.max.timeout.ms``, or,
  when the prepare named an ``owner_prefix``, once its owner has been quiet for the
  transaction's timeout, no request for an id under the prefix and no OwnerHeartbeat: its
  decider is presumed gone),
  survives a broker restart as it is, and is completed by :func:`commit` or :func:`abort` (or by
  its producer's EndTxn, or aborted by a new incarnation's InitProducerId).
- **Commit** (:func:`commit`, CommitPreparedTxns) commits a list of prepared transactions as
  one decision. It is all or nothing: every named transaction must be Prepared with the given
  producer id and epoch, or nothing happens and the results say why. The decision's commit
  point is *one* record (:class:`~spark_mq.broker.txn.records.Decision`, under the owner's
  key, or under a decision key of its own without an owner) listing every transaction it
  commits and every one its scope aborts; the transactions' own PrepareCommit / PrepareAbort
  records, markers and Complete* records follow, and after a crash the loaded decision
  record re-decides the transactions it names that are still open.
- **Abort** (:func:`abort`, AbortTxns) aborts the named transactions (Ongoing or Prepared)
  and what the scope left behind, as one decision.
- **Idempotence**: a commit whose ``sequence`` is not above the owner's last recorded one is a
  replay. Its transactions are aborted instead and the answer says ``already_committed``: a
  replayed batch never doubles its output.
- **Binding an owner to an instance** (for an owner whose sequences restart with a new
  instance of it): the owner's first commit that names an instance binds the owner to it,
  in the decision record. A later decision (commit or abort) of that owner from another
  instance is refused whole with :class:`~spark_mq.errors.OwnerInstanceConflictError`, so
  the new instance's sequences are neither taken as replays and dropped nor able to abort
  the bound instance's open transactions. Decisions without an instance are not checked.
- **Closing a scope** (``scope.close``, for an owner that decides once, such as a batch
  job): the decision record also closes the scope's prefix for good. From then on the
  coordinator refuses InitProducerId, AddPartitionsToTxn and PrepareTxn for ids under it
  (PRODUCER_FENCED), so an attempt still running when its job was decided cannot prepare a
  transaction that would then hang until ``transaction.prepared.max.timeout.ms``.

What the coordinator keeps about owners (records, closed prefixes, activity) and the moves
it allows them are in :mod:`~spark_mq.broker.txn.owners`; each request type checks its own
fields (``problem()``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

import msgspec

from spark_mq.broker.txn.coordinator import TransactionCoordinator, check_producer
from spark_mq.broker.txn.owners import Owner
from spark_mq.broker.txn.records import Decision, DecisionEntry
from spark_mq.broker.txn.state import TopicPartition, TxnMetadata, TxnState
from spark_mq.errors import (
    InvalidRequestError,
    InvalidTxnStateError,
    OwnerInstanceConflictError,
    SparkMQError,
    TransactionalIdNotFoundError,
)
from spark_mq.protocol.transactions import (
    AbortTxnsRequest,
    CommitPreparedTxnsRequest,
    PreparedTxnRef,
    TxnOwnerScope,
    owner_prefix_problem,
)


@dataclasses.dataclass(frozen=True, slots=True)
class RemoteVotes:
    """What the coordinators of the named transactions this broker does not coordinate
    answered to CheckPreparedTxns (:mod:`~spark_mq.broker.txn.participants`): the entries
    to decide, per transactional id (None: an abort already done), why the others cannot
    be, and the scope's open transactions they coordinate."""

    entries: dict[str, DecisionEntry | None]
    errors: dict[str, SparkMQError]
    leftovers: list[DecisionEntry]

    def named(self, transactional_id: str) -> bool:
        return transactional_id in self.entries or transactional_id in self.errors


NO_REMOTE: Final = RemoteVotes({}, {}, [])


@dataclasses.dataclass(frozen=True, slots=True)
class CompletionOutcome:
    """What :func:`commit` or :func:`abort` did."""

    #: Per named transaction, in request order: None (done) or why not.
    results: list[tuple[str, SparkMQError | None]]
    committed: bool
    already_committed: bool
    last_sequence: int
    aborted_others: list[str]
    #: The decision's key at this coordinator and what its participants (other
    #: coordinators) must be told; None when every transaction is coordinated here.
    delivery: tuple[str, tuple[DecisionEntry, ...]] | None = None

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
    return coordinator.owners.last_sequence(owner)


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


_PREPARED = frozenset({TxnState.PREPARED})
_ABORTABLE = frozenset({TxnState.ONGOING, TxnState.PREPARED})


def _validated(request: CommitPreparedTxnsRequest | AbortTxnsRequest) -> None:
    problem = request.problem()
    if problem is not None:
        raise InvalidRequestError(problem)


def _owner_checked(
    coordinator: TransactionCoordinator,
    owner: str | None,
    instance: str | None,
    scope: TxnOwnerScope | None,
) -> Owner | None:
    """The owner's record, after refusing a decision from an instance other than the one it
    is bound to, or a close of a prefix other than the one it closed: both refuse the whole
    request, nothing decided."""
    known = coordinator.owners.get(owner) if owner is not None else None
    if known is None:
        return None
    if known.instance is not None and instance not in (None, known.instance):
        raise OwnerInstanceConflictError(
            f"owner {owner!r} belongs to instance {known.instance!r} (its last committed "
            f"sequence is {known.last_sequence}), not to {instance!r}: nothing was decided. "
            "Each instance of a decider needs an owner of its own: an instance whose "
            "sequences start again would have its commits taken as replays and dropped"
        )
    if scope is not None and scope.close and known.closed_prefix not in (None, scope.prefix):
        raise InvalidRequestError(
            f"owner {owner!r} already closed prefix {known.closed_prefix!r}; it cannot close "
            f"{scope.prefix!r} too"
        )
    return known


def _scope_leftovers(
    coordinator: TransactionCoordinator,
    scope: TxnOwnerScope | None,
    refs: Sequence[PreparedTxnRef],
) -> list[TxnMetadata]:
    """The scope's open transactions that the request does not name."""
    if scope is None:
        return []
    named = {r.transactional_id for r in refs}
    return [
        coordinator.txns[tid]
        for tid in sorted(coordinator.txns)
        if tid.startswith(scope.prefix) and tid not in named and coordinator.txns[tid].state.is_open
    ]


def _record(
    decisions: Sequence[tuple[TxnMetadata, bool]],
    *,
    sequence: int,
    now_ms: int,
    known: Owner | None,
    scope: TxnOwnerScope | None,
    instance: str | None,
) -> Decision:
    """The decision record: the owner's record carries its closed prefix and binding on
    (the newest record is the one compaction keeps)."""
    closed = known.closed_prefix if known is not None else None
    if closed is None and scope is not None and scope.close:
        closed = scope.prefix
    bound = known.instance if known is not None else None
    entries = tuple(
        DecisionEntry(t.transactional_id, t.producer_id, t.producer_epoch, t.txn_number, c)
        for t, c in decisions
    )
    return Decision(sequence, now_ms, entries, closed, bound or instance)


def _close_if_asked(
    coordinator: TransactionCoordinator,
    name: str | None,
    known: Owner | None,
    scope: TxnOwnerScope | None,
    decisions: Sequence[tuple[TxnMetadata, bool]],
    *,
    now_ms: int,
) -> None:
    """A decision that commits nothing writes a record only to close the scope (the first
    time): it keeps the owner's sequence and binding."""
    if scope is None or not scope.close or name is None:
        return
    if known is not None and known.closed_prefix is not None:
        return
    last = known.last_sequence if known is not None else -1
    record = _record(
        decisions, sequence=last, now_ms=now_ms, known=known, scope=scope, instance=None
    )
    coordinator.write_decision(name, record, now_ms)


def _finish(
    coordinator: TransactionCoordinator, decisions: Sequence[tuple[TxnMetadata, bool]], now_ms: int
) -> None:
    if decisions:
        coordinator.decide(decisions, now_ms, fence=True)
        coordinator.retry_pending(now_ms)


def _remote_entries(
    coordinator: TransactionCoordinator,
    remote: RemoteVotes,
    refs: Sequence[PreparedTxnRef],
    commit: bool,
) -> tuple[DecisionEntry, ...]:
    """The entries the participants must be told: the named transactions they vote for
    (committed or aborted as ``commit`` says), then the scope's leftovers there. A
    transaction an earlier decision held here already decides is left to that decision's
    delivery: a replay after a decider crashed must not abort what it committed."""
    named = [remote.entries.get(r.transactional_id) for r in refs]
    decided = [msgspec.structs.replace(e, commit=commit) for e in named if e is not None]
    earlier = {
        (e.transactional_id, e.producer_id, e.txn_number)
        for d in [*coordinator.owners.records(), *coordinator.anonymous.values()]
        for e in d.entries
    }
    return tuple(
        e
        for e in (*decided, *remote.leftovers)
        if (e.transactional_id, e.producer_id, e.txn_number) not in earlier
    )


def _committed_before(coordinator: TransactionCoordinator) -> set[str]:
    """The transactional ids the decisions held here commit."""
    return {
        e.transactional_id
        for d in [*coordinator.owners.records(), *coordinator.anonymous.values()]
        for e in d.entries
        if e.commit
    }


def _check_vetoes(coordinator: TransactionCoordinator, entries: Sequence[DecisionEntry]) -> None:
    """Refuse to commit a participant's transaction that its coordinator asked about (the
    termination protocol) and was told no decision names: it is being aborted there."""
    for e in entries:
        if e.commit and coordinator.guards.vetoed(e.transactional_id, e.producer_id, e.txn_number):
            raise InvalidTxnStateError(
                f"the transaction of {e.transactional_id!r} is being aborted by its own "
                "coordinator: its owner was quiet for its transaction.timeout.ms and no "
                "decision named it; nothing was committed",
                producer_id=e.producer_id,
                producer_epoch=e.producer_epoch,
            )


def _delivery(
    coordinator: TransactionCoordinator, key: str | None, entries: tuple[DecisionEntry, ...]
) -> str | None:
    """A name for the decision's delivery record (None when there is nothing to deliver):
    a decision id on the partition of ``key``, which this broker coordinates."""
    if not entries:
        return None
    return coordinator.decision_name_near(key) if key is not None else None


def commit(
    coordinator: TransactionCoordinator,
    request: CommitPreparedTxnsRequest,
    now_ms: int,
    remote: RemoteVotes = NO_REMOTE,
    *,
    decider_key: str | None = None,
) -> CompletionOutcome:
    """CommitPreparedTxns: commit the named transactions (all or nothing) and abort the rest
    of the scope, as one decision; a replayed sequence aborts them instead. ``remote``: the
    votes of the transactions other coordinators coordinate, decided with the same record
    and then delivered to them (``delivery``)."""
    _validated(request)
    tag, scope, refs = request.owner, request.scope, request.transactions
    name = tag.owner if tag is not None else None
    known = _owner_checked(coordinator, name, tag.instance if tag else None, scope)
    last = known.last_sequence if known is not None else -1
    local_refs = [r for r in refs if not remote.named(r.transactional_id)]
    if tag is not None and tag.sequence <= last:
        # A replay: what it names is aborted, and the owner's record stays as it is.
        outcome = _abort_refs(coordinator, local_refs, _scope_leftovers(coordinator, scope, refs))
        entries = _remote_entries(coordinator, remote, refs, False)
        delivery = _delivery(coordinator, decider_key, entries)
        if delivery is not None:
            coordinator.write_decision(None, Decision(-1, now_ms, entries), now_ms, name=delivery)
        _close_if_asked(coordinator, name, known, scope, outcome.decisions, now_ms=now_ms)
        _finish(coordinator, outcome.decisions, now_ms)
        # A named transaction an earlier decision here committed is what a replay wants
        # (the client's retry after the decider died with its answer in flight).
        # (Only in a cluster: one node answers such a retry as before.)
        committed = _committed_before(coordinator) if remote is not NO_REMOTE else set()
        replayed = [
            (tid, None if tid in committed else error)
            for tid, error in _merged(refs, outcome.results, remote)
        ]
        others = outcome.others + [e.transactional_id for e in remote.leftovers]
        return CompletionOutcome(replayed, False, True, last, others, _delivered(delivery, entries))
    results: list[tuple[str, SparkMQError | None]] = []
    decisions: list[tuple[TxnMetadata, bool]] = []
    for ref in local_refs:
        try:
            decisions.append((_check_ref(coordinator, ref, _PREPARED), True))
            results.append((ref.transactional_id, None))
        except SparkMQError as exc:
            results.append((ref.transactional_id, exc))
    results = _merged(refs, results, remote)
    if any(e is not None for _, e in results):
        return CompletionOutcome(results, False, False, last, [])
    entries = _remote_entries(coordinator, remote, refs, True)
    _check_vetoes(coordinator, entries)
    leftovers = _scope_leftovers(coordinator, scope, refs)
    decisions += [(t, False) for t in leftovers]
    delivery = _delivery(coordinator, decider_key, entries)
    if tag is not None or len(decisions) > 1 or (scope is not None and scope.close) or entries:
        if tag is not None:
            last = tag.sequence
        record = _record(
            decisions,
            sequence=last if tag is not None else -1,
            now_ms=now_ms,
            known=known,
            scope=scope if tag is not None else None,
            instance=tag.instance if tag is not None else None,
        )
        record = dataclasses.replace(record, entries=(*record.entries, *entries))
        coordinator.write_decision(name, record, now_ms, name=delivery)
    _finish(coordinator, decisions, now_ms)
    others = [t.transactional_id for t in leftovers] + [
        e.transactional_id for e in remote.leftovers
    ]
    return CompletionOutcome(results, True, False, last, others, _delivered(delivery, entries))


def _merged(
    refs: Sequence[PreparedTxnRef],
    local: Sequence[tuple[str, SparkMQError | None]],
    remote: RemoteVotes,
) -> list[tuple[str, SparkMQError | None]]:
    """Per named transaction, in request order: the local check's result or the vote's."""
    mine = dict(local)
    return [
        (r.transactional_id, remote.errors.get(r.transactional_id))
        if remote.named(r.transactional_id)
        else (r.transactional_id, mine.get(r.transactional_id))
        for r in refs
    ]


def _delivered(
    name: str | None, entries: tuple[DecisionEntry, ...]
) -> tuple[str, tuple[DecisionEntry, ...]] | None:
    return None if name is None else (name, entries)


def abort(
    coordinator: TransactionCoordinator,
    request: AbortTxnsRequest,
    now_ms: int,
    remote: RemoteVotes = NO_REMOTE,
    *,
    decider_key: str | None = None,
) -> CompletionOutcome:
    """AbortTxns: abort the named transactions and the rest of the scope as one decision,
    closing the scope when asked; ``remote`` as for :func:`commit` (an abort needs no
    commit point, but its delivery record lets a new coordinator finish telling them)."""
    _validated(request)
    tag, scope, refs = request.owner, request.scope, request.transactions
    name = tag.owner if tag is not None else None
    known = _owner_checked(coordinator, name, tag.instance if tag else None, scope)
    last = known.last_sequence if known is not None else -1
    local_refs = [r for r in refs if not remote.named(r.transactional_id)]
    outcome = _abort_refs(coordinator, local_refs, _scope_leftovers(coordinator, scope, refs))
    entries = _remote_entries(coordinator, remote, refs, False)
    delivery = _delivery(coordinator, decider_key, entries)
    if delivery is not None:
        record = Decision(-1, now_ms, entries)
        coordinator.write_decision(None, record, now_ms, name=delivery)
    _close_if_asked(coordinator, name, known, scope, outcome.decisions, now_ms=now_ms)
    _finish(coordinator, outcome.decisions, now_ms)
    results = _merged(refs, outcome.results, remote)
    others = outcome.others + [e.transactional_id for e in remote.leftovers]
    return CompletionOutcome(results, False, False, last, others, _delivered(delivery, entries))


@dataclasses.dataclass(frozen=True, slots=True)
class _Aborts:
    results: list[tuple[str, SparkMQError | None]]
    decisions: list[tuple[TxnMetadata, bool]]
    others: list[str]


def _abort_refs(
    coordinator: TransactionCoordinator,
    refs: Sequence[PreparedTxnRef],
    leftovers: Sequence[TxnMetadata],
) -> _Aborts:
    """Check each named transaction for an abort (one already aborted is fine), then add
    the scope's leftovers."""
    results: list[tuple[str, SparkMQError | None]] = []
    decisions: list[tuple[TxnMetadata, bool]] = []
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
            decisions.append((_check_ref(coordinator, ref, _ABORTABLE), False))
            results.append((ref.transactional_id, None))
        except SparkMQError as exc:
            results.append((ref.transactional_id, exc))
    decisions += [(t, False) for t in leftovers]
    return _Aborts(results, decisions, [t.transactional_id for t in leftovers])
