"""What the transaction coordinator ends and forgets on its own, on its periodic jobs
(``TransactionService``): transactions past their timeouts, Prepared transactions whose
two-phase owner went quiet, and transactional ids and closed owners past
``transactional.id.expiration.ms``. Functions over the
:class:`~spark_mq.broker.txn.coordinator.TransactionCoordinator`, whose methods of the same
names call them; every write goes through its ``__transaction_state`` append, and a failed
one (:data:`WRITE_FAILED`) leaves things as they were, for the next run of the job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from spark_mq.broker.txn.records import owner_key, txn_key
from spark_mq.broker.txn.state import TxnMetadata, TxnState
from spark_mq.errors import CoordinatorNotAvailableError, NotCoordinatorError

if TYPE_CHECKING:
    from spark_mq.broker.txn.coordinator import TransactionCoordinator

logger = logging.getLogger("spark_mq.broker.txn")

#: What a failed write of __transaction_state raises (nothing changed; retried later).
WRITE_FAILED: Final = (CoordinatorNotAvailableError, NotCoordinatorError)


def abort_timed_out(c: TransactionCoordinator, now_ms: int) -> int:
    """Abort Ongoing transactions past their ``transaction.timeout.ms`` and Prepared ones
    past ``transaction.prepared.max.timeout.ms`` (fencing their producers); retry
    pending completions. How many were aborted.

    A Prepared transaction whose prepare named an ``owner_prefix`` is also aborted once
    its owner has gone quiet for that transaction's ``transaction.timeout.ms``: no client
    request for a transactional id under the prefix (InitProducerId, AddPartitionsToTxn,
    AddOffsetsToTxn, EndTxn, PrepareTxn: the other tasks of the same Spark job or
    micro-batch, and their retries), no OwnerHeartbeat for the prefix (a write task sends
    them while it runs, also before its first record), and no load of this coordinator
    since. Every task of the owner has then ended and the decision, due right after the
    last one, has not come: the decider (a Spark driver) is presumed gone, and holding
    the transaction would stall every ``read_committed`` reader of its partitions until
    the prepared limit."""
    c.retry_pending(now_ms)
    quiet_since = c.owners.last_active(
        t.owner_prefix for t in _waiting_on_owners(c) if t.owner_prefix
    )
    due = [
        (t, why)
        for t in c.txns.values()
        if (why := _timed_out(c, t, now_ms, quiet_since)) is not None
    ]
    for txn, why in due:
        logger.warning(
            "aborting the %s transaction of %r (producer %d epoch %d): %s",
            txn.state.value,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            why,
        )
        try:
            c.decide([(txn, False)], now_ms, fence=True, from_request=False)
        except WRITE_FAILED:
            continue  # retried at the next check
    return len(due)


def _timed_out(
    c: TransactionCoordinator, txn: TxnMetadata, now_ms: int, quiet_since: dict[str, int]
) -> str | None:
    """Why :func:`abort_timed_out` aborts ``txn`` now, None if it does not."""
    if txn.state is TxnState.ONGOING:
        return "it timed out" if now_ms - txn.txn_start_ms > txn.timeout_ms else None
    if txn.state is not TxnState.PREPARED:
        return None
    if now_ms - txn.prepared_ms > c.config.transaction_prepared_max_timeout_ms:
        return "it timed out (transaction.prepared.max.timeout.ms)"
    if c.guards.held(txn.transactional_id, now_ms):
        return None  # it voted for a decision on its way
    if txn.owner_prefix is not None and now_ms - quiet_since[txn.owner_prefix] > txn.timeout_ms:
        if c.guards.presume_abort is not None and not c.guards.presume_abort(txn, now_ms):
            return None  # asking the other coordinators first
        return (
            f"its owner {txn.owner_prefix!r} has been quiet for {txn.timeout_ms} ms "
            "(transaction.timeout.ms: no request for an id under it, no heartbeat): its "
            "decider is presumed gone"
        )
    return None


def _waiting_on_owners(c: TransactionCoordinator) -> Iterator[TxnMetadata]:
    """The Prepared transactions that named an owner prefix."""
    return (
        t for t in c.txns.values() if t.state is TxnState.PREPARED and t.owner_prefix is not None
    )


def waits_on_owners(c: TransactionCoordinator) -> int:
    """How many Prepared transactions named an owner prefix: the owner-prefix rule of
    :func:`abort_timed_out` may still have to end them, and its record of their owners'
    activity is in memory only, so a broker that holds them should not idle-exit."""
    return sum(1 for _ in _waiting_on_owners(c))


def expire_ids(c: TransactionCoordinator, now_ms: int) -> int:
    """Forget transactional ids idle for ``transactional.id.expiration.ms``, and closed
    two-phase owners as old (tombstones); how many."""
    limit = c.config.transactional_id_expiration_ms
    expired = 0
    c.owners.expire_heartbeats(now_ms, limit)
    for txn in list(c.txns.values()):
        if not txn.state.is_complete or now_ms - txn.last_update_ms < limit:
            continue
        txn.transition(TxnState.DEAD, now_ms)  # validates the move
        try:
            c._append(txn.transactional_id, [(txn_key(txn.transactional_id), None)], now_ms)
        except WRITE_FAILED:
            continue
        del c.txns[txn.transactional_id]
        c.owners.forget_id(txn.transactional_id)
        expired += 1
    if expired:
        logger.info("forgot %d expired transactional ids", expired)
    return expired + _expire_closed_owners(c, now_ms, limit)


def _expire_closed_owners(c: TransactionCoordinator, now_ms: int, limit: int) -> int:
    """Forget closed two-phase owners (finished batch jobs) whose last record is older
    than ``transactional.id.expiration.ms`` and under whose prefix nothing is open or
    still completing: no attempt of such a job can still be running. An owner that is
    not closed (a stream's sink id) is kept: its sequence guards against a replay."""
    forgotten = 0
    unfinished = [tid for tid, txn in c.txns.items() if not txn.state.is_complete]
    for owner in c.owners.expirable(now_ms, limit, unfinished):
        try:
            c._append(owner, [(owner_key(owner), None)], now_ms)
        except WRITE_FAILED:
            continue
        c.owners.forget(owner)
        forgotten += 1
    if forgotten:
        logger.info("forgot %d closed two-phase owners past their expiration", forgotten)
    return forgotten
