"""Two-phase decisions across transaction coordinators: the requests a two-phase owner's
coordinator (the *decider*) sends to the coordinators of the transactions it decides (the
*participants*). spark_mq's own inter-broker APIs (docs/protocol.md):

- **CheckPreparedTxns (1010)**: the vote. Is each named transaction Prepared (``commit``) or
  Ongoing/Prepared (an abort) with this producer id and epoch, and which transaction number
  is it; with ``scope_prefix``, which other open transactions under the prefix does the
  participant coordinate (the scope's leftovers, aborted by the same decision). A
  transaction that voted for a commit is held: the participant does not abort it on its
  own (a quiet owner, a new incarnation) for 30 s, or until the decision arrives.
- **DecideTxns (1011)**: the decision, once the decider's decision record is durable. The
  participant records it for each named transaction (PrepareCommit / PrepareAbort, then
  markers) and answers once that record is on every in-sync replica; a transaction already
  decided the same way, or since completed and moved on, answers NONE, so a re-sent
  decision is a no-op.
- **QueryTxnDecisions (1012)**: the termination protocol. A participant whose Prepared
  transaction's owner has been quiet asks every broker whether a decision it holds names
  the transaction, or whether the owner prefix was active there; see the broker's
  ``participants`` module.

Only brokers may send them (inter-broker APIs: a client gets CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import msgspec

from spark_mq.protocol.transactions import PreparedTxnRef


class CheckPreparedTxnsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    transactions: list[PreparedTxnRef]
    commit: bool
    scope_prefix: str | None = None


class CheckedTxn(msgspec.Struct, array_like=True):
    """One transaction's vote: NONE with its transaction number (``txn_number`` -1 with
    NONE: an abort that is already done, nothing to decide), or why not."""

    transactional_id: str
    error_code: int
    error_message: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    txn_number: int = -1


class CheckPreparedTxnsResponse(msgspec.Struct, array_like=True):
    error_code: int
    results: list[CheckedTxn] = []
    #: The scope's open transactions this participant coordinates (error_code NONE).
    scope_open: list[CheckedTxn] = []
    error_message: str | None = None


class DecidedTxn(msgspec.Struct, array_like=True):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_number: int
    commit: bool


class DecideTxnsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    #: The decision's key at the decider (the owner, or the decision id), for the logs.
    decision: str
    transactions: list[DecidedTxn]


class DecideTxnsResult(msgspec.Struct, array_like=True):
    transactional_id: str
    error_code: int
    error_message: str | None = None


class DecideTxnsResponse(msgspec.Struct, array_like=True):
    error_code: int
    results: list[DecideTxnsResult] = []
    error_message: str | None = None


class QueriedTxn(msgspec.Struct, array_like=True):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_number: int
    owner_prefix: str
    #: The transaction's timeout: the window of owner activity that counts.
    timeout_ms: int


class QueryTxnDecisionsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    transactions: list[QueriedTxn]


class QueryAnswer(msgspec.Struct, array_like=True):
    """What the answering broker knows of one transaction: ``decision`` 1 commit, 0 abort,
    -1 none; ``owner_active``: its owner prefix was active there within the timeout."""

    transactional_id: str
    decision: int = -1
    owner_active: bool = False


class QueryTxnDecisionsResponse(msgspec.Struct, array_like=True):
    error_code: int
    #: The __transaction_state partitions this broker has loaded: its answers cover them.
    loaded_partitions: list[int] = []
    answers: list[QueryAnswer] = []
    error_message: str | None = None


def check_prepared_txns_error(
    _: CheckPreparedTxnsRequest, code: int, message: str
) -> CheckPreparedTxnsResponse:
    return CheckPreparedTxnsResponse(code, error_message=message)


def decide_txns_error(request: DecideTxnsRequest, code: int, message: str) -> DecideTxnsResponse:
    return DecideTxnsResponse(
        code,
        [DecideTxnsResult(t.transactional_id, code, message) for t in request.transactions],
        error_message=message,
    )


def query_txn_decisions_error(
    _: QueryTxnDecisionsRequest, code: int, message: str
) -> QueryTxnDecisionsResponse:
    return QueryTxnDecisionsResponse(code, error_message=message)
