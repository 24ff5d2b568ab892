"""The record accumulator: records wait here, per partition, until their batch is sent.

``send()`` appends a record to its partition's *open* batch: four Python list appends
(value, timestamp, and key and headers only once a record of the batch has them), a size
count and a small future. Nothing is encoded per record. A batch closes when it reaches
``batch.size`` bytes (estimated: key + value + a fixed per-record overhead) and waits in its
partition's queue of closed batches; an open batch is also ready once it is ``linger.ms`` old,
or at once while a flush or close is in progress.

Batches grow past ``batch.size`` under load: while closed batches of the partition are still
queued (the sender or the broker is behind), the open batch keeps filling, up to
``max.request.size``, and is sent as soon as the queue ahead of it drains. Fewer, larger
requests is what lets a busy producer catch up (the broker's cost is mostly per request, and
an idempotent producer may send only one batch per partition per request), while a producer
that keeps up still sends ``batch.size`` batches with ``linger.ms`` latency.

A topic may take less than that (its ``max.message.bytes`` or ``segment.bytes``): a batch the
broker refuses as too large (``MESSAGE_TOO_LARGE``) is split into batches of about
``batch.size`` and sent again (:meth:`RecordAccumulator.split_and_reenqueue`), as Kafka's
producer does, keeping its records' order, futures and sequence numbers, and from then on the
topic's batches stay within ``batch.size`` (the topic is *capped*), which is all Kafka's
producer ever sends. A batch of one record refused as too large fails with
:class:`~spark_mq.errors.RecordTooLargeError`.

The sender thread drains ready batches (:meth:`RecordAccumulator.drain`) and encodes each
with one :func:`~spark_mq.storage.record_batch.encode_batch_parts` call over Arrow arrays
built once from the lists, then stamps it like any other batch (:meth:`ProducerBatch.encode`).
A batch of at most ``VARINT_MAX_RECORDS`` records gets a varint body instead (Kafka's record
layout, :mod:`spark_mq.storage.varint_records`), encoded from the lists: a handful of records
costs little Python, and the batch is Kafka-sized instead of carrying Arrow's framing.

``send_batch()`` hands in batches it already encoded, column-wise, as a header without
producer fields or CRC and an Arrow body (:meth:`RecordAccumulator.append_encoded`). The
sender stamps every batch when it sends it (:func:`stamp_header`: producer id, epoch and
sequence, or -1s, then the one CRC pass over header and body) and sends the stamped header and
the body's parts as they are, so the body is never copied to join them (an uncompressed body's
parts are views of the caller's own Arrow buffers: the socket gets the only copy).

Back-pressure: the bytes of every batch not yet completed count against ``buffer.memory``;
an append that would pass it waits up to ``max.block.ms`` for completed batches to release
theirs, then raises :class:`~spark_mq.client.errors.BufferExhaustedError`.

Threads: user threads append, the sender thread drains, re-enqueues and completes; all shared
state is guarded by one lock, held for a handful of list operations at a time. The clock is
injected (monotonic seconds) so tests control linger and timeouts.
"""

from __future__ import annotations

import collections
import itertools
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.client.errors import BufferExhaustedError
from spark_mq.client.futures import FutureRecordMetadata, ProduceRequestResult
from spark_mq.errors import SparkMQError
from spark_mq.storage.arrow_arrays import binary_array, from_numpy, to_numpy_filled
from spark_mq.storage.batch_decoder import decode_body
from spark_mq.storage.codecs import codec_for_id
from spark_mq.storage.record_batch import (
    ATTR_TRANSACTIONAL,
    CRC_START,
    HEADER_SIZE,
    BatchHeader,
    Body,
    encode_batch_parts,
    encode_varint_batch_parts,
)
from spark_mq.storage.varint_records import VARINT_MAX_RECORDS

#: Bytes a record costs in a batch besides its key and value (and its headers, estimated
#: apart): offset delta (4), timestamp (8), key, value and header-list offsets (4 each), and
#: the validity bits of the key, value and header columns, rounded up. What a batch costs
#: once (its header, the Arrow metadata, buffer padding) is the producer's
#: ``BATCH_OVERHEAD_BYTES``. ``tests/client/test_size_estimate.py`` checks both against
#: encoded batches: an estimate under the real size splits a full piece in two, one over it
#: leaves every record batch short of ``max.request.size``.
RECORD_OVERHEAD_BYTES = 25


def record_size(key: bytes | None, value: bytes | None, header_bytes: int = 0) -> int:
    """What ``send()`` counts one record as, against ``batch.size``, ``max.request.size`` and
    ``buffer.memory``: its key, value and headers (``header_bytes``, the estimate
    ``_normalize_headers`` gives) and :data:`RECORD_OVERHEAD_BYTES`."""
    size = RECORD_OVERHEAD_BYTES + header_bytes
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    return size


TP = tuple[str, int]
Callback = Callable[[Any, Exception | None], None]

# Header fields an idempotent producer rewrites: producerId, producerEpoch, baseSequence.
_PRODUCER_FIELDS = struct.Struct(">qhi")
_PRODUCER_FIELDS_AT = 43
_CRC = struct.Struct(">I")
_CRC_AT = 17
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21


def stamp_header(
    header: bytes,
    body: Body | list[Body],
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    transactional: bool = False,
) -> bytes:
    """A copy of the 61-byte batch ``header`` with the producer fields (and, for a
    transactional producer, the transactional attribute bit) set and the CRC computed over it
    (from ``attributes`` on) and ``body`` (one buffer, or the parts that joined are the
    body)."""
    stamped = bytearray(header)
    if transactional:
        (attributes,) = _ATTRIBUTES.unpack_from(stamped, _ATTRIBUTES_AT)
        _ATTRIBUTES.pack_into(stamped, _ATTRIBUTES_AT, attributes | ATTR_TRANSACTIONAL)
    _PRODUCER_FIELDS.pack_into(
        stamped, _PRODUCER_FIELDS_AT, producer_id, producer_epoch, base_sequence
    )
    crc = crc32c.crc32c(memoryview(stamped)[CRC_START:])
    for part in body if isinstance(body, list) else (body,):
        crc = crc32c.crc32c(part, crc)
    _CRC.pack_into(stamped, _CRC_AT, crc)
    return bytes(stamped)


class ProducerBatch:
    """One partition's batch: record lists while open, an encoded header and body once
    drained (or from the start, for a batch ``send_batch()`` encoded)."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "body",
        "callbacks",
        "created",
        "header",
        "headers",
        "keys",
        "last_error",
        "max_size",
        "partition",
        "record_count",
        "result",
        "retry_at",
        "sent_at",
        "size",
        "stamp",
        "timestamps",
        "topic",
        "values",
        "wire",
        "wire_size",
    )

    def __init__(self, topic: str, partition: int, created: float, max_size: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.created = created
        #: The size this batch may grow to while batches of its partition wait ahead of it.
        self.max_size = max_size
        self.values: list[bytes | None] = []
        self.timestamps: list[float] = []
        self.keys: list[bytes | None] | None = None
        self.headers: list[Any] | None = None
        self.callbacks: list[tuple[int, Callback]] | None = None
        self.record_count = 0
        self.size = 0
        self.result = ProduceRequestResult(topic, partition)
        # The encoded header (producer fields and CRC unset) and body, once encoded: the
        # body's parts, which joined are the body (see encode_batch_gathered).
        self.header: bytes | None = None
        self.body: list[Body] | None = None
        self.wire: list[Body] = []
        #: The bytes of ``wire`` (0 until encoded).
        self.wire_size = 0
        self.stamp: tuple[int, int, int] | None = None
        self.base_sequence: int | None = None
        self.attempts = 0
        self.retry_at = 0.0
        #: When its latest produce request went out (the sender's clock), for the latency.
        self.sent_at = 0.0
        # The retriable error of the last failed attempt, for the delivery timeout's message.
        self.last_error: SparkMQError | None = None

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)

    def encode(
        self,
        codec: str,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        transactional: bool = False,
    ) -> None:
        """Make ``wire`` the batch's bytes with these producer fields (-1s when not
        idempotent), marked transactional if asked. Record lists are encoded once; later
        calls only restamp the header (and compute the CRC again)."""
        stamp = (producer_id, producer_epoch, base_sequence)
        if self.header is None:
            encoded = self._encode_small(codec)
            if encoded is not None:
                header, body = encoded
            else:
                stamps = np.array(self.timestamps, dtype=np.float64).astype(np.int64)
                header, body = encode_batch_parts(
                    binary_array(self.values),
                    key=None if self.keys is None else binary_array(self.keys),
                    timestamp=from_numpy(stamps),
                    headers=self.headers,
                    codec=codec,
                )
            self.header = bytes(header)
            self.body = [body]
            # The encoded bytes hold the data now; the timestamps stay for the metadata.
            self.values = []
            self.keys = None
            self.headers = None
        elif stamp == self.stamp:
            return
        assert self.body is not None
        stamped = stamp_header(self.header, self.body, *stamp, transactional=transactional)
        self.wire = [stamped, *self.body]
        self.wire_size = sum(memoryview(b).nbytes for b in self.wire)
        self.stamp = stamp

    def _encode_small(self, codec: str) -> tuple[bytearray, Body] | None:
        """A small batch as Kafka's varint records, straight from the lists (no Arrow framing
        on the wire or on disk, and no Arrow arrays to build); None for a batch that gets an
        Arrow body (too many records, or timestamps a varint body cannot hold)."""
        if self.record_count > VARINT_MAX_RECORDS:
            return None
        try:
            return encode_varint_batch_parts(
                self.values,
                self.keys,
                [int(ts) for ts in self.timestamps],
                self.headers,
                codec=codec,
            )
        except OverflowError:
            return None

    def record_timestamp(self, index: int) -> int:
        return int(self.timestamps[index]) if self.timestamps else -1

    def split(self, piece_bytes: int) -> list[ProducerBatch]:
        """This batch, which the broker refused as too large, as at least two batches of about
        ``piece_bytes`` each (at least one record each), holding its records in order.

        The encoded body is decoded to its Arrow columns, which are sliced and encoded again
        with the batch's codec: no per-record Python. The parts inherit what the batch had
        that outlives a send: creation time (``delivery.timeout.ms`` still counts from the
        first ``send()``), callbacks and record timestamps, and for an idempotent producer
        consecutive ranges of its sequence numbers (the broker refused the batch before
        looking at them, so none is used). Memory accounting is the accumulator's
        (:meth:`RecordAccumulator.split_and_reenqueue`).
        """
        assert self.header is not None and self.body is not None, "only a sent batch is split"
        count = self.record_count
        assert count > 1, "a batch of one record cannot be split"
        header = BatchHeader.unpack_from(self.header)
        columns = decode_body(b"".join([self.header, *self.body]), 0, header)
        bounds = _piece_bounds(columns, piece_bytes)
        codec = codec_for_id(header.codec_id)
        out = []
        for start, stop in itertools.pairwise(bounds):
            rows = columns.slice(start, stop - start)
            piece_header, piece_body = encode_batch_parts(
                rows.column(3),
                key=rows.column(2),
                timestamp=rows.column(1),
                headers=rows.column(4),
                codec=codec,
                body_encoding="auto",
            )
            part = ProducerBatch(self.topic, self.partition, self.created, self.max_size)
            part.header = bytes(piece_header)
            part.body = [piece_body]
            part.record_count = stop - start
            # The parts' sizes add up to the batch's, which buffer.memory counted.
            part.size = self.size * stop // count - self.size * start // count
            if self.timestamps:
                part.timestamps = self.timestamps[start:stop]
            if self.callbacks is not None:
                part.callbacks = [
                    (index - start, callback)
                    for index, callback in self.callbacks
                    if start <= index < stop
                ]
            if self.base_sequence is not None:
                part.base_sequence = (self.base_sequence + start) % (2**31)
            out.append(part)
        self.result.split(bounds[:-1], [part.result for part in out])
        return out


def size_ranges(sizes: np.ndarray[Any, Any], limit: int) -> list[tuple[int, int]]:
    """Consecutive row ranges whose ``sizes`` add up to at most ``limit`` bytes each (a row
    larger than that alone): how ``send_batch()`` cuts a table into batches and how a
    refused batch is cut into parts. One ``searchsorted`` per range, none per row."""
    total = int(sizes.sum())
    if total <= limit:
        return [(0, len(sizes))]
    ends = np.cumsum(sizes)
    out = []
    start = 0
    base = 0
    while start < len(sizes):
        stop = int(np.searchsorted(ends, base + limit, side="right"))
        stop = max(stop, start + 1)
        out.append((start, stop))
        base = int(ends[stop - 1])
        start = stop
    return out


def _piece_bounds(columns: pa.RecordBatch, piece_bytes: int) -> list[int]:
    """Row bounds that cut a batch's body into at least two pieces of at most
    ``piece_bytes`` of keys and values each (:func:`size_ranges`): a record much larger than
    the rest ends up alone at once, not after a halving per refusal."""
    count = columns.num_rows
    sizes = np.full(count, RECORD_OVERHEAD_BYTES, dtype=np.int64)
    for index in (2, 3):  # key, value
        sizes += to_numpy_filled(pc.binary_length(columns.column(index)), 0)
    ranges = size_ranges(sizes, max(piece_bytes, 1))
    if len(ranges) == 1:
        return [0, count // 2, count]
    return [0, *(stop for _, stop in ranges)]


class RecordAccumulator:
    """Per-partition open batches and queues of closed ones (see the module docstring)."""

    def __init__(
        self,
        *,
        batch_size: int,
        max_batch_bytes: int | None = None,
        linger_ms: int,
        buffer_memory: int,
        max_block_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._batch_size = batch_size
        self._max_batch_bytes = max(max_batch_bytes or batch_size, batch_size)
        self._linger_s = linger_ms / 1000
        self._buffer_memory = buffer_memory
        self._max_block_ms = max_block_ms
        self._clock = clock
        self.lock = threading.Lock()
        self._space = threading.Condition(self.lock)
        #: What each thread blocked in :meth:`_wait_for_space` waits for ``_used`` to fall to.
        self._resume_at: list[int] = []
        #: How many times the waiting threads were released (see :meth:`_wait_for_space`).
        self._releases = 0
        self._open: dict[TP, ProducerBatch] = {}
        #: Set once the sender has stopped for good (:meth:`shut`): appends raise it.
        self._shut: SparkMQError | None = None
        #: Topics that refused a batch as too large: their batches no longer grow past
        #: batch.size (see the module docstring).
        self._capped: set[str] = set()
        self._queues: dict[TP, collections.deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._used = 0
        self._flushes = 0
        self._closing = False
        #: Called (without the lock) when a batch becomes ready or is created; the sender
        #: sets it to wake itself.
        self.wakeup: Callable[[], None] = lambda: None

    # -- appending (user threads) ---------------------------------------------------------

    def append(  # noqa: PLR0917 (positional: the per-record hot path)
        self,
        topic: str,
        partition: int,
        timestamp_ms: float,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
        size: int,
        callback: Callback | None,
    ) -> FutureRecordMetadata:
        """Add one record to its partition's open batch; returns its future."""
        tp = (topic, partition)
        lock = self.lock
        lock.acquire()
        try:
            if self._shut is not None:
                raise self._shut
            batch = self._open.get(tp)
            # The common case, in as few steps as possible (this runs once per send()): a
            # keyless record without headers or callback that stays in the open batch
            # without filling it, or that grows it while earlier batches are queued.
            if (
                batch is not None
                and key is None
                and headers is None
                and callback is None
                and batch.keys is None
                and batch.headers is None
                and self._used + size <= self._buffer_memory
                and not self._resume_at
                and (
                    batch.size + size < self._batch_size
                    or (batch.size + size <= batch.max_size and self._queues.get(tp))
                )
            ):
                index = batch.record_count
                batch.record_count = index + 1
                batch.values.append(value)
                batch.timestamps.append(timestamp_ms)
                batch.size += size
                self._used += size
                return FutureRecordMetadata(batch.result, index, timestamp_ms)
            future, wake = self._append_slow(
                tp, batch, timestamp_ms, key, value, headers, size, callback
            )
        finally:
            lock.release()
        if wake:
            self.wakeup()
        return future

    def _append_slow(  # noqa: PLR0917
        self,
        tp: TP,
        batch: ProducerBatch | None,
        timestamp_ms: float,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
        size: int,
        callback: Callback | None,
    ) -> tuple[FutureRecordMetadata, bool]:
        """:meth:`append` in full (under the lock): waits for buffer space, opens and closes
        batches, keys, headers and callbacks. Returns the future and whether to wake the
        sender."""
        wake = False
        if self._must_wait(size):
            self._wait_for_space(size)
            batch = self._open.get(tp)  # the sender may have closed it meanwhile
        if batch is None or (
            batch.size + size > self._batch_size
            and batch.record_count
            and (batch.size + size > batch.max_size or not self._queues.get(tp))
        ):
            if batch is not None:
                self._close(tp, batch)
            batch = self._open[tp] = ProducerBatch(
                tp[0], tp[1], self._clock(), self.max_batch_bytes(tp[0])
            )
            self._incomplete.add(batch)
            wake = True
        index = batch.record_count
        batch.record_count = index + 1
        batch.values.append(value)
        batch.timestamps.append(timestamp_ms)
        if key is not None:
            if batch.keys is None:
                batch.keys = [None] * index
            batch.keys.append(key)
        elif batch.keys is not None:
            batch.keys.append(None)
        if headers is not None:
            if batch.headers is None:
                batch.headers = [None] * index
            batch.headers.append(headers)
        elif batch.headers is not None:
            batch.headers.append(None)
        if callback is not None:
            if batch.callbacks is None:
                batch.callbacks = []
            batch.callbacks.append((index, callback))
        batch.size += size
        self._used += size
        if batch.size >= self._batch_size and not self._queues.get(tp):
            self._close(tp, batch)
            wake = True
        return FutureRecordMetadata(batch.result, index, timestamp_ms), wake

    def append_encoded(
        self, topic: str, partition: int, header: bytes, body: list[Body], record_count: int
    ) -> ProduceRequestResult:
        """Queue a batch ``send_batch()`` encoded (after anything ``send()`` queued before):
        its header, whose producer fields and CRC the sender sets (:func:`stamp_header`),
        and its body's parts."""
        size = HEADER_SIZE + sum(memoryview(part).nbytes for part in body)
        with self.lock:
            if self._shut is not None:
                raise self._shut
            if self._must_wait(size):
                self._wait_for_space(size)
            tp = (topic, partition)
            open_batch = self._open.get(tp)
            if open_batch is not None:
                self._close(tp, open_batch)
            batch = ProducerBatch(topic, partition, self._clock())
            batch.header = header
            batch.body = body
            batch.record_count = record_count
            batch.size = size
            self._incomplete.add(batch)
            self._used += size
            self._queue(tp).append(batch)
        self.wakeup()
        return batch.result

    def max_batch_bytes(self, topic: str) -> int:
        """The size a batch of ``topic`` may grow to under load: ``max.request.size``, or
        ``batch.size`` once the topic refused a batch as too large."""
        return self._batch_size if topic in self._capped else self._max_batch_bytes

    def is_capped(self, topic: str) -> bool:
        return topic in self._capped

    def split_and_reenqueue(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """Split a batch the broker refused as too large into batches of about
        ``batch.size`` (:meth:`ProducerBatch.split`) and queue them at the head of its
        partition, in sequence order, in its place; cap its topic (see the module
        docstring). Returns the parts."""
        parts = batch.split(self._batch_size)
        with self.lock:
            if batch.topic not in self._capped:
                self._capped.add(batch.topic)
                for (topic, _), open_batch in self._open.items():
                    if topic == batch.topic:
                        open_batch.max_size = self._batch_size
            if batch in self._incomplete:
                self._incomplete.discard(batch)
                self._incomplete.update(parts)
            queue = self._queue(batch.tp)
            for part in reversed(parts):
                part.retry_at = batch.retry_at
                self._insert_in_order(queue, part)
        return parts

    def _queue(self, tp: TP) -> collections.deque[ProducerBatch]:
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = collections.deque()
        return queue

    def _close(self, tp: TP, batch: ProducerBatch) -> None:
        del self._open[tp]
        self._queue(tp).append(batch)

    def _must_wait(self, size: int) -> bool:
        """Whether adding ``size`` bytes waits for room: when they do not fit, or when
        another thread waits already (it would otherwise watch later callers take the room
        it waits for)."""
        return bool(self._used) and (
            self._used + size > self._buffer_memory or bool(self._resume_at)
        )

    def _wait_for_space(self, size: int) -> None:
        """Block (lock held, released while waiting) until ``size`` more bytes fit.

        A full buffer means the producer is ahead of the broker. Resuming as soon as one
        completed batch freed room would then wake this thread for every batch the broker
        answers, to queue one batch each time. Instead it resumes once a quarter of
        ``buffer.memory`` is free besides ``size`` (or the buffer is empty), and then queues
        a run of batches: the sender still has three quarters queued. Every thread waiting
        then is released, and goes on once its batch fits (a thread that waits for a larger
        batch must not wait again for the threshold just because another went first). At the
        ``max.block.ms`` deadline, room for ``size`` alone is enough."""
        deadline = self._clock() + self._max_block_ms / 1000
        resume_at = self._buffer_memory - size - self._buffer_memory // 4
        releases = self._releases
        self._resume_at.append(resume_at)
        try:
            while self._used > max(resume_at, 0) and (
                self._releases == releases or self._used + size > self._buffer_memory
            ):
                remaining = deadline - self._clock()
                if remaining <= 0:
                    if self._used + size <= self._buffer_memory:
                        return
                    self._raise_exhausted(size)
                self._space.wait(remaining)
        finally:
            self._resume_at.remove(resume_at)

    def _raise_exhausted(self, size: int) -> None:
        raise BufferExhaustedError(
            f"send() waited max.block.ms={self._max_block_ms} for {size} bytes of "
            f"buffer.memory={self._buffer_memory} ({self._used} in use by unsent or "
            "unacknowledged records); the broker is slower than the producer or "
            "unreachable",
            buffer_memory=self._buffer_memory,
            max_block_ms=self._max_block_ms,
        )

    # -- draining (sender thread) ---------------------------------------------------------

    def drain(
        self,
        can_send: Callable[[TP], int],
        max_request_bytes: int,
    ) -> list[ProducerBatch]:
        """Take the ready batches the sender may send now. ``can_send(tp)`` says how many
        batches of a partition may go (0 while its earlier batches must be answered first).
        The first batch is always taken whole; later ones only while the total estimate stays
        within ``max_request_bytes``."""
        now = self._clock()
        out: list[ProducerBatch] = []
        total = 0
        with self.lock:
            force = self._flushes > 0 or self._closing
            for tp, batch in list(self._open.items()):
                if (
                    force
                    or batch.size >= self._batch_size
                    or (batch.created + self._linger_s <= now and self._sendable(tp, can_send))
                ):
                    self._close(tp, batch)
            for tp, queue in self._queues.items():
                if not queue:
                    continue
                allowed = can_send(tp)
                while queue and allowed > 0 and queue[0].retry_at <= now:
                    size = queue[0].size
                    if out and total + size > max_request_bytes:
                        return out
                    out.append(queue.popleft())
                    total += size
                    allowed -= 1
        return out

    def _sendable(self, tp: TP, can_send: Callable[[TP], int]) -> bool:
        """Whether ``tp``'s open batch, its linger over, would go out now (lock held): only
        when no batch of the partition waits ahead of it and the sender may send one.
        Otherwise it stays open and keeps filling, as Kafka's last batch of a partition does:
        with ``linger.ms=0`` closing it at every drain would queue a batch per record while
        the partition's requests are in flight, each then sent on its own (an idempotent
        producer sends one batch per partition per request), so the backlog, and the latency
        of every record behind it, would grow without bound at rates the broker could take
        in larger batches."""
        return not self._queues.get(tp) and can_send(tp) > 0

    def next_ready_in(self, can_send: Callable[[TP], int]) -> float | None:
        """Seconds until a batch may become ready (0: now), None if nothing is waiting. An
        open batch that may not go out yet (see :meth:`_sendable`) is not waited for: what
        unblocks it (a response, the queue ahead draining) wakes the sender anyway."""
        now = self._clock()
        soonest: float | None = None
        with self.lock:
            force = self._flushes > 0 or self._closing
            for tp, batch in self._open.items():
                full = force or batch.size >= self._batch_size
                if not full and not self._sendable(tp, can_send):
                    continue
                wait = 0.0 if full else batch.created + self._linger_s - now
                soonest = wait if soonest is None else min(soonest, wait)
            for tp, queue in self._queues.items():
                if queue and can_send(tp) > 0:
                    wait = queue[0].retry_at - now
                    soonest = wait if soonest is None else min(soonest, wait)
        return None if soonest is None else max(soonest, 0.0)

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch that failed retriably back at the head of its queue, in sequence
        order, to be sent again no earlier than ``retry_at``."""
        batch.retry_at = retry_at
        with self.lock:
            self._insert_in_order(self._queue(batch.tp), batch)

    @staticmethod
    def _insert_in_order(queue: collections.deque[ProducerBatch], batch: ProducerBatch) -> None:
        """Put a batch back into its queue (lock held): at the head, or, with a sequence,
        after the queued batches of earlier sequences."""
        if batch.base_sequence is None:
            queue.appendleft(batch)
            return
        # Earlier sequences go first; batches never sent (no sequence yet) stay behind.
        index = len(queue)
        for i, queued in enumerate(queue):
            if queued.base_sequence is None or queued.base_sequence > batch.base_sequence:
                index = i
                break
        queue.insert(index, batch)

    def has_earlier_queued(self, tp: TP, sequence: int) -> bool:
        """Whether a batch of ``tp`` with a sequence below ``sequence`` waits for a retry."""
        with self.lock:
            return any(
                b.base_sequence is not None and b.base_sequence < sequence
                for b in self._queues.get(tp, ())
            )

    def reset_sequences(self) -> None:
        """Forget the sequences of queued batches (a new producer epoch renumbers them)."""
        with self.lock:
            for queue in self._queues.values():
                for b in queue:
                    b.base_sequence = None

    def partitions_with_data(self) -> list[TP]:
        with self.lock:
            return [*self._open, *(tp for tp, q in self._queues.items() if q)]

    def complete(self, batch: ProducerBatch) -> None:
        """Release a completed batch's memory (the sender calls this after completing it)."""
        with self.lock:
            if batch in self._incomplete:
                self._incomplete.discard(batch)
                self._used -= batch.size
                if self._resume_at and (self._used == 0 or self._used <= max(self._resume_at)):
                    self._releases += 1
                    self._space.notify_all()

    def expired(self, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Remove and return queued (not in-flight) batches older than the delivery timeout."""
        now = self._clock()
        out: list[ProducerBatch] = []
        with self.lock:
            for tp, batch in list(self._open.items()):
                if now - batch.created >= delivery_timeout_s:
                    del self._open[tp]
                    out.append(batch)
            for queue in self._queues.values():
                while queue and now - queue[0].created >= delivery_timeout_s:
                    out.append(queue.popleft())
        return out

    def shut(self, error: SparkMQError) -> list[ProducerBatch]:
        """The sender stopped for good with ``error``: every batch not yet sent is removed
        and returned (the caller fails them), and every later append raises ``error``, so
        that a send() that passed the producer's own check just before the sender stopped
        cannot leave a record whose future never completes."""
        with self.lock:
            self._shut = error
        return self.abort_all()

    def abort_all(self) -> list[ProducerBatch]:
        """Remove and return every batch not yet sent (close without waiting)."""
        with self.lock:
            out = list(self._open.values())
            self._open.clear()
            for queue in self._queues.values():
                out.extend(queue)
                queue.clear()
        return out

    # -- flush and close ------------------------------------------------------------------

    def begin_flush(self) -> list[ProducerBatch]:
        """Make every batch ready now; returns the batches to wait for."""
        with self.lock:
            self._flushes += 1
            pending = list(self._incomplete)
        self.wakeup()
        return pending

    def end_flush(self) -> None:
        with self.lock:
            self._flushes -= 1

    def begin_close(self) -> None:
        with self.lock:
            self._closing = True
        self.wakeup()

    @property
    def closing(self) -> bool:
        return self._closing

    def has_unsent(self) -> bool:
        with self.lock:
            return bool(self._open) or any(self._queues.values())

    def incomplete(self) -> Iterable[ProducerBatch]:
        with self.lock:
            return list(self._incomplete)

    @property
    def buffered_bytes(self) -> int:
        return self._used
