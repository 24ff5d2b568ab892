"""Transactions on the client side: the value types of the API and the producer's transaction
state machine.

A transactional producer (``transactional.id`` set) moves through Kafka's client states::

    Uninitialized --init_transactions()--> Initializing --> Ready
    Ready --begin_transaction()--> InTransaction
    InTransaction --commit_transaction()--> CommittingTransaction --> Ready
    InTransaction --abort_transaction()--> AbortingTransaction --> Ready
    InTransaction --prepare_transaction()--> PreparedTransaction   (final for this producer)
    InTransaction / CommittingTransaction --a send or request failed--> AbortableError
    AbortableError --abort_transaction()--> AbortingTransaction --> Ready
    any --fenced, or an error nothing can repair--> FatalError   (final)

The table :data:`TRANSITIONS` is the whole truth: :meth:`TransactionStateMachine.transition`
refuses any other move with an AssertionError (a bug in spark_mq, not in the caller), while
:meth:`TransactionStateMachine.require` turns a user call made in the wrong state into
:class:`~spark_mq.errors.InvalidTxnStateError` saying what to call first, the stored
:class:`~spark_mq.errors.TransactionAbortableError` in AbortableError, and the stored fatal
error (:class:`~spark_mq.errors.ProducerFencedError` when fenced) in FatalError.

A commit or abort that timed out may be retried: CommittingTransaction accepts another
``commit_transaction()`` and AbortingTransaction another ``abort_transaction()``.

Two-phase commit (KIP-939 style): ``prepare_transaction()`` leaves the transaction prepared
and returns a :class:`PreparedTransaction`, a small handle that can be pickled or turned into
JSON, travel to another process and be committed there, together with other handles, by
:meth:`~spark_mq.Admin.complete_prepared_transactions` (one decision, tagged with an owner
and a sequence so a replay never commits twice).

Threads: the state machine is guarded by its own lock; the producer's user threads call
``require``/``transition``, the sender thread reports failures through
:meth:`TransactionStateMachine.abortable` / :meth:`TransactionStateMachine.fatal`.
"""

from __future__ import annotations

import enum
import json
import threading
from dataclasses import dataclass
from typing import Final

from spark_mq.client.records import TopicPartition
from spark_mq.errors import (
    InvalidTxnStateError,
    ProducerFencedError,
    SparkMQError,
    TransactionAbortableError,
    UsageError,
)

# ---------------------------------------------------------------------------------------------
# Value types


@dataclass(frozen=True)
class PreparedTransaction:
    """A prepared transaction's handle: everything needed to commit or abort it from any
    process, after its producer is gone. Small, picklable, and round-trips through JSON.

    >>> handle = PreparedTransaction("sink-3", 7, 2, (TopicPartition("out", 0),))
    >>> PreparedTransaction.from_json(handle.to_json()) == handle
    True
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]

    def to_json(self) -> str:
        """The handle as a compact JSON object."""
        return json.dumps(
            {
                "transactional_id": self.transactional_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "partitions": [[tp.topic, tp.partition] for tp in self.partitions],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> PreparedTransaction:
        """Parse :meth:`to_json` output; raises UsageError for anything else."""
        try:
            data = json.loads(text)
            handle = cls(
                str(data["transactional_id"]),
                int(data["producer_id"]),
                int(data["producer_epoch"]),
                tuple(TopicPartition(str(t), int(p)) for t, p in data["partitions"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise UsageError(
                f"not a prepared transaction handle ({exc}): expected the JSON of "
                f"PreparedTransaction.to_json(), got {text[:200]!r}"
            ) from exc
        return handle


@dataclass(frozen=True)
class CompletionResult:
    """What :meth:`~spark_mq.Admin.complete_prepared_transactions` did.

    ``committed``: this call committed the transactions. ``already_committed``: the owner had
    already recorded this sequence (or a later one), so nothing new was committed and the
    given transactions were aborted instead. ``last_sequence``: the owner's newest recorded
    sequence after the call (-1: none). ``aborted_others``: ids aborted through
    ``abort_prefix``.
    """

    committed: bool
    already_committed: bool
    last_sequence: int
    aborted_others: tuple[str, ...]


@dataclass(frozen=True)
class TransactionListing:
    """One transaction as :meth:`~spark_mq.Admin.list_transactions` lists it.
    ``duration_ms`` is how long its current transaction has been open (-1: none open)."""

    transactional_id: str
    producer_id: int
    state: str
    duration_ms: int
    coordinator_id: int


@dataclass(frozen=True)
class TransactionDescription:
    """What the coordinator knows of one transactional id
    (:meth:`~spark_mq.Admin.describe_transactions`). Times are epoch milliseconds, -1 when
    not applicable; ``partitions`` are those of the open (or prepared) transaction."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    prepared_time_ms: int
    partitions: tuple[TopicPartition, ...]
    coordinator_id: int


# ---------------------------------------------------------------------------------------------
# The producer's state machine


class TxnState(enum.Enum):
    """The client-side state of a transactional producer (Kafka's names)."""

    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING_TRANSACTION = "CommittingTransaction"
    ABORTING_TRANSACTION = "AbortingTransaction"
    PREPARED_TRANSACTION = "PreparedTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


S = TxnState
#: Target state -> the states it may be entered from.
TRANSITIONS: Final[dict[TxnState, frozenset[TxnState]]] = {
    S.UNINITIALIZED: frozenset({S.INITIALIZING}),  # init failed: may be called again
    S.INITIALIZING: frozenset({S.UNINITIALIZED}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.PREPARED_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TxnState),
}

#: User call -> the states in which it may run (other states raise, see ``require``).
ALLOWED_CALLS: Final[dict[str, frozenset[TxnState]]] = {
    "init_transactions": frozenset({S.UNINITIALIZED}),
    "begin_transaction": frozenset({S.READY}),
    "send": frozenset({S.IN_TRANSACTION}),
    "send_batch": frozenset({S.IN_TRANSACTION}),
    "send_offsets_to_transaction": frozenset({S.IN_TRANSACTION}),
    "commit_transaction": frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION}),
    "abort_transaction": frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION}),
    "prepare_transaction": frozenset({S.IN_TRANSACTION}),
}


def _advice(call: str, state: TxnState) -> str:
    """What to do instead of ``call`` in ``state`` (for the InvalidTxnStateError message)."""
    if state is S.UNINITIALIZED:
        return "call init_transactions() first"
    if state is S.INITIALIZING:
        return "init_transactions() is still running in another thread"
    if call == "init_transactions":
        return "init_transactions() was already called; it runs once per producer"
    if state is S.READY:
        return "call begin_transaction() first"
    if state is S.IN_TRANSACTION:
        return "a transaction is already open: commit_transaction() or abort_transaction() first"
    if state is S.COMMITTING_TRANSACTION:
        return "the previous commit_transaction() did not finish: call it again"
    if state is S.ABORTING_TRANSACTION:
        return "the previous abort_transaction() did not finish: call it again"
    if state is S.PREPARED_TRANSACTION:
        return (
            "the transaction is prepared: complete it with Admin.complete_prepared_transactions()"
            " and use a new producer for the next transaction"
        )
    return "abort_transaction() first"


class TransactionStateMachine:
    """The transaction state of one producer (see the module docstring).

    >>> machine = TransactionStateMachine("tx-1")
    >>> machine.require("begin_transaction")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_mq.errors.InvalidTxnStateError: begin_transaction() ... call init_transactions() first
    """

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self._lock = threading.Lock()
        self._state = S.UNINITIALIZED
        self._error: SparkMQError | None = None
        #: Whether records may be sent now: a plain attribute, for send()'s per-record test.
        self.in_transaction = False
        self.producer_id = -1
        self.producer_epoch = -1

    @property
    def state(self) -> TxnState:
        return self._state

    @property
    def error(self) -> SparkMQError | None:
        """The error behind AbortableError or FatalError (None otherwise)."""
        return self._error

    @property
    def has_error(self) -> bool:
        return self._state in (S.ABORTABLE_ERROR, S.FATAL_ERROR)

    def transition(self, target: TxnState) -> None:
        """Move to ``target``; a move the table does not allow is a bug (AssertionError).
        A producer in FatalError stays there."""
        with self._lock:
            self._transition(target)

    def _transition(self, target: TxnState) -> None:
        if self._state is S.FATAL_ERROR:
            return
        if self._state not in TRANSITIONS[target]:
            raise AssertionError(
                f"illegal transaction state change {self._state.value} -> {target.value} "
                f"for transactional id {self.transactional_id!r}"
            )
        self._state = target
        self.in_transaction = target is S.IN_TRANSACTION
        if target not in (S.ABORTABLE_ERROR, S.FATAL_ERROR):
            self._error = None

    def require(self, call: str) -> TxnState:
        """Check that ``call`` may run now; returns the current state, raises otherwise."""
        state = self._state
        if state in ALLOWED_CALLS[call]:
            return state
        if state is S.FATAL_ERROR:
            error = self._error
            assert error is not None
            raise _copy(error, f"{call}() on a producer in FatalError: {error}") from error
        if state is S.ABORTABLE_ERROR:
            error = self._error
            raise TransactionAbortableError(
                f"{call}(): the transaction of {self.transactional_id!r} cannot commit "
                f"({error}); call abort_transaction() and begin a new one"
            ) from error
        raise InvalidTxnStateError(
            f"{call}() is not allowed in state {state.value} (transactional id "
            f"{self.transactional_id!r}): {_advice(call, state)}",
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
        )

    def abortable(self, error: SparkMQError) -> None:
        """A send or a transactional request failed: the transaction must be aborted. Only
        an open transaction (or one being committed) becomes abortable; other states keep
        theirs (an abort in progress is not disturbed by the failures it causes)."""
        with self._lock:
            if self._state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
                if self._error is None:
                    self._error = error
                self._state = S.ABORTABLE_ERROR
                self.in_transaction = False

    def fatal(self, error: SparkMQError) -> None:
        """The producer can do nothing more (fenced, or broken): every later call raises
        ``error`` (a ProducerFencedError when fenced); close() still works."""
        with self._lock:
            if self._state is not S.FATAL_ERROR:
                self._error = error
                self._state = S.FATAL_ERROR
                self.in_transaction = False

    def __repr__(self) -> str:
        return f"TransactionStateMachine({self.transactional_id!r}, {self._state.value})"


def _copy(error: SparkMQError, message: str) -> SparkMQError:
    """A fresh exception of ``error``'s class and attributes with a new message (the stored
    error is raised again and again; each raise gets its own object and traceback)."""
    exc = type(error).__new__(type(error))
    Exception.__init__(exc, message)
    exc.__dict__.update(error.__dict__)
    return exc


def fenced_error(transactional_id: str, cause: SparkMQError) -> ProducerFencedError:
    """The ProducerFencedError a fenced producer raises from then on."""
    return ProducerFencedError(
        f"producer with transactional id {transactional_id!r} was fenced ({cause}): a newer "
        "producer with the same transactional.id exists, or the coordinator aborted the "
        "transaction after transaction.timeout.ms; close this producer"
    )
