"""The producer: ``send()`` one record at a time, or ``send_batch()`` a whole Arrow table.

``send()`` does the minimum per record in the caller's thread (normalise key and value,
estimate the size, pick a partition, append to the accumulator) and returns a cheap future;
the sender thread batches, encodes, compresses, sends, retries and completes futures.
``send_batch()`` is the columnar path: keyless rows go in whole batches, slices of the table
(split at ``max.request.size``), to the sticky partition; otherwise it hashes the key column
once with numpy, groups rows by partition with one stable argsort, and encodes one batch per
partition (split at ``max.request.size``) with
:func:`~spark_mq.storage.record_batch.encode_batch_parts`; no Python code runs per record.
See ``docs/clients.md`` for every setting, the threading model and the delivery guarantees.

With ``transactional.id`` set the producer is transactional: ``init_transactions()`` once,
then ``begin_transaction()``, sends (and ``send_offsets_to_transaction()``), and
``commit_transaction()`` or ``abort_transaction()``; or ``prepare_transaction()`` for a
two-phase commit decided elsewhere. The state machine is in
:mod:`spark_mq.client.transactions`, the coordinator requests in
:mod:`spark_mq.client.txn_manager`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from os import PathLike
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.client.accumulator import (
    RECORD_OVERHEAD_BYTES,
    Callback,
    RecordAccumulator,
    record_size,
    size_ranges,
)
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ProducerConfig, client_config_props
from spark_mq.client.futures import FutureBatchMetadata, FutureRecordMetadata
from spark_mq.client.group.member_state import ConsumerGroupMetadata
from spark_mq.client.group.offsets import OffsetAndMetadata, normalize_offsets
from spark_mq.client.interceptors import ProducerInterceptors, ProducerRecord
from spark_mq.client.partitioner import Partitioner, check_partition
from spark_mq.client.records import TopicPartition
from spark_mq.client.sender import REFUSALS, Sender
from spark_mq.client.transactions import PreparedTransaction, TxnState
from spark_mq.client.txn_manager import TransactionManager
from spark_mq.errors import InvalidRecordError, RecordTooLargeError, SparkMQError, UsageError
from spark_mq.protocol.transactions import owner_prefix_problem
from spark_mq.storage.arrow_arrays import from_numpy, to_numpy_filled
from spark_mq.storage.record_batch import HEADER_SIZE, Body, encode_batch_gathered

#: One batch to encode: its partition, the columns, and the row range ``[start, stop)``.
_Piece = tuple[int, dict[str, pa.Array | pa.ChunkedArray], int, int]

#: Bytes a batch with an Arrow body costs besides its records (61-byte header and the Arrow
#: IPC framing), rounded up: what batches of more than ``VARINT_MAX_RECORDS`` records leave
#: free of ``max.request.size``. Smaller batches get a varint body, which costs only the
#: header (``HEADER_SIZE``): so a record fits ``max.request.size`` when it fits with the
#: header alone, as in Kafka.
BATCH_OVERHEAD_BYTES = 1024
#: Columns ``send_batch()`` understands.
BATCH_COLUMNS = ("value", "key", "partition", "timestamp", "headers")

_time = time.time


def _to_bytes(what: str, data: object) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidRecordError(
        f"record {what} must be bytes (or str, sent as UTF-8), got {type(data).__name__}; "
        "serialize it first"
    )


def _normalize_headers(headers: object) -> tuple[list[tuple[str, bytes | None]], int]:
    """Headers as a list of (str, bytes) pairs, and their estimated size."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    size = 0
    try:
        for key, value in items:  # type: ignore[attr-defined]
            if not isinstance(key, str):
                raise TypeError(f"header key {key!r} is not a str")
            data = None if value is None else _to_bytes(f"header {key!r}", value)
            out.append((key, data))
            size += len(key) + (len(data) if data is not None else 0) + 8
    except (TypeError, ValueError) as exc:
        raise InvalidRecordError(
            f"headers must be a list of (str, bytes) pairs or a dict: {exc}"
        ) from exc
    return out, size


class Producer:
    """Publishes records to topics.

    Give exactly one of ``path`` (the log directory whose local broker to use, started if
    none runs) or ``bootstrap_servers``; every other setting is a Kafka key, as a keyword
    with underscores (``linger_ms=5``) or dotted (``**{"linger.ms": 5}``), or in ``config``.

    Example (assumes the broker can be started for the directory)::

        with Producer(path="/data/mq", linger_ms=5) as producer:
            future = producer.send("events", b"hello", key=b"user-1")
            producer.flush()
            print(future.get().offset)
            producer.send_batch("events", pyarrow.table({"value": [b"a", b"b"]}))

    Settings are checked before anything starts:

    >>> Producer(path="/tmp/mq", lingr_ms=5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_mq.errors.ConfigError: unknown producer setting 'lingr_ms'; did you mean 'linger.ms'? ...
    >>> Producer(linger_ms=5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_mq.errors.ConfigError: producer: give exactly one of path=DIR ...
    """

    def __init__(
        self,
        path: str | PathLike[str] | None = None,
        *,
        bootstrap_servers: str | Sequence[str] | None = None,
        config: Mapping[str, object] | None = None,
        **configs: object,
    ) -> None:
        self.config = ProducerConfig.from_user(
            client_config_props(path, bootstrap_servers, config, configs)
        )
        self.config.check_endpoint()
        cfg = self.config
        self._closed = False
        self._close_called = False
        #: A refusal of this producer's identity met by send() on the caller's thread.
        self._refused: SparkMQError | None = None
        # A producer creates the log of ``path`` if there is none yet: writing is how a log
        # starts (readers refuse a path that holds none).
        self._cluster = Cluster(cfg, create_log=True)
        self._partitioner = Partitioner(cfg.partitioner, batch_size=cfg.batch_size)
        self._interceptors = ProducerInterceptors(cfg.interceptors)
        self._intercept_send = bool(cfg.interceptors) and any(
            hasattr(i, "on_send") for i in cfg.interceptors
        )
        #: One flag for send() to test: closed, or interceptors to run.
        self._slow_send = self._intercept_send
        # What many records may add up to in one (Arrow) batch; at least 1, so that with a
        # small max.request.size every record goes alone in a (varint) batch.
        self._max_request_size = max(cfg.max_request_size - BATCH_OVERHEAD_BYTES, 1)
        # What one record may be: alone in its batch it has a varint body, which costs the
        # batch header and nothing else (its own overhead is within the record's estimate).
        self._max_record_bytes = cfg.max_request_size - HEADER_SIZE
        self._accumulator = RecordAccumulator(
            batch_size=min(cfg.batch_size, self._max_request_size),
            max_batch_bytes=self._max_request_size,
            linger_ms=cfg.linger_ms,
            buffer_memory=cfg.buffer_memory,
            max_block_ms=cfg.max_block_ms,
        )
        # Bound once: send() runs per record, and each attribute lookup there shows.
        self._partition = self._partitioner.partition
        self._append = self._accumulator.append
        self._txn = TransactionManager(cfg, self._cluster) if cfg.transactional_id else None
        self._txn_machine = None if self._txn is None else self._txn.machine
        if self._txn is not None:
            # send() checks the transaction state on its slow path.
            self._slow_send = True
        self._sender = Sender(
            cfg,
            self._accumulator,
            self._cluster,
            self._interceptors,
            on_fatal=self._failed,
            txn=self._txn,
        )
        self._sender.start()

    # -- one record -----------------------------------------------------------------------

    def send(  # noqa: PLR0917 (Kafka's positional order: topic, value, key, ...)
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        callback: Callback | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns the future of its :class:`~spark_mq.RecordMetadata`.

        ``callback(metadata, exception)`` runs on the sender thread once the record's batch
        is acknowledged or failed. Raises :class:`~spark_mq.RecordTooLargeError` at once for
        a record over ``max.request.size``, and blocks up to ``max.block.ms`` for buffer
        space or for the topic's metadata.
        """
        # The per-record path: every line here costs throughput (see docs/clients.md).
        if self._slow_send:
            if self._closed:
                self._raise_closed("send")
            machine = self._txn_machine
            if machine is not None and not machine.in_transaction:
                machine.require("send")
            if self._intercept_send:
                record = self._interceptors.on_send(
                    ProducerRecord(topic, partition, key, value, timestamp_ms, headers)
                )
                topic, partition, key, value, timestamp_ms, headers = record
        if value is not None and value.__class__ is not bytes:
            value = _to_bytes("value", value)
        if key is not None and key.__class__ is not bytes:
            key = _to_bytes("key", key)
        header_size = 0
        if headers is not None:
            headers, header_size = _normalize_headers(headers)
        size = record_size(key, value, header_size)
        if size > self._max_record_bytes:
            self._too_large(size)
        count = self._cluster.partition_counts.get(topic)
        if count is None:
            count = self._wait_for_topic(topic)
        if partition is None:
            partition = self._partition(topic, key, count, size)
        elif not 0 <= partition < count:
            check_partition(topic, partition, count)
        return self._append(
            topic,
            partition,
            _time() * 1000.0 if timestamp_ms is None else timestamp_ms,
            key,
            value,
            headers,
            size,
            callback,
        )

    def _failed(self, exc: BaseException) -> None:
        self._closed = self._slow_send = True

    def _refusal(self) -> SparkMQError | None:
        """The broker's refusal of this producer's identity (SASL or TLS), if one stopped the
        sender or a metadata wait of send(): what the next send() and flush() raise."""
        fatal = self._sender.fatal_error
        if isinstance(fatal, REFUSALS):
            return fatal
        return self._refused

    def _raise_closed(self, call: str) -> None:
        if self._txn is not None and self._txn.machine.state is TxnState.FATAL_ERROR:
            self._txn.machine.require(call)  # raises the fatal error (fenced)
        refusal = self._refusal()
        if refusal is not None and not self._close_called:
            raise refusal
        fatal = self._sender.fatal_error
        if fatal is not None:
            raise UsageError(
                f"{call}() on a producer whose sender thread failed ({fatal!r}); create a new "
                "producer"
            ) from fatal
        raise UsageError(f"{call}() on a closed producer")

    def _too_large(self, size: int) -> None:
        limit = self.config.max_request_size
        raise RecordTooLargeError(
            f"a record of about {size + HEADER_SIZE} bytes (with its batch header) "
            f"is over max.request.size={limit}; nothing was sent. Raise max.request.size "
            "(and the topic's max.message.bytes) or split the record",
            size_bytes=size + HEADER_SIZE,
            max_bytes=limit,
        )

    def _wait_for_topic(self, topic: str) -> int:
        try:
            return self._cluster.wait_for_topic(
                topic, timeout_ms=self.config.max_block_ms, allow_auto_create=True
            )
        except REFUSALS as exc:
            self._refused = exc
            raise

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of ``topic`` (waiting up to ``max.block.ms`` for metadata)."""
        count = self._cluster.partition_counts.get(topic) or self._wait_for_topic(topic)
        return list(range(count))

    def metrics(self) -> dict[str, dict[str, float]]:
        """Kafka's producer metrics over the last 30 s, as kafka-python shapes them:
        ``{"producer-metrics": {"record-send-rate": ..., ...}}`` (names and meaning in
        docs/clients.md). An average or maximum with nothing recorded is NaN."""
        return self._sender.metrics.snapshot()

    # -- a whole table --------------------------------------------------------------------

    def send_batch(self, topic: str, table: pa.Table | pa.RecordBatch) -> FutureBatchMetadata:
        """Queue every row of an Arrow table: ``value`` (binary or string) and optional
        ``key``, ``partition`` (int), ``timestamp`` (int64 ms or an Arrow timestamp) and
        ``headers`` (``list<struct<key: string, value: binary>>``) columns.

        Rows with a null or missing ``partition`` are partitioned like ``send()`` would: by
        key hash; keyless rows stick to a partition until about ``batch.size`` bytes went
        there, or go row by row with ``round_robin``. When no row has a key or a partition,
        each encoded batch (a slice of up to ``max.request.size``) counts as one unit, so a
        batch's rows stay together. Each partition's rows keep their order and are encoded into
        batches of up to ``max.request.size``. A row over that limit raises
        RecordTooLargeError before anything is queued. Returns a future of the list of
        :class:`~spark_mq.client.futures.BatchMetadata` written.

        A table made of several record batches (``pa.concat_tables``) is cut into batches
        across them, without concatenating keyless columns first: the way to fill batches up
        to ``max.request.size`` from small record batches.
        """
        if self._closed:
            self._raise_closed("send_batch")
        if self._txn is not None:
            self._txn.machine.require("send_batch")
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise UsageError(f"send_batch() takes a pyarrow Table or RecordBatch, not {table!r}")
        unknown = set(table.column_names) - set(BATCH_COLUMNS)
        if unknown or "value" not in table.column_names:
            raise InvalidRecordError(
                f"send_batch() needs a 'value' column and accepts only {', '.join(BATCH_COLUMNS)}"
                f"; got {', '.join(table.column_names)}"
            )
        n = table.num_rows
        if n == 0:
            return FutureBatchMetadata([], [])
        # A table of several record batches keeps its chunks: keyless pieces are slices of
        # it, gathered chunk by chunk, so pieces fill up to max.request.size across the
        # batches without a copy. Rows gathered per partition are one array each.
        columns: dict[str, pa.Array | pa.ChunkedArray] = {
            name: column.chunk(0) if column.num_chunks == 1 else column
            for name, column in zip(table.column_names, table.columns, strict=True)
        }
        sizes = self._row_sizes(columns)
        largest = int(sizes.argmax())
        if sizes[largest] > self._max_record_bytes:
            self._too_large(int(sizes[largest]))
        count = self._cluster.partition_counts.get(topic) or self._wait_for_topic(topic)
        keyless = self._keyless_pieces(topic, columns, count, sizes)
        pieces: Iterable[_Piece] = (
            keyless
            if keyless is not None
            else self._grouped_pieces(
                topic,
                {
                    name: column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
                    for name, column in columns.items()
                },
                count,
                sizes,
            )
        )
        results = []
        counts = []
        # Rows without a timestamp get the time of this call (CreateTime), every batch alike.
        now_ms = int(time.time() * 1000)
        for partition, group, start, stop in pieces:
            for header, body, rows_in_chunk in self._encode_chunk(group, start, stop, now_ms):
                results.append(
                    self._accumulator.append_encoded(topic, partition, header, body, rows_in_chunk)
                )
                counts.append(rows_in_chunk)
        return FutureBatchMetadata(results, counts)

    def _encode_chunk(
        self,
        columns: dict[str, pa.Array | pa.ChunkedArray],
        start: int,
        stop: int,
        now_ms: int,
    ) -> list[tuple[bytes, list[Body], int]]:
        """Encode rows ``start:stop`` as one batch (header, body parts, rows), or as several if
        the size estimate was short and the batch came out over ``max.request.size``.
        Uncompressed bodies are gathered from the columns' own buffers
        (:func:`~spark_mq.storage.record_batch.encode_batch_gathered`); the sender's
        ``sendmsg`` is then the only copy of the keys and values."""
        chunk = {k: v.slice(start, stop - start) for k, v in columns.items()}
        header, body = encode_batch_gathered(
            chunk["value"],
            key=chunk.get("key"),
            timestamp=chunk.get("timestamp"),
            headers=chunk.get("headers"),
            codec=self.config.compression_type,
            now_ms=now_ms,
            body_encoding="auto",
        )
        size = HEADER_SIZE + sum(memoryview(part).nbytes for part in body)
        if size <= self.config.max_request_size or stop - start == 1:
            return [(bytes(header), body, stop - start)]
        middle = (start + stop) // 2
        return self._encode_chunk(columns, start, middle, now_ms) + self._encode_chunk(
            columns, middle, stop, now_ms
        )

    @staticmethod
    def _row_sizes(columns: dict[str, pa.Array | pa.ChunkedArray]) -> np.ndarray[Any, Any]:
        sizes = np.full(len(columns["value"]), RECORD_OVERHEAD_BYTES, dtype=np.int64)
        for name in ("value", "key"):
            col = columns.get(name)
            if col is None or pa.types.is_null(col.type):
                continue
            sizes += to_numpy_filled(pc.binary_length(col), 0)
        headers = columns.get("headers")
        if headers is not None and headers.null_count < len(headers):
            # Headers are rare in bulk data: a rough per-row estimate from the whole column.
            sizes += headers.nbytes // max(len(headers), 1)
        return sizes

    def _keyless_pieces(
        self,
        topic: str,
        columns: dict[str, pa.Array | pa.ChunkedArray],
        count: int,
        sizes: np.ndarray[Any, Any],
    ) -> list[_Piece] | None:
        """When no row has a key or a partition and the partitioner keeps keyless rows in
        runs: each chunk of the table, whole, on its partition (a slice, no gather of rows).
        None otherwise."""
        for name in ("key", "partition"):
            column = columns.get(name)
            if column is not None and column.null_count < len(column):
                return None
        chunks = size_ranges(sizes, self._piece_bytes(topic))
        run_sizes = [int(sizes[start:stop].sum()) for start, stop in chunks]
        partitions = self._partitioner.keyless_runs(topic, count, run_sizes)
        if partitions is None:
            return None
        return [
            (partition, columns, start, stop)
            for partition, (start, stop) in zip(partitions, chunks, strict=True)
        ]

    def _grouped_pieces(
        self, topic: str, columns: dict[str, pa.Array], count: int, sizes: np.ndarray[Any, Any]
    ) -> Iterator[_Piece]:
        """Each partition's rows gathered in table order, in chunks. Partitions are chosen
        (and bad ones refused) before the first piece is taken."""
        groups = self._group(self._partitions(topic, columns, count, sizes))

        def pieces() -> Iterator[_Piece]:
            for partition, rows in groups:
                if rows is None:
                    group, group_sizes = columns, sizes
                else:
                    indices = from_numpy(rows)
                    group = {k: v.take(indices) for k, v in columns.items()}
                    group_sizes = sizes[rows]
                for start, stop in size_ranges(group_sizes, self._piece_bytes(topic)):
                    yield partition, group, start, stop

        return pieces()

    def _partitions(
        self, topic: str, columns: dict[str, pa.Array], count: int, sizes: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        keys = columns.get("key")
        if keys is not None and not pa.types.is_null(keys.type):
            if not (pa.types.is_binary(keys.type) or pa.types.is_string(keys.type)):
                raise InvalidRecordError(f"key column must be binary or string, not {keys.type}")
        else:
            keys = None
        given = columns.get("partition")
        if given is None or given.null_count == len(given):
            return self._partitioner.partition_array(topic, keys, count, sizes)
        if not pa.types.is_integer(given.type):
            raise InvalidRecordError(f"partition column must be integers, not {given.type}")
        parts: np.ndarray[Any, Any] = to_numpy_filled(given, -1).astype(np.int32)
        missing = np.nonzero(parts < 0)[0] if given.null_count else np.zeros(0, np.int64)
        if len(missing):
            sub_keys = keys.take(from_numpy(missing)) if keys is not None else None
            parts[missing] = self._partitioner.partition_array(
                topic, sub_keys, count, sizes[missing]
            )
        bad = np.nonzero((parts < 0) | (parts >= count))[0]
        if len(bad):
            check_partition(topic, int(parts[bad[0]]), count)
        return parts

    @staticmethod
    def _group(parts: np.ndarray[Any, Any]) -> list[tuple[int, np.ndarray[Any, Any] | None]]:
        """(partition, row indices) per partition, rows in table order; None means all."""
        first = int(parts[0])
        if int(parts.min()) == int(parts.max()):
            return [(first, None)]
        order = np.argsort(parts, kind="stable")
        ordered = parts[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        bounds = [0, *cuts.tolist(), len(parts)]
        return [(int(ordered[a]), order[a:b]) for a, b in itertools.pairwise(bounds)]

    def _piece_bytes(self, topic: str) -> int:
        """How large ``send_batch()`` makes a topic's batches: ``max.request.size``, or
        ``batch.size`` once the topic refused a batch as too large (see the accumulator)."""
        return min(self._accumulator.max_batch_bytes(topic), self._max_request_size)

    # -- transactions ---------------------------------------------------------------------

    def _transaction(self, call: str) -> tuple[TransactionManager, TxnState]:
        if self._txn is None:
            raise UsageError(
                f"{call}() needs a transactional producer: set transactional.id (e.g. "
                "Producer(path=..., transactional_id='my-app-0'))"
            )
        if self._closed:
            self._raise_closed(call)
        return self._txn, self._txn.machine.require(call)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with its coordinator, once, before any transaction:
        gets the producer id and a new epoch, which fences every older producer with the
        same id; the coordinator aborts (or finishes) what that producer left open.
        ``timeout`` in seconds (None: ``max.block.ms``); a timed out call may be repeated.

        Example (assumes the broker can be started for the directory)::

            producer = Producer(path="/data/mq", transactional_id="copier-0")
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("out", b"v")
            producer.commit_transaction()
        """
        txn, _ = self._transaction("init_transactions")
        txn.machine.transition(TxnState.INITIALIZING)
        try:
            producer_id, epoch = txn.init_producer_id(txn.deadline(timeout))
        except BaseException:
            txn.machine.transition(TxnState.UNINITIALIZED)  # no-op once fatal
            raise
        self._sender.set_producer(producer_id, epoch)
        txn.machine.transition(TxnState.READY)

    def begin_transaction(self) -> None:
        """Start a transaction (local: the coordinator hears of it with the first send)."""
        txn, _ = self._transaction("begin_transaction")
        txn.machine.transition(TxnState.IN_TRANSACTION)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        group_metadata: str | ConsumerGroupMetadata,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's offsets (next offset to read) as part of the
        transaction: the group sees them only if the transaction commits. Pass the
        consumer's :meth:`~spark_mq.Consumer.group_metadata` so that a consumer that lost its
        partitions to a rebalance cannot commit (a plain group id skips that check)."""
        txn, _ = self._transaction("send_offsets_to_transaction")
        if isinstance(group_metadata, str):
            group = ConsumerGroupMetadata(group_metadata, -1, "", None)
        elif isinstance(group_metadata, ConsumerGroupMetadata):
            group = group_metadata
        else:
            raise UsageError(
                "group_metadata must be a group id or consumer.group_metadata(), not "
                f"{type(group_metadata).__name__}"
            )
        if not group.group_id:
            raise UsageError("send_offsets_to_transaction() needs a group id (group.id)")
        given: dict[TopicPartition | tuple[str, int], int | OffsetAndMetadata] = {
            tp: value for tp, value in offsets.items()
        }
        normalized = normalize_offsets(given)
        if normalized:
            txn.add_offsets(normalized, group, txn.deadline(timeout))

    def _flush_transaction(self, txn: TransactionManager, call: str, deadline: float) -> None:
        """Send and acknowledge everything of the transaction, then check that nothing
        failed (a failure makes the transaction abortable: this raises)."""
        self.flush(max(deadline - self._cluster.clock(), 0.0))
        if txn.machine.has_error:
            txn.machine.require(call)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit: every record of the transaction becomes visible to
        ``read_committed`` readers at once. Raises TransactionAbortableError if a send of the
        transaction failed (call ``abort_transaction()``), ProducerFencedError if a newer
        producer took the transactional id. A call that timed out may be repeated."""
        txn, state = self._transaction("commit_transaction")
        deadline = txn.deadline(timeout)
        if state is TxnState.IN_TRANSACTION:
            txn.machine.transition(TxnState.COMMITTING_TRANSACTION)
        self._flush_transaction(txn, "commit_transaction", deadline)
        if txn.partitions or txn.has_offsets:
            txn.end_txn(True, deadline)
        txn.reset_transaction()
        txn.machine.transition(TxnState.READY)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: records not yet sent are dropped (their futures fail),
        those written are hidden from ``read_committed`` readers forever."""
        txn, state = self._transaction("abort_transaction")
        deadline = txn.deadline(timeout)
        if state is not TxnState.ABORTING_TRANSACTION:
            txn.machine.transition(TxnState.ABORTING_TRANSACTION)
        self._sender.wakeup()
        self.flush(max(deadline - self._cluster.clock(), 0.0))
        if txn.partitions or txn.has_offsets:
            txn.end_txn(False, deadline)
        txn.reset_transaction()
        if self._sender.needs_new_epoch:
            # A failed batch left a hole in some partition's sequence numbers: a new epoch
            # starts them again (the coordinator has nothing open to finish by now).
            self._sender.set_producer(*txn.init_producer_id(deadline))
        txn.machine.transition(TxnState.READY)

    def prepare_transaction(
        self, timeout: float | None = None, *, owner_prefix: str | None = None
    ) -> PreparedTransaction:
        """First phase of a two-phase commit: flush, then ask the coordinator to hold the
        transaction prepared (the ordinary ``transaction.timeout.ms`` no longer aborts it;
        the broker's ``transaction.prepared.max.timeout.ms`` does).
        Returns the handle to commit or abort it with, from any process, through
        :meth:`~spark_mq.Admin.complete_prepared_transactions`. The producer can begin no
        further transaction; ``close()`` leaves the prepared one alone.

        ``owner_prefix``, a strict prefix of this producer's ``transactional.id`` shared by
        every transaction the same decision completes (the tasks of one job), lets the
        coordinator give up on a decider that died: once the owner has been quiet for
        ``transaction.timeout.ms`` (no request for an id under the prefix, no
        :meth:`~spark_mq.Admin.owner_heartbeat`), it aborts the prepared transaction instead
        of holding back ``read_committed`` readers until the prepared limit."""
        txn, _ = self._transaction("prepare_transaction")
        problem = owner_prefix_problem(owner_prefix, txn.transactional_id)
        if problem is not None:
            raise UsageError(problem)
        deadline = txn.deadline(timeout)
        self._flush_transaction(txn, "prepare_transaction", deadline)
        handle = txn.prepare(deadline, owner_prefix)
        txn.machine.transition(TxnState.PREPARED_TRANSACTION)
        return handle

    @property
    def transaction_state(self) -> TxnState | None:
        """The transaction state (None for a producer without ``transactional.id``)."""
        return None if self._txn is None else self._txn.machine.state

    # -- lifecycle ------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until every record sent before the call is
        acknowledged or failed (raises RequestTimedOutError after ``timeout`` seconds)."""
        pending = self._accumulator.begin_flush()
        try:
            deadline = None if timeout is None else self._cluster.clock() + timeout
            for batch in pending:
                remaining = None if deadline is None else max(deadline - self._cluster.clock(), 0.0)
                if not batch.result.done():
                    batch.result.wait(remaining)
        finally:
            self._accumulator.end_flush()
        # The records failed with the broker's refusal; flush() says so too (Kafka's does), so
        # a caller that only flushes learns that nothing it sent was written.
        refusal = self._refusal()
        if refusal is not None:
            raise refusal

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered, wait up to ``timeout`` seconds (None: as long as it takes)
        for acknowledgements, then stop; records still pending after that fail. An open
        transaction is not aborted here (the coordinator aborts it after
        ``transaction.timeout.ms``, or the next producer with the id at once), and a prepared
        one stays prepared."""
        # Not ``_closed``: a sender stopped by a refusal sets that, and the cluster's
        # connections must still be closed here.
        if self._close_called:
            return
        self._close_called = True
        self._closed = self._slow_send = True
        self._accumulator.begin_close()
        self._sender.join(timeout)
        if self._sender.is_alive():
            self._sender.force_close()
            self._sender.join()
        self._cluster.close()

    @property
    def producer_id(self) -> int:
        """The idempotent producer id (-1 before the first send or without idempotence)."""
        return self._sender.producer_id

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.config.path or self.config.bootstrap_servers
        return f"Producer({where!r}, closed={self._closed})"
