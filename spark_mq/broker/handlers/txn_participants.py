"""Two-phase decisions across transaction coordinators: the decider's side of
CommitPreparedTxns / AbortTxns (:func:`decide_two_phase`), and the inter-broker requests a
decider and its participants send each other: CheckPreparedTxns (1010), DecideTxns (1011)
and QueryTxnDecisions (1012). The semantics are in :mod:`spark_mq.broker.txn.participants`
and docs/cluster.md; only brokers may send the three (inter-broker APIs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final, Protocol, TypeVar

from spark_mq import crash_points
from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import error_of
from spark_mq.broker.txn import participants, two_phase
from spark_mq.broker.txn.coordinator import TransactionCoordinator
from spark_mq.broker.txn.service import TransactionService
from spark_mq.broker.txn.two_phase import NO_REMOTE, CompletionOutcome, RemoteVotes
from spark_mq.errors import SparkMQError
from spark_mq.protocol.transactions import AbortTxnsRequest, CommitPreparedTxnsRequest
from spark_mq.protocol.txn_participants import (
    CheckedTxn,
    CheckPreparedTxnsRequest,
    CheckPreparedTxnsResponse,
    DecideTxnsRequest,
    DecideTxnsResponse,
    DecideTxnsResult,
    QueryTxnDecisionsRequest,
    QueryTxnDecisionsResponse,
)

#: How long CommitPreparedTxns / AbortTxns wait for the first delivery to the participants
#: before answering (the delivery goes on after: the decision is durable already).
FIRST_DELIVERY_WAIT_S: Final = 5.0

#: What a client that sends one of the inter-broker requests is told instead.
TWO_PHASE_HINT: Final = (
    "Commit or abort prepared transactions with CommitPreparedTxns / AbortTxns "
    "(Admin.txn_owner(...).commit / .abort) at the owner's transaction coordinator; it asks "
    "the other coordinators itself."
)

Request = CommitPreparedTxnsRequest | AbortTxnsRequest
Decider = Callable[[TransactionCoordinator, int], CompletionOutcome]


def decider_key(request: Request) -> str:
    """The key of the decision's coordinator, as the client finds it: the owner, else the
    first named transaction, else the scope's prefix."""
    if request.owner is not None:
        return request.owner.owner
    if request.transactions:
        return request.transactions[0].transactional_id
    return request.scope.prefix if request.scope is not None else ""


async def decide_two_phase(
    txns: TransactionService,
    request: Request,
    run: Callable[[list[str], Decider], Awaitable[CompletionOutcome]],
) -> CompletionOutcome:
    """CommitPreparedTxns or AbortTxns at the decider: the votes of the named transactions
    other coordinators coordinate (and of the scope's leftovers there), then the decision
    (one record, with its delivery record), then the delivery."""
    commit = isinstance(request, CommitPreparedTxnsRequest)
    key = decider_key(request)
    peers = txns.peers
    remote = NO_REMOTE
    local = [key, *(r.transactional_id for r in request.transactions)]
    if peers is not None:
        coordinator = await txns.coordinator_for(key)
        tag = request.owner if isinstance(request, CommitPreparedTxnsRequest) else None
        replay = tag is not None and tag.sequence <= coordinator.owners.last_sequence(tag.owner)
        scope = request.scope.prefix if request.scope is not None else None
        if scope is not None or any(peers.remote(r.transactional_id) for r in request.transactions):
            remote = await peers.votes(
                request.transactions, commit=commit and not replay, scope_prefix=scope
            )
            local = [
                key,
                *(
                    r.transactional_id
                    for r in request.transactions
                    if not remote.named(r.transactional_id)
                ),
            ]
    decided = _decider(request, remote, key)
    outcome = await run(local, decided)
    if outcome.delivery is not None and peers is not None:
        crash_points.reach("txn.before_delivery", key)
        task = peers.deliver(*outcome.delivery)
        if task is not None:
            await asyncio.wait({task}, timeout=FIRST_DELIVERY_WAIT_S)
    return outcome


def _decider(request: Request, remote: RemoteVotes, key: str) -> Decider:
    if isinstance(request, CommitPreparedTxnsRequest):
        return lambda c, now: two_phase.commit(c, request, now, remote, decider_key=key)
    return lambda c, now: two_phase.abort(c, request, now, remote, decider_key=key)


class _HasTransactionalId(Protocol):
    @property
    def transactional_id(self) -> str: ...


_Named = TypeVar("_Named", bound=_HasTransactionalId)


def _coordinated_here(
    txns: TransactionService, items: list[_Named], verb: str
) -> tuple[list[_Named], dict[str, tuple[int, str | None]]]:
    """Split a participant request's ``items`` into those whose transactional id this broker
    coordinates now and, by id, the error code and message of each it does not (a moved
    coordinator: the decider asks the new one)."""
    mine: list[_Named] = []
    refused: dict[str, tuple[int, str | None]] = {}
    for item in items:
        try:
            txns.placement.check(item.transactional_id)
            mine.append(item)
        except SparkMQError as exc:
            refused[item.transactional_id] = error_of(exc, f"{verb} {item.transactional_id!r}")
    return mine, refused


async def handle_check_prepared_txns(
    ctx: RequestContext, request: CheckPreparedTxnsRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    coordinator = await txns.ready()
    mine, refusals = _coordinated_here(txns, request.transactions, "check")
    refused = {tid: CheckedTxn(tid, code, message) for tid, (code, message) in refusals.items()}
    answer = participants.check(
        coordinator,
        CheckPreparedTxnsRequest(mine, request.commit, request.scope_prefix),
        txns.now_ms(),
    )
    by_id = {r.transactional_id: r for r in answer.results} | refused
    results = [by_id[r.transactional_id] for r in request.transactions]
    return Response(CheckPreparedTxnsResponse(0, results, answer.scope_open))


async def handle_decide_txns(
    ctx: RequestContext, request: DecideTxnsRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    coordinator = await txns.ready()
    mine, refusals = _coordinated_here(txns, request.transactions, "decide")
    results = {
        tid: DecideTxnsResult(tid, code, message) for tid, (code, message) in refusals.items()
    }
    keys = [t.transactional_id for t in mine]
    try:
        done = participants.decide(
            coordinator, DecideTxnsRequest(request.decision, mine), txns.now_ms()
        )
    finally:
        # Acknowledged only once the participant's own decision is on its in-sync
        # replicas: from then on its coordinator, wherever it moves, completes it.
        await txns.settle(keys)
    results.update({r.transactional_id: r for r in done})
    return Response(
        DecideTxnsResponse(0, [results[t.transactional_id] for t in request.transactions])
    )


async def handle_query_txn_decisions(
    ctx: RequestContext, request: QueryTxnDecisionsRequest, _: memoryview
) -> Response:
    txns = ctx.core.transactions
    coordinator = await txns.ready()
    peers = txns.peers
    loaded = peers.loaded() if peers is not None else []
    answer: QueryTxnDecisionsResponse = participants.answer_query(
        coordinator, request, txns.now_ms(), loaded
    )
    return Response(answer)
