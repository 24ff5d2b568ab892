"""Produce (key 0): validate and append record batches, partition by partition.

Each partition's bytes are checked in full before anything of that partition is written:
every batch's header, its size against the topic's ``max.message.bytes``, and its Arrow body
(``validate_batch_body``: a CRC only proves the producer's bytes arrived intact, not that a
reader can decode them) here; the header again and the CRC in the log's append
(``PartitionLog.append`` checks every batch before it writes any), so the CRC pass over the
bytes is made once, not twice. A body that fails to decode is CRC-checked before the error
is reported, so damage in flight is still reported as a CRC mismatch. The log then appends
with the producer state rules (idempotence). Partitions succeed or fail independently, as in
Kafka. ``acks=0`` gets no response; if any partition failed, the connection is closed
instead, which is how Kafka tells a fire-and-forget producer that something went wrong.

``acks=-1`` (all): a partition whose ISR is smaller than its topic's ``min.insync.replicas``
is refused before anything is written (NOT_ENOUGH_REPLICAS); after the append the answer
waits in the ReplicaManager's purgatory (:mod:`~spark_mq.broker.delayed_produce`) until the
high watermark passes the partition's last appended offset, up to the request's
``timeout_ms`` (REQUEST_TIMED_OUT after it; leadership lost: NOT_LEADER_OR_FOLLOWER), and
is NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below ``min.insync.replicas`` by then.
On one node the high watermark follows every append, so nothing waits.

Internal topics (``__consumer_offsets``, ``__transaction_state``; see
:mod:`~spark_mq.broker.internal_topics`) are refused with INVALID_TOPIC_EXCEPTION and never
auto-created here. The broker's coordinators write them through their own append path (the
partition or the log directly), never through this handler.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from collections.abc import Hashable
from typing import TYPE_CHECKING, Final

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import TYPED_ERRORS, error_of
from spark_mq.broker.internal_topics import check_not_internal
from spark_mq.broker.partition import Partition
from spark_mq.broker.quotas import throttling as quotas
from spark_mq.broker.quotas.manager import QuotaType
from spark_mq.broker.txn.produce_check import verify_transactional_jobs
from spark_mq.errors import (
    CorruptRecordError,
    InvalidRequiredAcksError,
    RecordTooLargeError,
)
from spark_mq.protocol.framing import split_records
from spark_mq.protocol.produce import (
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResponse,
)
from spark_mq.storage.batch_decoder import validate_batch, validate_batch_body
from spark_mq.storage.record_batch import ATTR_CODEC_MASK, BatchHeader

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore

#: Requests with at least this many bytes of compressed records are validated and appended
#: on an executor thread, so that decompressing large bodies does not stall other
#: connections.
INLINE_APPEND_MAX_BYTES: Final = 256 * 1024
#: Uncompressed records are appended on the event loop up to this many bytes per request:
#: validating them is cheap and the hop to a thread and back cost more than it saved (for a
#: producer of 1 MB requests, measured with bench_clients: see docs/benchmarks.md).
INLINE_UNCOMPRESSED_MAX_BYTES: Final = 4 * 1024 * 1024
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT: Final = 21


@dataclasses.dataclass(slots=True)
class _Job:
    topic: str
    partition: int
    data: memoryview
    error: tuple[int, str] | None = None
    result: ProducePartitionResponse | None = None
    appended: Partition | None = None
    #: The offset after the last one appended (what acks=all waits for).
    end_offset: int = -1


def validate_records(
    data: memoryview, max_message_bytes: int, where: str, *, verify_crc: bool = True
) -> None:
    """Check every batch of ``data`` (header, CRC unless ``verify_crc`` is False, size,
    body); raise before any append. The produce path passes False because the log's append
    verifies every CRC before it writes anything."""
    pos = 0
    while pos < len(data):
        header = _validate_header(data, pos, where, verify_crc=verify_crc)
        if header.size > max_message_bytes:
            raise RecordTooLargeError(
                f"{where}: a record batch of {header.size} bytes exceeds the topic's "
                f"max.message.bytes={max_message_bytes}; send smaller batches (batch.size, "
                "max.request.size) or raise the topic's max.message.bytes",
                size_bytes=header.size,
                max_bytes=max_message_bytes,
            )
        try:
            validate_batch_body(data, pos, header)
        except CorruptRecordError as exc:
            if not verify_crc:
                # Bytes damaged in flight usually fail here first: report a CRC mismatch as
                # what it is.
                _validate_header(data, pos, where, verify_crc=True)
            raise CorruptRecordError(
                f"{where}: record batch at byte {pos} has a valid CRC but an unreadable body "
                f"({exc}); nothing was appended to this partition"
            ) from exc
        pos += header.size


def _validate_header(data: memoryview, pos: int, where: str, *, verify_crc: bool) -> BatchHeader:
    try:
        return validate_batch(data, pos, verify_crc=verify_crc)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{where}: corrupt record batch at byte {pos} of the request ({exc}); nothing "
            "was appended to this partition"
        ) from exc


def _append_all(core: BrokerCore, jobs: list[_Job], acks: int) -> None:
    """Validate and append every job without an error yet (any thread)."""
    for job in jobs:
        if job.error is not None:
            continue
        where = f"{job.topic}-{job.partition}"
        try:
            part = core.replicas.partition(job.topic, job.partition)
            validate_records(job.data, part.log.config.max_message_bytes, where, verify_crc=False)
            info = part.append(job.data, required_acks=acks)
        except Exception as exc:
            # A boundary: the partitions done before this one stay done and are
            # answered so; a bug here is this partition's UNKNOWN_SERVER_ERROR, logged with
            # its traceback by error_of.
            job.error = error_of(exc, f"produce to {where}")
            continue
        job.appended = part
        job.end_offset = info.last_offset + 1
        if not info.is_duplicate:
            core.metrics.produced(job.topic, info.valid_bytes, info.num_records)
        job.result = ProducePartitionResponse(
            partition=job.partition,
            error_code=0,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=info.log_start_offset,
        )


def _on_executor(jobs: list[_Job], size: int) -> bool:
    """Whether to append on an executor thread (see :data:`INLINE_APPEND_MAX_BYTES`). Only
    each partition's first batch header is looked at: a producer compresses all alike, and a
    request that mixes only costs loop time."""
    if size >= INLINE_UNCOMPRESSED_MAX_BYTES:
        return True
    if size < INLINE_APPEND_MAX_BYTES:
        return False
    return any(
        len(job.data) >= _ATTRIBUTES_AT + _ATTRIBUTES.size
        and _ATTRIBUTES.unpack_from(job.data, _ATTRIBUTES_AT)[0] & ATTR_CODEC_MASK
        for job in jobs
    )


async def handle_produce(
    ctx: RequestContext, request: ProduceRequest, records: memoryview
) -> Response | None:
    core = ctx.core
    sizes = [p.records_size for t in request.topics for p in t.partitions]
    chunks = iter(split_records(records, sizes))
    jobs = [_Job(t.name, p.partition, next(chunks)) for t in request.topics for p in t.partitions]
    request_error: Exception | None = None
    if request.acks not in (0, 1, -1):
        request_error = InvalidRequiredAcksError(
            f"acks={request.acks} is not valid: use 0 (no response), 1 (leader) or -1 (all)"
        )
    if request_error is not None:
        for job in jobs:
            job.error = error_of(request_error, "produce")
    else:
        _refuse_internal(jobs)
        if request.transactional_id is not None and _coordinated_here(
            core, request.transactional_id
        ):
            await verify_transactional_jobs(core.transactions, request.transactional_id, jobs)
        await _resolve_topics(core, jobs)
        if _on_executor(jobs, len(records)):
            await core.run_blocking(_append_all, core, jobs, request.acks)
        else:
            _append_all(core, jobs, request.acks)
        core.replicas.notify(job.appended for job in jobs if job.appended is not None)
        if request.acks == -1:
            waited = asyncio.get_running_loop().time()
            await _wait_for_replication(core, jobs, request.timeout_ms / 1000)
            ctx.timing.remote_s += asyncio.get_running_loop().time() - waited

    failed = any(job.error is not None for job in jobs)
    # Kafka counts the request's bytes against producer_byte_rate whatever their fate.
    throttle_ms = quotas.record(ctx, QuotaType.PRODUCE, len(records))
    if request.acks == 0:
        return Response(ProduceResponse([]), close_connection=True, silent=True) if failed else None
    # The response mirrors the request entry for entry (see protocol.produce): a partition
    # named twice gets two answers, told apart only by their position.
    answers = iter(jobs)
    topics: list[ProduceTopicResponse] = []
    for topic in request.topics:
        partitions: list[ProducePartitionResponse] = []
        for _ in topic.partitions:
            job = next(answers)
            if job.result is None:
                code, message = job.error or (-1, "not processed")
                job.result = ProducePartitionResponse(
                    partition=job.partition, error_code=code, error_message=message
                )
            partitions.append(job.result)
        topics.append(ProduceTopicResponse(topic.name, partitions))
    return Response(ProduceResponse(topics=topics, throttle_time_ms=throttle_ms))


def _coordinated_here(core: BrokerCore, transactional_id: str) -> bool:
    """Whether this broker's transaction coordinator can check a transactional produce: on
    one node always; in a cluster only if it knows the transactional id, since the leader of
    a partition is often not the transaction's coordinator. A leader that does not coordinate
    the transaction takes the batch as Kafka's leaders do without KIP-890's verification: the
    producer added the partition with AddPartitionsToTxn first, and the partition's producer
    state still refuses an epoch older than its markers'."""
    return core.membership is None or transactional_id in core.transactions.coordinator.txns


async def _wait_for_replication(core: BrokerCore, jobs: list[_Job], timeout_s: float) -> None:
    """acks=all: wait until every in-sync replica has each appended job's records (the
    high watermark passed them), then check ``min.insync.replicas`` again.

    A job whose records are already below the high watermark (one node, or an ISR of the
    leader alone) is checked at once: such a request answers in the same turn of the event
    loop as its append. The others wait in the purgatory together, as one delayed produce
    (a partition named twice waits for the later of its two batches)."""
    required: dict[Hashable, int] = {}
    waiting: list[_Job] = []
    for job in jobs:
        part = job.appended
        if part is None or job.error is not None:
            continue
        if part.high_watermark < job.end_offset:
            key = (job.topic, job.partition)
            required[key] = max(required.get(key, -1), job.end_offset)
            waiting.append(job)
        else:
            _check_replicas_after_append(job, part)
    if not waiting:
        return
    errors = await core.replicas.purgatory.wait_all(required, timeout_s)
    for job in waiting:
        error = errors.get((job.topic, job.partition))
        if error is not None:
            job.error = error_of(error, f"produce to {job.topic}-{job.partition}")
            job.result = None
        else:
            assert job.appended is not None
            _check_replicas_after_append(job, job.appended)


def _check_replicas_after_append(job: _Job, part: Partition) -> None:
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas."""
    try:
        part.check_enough_replicas(after_append=True)
    except TYPED_ERRORS as exc:
        job.error = error_of(exc, f"produce to {job.topic}-{job.partition}")
        job.result = None


def _refuse_internal(jobs: list[_Job]) -> None:
    """Fail the jobs of internal topics (before auto-creation could create one)."""
    for job in jobs:
        try:
            check_not_internal(job.topic, "produce to")
        except TYPED_ERRORS as exc:
            job.error = error_of(exc, f"produce to {job.topic}-{job.partition}")


async def _resolve_topics(core: BrokerCore, jobs: list[_Job]) -> None:
    """Auto-create missing topics (on the executor: creation fsyncs) or fail their jobs."""
    missing = sorted(
        {job.topic for job in jobs if job.error is None and not core.logs.topic_exists(job.topic)}
    )
    for topic in missing:
        try:
            await core.run_blocking(core.replicas.auto_create, topic)
        except TYPED_ERRORS as exc:
            error = error_of(exc, f"produce to topic {topic!r}")
            for job in jobs:
                if job.topic == topic:
                    job.error = error
