"""What ``Admin`` does for transactions: list, describe, abort hanging ones, and complete
prepared transactions as one decision (the second phase of a two-phase commit).

ListTransactions goes to every broker (each lists the transactional ids it coordinates);
the other calls go to the transaction coordinator of their key (FindCoordinator with
``key_type`` 1): the transactional id, or for CommitPreparedTxns, AbortTxns and
DescribeTxnOwner the owner (so every decision of one owner, and its sequence record, lives on
one coordinator). In a cluster that coordinator asks the coordinators of the transactions it
does not coordinate itself (docs/cluster.md, "Two-phase decisions across coordinators"):
one request decides them all, wherever they are.
Requests are retried while the coordinator moves, loads or is busy finishing a transaction
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
CONCURRENT_TRANSACTIONS) within ``default.api.timeout.ms``.

Threads: any (the cluster's control connections are locked).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from spark_mq.client.cluster import Cluster
from spark_mq.client.records import TopicPartition
from spark_mq.client.transactions import (
    CompletionResult,
    PreparedTransaction,
    TransactionDescription,
    TransactionListing,
)
from spark_mq.client.txn_manager import RETRY_CODES, coordinator_request, find_txn_coordinator
from spark_mq.errors import InvalidTxnStateError, UsageError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.transactions import (
    TXN_STATES,
    AbortTxnsRequest,
    AbortTxnsResponse,
    CommitPreparedTxnsRequest,
    CommitPreparedTxnsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    OwnerHeartbeatRequest,
    OwnerHeartbeatResponse,
    OwnerSequenceRequest,
    OwnerSequenceResponse,
    PreparedTxnRef,
    TransactionState,
    TxnAbortOwner,
    TxnCommitOwner,
    TxnOwnerScope,
)

#: States in which a transaction holds back the last stable offset and can be aborted.
HANGING_STATES = ("Ongoing", "Prepared")


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionAdmin:
    """The transaction calls of one ``Admin`` (see the module docstring)."""

    def __init__(self, cluster: Cluster, *, timeout_ms: int) -> None:
        self._cluster = cluster
        self._timeout_ms = timeout_ms
        self._nodes_known = False

    def _deadline(self) -> float:
        return self._cluster.clock() + self._timeout_ms / 1000

    def _learn_nodes(self) -> None:
        if not self._nodes_known and not self._cluster.config.path:
            self._cluster.refresh([])
        self._nodes_known = True

    def _call(self, key: str, request: msgspec.Struct, error_of: Any) -> Any:
        self._learn_nodes()
        return coordinator_request(self._cluster, key, request, error_of, deadline=self._deadline())

    # -- two-phase commit -----------------------------------------------------------------

    def commit(
        self,
        handles: Sequence[PreparedTransaction],
        owner: TxnCommitOwner | None = None,
        scope: TxnOwnerScope | None = None,
    ) -> CompletionResult:
        """CommitPreparedTxns: all or nothing, one decision (see the protocol doc)."""
        request = CommitPreparedTxnsRequest(_refs(handles), owner, scope)
        return self._decide(request, owner.owner if owner else None, handles, scope, commit=True)

    def abort_transactions(
        self,
        handles: Sequence[PreparedTransaction],
        owner: TxnAbortOwner | None = None,
        scope: TxnOwnerScope | None = None,
    ) -> CompletionResult:
        """AbortTxns: the handles and the rest of ``scope`` as one decision."""
        request = AbortTxnsRequest(_refs(handles), owner, scope)
        return self._decide(request, owner.owner if owner else None, handles, scope, commit=False)

    def _decide(
        self,
        request: CommitPreparedTxnsRequest | AbortTxnsRequest,
        owner: str | None,
        handles: Sequence[PreparedTransaction],
        scope: TxnOwnerScope | None,
        *,
        commit: bool,
    ) -> CompletionResult:
        problem = request.problem()
        if problem is not None:
            raise UsageError(f"{problem}: nothing was sent")
        # Every decision of one owner, and its record, lives on the owner's coordinator.
        key = owner or (handles[0].transactional_id if handles else None)
        key = key or (scope.prefix if scope is not None else None)
        if not key:
            raise UsageError(
                "a decision needs transactions, an owner or a scope: there is nothing to decide"
            )

        def error_of(response: CommitPreparedTxnsResponse | AbortTxnsResponse) -> int:
            # A commit is all or nothing, so one busy transaction makes the whole decision
            # safe to repeat; an abort's per-transaction results are final.
            if response.error_code != ErrorCode.NONE or not commit:
                return int(response.error_code)
            codes = [r.error_code for r in response.results if r.error_code in RETRY_CODES]
            return int(codes[0]) if codes else ErrorCode.NONE

        response: CommitPreparedTxnsResponse | AbortTxnsResponse = self._call(
            key, request, error_of
        )
        if response.error_code != ErrorCode.NONE:
            raise error_from_code(response.error_code, response.error_message)
        replay = isinstance(response, CommitPreparedTxnsResponse) and response.already_committed
        if not replay:
            for result in response.results:
                if result.error_code != ErrorCode.NONE:
                    raise error_from_code(
                        result.error_code,
                        f"transaction {result.transactional_id!r}: "
                        f"{result.error_message or ErrorCode(result.error_code).name}"
                        + ("; nothing was committed" if commit else ""),
                    )
        return CompletionResult(
            committed=commit and not replay,
            already_committed=replay,
            last_sequence=response.last_sequence,
            aborted_others=tuple(response.aborted_others),
        )

    def complete(
        self,
        transactions: Sequence[PreparedTransaction],
        *,
        commit: bool,
        owner: str | None,
        sequence: int,
        abort_prefix: str | None,
        close_owner: bool = False,
        instance: str | None = None,
    ) -> CompletionResult:
        """``Admin.complete_prepared_transactions``: its keyword arguments mapped onto the
        typed requests (the arguments that only make sense together are checked here, with
        the names the caller used)."""
        handles = _handles(transactions)
        if owner is None and sequence != -1:
            raise UsageError(f"sequence={sequence} needs an owner: the sequence is per owner")
        if owner is not None and commit and sequence < 0:
            raise UsageError(
                f"a commit for owner {owner!r} needs a sequence >= 0 (increasing per owner), "
                f"got {sequence}"
            )
        if close_owner and (owner is None or not abort_prefix):
            raise UsageError(
                "close_owner=True needs an owner and an abort_prefix (the prefix it closes)"
            )
        if instance is not None and (owner is None or not instance):
            raise UsageError(
                f"instance={instance!r} needs an owner and must not be empty: it names which "
                "instance of the owner decides"
            )
        scope = TxnOwnerScope(abort_prefix, close_owner) if abort_prefix else None
        if commit:
            tag = None if owner is None else TxnCommitOwner(owner, sequence, instance)
            return self.commit(handles, tag, scope)
        who = None if owner is None else TxnAbortOwner(owner, instance)
        return self.abort_transactions(handles, who, scope)

    def last_committed_sequence(self, owner: str) -> int:
        if not owner:
            raise UsageError("last_committed_sequence() needs an owner id")
        response: OwnerSequenceResponse = self._call(
            owner, OwnerSequenceRequest(owner), lambda r: r.error_code
        )
        if response.error_code != ErrorCode.NONE:
            raise error_from_code(response.error_code, response.error_message)
        return int(response.last_sequence)

    def owner_heartbeat(self, owner_prefix: str) -> None:
        if not owner_prefix:
            raise UsageError("owner_heartbeat() needs an owner prefix")
        response: OwnerHeartbeatResponse = self._call(
            owner_prefix, OwnerHeartbeatRequest(owner_prefix), lambda r: r.error_code
        )
        if response.error_code != ErrorCode.NONE:
            raise error_from_code(response.error_code, response.error_message)

    # -- listing and describing -----------------------------------------------------------

    def list_transactions(
        self,
        states: Iterable[str],
        producer_ids: Iterable[int],
        duration_ms: int,
        prefix: str | None,
    ) -> list[TransactionListing]:
        wanted = _check_states(states)
        request = ListTransactionsRequest(
            wanted, [int(p) for p in producer_ids], int(duration_ms), prefix
        )
        metadata = self._cluster.refresh([])
        self._nodes_known = True
        node_ids = sorted({b.node_id for b in metadata.brokers}) or [-1]
        found: dict[str, TransactionListing] = {}
        now_ms = _now_ms()
        for node_id in node_ids:
            response: ListTransactionsResponse = self._cluster.request(
                request, node_id=node_id, timeout_ms=self._timeout_ms
            )
            if response.error_code != ErrorCode.NONE:
                raise error_from_code(response.error_code, response.error_message)
            for state in response.transaction_states:
                start = state.transaction_start_time_ms
                found[state.transactional_id] = TransactionListing(
                    state.transactional_id,
                    state.producer_id,
                    state.state,
                    now_ms - start if start >= 0 else -1,
                    node_id,
                )
        return [found[name] for name in sorted(found)]

    def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> list[TransactionDescription]:
        if isinstance(transactional_ids, str):
            raise UsageError("describe_transactions() takes a list of transactional ids")
        self._learn_nodes()
        out: list[TransactionDescription] = []
        for txn_id in transactional_ids:
            node = find_txn_coordinator(self._cluster, txn_id, deadline=self._deadline())
            response: DescribeTransactionsResponse = self._call(
                txn_id,
                DescribeTransactionsRequest([txn_id]),
                lambda r: r.transaction_states[0].error_code if r.transaction_states else 0,
            )
            for state in response.transaction_states:
                if state.error_code != ErrorCode.NONE:
                    raise error_from_code(
                        state.error_code,
                        state.error_message
                        or f"transactional id {state.transactional_id!r} is not known to its "
                        "coordinator (never used, or expired); list them with: spark-mq "
                        "transactions list",
                    )
                out.append(_description(state, node))
        return out

    def abort(self, transactional_id: str) -> None:
        """End a hanging transaction (Ongoing or Prepared) with an abort decision."""
        (description,) = self.describe_transactions([transactional_id])
        if description.state not in HANGING_STATES:
            raise InvalidTxnStateError(
                f"transaction {transactional_id!r} is {description.state}, not Ongoing or "
                "Prepared: there is nothing to abort",
                producer_id=description.producer_id,
                producer_epoch=description.producer_epoch,
            )
        handle = PreparedTransaction(
            transactional_id,
            description.producer_id,
            description.producer_epoch,
            description.partitions,
        )
        self.abort_transactions([handle])


def _handles(transactions: Sequence[PreparedTransaction]) -> list[PreparedTransaction]:
    if isinstance(transactions, PreparedTransaction):
        raise UsageError("complete_prepared_transactions() takes a list of handles")
    handles = list(transactions)
    for handle in handles:
        if not isinstance(handle, PreparedTransaction):
            raise UsageError(
                "complete_prepared_transactions() takes PreparedTransaction handles (from "
                f"Producer.prepare_transaction()), not {type(handle).__name__}"
            )
    return handles


def _refs(handles: Sequence[PreparedTransaction]) -> list[PreparedTxnRef]:
    return [
        PreparedTxnRef(h.transactional_id, h.producer_id, h.producer_epoch)
        for h in _handles(handles)
    ]


def _check_states(states: Iterable[str]) -> list[str]:
    if isinstance(states, str):
        states = [states]
    by_lower = {s.lower(): s for s in TXN_STATES}
    out = []
    for state in states:
        name = by_lower.get(str(state).lower())
        if name is None:
            raise UsageError(
                f"unknown transaction state {state!r}; use one of {', '.join(TXN_STATES)}"
            )
        out.append(name)
    return out


def _description(state: TransactionState, node: int) -> TransactionDescription:
    return TransactionDescription(
        transactional_id=state.transactional_id,
        state=state.state,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        transaction_timeout_ms=state.transaction_timeout_ms,
        transaction_start_time_ms=state.transaction_start_time_ms,
        prepared_time_ms=state.prepared_time_ms,
        partitions=tuple(
            sorted(TopicPartition(t.name, p) for t in state.topics for p in t.partitions)
        ),
        coordinator_id=node,
    )
