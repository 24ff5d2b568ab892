"""The transactional producer's requests to its transaction coordinator (and, for offsets,
to the group coordinator): InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn and PrepareTxn.

The coordinator is found with FindCoordinator (``key_type`` 1, the transactional id as key)
and remembered until it answers NOT_COORDINATOR or its connection fails. Every request is
retried, with a short backoff, on the errors that mean "not now": CONCURRENT_TRANSACTIONS (the
previous transaction's markers are still being written), COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR and lost connections, until the call's
deadline. Fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) makes the producer fatal
(:meth:`~spark_mq.client.transactions.TransactionStateMachine.fatal`); TRANSACTION_ABORTABLE
makes the transaction abortable.

Threads: the user threads call everything except :meth:`TransactionManager.before_send` and
:meth:`TransactionManager.add_partitions`, which the sender thread calls (one attempt per
call, then a short backoff: the sender must not block on retries).
``partitions`` (the partitions registered in the open transaction) is a set the sender reads
without a lock; it is only replaced whole or added to by the sender, and cleared by a user
thread only when nothing of the transaction is left to send.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from spark_mq.client.accumulator import ProducerBatch, RecordAccumulator
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ProducerConfig
from spark_mq.client.group.coordinator_lookup import call_coordinator, lookup_coordinator
from spark_mq.client.group.member_state import ConsumerGroupMetadata
from spark_mq.client.group.offsets import OffsetAndMetadata
from spark_mq.client.records import TopicPartition
from spark_mq.client.retry import Again, Retry, sent
from spark_mq.client.transactions import (
    PreparedTransaction,
    TransactionStateMachine,
    TxnState,
    fenced_error,
)
from spark_mq.errors import RequestTimedOutError, SparkMQError, TransactionAbortableError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.groups import (
    COORDINATOR_TRANSACTION,
)
from spark_mq.protocol.producer_id import InitProducerIdRequest, InitProducerIdResponse
from spark_mq.protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    PrepareTxnRequest,
    TxnOffsetCommitPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitTopic,
    TxnTopic,
)

log = logging.getLogger(__name__)

TP = tuple[str, int]

#: Codes after which the same request may succeed a moment later.
RETRY_CODES = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
    }
)
#: Codes that mean a newer incarnation of the producer exists.
FENCED_CODES = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
#: First retry wait on CONCURRENT_TRANSACTIONS: the previous transaction usually completes
#: within milliseconds, so retry.backoff.ms (100 ms) would dominate short transactions (Kafka
#: uses 20 ms for the same reason).
CONCURRENT_BACKOFF_S = 0.002


def find_txn_coordinator(cluster: Cluster, key: str, *, deadline: float) -> int:
    """The node id of the transaction coordinator of ``key`` (a transactional id or an
    owner), retried until ``deadline`` (monotonic seconds) while it is not available."""
    retry = Retry(
        deadline,
        backoff_s=max(cluster.config.retry_backoff_ms, 1) / 1000,
        max_backoff_s=1.0,
        clock=cluster.clock,
        sleep=cluster.sleep,
    )
    coordinator = lookup_coordinator(
        cluster,
        key,
        key_type=COORDINATOR_TRANSACTION,
        retry=retry,
        timeout_error=lambda error: RequestTimedOutError(
            f"no transaction coordinator found for {key!r} (last error: {error}); is the "
            "broker up, and can it create __transaction_state?"
        ),
    )
    return int(coordinator.node_id)


def coordinator_request(
    cluster: Cluster,
    key: str,
    request: msgspec.Struct,
    error_of: Callable[[Any], int],
    *,
    deadline: float,
    node: int | None = None,
    on_node: Callable[[int | None], None] | None = None,
) -> Any:
    """Send ``request`` to the transaction coordinator of ``key`` (``node`` if known) until
    it answers with something other than a retry code (see :data:`RETRY_CODES`) or
    ``deadline`` passes. Returns the response; ``error_of(response)`` picks the code to
    judge it by. ``on_node`` hears of every coordinator found (None: forgotten)."""
    retry = Retry(
        deadline,
        backoff_s=CONCURRENT_BACKOFF_S,
        max_backoff_s=max(cluster.config.retry_backoff_max_ms, 1) / 1000,
        clock=cluster.clock,
        sleep=cluster.sleep,
    )

    def learn(found: int | None) -> None:
        nonlocal node
        node = found
        if on_node is not None:
            on_node(found)

    def send() -> Any:
        found = node
        if found is None:
            found = find_txn_coordinator(cluster, key, deadline=deadline)
            learn(found)
        return cluster.request(request, node_id=found)

    def attempt() -> Any:
        response = sent(send)
        if isinstance(response, Again):
            learn(None)
            return response
        code = error_of(response)
        if code not in RETRY_CODES:
            return response
        if code != ErrorCode.CONCURRENT_TRANSACTIONS:
            learn(None)
            retry.at_least(cluster.config.retry_backoff_ms / 1000)
        return Again(error_from_code(code))

    name = type(request).__name__
    return retry.until(
        attempt,
        lambda error: RequestTimedOutError(
            f"{name} for {key!r} did not succeed in time (last error: {error}); call it "
            "again, or abort"
        ),
        what=f"{name} for {key!r}",
    )


class TransactionManager:
    """The coordinator side of one transactional producer (see the module docstring)."""

    def __init__(self, config: ProducerConfig, cluster: Cluster) -> None:
        assert config.transactional_id, "a TransactionManager needs a transactional.id"
        self.transactional_id = config.transactional_id
        self._config = config
        self._cluster = cluster
        self.machine = TransactionStateMachine(config.transactional_id)
        #: Partitions registered with AddPartitionsToTxn in the open transaction.
        self.partitions: set[TP] = set()
        self._groups: set[str] = set()
        self._nodes_known = False
        self._node: int | None = None
        #: When the sender may try AddPartitionsToTxn again (monotonic seconds).
        self.add_retry_at = 0.0
        self._add_backoff_s = CONCURRENT_BACKOFF_S

    # -- helpers --------------------------------------------------------------------------

    def deadline(self, timeout: float | None) -> float:
        """Monotonic deadline of a call: ``timeout`` seconds, else ``max.block.ms``."""
        seconds = self._config.max_block_ms / 1000 if timeout is None else timeout
        return self._cluster.clock() + max(seconds, 0.0)

    def _ids(self) -> tuple[int, int]:
        return self.machine.producer_id, self.machine.producer_epoch

    def _learn_nodes(self) -> None:
        # Routing a request by node id needs every broker's address (bootstrap mode).
        if not self._nodes_known and not self._config.path:
            self._cluster.refresh([])
        self._nodes_known = True

    def _request(
        self, request: msgspec.Struct, error_of: Callable[[Any], int], deadline: float
    ) -> Any:
        self._learn_nodes()
        return coordinator_request(
            self._cluster,
            self.transactional_id,
            request,
            error_of,
            deadline=deadline,
            node=self._node,
            on_node=self._set_node,
        )

    def _set_node(self, node: int | None) -> None:
        self._node = node

    def check(self, code: int, message: str | None, *, abortable: bool) -> None:
        """Raise (and record in the state machine) the error of a non-zero ``code``:
        fencing is fatal; other errors make the transaction abortable when ``abortable``."""
        if code == ErrorCode.NONE:
            return
        error = error_from_code(code, message)
        if code in FENCED_CODES:
            fenced = fenced_error(self.transactional_id, error)
            self.machine.fatal(fenced)
            raise fenced from error
        if abortable or code == ErrorCode.TRANSACTION_ABORTABLE:
            self.machine.abortable(error)
        raise error

    # -- requests -------------------------------------------------------------------------

    def init_producer_id(self, deadline: float) -> tuple[int, int]:
        """InitProducerId with the transactional id: a producer id and a bumped epoch that
        fences every older incarnation; the coordinator finishes what they left open."""
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self._config.transaction_timeout_ms,
        )
        response: InitProducerIdResponse = self._request(request, lambda r: r.error_code, deadline)
        self.check(response.error_code, response.error_message, abortable=False)
        self.machine.producer_id = response.producer_id
        self.machine.producer_epoch = response.producer_epoch
        return response.producer_id, response.producer_epoch

    def drops_unsent(self) -> bool:
        """Whether batches not yet sent must be failed instead of sent: the transaction is
        aborting, cannot commit (AbortableError), or the producer is fenced (FatalError)."""
        return self.machine.state in (
            TxnState.ABORTING_TRANSACTION,
            TxnState.ABORTABLE_ERROR,
            TxnState.FATAL_ERROR,
        )

    def fail_unsent(
        self,
        batches: Sequence[ProducerBatch],
        fail: Callable[[ProducerBatch, SparkMQError], None],
    ) -> None:
        """Fail ``batches`` (never sent) with the reason the transaction gives."""
        error = self.machine.error
        if error is None or self.machine.state is TxnState.ABORTING_TRANSACTION:
            error = TransactionAbortableError(
                "the transaction was aborted before this record was sent"
            )
        for batch in batches:
            fail(batch, error)

    def before_send(
        self,
        acc: RecordAccumulator,
        fail: Callable[[ProducerBatch, SparkMQError], None],
        *,
        have_producer_id: bool,
    ) -> None:
        """The sender's step before it drains (sender thread): fail the unsent batches of a
        transaction that will not commit (aborting, AbortableError, FatalError), or register
        the partitions that have data but are not yet in the transaction."""
        if self.drops_unsent():
            self.fail_unsent(acc.abort_all(), fail)
            return
        if not have_producer_id or self._cluster.clock() < self.add_retry_at:
            return
        registered = self.partitions
        new = sorted({tp for tp in acc.partitions_with_data() if tp not in registered})
        if not new:
            return
        errors = self.add_partitions(new)
        if errors:
            log.debug("AddPartitionsToTxn: %s; retrying", next(iter(errors.values())))
            self.add_retry_at = self._cluster.clock() + self._add_backoff_s
            self._add_backoff_s = min(
                self._add_backoff_s * 2, max(self._config.retry_backoff_ms, 1) / 1000
            )
        else:
            self._add_backoff_s = CONCURRENT_BACKOFF_S

    def add_partitions(self, tps: Iterable[TP]) -> dict[TP, SparkMQError]:
        """One AddPartitionsToTxn for ``tps`` (sender thread). Registered partitions join
        :attr:`partitions`; returns the errors of the others. Retriable errors are for the
        caller to retry later; fencing makes the producer fatal, anything else makes the
        transaction abortable."""
        by_topic: dict[str, list[int]] = {}
        for name, partition in tps:
            by_topic.setdefault(name, []).append(partition)
        pid, epoch = self._ids()
        request = AddPartitionsToTxnRequest(
            self.transactional_id,
            pid,
            epoch,
            [TxnTopic(t, sorted(ps)) for t, ps in sorted(by_topic.items())],
        )
        errors: dict[TP, SparkMQError] = {}
        try:
            # One attempt: the deadline is now, so a retry code comes back as a timeout.
            response: AddPartitionsToTxnResponse = self._request(
                request, lambda r: _first_code(r.results), self._cluster.clock()
            )
        except SparkMQError as exc:
            if not exc.retriable:
                self.machine.abortable(exc)
            return {tp: exc for tp in tps}
        added = set(self.partitions)
        for topic in response.results:
            for part in topic.partitions:
                tp = (topic.name, part.partition)
                if part.error_code == ErrorCode.NONE:
                    added.add(tp)
                    continue
                error = error_from_code(
                    part.error_code, part.error_message, topic=topic.name, partition=part.partition
                )
                errors[tp] = error
                if part.error_code in FENCED_CODES:
                    self.machine.fatal(fenced_error(self.transactional_id, error))
                elif not error.retriable:
                    self.machine.abortable(error)
        self.partitions = added
        return errors

    def add_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        group: ConsumerGroupMetadata,
        deadline: float,
    ) -> None:
        """AddOffsetsToTxn (once per group and transaction), then TxnOffsetCommit to the
        group's coordinator with the consumer's generation and member id for fencing."""
        pid, epoch = self._ids()
        if group.group_id not in self._groups:
            request = AddOffsetsToTxnRequest(self.transactional_id, pid, epoch, group.group_id)
            response = self._request(request, lambda r: r.error_code, deadline)
            self.check(response.error_code, response.error_message, abortable=True)
            self._groups.add(group.group_id)
        by_topic: dict[str, list[TxnOffsetCommitPartition]] = {}
        for tp, oam in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                TxnOffsetCommitPartition(
                    tp.partition, oam.offset, oam.leader_epoch, oam.metadata or None
                )
            )
        commit = TxnOffsetCommitRequest(
            self.transactional_id,
            group.group_id,
            pid,
            epoch,
            [TxnOffsetCommitTopic(t, ps) for t, ps in by_topic.items()],
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
        )
        answer = self._group_request(group.group_id, commit, deadline)
        for topic in answer.topics:
            for part in topic.partitions:
                self.check(part.error_code, part.error_message, abortable=True)

    def _group_request(
        self, group_id: str, request: TxnOffsetCommitRequest, deadline: float
    ) -> TxnOffsetCommitResponse:
        cluster = self._cluster
        retry = Retry(
            deadline,
            backoff_s=CONCURRENT_BACKOFF_S,
            max_backoff_s=1.0,
            clock=cluster.clock,
            sleep=cluster.sleep,
        )
        response: TxnOffsetCommitResponse
        response, _ = call_coordinator(
            cluster,
            group_id,
            request,
            retry=retry,
            error_of=lambda r: _first_code(r.topics),
            retry_codes=RETRY_CODES,
            timeout_error=lambda error: RequestTimedOutError(
                f"TxnOffsetCommit for group {group_id!r} did not succeed in time (last "
                f"error: {error})"
            ),
        )
        return response

    def end_txn(self, commit: bool, deadline: float) -> None:
        """EndTxn: returns once the coordinator's decision is durable."""
        pid, epoch = self._ids()
        request = EndTxnRequest(self.transactional_id, pid, epoch, commit)
        response = self._request(request, lambda r: r.error_code, deadline)
        self.check(response.error_code, response.error_message, abortable=commit)
        self.reset_transaction()

    def prepare(self, deadline: float, owner_prefix: str | None = None) -> PreparedTransaction:
        """PrepareTxn: Ongoing -> Prepared; the handle names what the coordinator holds."""
        pid, epoch = self._ids()
        request = PrepareTxnRequest(self.transactional_id, pid, epoch, owner_prefix)
        response = self._request(request, lambda r: r.error_code, deadline)
        self.check(response.error_code, response.error_message, abortable=True)
        partitions = tuple(
            sorted(TopicPartition(t.name, p) for t in response.topics for p in t.partitions)
        )
        self.reset_transaction()
        return PreparedTransaction(self.transactional_id, pid, epoch, partitions)

    @property
    def has_offsets(self) -> bool:
        """Whether the open transaction holds consumer offsets (AddOffsetsToTxn was sent)."""
        return bool(self._groups)

    def reset_transaction(self) -> None:
        """Forget the registrations of the transaction that just ended."""
        self.partitions = set()
        self._groups.clear()


def _first_code(results: Iterable[Any]) -> int:
    """The first non-zero partition code of a per-topic result list (0 if none)."""
    for topic in results:
        for part in topic.partitions:
            if part.error_code != ErrorCode.NONE:
                return int(part.error_code)
    return ErrorCode.NONE
