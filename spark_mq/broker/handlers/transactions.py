"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66),
PrepareTxn (1000), CommitPreparedTxns (1001), DescribeTxnOwner (1002), OwnerHeartbeat (1003)
and AbortTxns (1004).

Thin: each handler waits for the transaction coordinator to be ready (``__transaction_state``
loaded, recovered and created), calls it with the time and wraps the answer; the semantics
are in :mod:`spark_mq.broker.txn` and docs/transactions.md. In a cluster a request for a
transactional id (or two-phase owner) whose ``__transaction_state`` partition this broker
does not lead is answered NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it loads), and
a request is answered once what it wrote is on every in-sync replica (:func:`_run`); a
two-phase decision is the owner's coordinator's, which asks the others for the transactions
it does not coordinate (:mod:`~spark_mq.broker.handlers.txn_participants`).

TxnOffsetCommit is the group coordinator's request: it checks the transaction with the
(local) transaction coordinator (Ongoing, the group's ``__consumer_offsets`` partition added
with AddOffsetsToTxn, same producer id and epoch), then the group as OffsetCommit does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.group.offsets import OffsetCommit
from spark_mq.broker.group.rebalance import validate_group_id
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.handlers.txn_participants import decide_two_phase
from spark_mq.broker.internal_topics import OFFSETS_TOPIC, check_not_internal
from spark_mq.broker.txn import two_phase
from spark_mq.broker.txn.coordinator import TransactionCoordinator
from spark_mq.broker.txn.service import TransactionService
from spark_mq.broker.txn.state import TopicPartition, TxnMetadata
from spark_mq.errors import SparkMQError
from spark_mq.protocol.transactions import (
    AbortTxnsRequest,
    AbortTxnsResponse,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    CommitPreparedTxnsRequest,
    CommitPreparedTxnsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    OwnerHeartbeatRequest,
    OwnerHeartbeatResponse,
    OwnerSequenceRequest,
    OwnerSequenceResponse,
    PreparedTxnResult,
    PrepareTxnRequest,
    PrepareTxnResponse,
    TransactionState,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnPartitionResult,
    TxnTopic,
    TxnTopicResult,
    WritableTxnMarkerResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

Results = dict[TopicPartition, tuple[int, str | None]]
T = TypeVar("T")


async def _run(
    txns: TransactionService,
    keys: Sequence[str],
    fn: Callable[[TransactionCoordinator, int], T],
    *,
    every: bool = False,
) -> T:
    """``fn(coordinator, now)`` for a request about ``keys`` (transactional ids, owners),
    answered once its state records are replicated: in a cluster, NOT_COORDINATOR unless
    this broker coordinates every key. A request that failed after writing (an abort left
    completing) waits too, so that the client's retry finds it complete. ``every``: the
    request may have decided transactions it does not name (a two-phase scope's others)."""
    coordinator = await txns.coordinator_for(*keys)
    try:
        result = fn(coordinator, txns.now_ms())
    except BaseException:
        await txns.settle(keys, every=every)
        raise
    await txns.settle(keys, every=every)
    return result


def _topic_results(order: Iterable[TopicPartition], results: Results) -> list[TxnTopicResult]:
    by_topic: dict[str, list[TxnPartitionResult]] = {}
    for topic, partition in order:
        code, message = results.get((topic, partition), (0, None))
        by_topic.setdefault(topic, []).append(TxnPartitionResult(partition, code, message))
    return [TxnTopicResult(name, parts) for name, parts in by_topic.items()]


def _topics(txn: TxnMetadata) -> list[TxnTopic]:
    return [TxnTopic(name, parts) for name, parts in txn.topics().items()]


def _state(txn: TxnMetadata) -> TransactionState:
    return TransactionState(
        txn.transactional_id,
        txn.state.value,
        txn.producer_id,
        txn.producer_epoch,
        txn.timeout_ms,
        txn.txn_start_ms,
        _topics(txn),
        txn.prepared_ms,
    )


def _code_of(error: Exception | None, what: str) -> tuple[int, str | None]:
    return (0, None) if error is None else error_of(error, what)


def _existing(ctx: RequestContext, pairs: Iterable[TopicPartition], what: str) -> Results:
    """The errors of partitions that do not exist (or may not be written by clients). A
    cluster broker asks its metadata cache for the partitions it does not host (the
    coordinator of a transaction is often no replica of its partitions)."""
    errors: Results = {}
    snapshot = ctx.core.metadata_cache.snapshot if ctx.core.membership is not None else None
    for topic, partition in pairs:
        try:
            if snapshot is None or partition not in snapshot.partitions(topic):
                ctx.core.logs.get_log(topic, partition)
            if what == "add":
                check_not_internal(topic, "add to a transaction the")
        except TYPED_ERRORS as exc:
            errors[(topic, partition)] = error_of(exc, f"{what} {topic}-{partition}")
    return errors


# ---------------------------------------------------------------------------------------------
# AddPartitionsToTxn, AddOffsetsToTxn, EndTxn


async def handle_add_partitions_to_txn(
    ctx: RequestContext, request: AddPartitionsToTxnRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    order = [(t.name, p) for t in request.topics for p in t.partitions]
    results = _existing(ctx, order, "add")
    valid = [tp for tp in order if tp not in results]
    if valid:
        try:
            await _run(
                txns,
                [request.transactional_id],
                lambda c, now: c.add_partitions(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    valid,
                    now,
                ),
            )
        except TYPED_ERRORS as exc:
            # The partitions that do not exist keep their own error.
            failure = error_of(exc, f"add partitions to {request.transactional_id!r}")
            results.update(dict.fromkeys(valid, failure))
    return Response(AddPartitionsToTxnResponse(_topic_results(order, results)))


async def handle_add_offsets_to_txn(
    ctx: RequestContext, request: AddOffsetsToTxnRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    validate_group_id(request.group_id)
    await ctx.core.groups.ready()
    partition = ctx.core.groups.partition_for(request.group_id)
    await _run(
        txns,
        [request.transactional_id],
        lambda c, now: c.add_partitions(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            [(OFFSETS_TOPIC, partition)],
            now,
        ),
    )
    return Response(AddOffsetsToTxnResponse(0))


async def handle_end_txn(ctx: RequestContext, request: EndTxnRequest, _: memoryview) -> Response:
    txns = ctx.core.transactions
    await _run(
        txns,
        [request.transactional_id],
        lambda c, now: c.end_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            now,
        ),
    )
    return Response(EndTxnResponse(0))


# ---------------------------------------------------------------------------------------------
# WriteTxnMarkers


def refuse_write_txn_markers(
    request: WriteTxnMarkersRequest, code: int, message: str
) -> WriteTxnMarkersResponse:
    """The response with ``code`` and ``message`` for every partition of the request."""
    out = []
    for m in request.markers:
        order = [(t.name, p) for t in m.topics for p in t.partitions]
        failed: Results = dict.fromkeys(order, (code, message))
        out.append(WritableTxnMarkerResult(m.producer_id, _topic_results(order, failed)))
    return WriteTxnMarkersResponse(out)


async def handle_write_txn_markers(
    ctx: RequestContext, request: WriteTxnMarkersRequest, _: memoryview
) -> Response:
    """Write the markers another broker's transaction coordinator asks for, to the partitions
    this broker leads (NOT_LEADER_OR_FOLLOWER for the others: the coordinator's channel asks
    their leader). Only brokers may (an inter-broker API):
    :mod:`~spark_mq.broker.handlers.inter_broker` answers a client's request before it gets
    here. As Kafka appends markers with acks=all, the answer waits until the partition's
    in-sync replicas have each marker (REQUEST_TIMED_OUT after the timeout: the sender
    retries, and the rewrite is skipped as already written), so a marker acknowledged to the
    coordinator survives the loss of this leader."""
    markers = ctx.core.transactions.markers
    answers: list[tuple[int, list[TopicPartition], Results]] = []
    # Markers for __consumer_offsets publish pending offsets: the groups must be loaded.
    await ctx.core.groups.loaded()
    written: list[tuple[TopicPartition, Results]] = []
    for m in request.markers:
        order = [(t.name, p) for t in m.topics for p in t.partitions]
        results = _existing(ctx, order, "write a marker to")
        failed = markers.write_local(
            [tp for tp in order if tp not in results],
            producer_id=m.producer_id,
            producer_epoch=m.producer_epoch,
            commit=m.transaction_result,
            coordinator_epoch=m.coordinator_epoch,
        )
        for tp, problem in failed.items():
            results[tp] = error_of(problem, f"write a marker to {tp[0]}-{tp[1]}")
        written.extend((tp, results) for tp in order if tp not in results)
        answers.append((m.producer_id, order, results))
    if ctx.core.membership is not None and written:
        await _wait_for_in_sync_replicas(ctx, written)
    return Response(
        WriteTxnMarkersResponse(
            [
                WritableTxnMarkerResult(producer_id, _topic_results(order, results))
                for producer_id, order, results in answers
            ]
        )
    )


#: How long a WriteTxnMarkers answer waits for the in-sync replicas (the sender's request
#: timeout is longer, so that it gets the answer rather than a dropped connection).
MARKER_REPLICATION_TIMEOUT_S = 10.0


async def _wait_for_in_sync_replicas(
    ctx: RequestContext, written: list[tuple[TopicPartition, Results]]
) -> None:
    """Wait until each written partition's high watermark passes its log end as it is now
    (past the marker just written, or the one written before); a partition that does not
    get there in time fails with the purgatory's error (retriable), in its own result."""
    replicas = ctx.core.replicas
    ends: dict[TopicPartition, int] = {}
    for tp, _ in written:
        part = replicas.cached(*tp)
        if part is not None:
            ends[tp] = part.log_end_offset

    async def wait(tp: TopicPartition, results: Results) -> None:
        part = replicas.cached(*tp)
        end = ends.get(tp)
        if part is None or end is None or part.high_watermark >= end:
            return
        try:
            await replicas.purgatory.wait(tp, end, MARKER_REPLICATION_TIMEOUT_S)
        except TYPED_ERRORS as exc:
            results[tp] = error_of(exc, f"replicate the marker of {tp[0]}-{tp[1]}")

    await asyncio.gather(*(wait(tp, results) for tp, results in written))


# ---------------------------------------------------------------------------------------------
# TxnOffsetCommit (the group coordinator's side)


async def handle_txn_offset_commit(
    ctx: RequestContext, request: TxnOffsetCommitRequest, _: memoryview
) -> Response:
    core = ctx.core
    groups = core.groups
    order = [(t.name, p.partition) for t in request.topics for p in t.partitions]
    results = _existing(ctx, order, "commit the offset of")
    commits = [
        OffsetCommit(
            t.name, p.partition, p.committed_offset, p.committed_leader_epoch, p.committed_metadata
        )
        for t in request.topics
        for p in t.partitions
        if (t.name, p.partition) not in results
    ]
    what = f"commit transactional offsets of group {request.group_id!r}"
    if not commits:
        return Response(TxnOffsetCommitResponse(_topic_results(order, results)))
    try:
        validate_group_id(request.group_id)
        await groups.ready()
        txn_coordinator = await core.transactions.loaded()
        # In a cluster only the id's own coordinator can check it (another broker's
        # transaction state is not here, as in Kafka before KIP-890).
        if core.transactions.coordinates(request.transactional_id):
            txn_coordinator.check_write(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                (OFFSETS_TOPIC, groups.partition_for(request.group_id)),
            )
        errors: list[SparkMQError | None] = groups.call(
            lambda c, now: c.offsets.commit_transactional(
                request.group_id,
                commits,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                generation_id=request.generation_id,
                member_id=request.member_id,
                group_instance_id=request.group_instance_id,
                now_ms=now,
            )
        )
    except TYPED_ERRORS as exc:
        # The partitions that do not exist keep their own error.
        failure = error_of(exc, what)
        for c in commits:
            results[(c.topic, c.partition)] = failure
    else:
        for c, error in zip(commits, errors, strict=True):
            if error is not None:
                results[(c.topic, c.partition)] = error_of(error, what)
    return Response(TxnOffsetCommitResponse(_topic_results(order, results)))


# ---------------------------------------------------------------------------------------------
# DescribeTransactions, ListTransactions


async def handle_describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    out = []
    for tid in request.transactional_ids:
        try:
            # Per id, as Kafka: NOT_COORDINATOR for an id another broker coordinates.
            coordinator = await txns.coordinator_for(tid)
            out.append(_state(coordinator.describe(tid)))
        except TYPED_ERRORS as exc:
            code, message = error_of(exc, f"describe {tid!r}")
            out.append(
                TransactionState(
                    tid, "", -1, -1, -1, -1, [], error_code=code, error_message=message
                )
            )
    return Response(DescribeTransactionsResponse(out))


async def handle_list_transactions(
    ctx: RequestContext, request: ListTransactionsRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    coordinator = await txns.ready()
    found = coordinator.list(
        states=request.state_filters,
        producer_ids=request.producer_id_filters,
        duration_ms=request.duration_filter_ms,
        prefix=request.transactional_id_prefix,
        now_ms=txns.now_ms(),
    )
    return Response(ListTransactionsResponse(0, [_state(t) for t in found]))


# ---------------------------------------------------------------------------------------------
# Two-phase commit: PrepareTxn, CommitPreparedTxns, AbortTxns, DescribeTxnOwner. Each request
# succeeds or fails whole: what they raise is answered by the dispatcher (errors.answer).


async def handle_prepare_txn(
    ctx: RequestContext, request: PrepareTxnRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    partitions = await _run(
        txns,
        [request.transactional_id],
        lambda c, now: two_phase.prepare(
            c,
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            now,
            owner_prefix=request.owner_prefix,
        ),
    )
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return Response(PrepareTxnResponse(0, [TxnTopic(n, ps) for n, ps in by_topic.items()]))


def _results(
    outcome: two_phase.CompletionOutcome, what: str
) -> tuple[list[PreparedTxnResult], int, str | None]:
    results = [
        PreparedTxnResult(tid, *_code_of(error, f"{what}: {tid!r}"))
        for tid, error in outcome.results
    ]
    return (results, *_code_of(outcome.first_error, what))


async def handle_commit_prepared_txns(
    ctx: RequestContext, request: CommitPreparedTxnsRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    what = "commit prepared transactions"
    outcome = await decide_two_phase(
        txns, request, lambda keys, fn: _run(txns, keys, fn, every=True)
    )
    results, code, message = _results(outcome, what)
    return Response(
        CommitPreparedTxnsResponse(
            code,
            results,
            already_committed=outcome.already_committed,
            last_sequence=outcome.last_sequence,
            aborted_others=outcome.aborted_others,
            error_message=message,
        )
    )


async def handle_abort_txns(
    ctx: RequestContext, request: AbortTxnsRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    what = "abort transactions"
    outcome = await decide_two_phase(
        txns, request, lambda keys, fn: _run(txns, keys, fn, every=True)
    )
    results, code, message = _results(outcome, what)
    return Response(
        AbortTxnsResponse(
            code,
            results,
            last_sequence=outcome.last_sequence,
            aborted_others=outcome.aborted_others,
            error_message=message,
        )
    )


async def handle_describe_txn_owner(
    ctx: RequestContext, request: OwnerSequenceRequest, _: memoryview
) -> Response:
    coordinator = await ctx.core.transactions.coordinator_for(request.owner)
    sequence = two_phase.last_sequence(coordinator, request.owner)
    return Response(OwnerSequenceResponse(0, sequence))


async def handle_owner_heartbeat(
    ctx: RequestContext, request: OwnerHeartbeatRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    # The owner prefix's coordinator: the ids under it need not all be there, but a
    # heartbeat must reach one broker that knows it, and clients look it up as an id.
    coordinator = await txns.coordinator_for(request.owner_prefix)
    coordinator.owner_heartbeat(request.owner_prefix, txns.now_ms())
    return Response(OwnerHeartbeatResponse(0))
