"""Transaction states, the transition table, and what the coordinator knows of one
transactional id.

The states are Kafka's (``TransactionState``) plus ``Prepared`` for two-phase commit
(KIP-939). :data:`TRANSITIONS` maps a state to the states it may move to; anything else
raises :class:`IllegalTxnTransitionError` (INVALID_TXN_STATE on the wire)::

    from               to
    Empty              Empty, Ongoing, Prepared*, Dead
    Ongoing            Ongoing, Prepared, PrepareCommit, PrepareAbort, PrepareEpochFence
    Prepared           PrepareCommit, PrepareAbort, PrepareEpochFence
    PrepareCommit      CompleteCommit
    PrepareAbort       CompleteAbort
    CompleteCommit     Empty, Ongoing, Prepared*, Dead
    CompleteAbort      Empty, Ongoing, Prepared*, Dead
    PrepareEpochFence  PrepareAbort
    Dead               (nothing)

    * PrepareTxn of a transaction with no partition: an empty transaction is prepared at once.

``PrepareEpochFence`` is the in-memory step of an InitProducerId (or a timeout) that finds a
transaction open: the epoch is bumped and the transaction is aborted with the new epoch, so
the old incarnation's writes and markers are refused. It is never written to the log.

:class:`TxnMetadata` is mutable only through :meth:`TxnMetadata.transition`, which returns a
changed *copy*: the coordinator writes the copy to ``__transaction_state`` and installs it
only once the append succeeded (a failed append changes nothing).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from spark_mq.errors import InvalidTxnStateError


class TxnState(enum.Enum):
    """A transactional id's state; values are the names the protocol reports."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARED = "Prepared"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def is_open(self) -> bool:
        """An undecided transaction: Ongoing or Prepared."""
        return self in (TxnState.ONGOING, TxnState.PREPARED)

    @property
    def is_decided(self) -> bool:
        """A decision is recorded but its markers may not all be written yet."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        """No transaction in flight (a new one may begin)."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_IDLE: Final = frozenset({TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARED, TxnState.DEAD})

TRANSITIONS: Final[dict[TxnState, frozenset[TxnState]]] = {
    TxnState.EMPTY: _IDLE,
    TxnState.ONGOING: frozenset(
        {
            TxnState.ONGOING,
            TxnState.PREPARED,
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
            TxnState.PREPARE_EPOCH_FENCE,
        }
    ),
    TxnState.PREPARED: frozenset(
        {TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: _IDLE,
    TxnState.COMPLETE_ABORT: _IDLE,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset(),
}


def is_transition_valid(old: TxnState, new: TxnState) -> bool:
    return new in TRANSITIONS[old]


class IllegalTxnTransitionError(InvalidTxnStateError):
    """A move the transition table does not allow (INVALID_TXN_STATE)."""

    def __init__(
        self, transactional_id: str, old: TxnState, new: TxnState, *, producer_id: int, epoch: int
    ) -> None:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[old])) or "nothing"
        super().__init__(
            f"transactional id {transactional_id!r} is {old.value} and cannot become "
            f"{new.value} (from {old.value} it may become: {allowed})",
            producer_id=producer_id,
            producer_epoch=epoch,
        )
        self.old = old
        self.new = new


#: (topic, partition) of a transaction.
TopicPartition = tuple[str, int]


@dataclasses.dataclass(slots=True)
class TxnMetadata:
    """One transactional id: its producer, its open transaction, its timestamps.

    ``txn_number`` counts the transactions this id has begun; with the producer id and
    epoch it names one transaction, so that a two-phase decision recorded for it never
    applies to a later transaction of the same producer epoch.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_ms: int = -1
    prepared_ms: int = -1
    last_update_ms: int = -1
    txn_number: int = 0
    #: Set by a prepare that names the prefix of the transactions its decision completes
    #: (see :meth:`TransactionCoordinator.abort_timed_out`); None otherwise.
    owner_prefix: str | None = None

    def transition(self, new: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
        """A copy in state ``new`` with ``changes`` applied; raises if the move is illegal."""
        if not is_transition_valid(self.state, new):
            raise IllegalTxnTransitionError(
                self.transactional_id,
                self.state,
                new,
                producer_id=self.producer_id,
                epoch=self.producer_epoch,
            )
        copy = dataclasses.replace(self, state=new, last_update_ms=now_ms)
        for name, value in changes.items():
            if not hasattr(copy, name):
                raise AttributeError(f"TxnMetadata has no field {name!r}")
            setattr(copy, name, value)
        if new.is_complete or new is TxnState.DEAD:
            copy.partitions = frozenset()
            copy.txn_start_ms = -1
            copy.prepared_ms = -1
            copy.owner_prefix = None
        return copy

    def topics(self) -> dict[str, list[int]]:
        """The partitions grouped by topic, sorted."""
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            out.setdefault(topic, []).append(partition)
        return out
