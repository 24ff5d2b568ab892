"""Fetch (key 1): read whole batches from several partitions, with long polling.

One pass reads every partition in request order. Each read is bounded by the partition's
``partition_max_bytes`` and by what is left of the request's ``max_bytes``, except that the
first batch of the first partition with data is always returned whole (Kafka's
``minOneMessage``), so a batch larger than the limits never blocks a consumer. Reads stop at
the high watermark (``isolation_level`` 0) or the last stable offset (1, with the aborted
transactions of the range so the reader can drop their batches).

If the pass found fewer than ``min_bytes`` bytes, no partition failed and ``max_wait_ms``
has not passed, the handler waits for an append to any of the partitions (per-partition
waiters, no polling) and reads again. A wake-up reads again only if something the pass saw
has changed (as Kafka's ``DelayedFetch.tryComplete`` checks before it completes a fetch): a
partition's bound for this fetch (the log end for a follower, the high watermark or the last
stable offset for a consumer), its log start, its role or leader epoch, or the partition
object itself. Otherwise the fetch waits on. Every follower fetch that moves a high
watermark wakes every fetch waiting on that partition, and a follower's fetch, which reads up
to the log end, would only read the same nothing again: with RF 3 each follower's fetch made
one such pass per produce request. The records are not read here: each partition's
``FileRange`` is sent from the segment file by the connection with ``sendfile``.

A fetch with ``replica_id`` >= 0 is a follower's (Kafka's replica fetch): it is served only on
a connection authenticated as that broker (AuthenticateBroker), and only for partitions the
broker is a replica of; it reads up to the log end instead of the high watermark, and each
of its partitions tells the leader where the follower's log ends
(:meth:`~spark_mq.broker.partition.Partition.update_follower`, in the fetch's first pass
only: the offsets are the same in every pass), which may move the high watermark. A
client's fetch with ``replica_id`` set is refused whole with CLUSTER_AUTHORIZATION_FAILED.

Nothing here checks CRCs or decodes bodies: the consumer does (``check.crcs``), as in Kafka,
so the bytes before a corrupt batch reach it and it can return their records before it
reports the corrupt one. Batches are checked on the way in (produce) and by recovery. What the
broker cannot serve at all it reports as ``CORRUPT_MESSAGE`` (2) for the partition, with its
position in the file: a batch whose length field does not fit its segment, which would
otherwise make the read go on in the next segment and skip every batch in between.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.partition import Partition, ReplicaState
from spark_mq.broker.quotas import throttling as quotas
from spark_mq.broker.quotas.manager import QuotaType
from spark_mq.errors import ClusterAuthorizationError, CorruptRecordError, InvalidRequestError
from spark_mq.protocol.fetch import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    AbortedTransaction,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchTopicResponse,
)
from spark_mq.storage.file_records import FileRange
from spark_mq.storage.log import FetchIsolation, PartitionLog
from spark_mq.storage.log_read import FetchDataInfo

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore

logger = logging.getLogger("spark_mq.broker.handlers")


#: What a pass saw of one partition: its log object, role, leader epoch, log start and the
#: bound of the fetch's isolation. A later pass with the same fetch offsets reads the same
#: bytes unless one of them changed.
_Seen = tuple[PartitionLog, ReplicaState, int, int, int]


def _bound(log: PartitionLog | FetchDataInfo, isolation: FetchIsolation) -> int:
    """How far a read with ``isolation`` may go (now, or when ``info`` was read)."""
    if isolation is FetchIsolation.LOG_END:
        return log.log_end_offset
    if isolation is FetchIsolation.TXN_COMMITTED:
        return log.last_stable_offset
    return log.high_watermark


def _seen_now(part: Partition, isolation: FetchIsolation) -> _Seen:
    log = part.log
    return (log, part.state, part.leader_epoch, log.log_start_offset, _bound(log, isolation))


def _changed(core: BrokerCore, result: _Pass, isolation: FetchIsolation) -> bool:
    """Whether reading again could answer differently from ``result`` (which read no
    partition in error): a partition was replaced, changed role or epoch, or moved its log
    start or the isolation's bound."""
    for part, seen in zip(result.partitions, result.seen, strict=True):
        if core.replicas.cached(part.topic, part.index) is not part:
            return True
        if _seen_now(part, isolation) != seen:
            return True
    return False


@dataclasses.dataclass(slots=True)
class _Pass:
    """The outcome of reading every partition once."""

    topics: list[FetchTopicResponse] = dataclasses.field(default_factory=list)
    ranges: list[FileRange | bytes] = dataclasses.field(default_factory=list)
    partitions: list[Partition] = dataclasses.field(default_factory=list)
    #: Per partition of :attr:`partitions`, what the pass saw (:data:`_Seen`).
    seen: list[_Seen] = dataclasses.field(default_factory=list)
    total_bytes: int = 0
    failed: bool = False

    def close(self) -> None:
        for item in self.ranges:
            if isinstance(item, FileRange):
                item.close()
        self.ranges = []


def _read_pass(
    core: BrokerCore, request: FetchRequest, isolation: FetchIsolation, *, first: bool
) -> _Pass:
    """Read every partition once. A follower's fetch offsets are its log ends: the first
    pass records them (which may move the high watermark, or let the follower back into the
    ISR); a later pass of the same fetch has nothing new to record, since the offsets have
    not changed and the high watermark only moves up."""
    follower = first and request.replica_id >= 0
    out = _Pass()
    remaining = request.max_bytes
    for topic in request.topics:
        responses: list[FetchPartitionResponse] = []
        for fp in topic.partitions:
            where = f"{topic.name}-{fp.partition}"
            part: Partition | None = None
            try:
                part = core.replicas.partition(topic.name, fp.partition)
                role = (part.state, part.leader_epoch)
                # Fetches are served by the leader only (a follower's log lags, and until
                # replication a follower's is empty): NOT_LEADER_OR_FOLLOWER sends the
                # consumer to refresh metadata. On one node every partition leads.
                part.require_leader()
                part.check_leader_epoch(fp.current_leader_epoch)
                if follower:
                    if part.update_follower(request.replica_id, fp.fetch_offset):
                        # The high watermark moved: acks=all producers and consumers
                        # waiting for it go on.
                        core.replicas.notify([part])
                    if core.isr_changes is not None and part.wants_isr_expansion():
                        # A follower caught up: propose it back into the ISR now (KIP-497).
                        core.isr_changes.wake()
                first_data = out.total_bytes == 0
                limit = max(0, min(fp.partition_max_bytes, remaining))
                info = part.log.read(
                    fp.fetch_offset, limit, isolation=isolation, min_one_message=first_data
                )
            except TYPED_ERRORS as exc:
                if isinstance(exc, CorruptRecordError):
                    # Damage in a log file is for the operator too, not only for the client.
                    logger.warning("fetch from %s at offset %d: %s", where, fp.fetch_offset, exc)
                code, message = error_of(exc, f"fetch from {where}")
                out.failed = True
                log = None if part is None else part.log
                responses.append(
                    FetchPartitionResponse(
                        partition=fp.partition,
                        error_code=code,
                        high_watermark=-1 if log is None else log.high_watermark,
                        last_stable_offset=-1 if log is None else log.last_stable_offset,
                        log_start_offset=-1 if log is None else log.log_start_offset,
                        records_size=0,
                        error_message=message,
                    )
                )
                continue
            out.partitions.append(part)
            # The role as it was before the read and the offsets the read itself used (taken
            # under the log's lock), so that a change during the pass is never taken as seen.
            out.seen.append(
                (part.log, role[0], role[1], info.log_start_offset, _bound(info, isolation))
            )
            size = info.size_bytes
            if info.records is not None:
                out.ranges.append(info.records)
                out.total_bytes += size
                remaining -= size
            aborted = None
            if isolation is FetchIsolation.TXN_COMMITTED:
                aborted = [
                    AbortedTransaction(a.producer_id, a.first_offset)
                    for a in info.aborted_transactions or ()
                ]
            responses.append(
                FetchPartitionResponse(
                    partition=fp.partition,
                    error_code=0,
                    high_watermark=info.high_watermark,
                    last_stable_offset=info.last_stable_offset,
                    log_start_offset=info.log_start_offset,
                    records_size=size,
                    aborted_transactions=aborted,
                )
            )
        out.topics.append(FetchTopicResponse(topic.name, responses))
    return out


def _count_sent(core: BrokerCore, topics: list[FetchTopicResponse], *, replica: bool) -> None:
    """Count the record bytes a fetch response carries, per topic (the metrics' bytes
    out, or replication bytes out for a follower's fetch)."""
    for topic in topics:
        size = sum(p.records_size for p in topic.partitions)
        if size:
            core.metrics.fetched(topic.name, size, replica=replica)


def _refused(request: FetchRequest, error: Exception) -> Response:
    code, text = error_of(error, "fetch")
    topics = [
        FetchTopicResponse(
            t.name,
            [
                FetchPartitionResponse(p.partition, code, -1, -1, -1, 0, None, text)
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return Response(FetchResponse(error_code=0, topics=topics))


def _take_back(ctx: RequestContext, result: _Pass) -> None:
    """Answer ``result`` with no records: its bytes leave the consumer's rate."""
    quotas.unrecord(ctx, QuotaType.FETCH, result.total_bytes)
    result.close()
    for topic in result.topics:
        for p in topic.partitions:
            p.records_size = 0
            p.aborted_transactions = None if p.aborted_transactions is None else []


def _quota_response(ctx: RequestContext, result: _Pass) -> Response:
    """A consumer's fetch while quotas apply: its bytes are recorded against its byte rate
    now, and its time against its request_percentage by the connection just before the
    answer is written, which is when the request's throttle, from either quota, is known.
    A throttled fetch then carries no records (Kafka's: the bytes are taken back from the
    rate, the partitions answer with no data and the client fetches them again after the
    throttle time); else its bytes are counted as sent."""
    quotas.record(ctx, QuotaType.FETCH, result.total_bytes)
    response = Response(FetchResponse(error_code=0, topics=result.topics), result.ranges)

    def before_send(throttle_ms: int) -> None:
        if throttle_ms:
            _take_back(ctx, result)
            response.records = []
        else:
            _count_sent(ctx.core, result.topics, replica=False)

    response.before_send = before_send
    return response


async def handle_fetch(ctx: RequestContext, request: FetchRequest, _: memoryview) -> Response:
    core = ctx.core
    if request.isolation_level == READ_COMMITTED:
        isolation = FetchIsolation.TXN_COMMITTED
    elif request.isolation_level == READ_UNCOMMITTED:
        isolation = FetchIsolation.HIGH_WATERMARK
    else:
        return _refused(
            request,
            InvalidRequestError(
                f"isolation_level {request.isolation_level} is not 0 (read_uncommitted) or 1 "
                "(read_committed)"
            ),
        )
    if request.replica_id >= 0:
        if not ctx.inter_broker or ctx.session.broker_id != request.replica_id:
            return _refused(
                request,
                ClusterAuthorizationError(
                    f"fetch with replica_id {request.replica_id} is a follower broker's, and "
                    f"this connection is not authenticated as broker {request.replica_id}; "
                    "nothing was read (consumers send replica_id -1)"
                ),
            )
        # Followers copy the whole log, not only what is committed.
        isolation = FetchIsolation.LOG_END
    quota_bytes = quotas.fetch_size_limit(ctx) if request.replica_id < 0 else -1
    if 0 <= quota_bytes < request.max_bytes:
        # A consumer under a quota gets no more in one response than the quota allows
        # over its windows (Kafka's getMaxValueInQuotaWindow).
        request.max_bytes = quota_bytes
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, request.max_wait_ms) / 1000
    first = True
    while True:
        result = _read_pass(core, request, isolation, first=first)
        first = False
        wait_s = deadline - loop.time()
        done = result.total_bytes >= request.min_bytes or result.failed or wait_s <= 0
        # A closing broker answers with what it has instead of waiting.
        if done or core.replicas.closing:
            if request.replica_id < 0 and quotas.measured(ctx):
                return _quota_response(ctx, result)
            _count_sent(core, result.topics, replica=request.replica_id >= 0)
            return Response(FetchResponse(error_code=0, topics=result.topics), result.ranges)
        result.close()
        while wait_s > 0 and not core.replicas.closing:
            waited = loop.time()
            await core.replicas.wait_for_append(result.partitions, wait_s)
            ctx.timing.remote_s += loop.time() - waited
            if _changed(core, result, isolation):
                break
            wait_s = deadline - loop.time()
        # Read again: something changed, the wait is over, or the broker is closing (each
        # answered from a fresh pass, so the high watermark in the answer is current).
