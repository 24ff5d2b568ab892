"""Two-phase decisions that span transaction coordinators (classic two-phase commit, the
owner's coordinator deciding).

In a cluster each transactional id's coordinator is the leader of its
``__transaction_state`` partition, so the prepared transactions of one two-phase decision
(a Spark sink's batch: one transactional id per write task) are spread over coordinators.
The coordinator of the decision's owner (the *decider*, where CommitPreparedTxns and
AbortTxns go) decides them all with one record:

1. **Votes.** For the named transactions it does not coordinate it sends CheckPreparedTxns
   (1010) to their coordinators (the *participants*), concurrently. Each answers, per
   transaction, whether it is Prepared (a commit) or abortable with the handle's producer id
   and epoch, and its transaction number; a transaction that votes for a commit is *held*
   (not aborted there on its own: quiet owner, new incarnation) for :data:`VOTE_HOLD_MS`.
   With a scope, every live broker is asked for the scope's open transactions it
   coordinates, which the decision aborts. A refusal refuses the whole commit (nothing is
   decided, the client is told why per transaction; a retriable one it retries).
2. **The commit point.** The decider writes its decision record (under the owner key, as on
   one node) listing every transaction, its own and the participants', and in the same
   batch a *delivery record* (a decision id on the same partition) holding what the
   participants must still be told. Both are appended acks=all.
3. **Delivery.** DecideTxns (1011) goes to each participant's coordinator (looked up again
   on every attempt), retried with a backoff doubling from 100 ms to 1 s until every
   participant acknowledged (it answers once its own PrepareCommit / PrepareAbort is on its
   in-sync replicas; a repeated decision answers NONE and changes nothing). Then the
   delivery record is tombstoned. A coordinator that loads the decider's partition
   (a move, a restart) re-delivers every delivery record it loads.

**Termination (a participant asks the decider).** A participant never presumes abort for
a Prepared transaction on its own: when its owner has been quiet here for the transaction's
timeout, it sends QueryTxnDecisions (1012) to every live broker (it knows the owner prefix,
not the owner's name, so it cannot tell which broker decides). Each answers for the
``__transaction_state`` partitions it has loaded: a decision naming the transaction
(commit or abort: applied at once), or whether the owner prefix was active there. Only if
the loaded partitions of the answers cover the whole topic, no answer names a decision and
none saw the owner active is the transaction aborted. A broker that answered "no decision"
*vetoes* the transaction: no decision it writes afterwards may commit it, so a commit whose
votes were collected before the question cannot land after the answer.

Threads: the event loop, except the blocking requests (:class:`BrokerLinks`), which run on
this module's small thread pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.metadata_cache import NO_LEADER, MetadataSnapshot
from spark_mq.broker.txn.broker_links import BrokerCredentials, BrokerLinks
from spark_mq.broker.txn.coordinator import TransactionCoordinator, check_producer
from spark_mq.broker.txn.records import Decision, DecisionEntry
from spark_mq.broker.txn.state import TxnMetadata, TxnState
from spark_mq.broker.txn.two_phase import RemoteVotes
from spark_mq.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidTxnStateError,
    SparkMQError,
    TransactionalIdNotFoundError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode, code_for, error_from_code
from spark_mq.protocol.transactions import PreparedTxnRef
from spark_mq.protocol.txn_participants import (
    CheckedTxn,
    CheckPreparedTxnsRequest,
    CheckPreparedTxnsResponse,
    DecidedTxn,
    DecideTxnsRequest,
    DecideTxnsResponse,
    DecideTxnsResult,
    QueriedTxn,
    QueryAnswer,
    QueryTxnDecisionsRequest,
    QueryTxnDecisionsResponse,
)
from spark_mq.rate_limited_log import RateLimitedLog

if TYPE_CHECKING:
    from spark_mq.broker.txn.service import TransactionService

logger = logging.getLogger("spark_mq.broker.txn")
_FAILURES: Final = RateLimitedLog(logger)

#: How long at most a transaction that voted for a commit is held for its decision (ms);
#: never longer than its own transaction.timeout.ms (the termination protocol takes over).
VOTE_HOLD_MS: Final = 30_000
#: How long a "no decision names it" answer bars a commit of the transaction (ms).
VETO_MS: Final = 600_000
#: Request timeout of one inter-broker two-phase request (ms).
REQUEST_TIMEOUT_MS: Final = 10_000
RETRY_BACKOFF_MS: Final = 100
RETRY_BACKOFF_MAX_MS: Final = 1000

_OPEN: Final = frozenset({TxnState.ONGOING, TxnState.PREPARED})


# ---------------------------------------------------------------------------------------------
# The participant's side (event loop, synchronous)


def _vote(c: TransactionCoordinator, ref: PreparedTxnRef, commit: bool, now_ms: int) -> CheckedTxn:
    txn = c.txns.get(ref.transactional_id)
    try:
        if txn is None:
            raise TransactionalIdNotFoundError(
                f"transactional id {ref.transactional_id!r} is unknown to its coordinator"
            )
        if (
            not commit
            and txn.state is TxnState.COMPLETE_ABORT
            and txn.producer_id == ref.producer_id
            and ref.producer_epoch in (txn.producer_epoch, txn.last_producer_epoch)
        ):
            return CheckedTxn(ref.transactional_id, 0)  # aborted already
        check_producer(txn, ref.producer_id, ref.producer_epoch)
        allowed = frozenset({TxnState.PREPARED}) if commit else _OPEN
        if txn.state not in allowed:
            raise InvalidTxnStateError(
                f"the transaction of {ref.transactional_id!r} is {txn.state.value}, not "
                f"{'Prepared' if commit else 'Ongoing or Prepared'}",
                producer_id=ref.producer_id,
                producer_epoch=ref.producer_epoch,
            )
        if ref.transactional_id in c.guards.terminating:
            raise ConcurrentTransactionsError(
                f"the coordinator of {ref.transactional_id!r} is asking whether a decision "
                "names it (its owner was quiet); retry"
            )
    except SparkMQError as exc:
        return CheckedTxn(ref.transactional_id, int(code_for(exc)), str(exc))
    if commit:
        c.guards.holds[ref.transactional_id] = now_ms + min(VOTE_HOLD_MS, txn.timeout_ms)
    return CheckedTxn(
        ref.transactional_id, 0, None, txn.producer_id, txn.producer_epoch, txn.txn_number
    )


def check(
    c: TransactionCoordinator, request: CheckPreparedTxnsRequest, now_ms: int
) -> CheckPreparedTxnsResponse:
    """CheckPreparedTxns: the votes of the named transactions (coordinated here: the handler
    checked), and the scope's other open transactions coordinated here."""
    results = [_vote(c, ref, request.commit, now_ms) for ref in request.transactions]
    scope: list[CheckedTxn] = []
    if request.scope_prefix:
        named = {r.transactional_id for r in request.transactions}
        scope = [
            CheckedTxn(t.transactional_id, 0, None, t.producer_id, t.producer_epoch, t.txn_number)
            for tid, t in sorted(c.txns.items())
            if tid.startswith(request.scope_prefix) and tid not in named and t.state.is_open
        ]
    return CheckPreparedTxnsResponse(0, results, scope)


def decide(
    c: TransactionCoordinator, request: DecideTxnsRequest, now_ms: int
) -> list[DecideTxnsResult]:
    """DecideTxns: record the decider's decision for each named transaction coordinated
    here; one decided the same way already, or completed since and moved on, is a no-op."""
    results: list[DecideTxnsResult] = []
    due: list[tuple[TxnMetadata, bool]] = []
    for e in request.transactions:
        txn = c.txns.get(e.transactional_id)
        c.guards.holds.pop(e.transactional_id, None)
        problem = _decided_problem(txn, e)
        if problem is not None:
            logger.error(
                "decision %s for %r cannot be applied: %s",
                request.decision,
                e.transactional_id,
                problem,
            )
            results.append(
                DecideTxnsResult(e.transactional_id, int(ErrorCode.INVALID_TXN_STATE), problem)
            )
            continue
        if txn is not None and txn.txn_number == e.txn_number and txn.state.is_open:
            due.append((txn, e.commit))
        results.append(DecideTxnsResult(e.transactional_id, 0))
    if due:
        c.decide(due, now_ms, fence=True, from_request=False)
    return results


def _decided_problem(txn: TxnMetadata | None, e: DecidedTxn) -> str | None:
    """Why the decision ``e`` contradicts ``txn`` (None: apply it, or nothing to do)."""
    if txn is None or txn.txn_number > e.txn_number:
        return None  # completed and forgotten, or completed and moved on
    if e.producer_id not in (txn.producer_id, txn.last_producer_id):
        return None if txn.txn_number != e.txn_number else "another producer owns it"
    if txn.txn_number < e.txn_number:
        return f"its transaction number is {txn.txn_number}, the decision's {e.txn_number}"
    if txn.state.is_open:
        return None
    committed = txn.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
    if committed != e.commit:
        return f"it was already {'committed' if committed else 'aborted'}"
    return None


def answer_query(
    c: TransactionCoordinator,
    request: QueryTxnDecisionsRequest,
    now_ms: int,
    loaded: Iterable[int],
) -> QueryTxnDecisionsResponse:
    """QueryTxnDecisions: what this broker's loaded decisions and owner activity say of each
    transaction; "nothing" vetoes a later commit of it here."""
    decisions = [*c.owners.records(), *c.anonymous.values()]
    active = c.owners.last_active(q.owner_prefix for q in request.transactions)
    answers = []
    for q in request.transactions:
        found = _named_by(decisions, q)
        if found is not None:
            answers.append(QueryAnswer(q.transactional_id, 1 if found else 0))
        elif now_ms - active[q.owner_prefix] <= q.timeout_ms:
            answers.append(QueryAnswer(q.transactional_id, -1, True))
        else:
            c.guards.vetoes[(q.transactional_id, q.producer_id, q.txn_number)] = now_ms + VETO_MS
            answers.append(QueryAnswer(q.transactional_id))
    for key, until in list(c.guards.vetoes.items()):
        if until <= now_ms:
            del c.guards.vetoes[key]
    return QueryTxnDecisionsResponse(0, sorted(loaded), answers)


def _named_by(decisions: Sequence[Decision], q: QueriedTxn) -> bool | None:
    for d in decisions:
        for e in d.entries:
            if (e.transactional_id, e.producer_id, e.txn_number) == (
                q.transactional_id,
                q.producer_id,
                q.txn_number,
            ):
                return e.commit
    return None


# ---------------------------------------------------------------------------------------------
# The decider's side, and the participant's questions (event loop, asynchronous)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class TxnPeers:
    """This broker's two-phase requests to the other coordinators (module docstring)."""

    def __init__(
        self,
        service: TransactionService,
        *,
        node_id: int,
        metadata: Callable[[], MetadataSnapshot],
        credentials: BrokerCredentials,
    ) -> None:
        self._service = service
        self._node_id = node_id
        self._metadata = metadata
        self._links = BrokerLinks(credentials, client_id=f"txn-participants-{node_id}")
        self._executor = concurrent.futures.ThreadPoolExecutor(
            4, thread_name_prefix="txn-participants"
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Delivery records being delivered now (one task each).
        self._delivering: set[str] = set()
        #: Transactions being asked about (one question each).
        self._asking: set[str] = set()
        self._closed = False
        service.coordinator.guards.presume_abort = self._presume_abort

    @property
    def _c(self) -> TransactionCoordinator:
        return self._service.coordinator

    def remote(self, transactional_id: str) -> bool:
        """Whether another broker coordinates ``transactional_id`` (its partition is not
        led here)."""
        partition = self._service.partition_for(transactional_id)
        return partition not in self._service.placement.led

    def _coordinator_of(self, key: str) -> tuple[int, BrokerAddress]:
        snapshot = self._metadata()
        partition = self._service.partition_for(key)
        cached = snapshot.partitions(TRANSACTION_STATE_TOPIC).get(partition)
        leader = cached.leader if cached is not None else NO_LEADER
        if leader == NO_LEADER or not snapshot.is_live(leader) or leader == self._node_id:
            raise CoordinatorNotAvailableError(
                f"the coordinator of {key!r} (the leader of {TRANSACTION_STATE_TOPIC}-"
                f"{partition}) is not known to be alive now; retry"
            )
        ep = snapshot.brokers[leader].endpoints[0]
        return leader, BrokerAddress(host=ep.host, port=ep.port)

    async def _call(self, broker: int, address: BrokerAddress, request: msgspec.Struct) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._links.request, broker, address, request, REQUEST_TIMEOUT_MS
        )

    # -- votes ------------------------------------------------------------------------------

    async def votes(
        self, refs: Sequence[PreparedTxnRef], *, commit: bool, scope_prefix: str | None
    ) -> RemoteVotes:
        """Ask the coordinators of the named transactions not coordinated here (and, with a
        scope, every live broker) for their votes."""
        by_broker: dict[int, tuple[BrokerAddress, list[PreparedTxnRef]]] = {}
        errors: dict[str, SparkMQError] = {}
        for ref in refs:
            if not self.remote(ref.transactional_id):
                continue
            try:
                broker, address = self._coordinator_of(ref.transactional_id)
            except SparkMQError as exc:
                errors[ref.transactional_id] = exc
                continue
            by_broker.setdefault(broker, (address, []))[1].append(ref)
        if scope_prefix:
            snapshot = self._metadata()
            for broker, live in snapshot.brokers.items():
                if broker != self._node_id and live.endpoints and broker not in by_broker:
                    ep = live.endpoints[0]
                    by_broker[broker] = (BrokerAddress(host=ep.host, port=ep.port), [])
        asked = list(by_broker.items())
        answers = await asyncio.gather(
            *(
                self._call(b, addr, CheckPreparedTxnsRequest(named, commit, scope_prefix))
                for b, (addr, named) in asked
            ),
            return_exceptions=True,
        )
        entries: dict[str, DecisionEntry | None] = {}
        leftovers: list[DecisionEntry] = []
        named_ids = {r.transactional_id for r in refs}
        for (broker, (_, named)), answer in zip(asked, answers, strict=True):
            if isinstance(answer, BaseException):
                for ref in named:
                    errors[ref.transactional_id] = CoordinatorNotAvailableError(
                        f"the coordinator of {ref.transactional_id!r} (broker {broker}) did "
                        f"not answer ({answer}); nothing was decided, retry"
                    )
                continue
            response: CheckPreparedTxnsResponse = answer
            if response.error_code != ErrorCode.NONE:
                for ref in named:
                    errors[ref.transactional_id] = error_from_code(
                        response.error_code, response.error_message
                    )
                continue
            for r in response.results:
                if r.error_code != ErrorCode.NONE:
                    errors[r.transactional_id] = error_from_code(r.error_code, r.error_message)
                elif r.txn_number < 0:
                    entries[r.transactional_id] = None  # an abort already done
                else:
                    entries[r.transactional_id] = DecisionEntry(
                        r.transactional_id, r.producer_id, r.producer_epoch, r.txn_number, commit
                    )
            leftovers += [
                DecisionEntry(
                    t.transactional_id, t.producer_id, t.producer_epoch, t.txn_number, False
                )
                for t in response.scope_open
                if t.transactional_id not in named_ids and self.remote(t.transactional_id)
            ]
        return RemoteVotes(entries, errors, leftovers)

    # -- delivery ---------------------------------------------------------------------------

    def deliver(self, name: str, entries: Sequence[DecisionEntry]) -> asyncio.Task[None] | None:
        """Tell the participants of decision ``name`` its outcome, until each acknowledged;
        then its delivery record is tombstoned. One task per decision."""
        remote = [e for e in entries if self.remote(e.transactional_id)]
        if self._closed or name in self._delivering:
            return None
        self._c.guards.remote_deliveries.add(name)
        self._delivering.add(name)
        task = asyncio.create_task(self._deliver(name, remote), name=f"txn-deliver-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def redrive(self, partition: int) -> int:
        """Deliver again every loaded delivery record of ``partition`` (a coordinator that
        just loaded it); how many."""
        count = 0
        for name, decision in list(self._c.anonymous.items()):
            if self._service.partition_for(name) != partition:
                continue
            if any(self.remote(e.transactional_id) for e in decision.entries):
                self.deliver(name, decision.entries)
                count += 1
        return count

    def redrive_pending(self) -> int:
        """Deliver every kept delivery record no task is delivering (one whose first
        re-delivery after a load could not start); how many. Run by the periodic job."""
        count = 0
        for name in list(self._c.guards.remote_deliveries):
            decision = self._c.anonymous.get(name)
            if decision is None or name in self._delivering or not self._service.coordinates(name):
                continue
            if self.deliver(name, decision.entries) is not None:
                count += 1
        return count

    async def _deliver(self, name: str, entries: list[DecisionEntry]) -> None:
        pending = {e.transactional_id: e for e in entries}
        backoff = RETRY_BACKOFF_MS
        try:
            while pending:
                if not self._service.coordinates(name) or name not in self._c.anonymous:
                    # This broker no longer coordinates the decision: whoever loads its
                    # partition delivers it.
                    return
                await self._deliver_once(name, pending)
                if pending:
                    await asyncio.sleep(backoff / 1000)
                    backoff = min(backoff * 2, RETRY_BACKOFF_MAX_MS)
            self._c.guards.remote_deliveries.discard(name)
            logger.info("decision %s: every participant acknowledged", name)
            self._c.retry_pending(self._service.now_ms())  # tombstones its record
        finally:
            self._delivering.discard(name)

    async def _deliver_once(self, name: str, pending: dict[str, DecisionEntry]) -> None:
        by_broker: dict[int, tuple[BrokerAddress, list[DecidedTxn]]] = {}
        for tid, e in list(pending.items()):
            if not self.remote(tid):
                # Its partition moved here meanwhile: decided here, as a participant would.
                if self._service.coordinates(tid):
                    request = DecideTxnsRequest(name, [_decided(e)])
                    (result,) = decide(self._c, request, self._service.now_ms())
                    if result.error_code in (ErrorCode.NONE, ErrorCode.INVALID_TXN_STATE):
                        pending.pop(tid)
                continue
            try:
                broker, address = self._coordinator_of(tid)
            except SparkMQError:
                continue
            by_broker.setdefault(broker, (address, []))[1].append(_decided(e))
        asked = list(by_broker.items())
        answers = await asyncio.gather(
            *(self._call(b, a, DecideTxnsRequest(name, txns)) for b, (a, txns) in asked),
            return_exceptions=True,
        )
        for (broker, _), answer in zip(asked, answers, strict=True):
            if isinstance(answer, BaseException):
                _FAILURES.failure(
                    answer, "DecideTxns to broker %d failed (retried): %s", broker, answer
                )
                continue
            response: DecideTxnsResponse = answer
            for r in response.results:
                if r.error_code == ErrorCode.NONE:
                    pending.pop(r.transactional_id, None)
                elif r.error_code == ErrorCode.INVALID_TXN_STATE:
                    # A contradiction (logged by both sides); retrying cannot change it.
                    logger.error(
                        "decision %s: broker %d cannot apply it to %r: %s",
                        name,
                        broker,
                        r.transactional_id,
                        r.error_message,
                    )
                    pending.pop(r.transactional_id, None)

    # -- termination ------------------------------------------------------------------------

    def _presume_abort(self, txn: TxnMetadata, now_ms: int) -> bool:
        """The coordinator's hook for a Prepared transaction whose owner is quiet here:
        never yes at once; a question to every broker decides it (:meth:`_ask`)."""
        tid = txn.transactional_id
        if tid not in self._asking and not self._closed:
            self._asking.add(tid)
            self._c.guards.terminating.add(tid)
            task = asyncio.create_task(self._ask(txn), name=f"txn-ask-{tid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return False

    async def _ask(self, txn: TxnMetadata) -> None:
        tid = txn.transactional_id
        try:
            verdict = await self._query(txn)
        except Exception as exc:
            _FAILURES.failure(exc, "asking whether a decision names %r failed: %s", tid, exc)
            verdict = None
        finally:
            self._asking.discard(tid)
            self._c.guards.terminating.discard(tid)
        now = self._service.now_ms()
        current = self._c.txns.get(tid)
        if (
            verdict is None
            or current is None
            or current.state is not TxnState.PREPARED
            or current.txn_number != txn.txn_number
        ):
            return
        if verdict == "active":
            self._c.owners.client_seen(tid, now)  # wait another timeout before asking again
            return
        commit = verdict == "commit"
        logger.warning(
            "the Prepared transaction of %r: its owner was quiet here; %s",
            tid,
            "a decision elsewhere commits it"
            if commit
            else "a decision elsewhere aborts it"
            if verdict == "abort"
            else "no coordinator holds a decision naming it and none saw its owner: aborted",
        )
        with contextlib.suppress(SparkMQError):
            self._c.decide([(current, commit)], now, fence=True, from_request=False)

    async def _query(self, txn: TxnMetadata) -> str | None:
        """ "commit", "abort", "active" or "none" (every partition answered, nothing names
        it, owner quiet everywhere); None when the answers do not cover every partition."""
        assert txn.owner_prefix is not None
        request = QueryTxnDecisionsRequest(
            [
                QueriedTxn(
                    txn.transactional_id,
                    txn.producer_id,
                    txn.producer_epoch,
                    txn.txn_number,
                    txn.owner_prefix,
                    txn.timeout_ms,
                )
            ]
        )
        snapshot = self._metadata()
        total = len(snapshot.partitions(TRANSACTION_STATE_TOPIC))
        others = [
            (b, live.endpoints[0])
            for b, live in snapshot.brokers.items()
            if b != self._node_id and live.endpoints
        ]
        responses: list[QueryTxnDecisionsResponse] = [
            answer_query(self._c, request, self._service.now_ms(), self.loaded())
        ]
        answers = await asyncio.gather(
            *(
                self._call(b, BrokerAddress(host=ep.host, port=ep.port), request)
                for b, ep in others
            ),
            return_exceptions=True,
        )
        responses += [
            a
            for a in answers
            if isinstance(a, QueryTxnDecisionsResponse) and a.error_code == ErrorCode.NONE
        ]
        covered: set[int] = set()
        verdict = "none"
        for response in responses:
            covered.update(response.loaded_partitions)
            for a in response.answers:
                if a.decision >= 0:
                    return "commit" if a.decision == 1 else "abort"
                if a.owner_active:
                    verdict = "active"
        if verdict == "none" and (total == 0 or not covered.issuperset(range(total))):
            return None
        return verdict

    def loaded(self) -> list[int]:
        """The ``__transaction_state`` partitions loaded here."""
        return [p for p in self._service.placement.led if self._service.placement.loaded(p)]

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._links.close)
        self._executor.shutdown(wait=False)


def _decided(e: DecisionEntry) -> DecidedTxn:
    return DecidedTxn(e.transactional_id, e.producer_id, e.producer_epoch, e.txn_number, e.commit)
