"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66),
and spark_mq's two-phase commit for an external coordinator: PrepareTxn (1000),
CommitPreparedTxns (1001), DescribeTxnOwner (1002), OwnerHeartbeat (1003) and AbortTxns
(1004), in the spirit of Kafka's KIP-939.

A transactional producer finds its transaction coordinator with FindCoordinator
(``key_type`` 1), gets its producer id and a bumped epoch from InitProducerId with
``transactional_id`` set (fencing every older incarnation), registers each partition with
AddPartitionsToTxn before its first transactional batch to it, registers a consumer group
with AddOffsetsToTxn before TxnOffsetCommit, and ends the transaction with EndTxn. The
coordinator records its decision (PrepareCommit / PrepareAbort) in ``__transaction_state``
before writing a marker to every partition of the transaction (docs/transactions.md).

Two-phase commit: PrepareTxn flushes nothing by itself (the producer flushes first); it moves
an Ongoing transaction to Prepared, where the ordinary ``transaction.timeout.ms`` no longer
aborts it (``transaction.prepared.max.timeout.ms`` does, and, when the prepare named an owner
prefix, a quiet owner: see PrepareTxnRequest and OwnerHeartbeat). CommitPreparedTxns commits
a list of prepared transactions as one decision, tagged with ``(owner, sequence)``; the
decision and the tag are one durable append. A commit whose ``sequence`` is not above the last
one recorded for ``owner`` aborts the transactions it names instead and answers
``already_committed`` True, so a replayed decision never doubles output. AbortTxns aborts
transactions, and what an owner's scope left behind, as one decision. Each request type
checks itself (``problem()``): one type per intent, so no combination of flags needs a rule.
"""

from __future__ import annotations

import msgspec

#: Transaction states as ListTransactions / DescribeTransactions report them (Kafka's names).
TXN_STATES = (
    "Empty",
    "Ongoing",
    "Prepared",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


class TxnTopic(msgspec.Struct, array_like=True):
    """A topic and some of its partitions."""

    name: str
    partitions: list[int]


class TxnPartitionResult(msgspec.Struct, array_like=True):
    partition: int
    error_code: int
    error_message: str | None = None


class TxnTopicResult(msgspec.Struct, array_like=True):
    name: str
    partitions: list[TxnPartitionResult]


# -- AddPartitionsToTxn (24) -----------------------------------------------------------------


class AddPartitionsToTxnRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    topics: list[TxnTopic]


class AddPartitionsToTxnResponse(msgspec.Struct, array_like=True):
    """Per partition: 0, or the reason (UNKNOWN_TOPIC_OR_PARTITION, PRODUCER_FENCED,
    CONCURRENT_TRANSACTIONS while the previous transaction completes, INVALID_TXN_STATE)."""

    results: list[TxnTopicResult]
    throttle_time_ms: int = 0


# -- AddOffsetsToTxn (25) --------------------------------------------------------------------


class AddOffsetsToTxnRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Adds the ``__consumer_offsets`` partition of ``group_id`` to the transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


class AddOffsetsToTxnResponse(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None
    throttle_time_ms: int = 0


# -- EndTxn (26) -----------------------------------------------------------------------------


class EndTxnRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``committed`` True commits, False aborts. Returns once the decision is durable; the
    markers are written after it (a client that reads its own writes with read_committed
    may see them a moment later, as in Kafka)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


class EndTxnResponse(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None
    throttle_time_ms: int = 0


# -- WriteTxnMarkers (27) ---------------------------------------------------------------------


class WritableTxnMarker(msgspec.Struct, array_like=True):
    producer_id: int
    producer_epoch: int
    transaction_result: bool  # True: commit, False: abort
    topics: list[TxnTopic]
    coordinator_epoch: int


class WriteTxnMarkersRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Coordinator to partition leader (inter-broker); a single broker writes its own
    markers without this request."""

    markers: list[WritableTxnMarker]


class WritableTxnMarkerResult(msgspec.Struct, array_like=True):
    producer_id: int
    topics: list[TxnTopicResult]


class WriteTxnMarkersResponse(msgspec.Struct, array_like=True):
    markers: list[WritableTxnMarkerResult]


# -- TxnOffsetCommit (28) ---------------------------------------------------------------------


class TxnOffsetCommitPartition(msgspec.Struct, array_like=True):
    """``committed_offset`` is the next offset to consume."""

    partition: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = None


class TxnOffsetCommitTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[TxnOffsetCommitPartition]


class TxnOffsetCommitRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Sent to the group coordinator. ``generation_id`` / ``member_id`` fence a consumer that
    lost its partitions (KIP-447); -1 / "" skip that check."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: list[TxnOffsetCommitTopic]
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TxnOffsetCommitResponse(msgspec.Struct, array_like=True):
    topics: list[TxnTopicResult]
    throttle_time_ms: int = 0


# -- DescribeTransactions (65) / ListTransactions (66) ---------------------------------------


class TransactionState(msgspec.Struct, array_like=True):
    """What the coordinator knows of one transactional id. ``transaction_start_time_ms`` is
    -1 when no transaction is open; ``prepared_time_ms`` is -1 unless Prepared."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    topics: list[TxnTopic]
    prepared_time_ms: int = -1
    error_code: int = 0
    error_message: str | None = None


class DescribeTransactionsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    transactional_ids: list[str]


class DescribeTransactionsResponse(msgspec.Struct, array_like=True):
    """One entry per requested id; an unknown id has ``error_code``
    TRANSACTIONAL_ID_NOT_FOUND."""

    transaction_states: list[TransactionState]
    throttle_time_ms: int = 0


class ListTransactionsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Filters (empty: all). ``duration_filter_ms`` >= 0 keeps only transactions open for
    longer than that (Kafka's KIP-994), to find hanging ones."""

    state_filters: list[str] = []
    producer_id_filters: list[int] = []
    duration_filter_ms: int = -1
    transactional_id_prefix: str | None = None


class ListTransactionsResponse(msgspec.Struct, array_like=True):
    error_code: int
    transaction_states: list[TransactionState] = []
    error_message: str | None = None
    throttle_time_ms: int = 0


# -- PrepareTxn (1000), CommitPreparedTxns (1001), AbortTxns (1004): two-phase commit ---------


class PrepareTxnRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Ongoing -> Prepared. The producer has flushed every batch of the transaction.

    ``owner_prefix``, when set, is a prefix of ``transactional_id`` shared by every
    transaction the same decision will complete (a Spark job's or micro-batch's tasks). While
    the transaction is Prepared, the coordinator also aborts it once its owner has been quiet
    for its ``transaction.timeout.ms``: no client request for an id under the prefix and no
    OwnerHeartbeat for it. The owner's tasks are then all done and its decision is overdue,
    so its decider is presumed gone."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    owner_prefix: str | None = None


def owner_prefix_problem(owner_prefix: str | None, transactional_id: str) -> str | None:
    """Why ``owner_prefix`` cannot be the owner prefix of ``transactional_id`` in a
    PrepareTxn (None when it can, or is unset): it must be a non-empty, strict prefix."""
    if owner_prefix is None or (
        owner_prefix
        and transactional_id.startswith(owner_prefix)
        and len(owner_prefix) < len(transactional_id)
    ):
        return None
    return (
        f"owner_prefix {owner_prefix!r} must be a non-empty, strict prefix of the "
        f"transactional id {transactional_id!r}"
    )


class PrepareTxnResponse(msgspec.Struct, array_like=True):
    """``topics`` lists the partitions the coordinator holds for the transaction (the
    handle's partitions)."""

    error_code: int
    topics: list[TxnTopic] = []
    error_message: str | None = None
    throttle_time_ms: int = 0


class PreparedTxnRef(msgspec.Struct, array_like=True):
    """One prepared transaction, as its handle names it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class TxnOwnerScope(msgspec.Struct, array_like=True):
    """The transactional ids a two-phase owner writes under: every id that starts with
    ``prefix``. A decision with a scope also aborts every Ongoing or Prepared transaction of
    the scope it does not name (what earlier attempts left behind); ``close`` also closes the
    scope for good, so that no transaction under it can begin, grow or be prepared again."""

    prefix: str
    close: bool = False

    def problem(self) -> str | None:
        return None if self.prefix else "a scope needs a non-empty transactional id prefix"


class TxnCommitOwner(msgspec.Struct, array_like=True):
    """Who commits: the owner, its ``sequence`` (>= 0, increasing per owner: a sequence at or
    below the owner's last one is a replay) and which instance of the owner decides (nil:
    unchecked)."""

    owner: str
    sequence: int
    instance: str | None = None

    def problem(self) -> str | None:
        if not self.owner:
            return "the owner must be a non-empty string"
        if self.sequence < 0:
            return f"a commit of owner {self.owner!r} needs a sequence >= 0, got {self.sequence}"
        return _instance_problem(self.owner, self.instance)


class TxnAbortOwner(msgspec.Struct, array_like=True):
    """On whose behalf an abort decides: the owner, and which instance of it (nil:
    unchecked)."""

    owner: str
    instance: str | None = None

    def problem(self) -> str | None:
        if not self.owner:
            return "the owner must be a non-empty string"
        return _instance_problem(self.owner, self.instance)


def _instance_problem(owner: str, instance: str | None) -> str | None:
    if instance is not None and not instance:
        return f"the instance of owner {owner!r} must be a non-empty string, or unset"
    return None


def _decision_problem(
    refs: list[PreparedTxnRef],
    owner: TxnCommitOwner | TxnAbortOwner | None,
    scope: TxnOwnerScope | None,
) -> str | None:
    names = [r.transactional_id for r in refs]
    if len(set(names)) != len(names):
        return "a transactional id is named twice in one decision"
    for part in (owner, scope):
        problem = None if part is None else part.problem()
        if problem is not None:
            return problem
    if scope is not None and scope.close and owner is None:
        return (
            f"closing the scope {scope.prefix!r} needs an owner: the owner's record is what "
            "keeps the scope closed"
        )
    return None


class CommitPreparedTxnsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Commit every transaction in ``transactions`` as one decision (all or nothing: if any
    is not Prepared with exactly the given producer id and epoch, nothing is committed and
    the per-transaction results say why). ``owner`` tags the commit with the owner's
    sequence (the decision and the tag are one durable append; a replayed sequence aborts
    the transactions instead and answers ``already_committed``) and binds the owner to its
    instance on the first commit naming one. ``scope`` aborts the rest of the owner's
    scope in the same decision, and closes it when asked (an owner that decides once, such
    as a batch job). :meth:`problem` says what makes the request invalid."""

    transactions: list[PreparedTxnRef]
    owner: TxnCommitOwner | None = None
    scope: TxnOwnerScope | None = None

    def problem(self) -> str | None:
        return _decision_problem(self.transactions, self.owner, self.scope)


class AbortTxnsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Abort every transaction in ``transactions`` (Ongoing or Prepared; one already aborted
    answers 0) and, with ``scope``, every other open transaction of the scope, as one
    decision; ``scope.close`` also closes the scope. ``owner`` names on whose behalf: an
    owner bound to another instance refuses the whole request. :meth:`problem` says what
    makes the request invalid."""

    transactions: list[PreparedTxnRef]
    owner: TxnAbortOwner | None = None
    scope: TxnOwnerScope | None = None

    def problem(self) -> str | None:
        return _decision_problem(self.transactions, self.owner, self.scope)


class PreparedTxnResult(msgspec.Struct, array_like=True):
    transactional_id: str
    error_code: int
    error_message: str | None = None


class CommitPreparedTxnsResponse(msgspec.Struct, array_like=True):
    """``already_committed``: the owner had already recorded the commit's sequence (or a
    later one); the named transactions were aborted instead. ``last_sequence`` is the owner's
    newest recorded sequence after this request (-1: none). ``aborted_others``: the scope's
    other transactions aborted."""

    error_code: int
    results: list[PreparedTxnResult] = []
    already_committed: bool = False
    last_sequence: int = -1
    aborted_others: list[str] = []
    error_message: str | None = None
    throttle_time_ms: int = 0


class AbortTxnsResponse(msgspec.Struct, array_like=True):
    """``last_sequence`` is the owner's newest recorded sequence (-1: none, or no owner).
    ``aborted_others``: the scope's other transactions aborted."""

    error_code: int
    results: list[PreparedTxnResult] = []
    last_sequence: int = -1
    aborted_others: list[str] = []
    error_message: str | None = None
    throttle_time_ms: int = 0


class OwnerSequenceRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """DescribeTxnOwner (1002): the newest sequence recorded for ``owner`` (-1: none)."""

    owner: str


class OwnerSequenceResponse(msgspec.Struct, array_like=True):
    error_code: int
    last_sequence: int = -1
    error_message: str | None = None
    throttle_time_ms: int = 0


class OwnerHeartbeatRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """OwnerHeartbeat (1003): a write task of the owner whose transactional ids start with
    ``owner_prefix`` is still running. A Prepared transaction that named the prefix at
    PrepareTxn is not aborted for a quiet owner while such heartbeats come (see
    PrepareTxnRequest)."""

    owner_prefix: str


class OwnerHeartbeatResponse(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None
    throttle_time_ms: int = 0


# ---------------------------------------------------------------------------------------------
# The answers to requests that failed as a whole: every partition, transaction or the
# response itself with the code.


def _failed_topics(topics: list[TxnTopic], code: int, message: str) -> list[TxnTopicResult]:
    return [
        TxnTopicResult(t.name, [TxnPartitionResult(p, code, message) for p in t.partitions])
        for t in topics
    ]


def add_partitions_to_txn_error(
    request: AddPartitionsToTxnRequest, code: int, message: str
) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(_failed_topics(request.topics, code, message))


def add_offsets_to_txn_error(
    _: AddOffsetsToTxnRequest, code: int, message: str
) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(code, message)


def end_txn_error(_: EndTxnRequest, code: int, message: str) -> EndTxnResponse:
    return EndTxnResponse(code, message)


def write_txn_markers_error(
    request: WriteTxnMarkersRequest, code: int, message: str
) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(
        [
            WritableTxnMarkerResult(m.producer_id, _failed_topics(m.topics, code, message))
            for m in request.markers
        ]
    )


def txn_offset_commit_error(
    request: TxnOffsetCommitRequest, code: int, message: str
) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        [
            TxnTopicResult(
                t.name, [TxnPartitionResult(p.partition, code, message) for p in t.partitions]
            )
            for t in request.topics
        ]
    )


def describe_transactions_error(
    request: DescribeTransactionsRequest, code: int, message: str
) -> DescribeTransactionsResponse:
    return DescribeTransactionsResponse(
        [
            TransactionState(tid, "", -1, -1, -1, -1, [], error_code=code, error_message=message)
            for tid in request.transactional_ids
        ]
    )


def list_transactions_error(
    _: ListTransactionsRequest, code: int, message: str
) -> ListTransactionsResponse:
    return ListTransactionsResponse(code, error_message=message)


def prepare_txn_error(_: PrepareTxnRequest, code: int, message: str) -> PrepareTxnResponse:
    return PrepareTxnResponse(code, error_message=message)


def commit_prepared_txns_error(
    _: CommitPreparedTxnsRequest, code: int, message: str
) -> CommitPreparedTxnsResponse:
    return CommitPreparedTxnsResponse(code, error_message=message)


def abort_txns_error(_: AbortTxnsRequest, code: int, message: str) -> AbortTxnsResponse:
    return AbortTxnsResponse(code, error_message=message)


def owner_sequence_error(_: OwnerSequenceRequest, code: int, message: str) -> OwnerSequenceResponse:
    return OwnerSequenceResponse(code, error_message=message)


def owner_heartbeat_error(
    _: OwnerHeartbeatRequest, code: int, message: str
) -> OwnerHeartbeatResponse:
    return OwnerHeartbeatResponse(code, error_message=message)
