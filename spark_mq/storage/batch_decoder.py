"""Validating and decoding record batches: from bytes to Arrow, never trusting the input.

The reading half of the batch format of :mod:`spark_mq.storage.record_batch` (layout in
``docs/format.md``). :func:`validate_batch` checks a batch's header and CRC-32C (what the log
does on append and recovery); :func:`decode_body` and :func:`validate_batch_body` check the
Arrow body in full, because a matching CRC only proves that the producer's bytes arrived
intact, not that they are a well-formed body; :func:`decode_records` turns a run of batches
into one Arrow table with absolute offsets, slicing the first and last batch by binary search
and skipping control batches. Nothing here runs Python code per record.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator, Sequence
from typing import NamedTuple, Protocol

import crc32c
import numpy as np
import pyarrow as pa

from spark_mq.errors import CorruptRecordError
from spark_mq.storage.arrow_arrays import from_numpy, to_numpy
from spark_mq.storage.codecs import Bytes, codec_for_id
from spark_mq.storage.record_batch import (
    ATTR_KNOWN,
    ATTR_TIMESTAMP_TYPE,
    BODY_SCHEMA,
    CRC_START,
    DEFAULT_MAX_BODY_BYTES,
    HEADER_SIZE,
    KNOWN_CODEC_IDS,
    LOG_OVERHEAD,
    MAGIC,
    RECORD_SCHEMA,
    BatchHeader,
    ControlRecord,
    ControlType,
    offset_deltas_valid,
    parse_control_record,
)
from spark_mq.storage.varint_records import ATTR_VARINT_BODY, check_body, parse_body, scan


class AbortedTxnLike(Protocol):
    """What the decoder needs of an aborted transaction (see ``txn_index.AbortedTxn``)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


#: baseOffset and batchLength: exactly the LOG_OVERHEAD bytes that locate the next batch.
_OFFSET_AND_LENGTH = struct.Struct(">qi")
assert _OFFSET_AND_LENGTH.size == LOG_OVERHEAD


def peek_size(buf: Bytes, pos: int = 0) -> int | None:
    """Total size of the batch at ``pos`` per its length field; None if under 12 bytes remain."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    _, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return int(length) + LOG_OVERHEAD


def validate_batch(
    buf: Bytes,
    pos: int = 0,
    *,
    verify_crc: bool = True,
    path: str | None = None,
    file_position: int | None = None,
) -> BatchHeader:
    """Check the batch at ``pos`` (size, magic, CRC, counts, attributes) and return its header.

    Raises :class:`CorruptRecordError` naming what failed and where; ``file_position`` is the
    position of ``buf[0]`` in ``path`` so the error can point at the bad bytes on disk.
    """
    where = (file_position or 0) + pos
    available = len(buf) - pos
    if available < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated batch: {available} bytes left, a header needs {HEADER_SIZE}",
            path=path,
            position=where,
        )
    header = BatchHeader.unpack_from(buf, pos)
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"batch magic byte is {header.magic}, expected {MAGIC}", path=path, position=where
        )
    size = header.size
    if size < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch length {header.batch_length} is smaller than the header",
            path=path,
            position=where,
        )
    if size > available:
        raise CorruptRecordError(
            f"truncated batch: header says {size} bytes, only {available} present",
            path=path,
            position=where,
            offset=header.base_offset,
        )
    if verify_crc:
        actual = crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + size])
        if actual != header.crc:
            raise CorruptRecordError(
                f"batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}",
                path=path,
                position=where,
                offset=header.base_offset,
            )
    if header.attributes & ~ATTR_KNOWN:
        raise CorruptRecordError(
            f"batch attributes {header.attributes:#06x} set unknown bits", path=path, position=where
        )
    if header.codec_id not in KNOWN_CODEC_IDS:
        raise CorruptRecordError(
            f"batch attributes name unknown compression codec id {header.codec_id}",
            path=path,
            position=where,
            offset=header.base_offset,
        )
    if (
        header.record_count < 0
        or header.last_offset_delta < -1
        or (header.record_count > header.last_offset_delta + 1)
    ):
        raise CorruptRecordError(
            f"batch record count {header.record_count} does not fit last offset delta "
            f"{header.last_offset_delta}",
            path=path,
            position=where,
            offset=header.base_offset,
        )
    if header.is_control and (header.record_count != 1 or not header.is_transactional):
        raise CorruptRecordError(
            "control batch must be transactional and hold exactly one record",
            path=path,
            position=where,
            offset=header.base_offset,
        )
    return header


def iter_batches(
    buf: Bytes,
    *,
    verify_crc: bool = True,
    path: str | None = None,
    file_position: int | None = None,
) -> Iterator[tuple[BatchHeader, int]]:
    """Validate and yield ``(header, position)`` for every whole batch in ``buf``.

    A trailing partial batch (a fetch cut by ``max_bytes``) is ignored, as Kafka's consumer
    ignores it; corrupt bytes raise.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        size = peek_size(buf, pos)
        if size is None or pos + size > end:
            return
        header = validate_batch(
            buf, pos, verify_crc=verify_crc, path=path, file_position=file_position
        )
        yield header, pos
        pos += size


def decode_body(
    buf: Bytes, pos: int, header: BatchHeader, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> pa.RecordBatch:
    """The Arrow body of a validated batch (zero-copy when uncompressed).

    The body is untrusted even when the CRC matches (the CRC only proves that the producer's
    bytes arrived intact), so everything a reader relies on is checked: the Arrow structure in
    full, no Arrow-level buffer compression (which would bypass ``max_body_bytes``), the row
    count, and offset deltas that start at 0 or later, strictly increase and stay within
    lastOffsetDelta. Any failure raises :class:`CorruptRecordError`. A varint body (attribute
    bit 6) is decoded to the same columns (:func:`spark_mq.storage.varint_records.parse_body`).
    """
    payload = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    raw = codec_for_id(header.codec_id).decompress(payload, max_output_bytes=max_body_bytes)
    if header.is_varint:
        return parse_body(raw, header)
    try:
        message = pa.ipc.read_message(pa.py_buffer(raw))
        if message.type != "record batch":
            raise CorruptRecordError(
                f"batch at offset {header.base_offset} has an Arrow {message.type} message as "
                "its body, not a record batch",
                offset=header.base_offset,
            )
        if _ipc_body_is_compressed(memoryview(message.metadata)):
            raise CorruptRecordError(
                f"batch at offset {header.base_offset} uses Arrow IPC buffer compression, "
                "which the format does not allow (the batch codec compresses the body)",
                offset=header.base_offset,
            )
        body = pa.ipc.read_record_batch(message, BODY_SCHEMA)
        body.validate(full=True)
    except (pa.ArrowException, OSError, EOFError, struct.error) as exc:
        # pyarrow reports a malformed IPC stream as OSError and an empty one as EOFError.
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} has an unreadable Arrow body: {exc!r}",
            offset=header.base_offset,
        ) from exc
    if body.num_rows != header.record_count:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} declares {header.record_count} records but its "
            f"body holds {body.num_rows}",
            offset=header.base_offset,
        )
    deltas = body.column(0)
    if deltas.null_count or body.column(1).null_count:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} has null offset deltas or timestamps",
            offset=header.base_offset,
        )
    if body.num_rows:
        values = to_numpy(deltas)
        if not offset_deltas_valid(values) or int(values[-1]) > header.last_offset_delta:
            raise CorruptRecordError(
                f"batch at offset {header.base_offset} has offset deltas that are negative, not "
                f"increasing, or past its lastOffsetDelta {header.last_offset_delta}",
                offset=header.base_offset,
            )
    return body


# Flatbuffer field slots of the Arrow IPC schema (format/Message.fbs): Message.header is field
# 2 and RecordBatch.compression field 3.
_FB_UOFFSET = struct.Struct("<I")
_FB_SOFFSET = struct.Struct("<i")
_FB_VOFFSET = struct.Struct("<H")


def _fb_field(meta: memoryview, table: int, index: int) -> int | None:
    """Position of field ``index`` of the flatbuffer table at ``table``, None when absent."""
    vtable = table - _fb_unpack(_FB_SOFFSET, meta, table)
    vtable_size = _fb_unpack(_FB_VOFFSET, meta, vtable)
    slot = 4 + 2 * index
    if slot + 2 > vtable_size:
        return None
    field = _fb_unpack(_FB_VOFFSET, meta, vtable + slot)
    return table + field if field else None


def _fb_unpack(fmt: struct.Struct, meta: memoryview, at: int) -> int:
    # struct reads negative positions from the end; a corrupt flatbuffer must not get there.
    if at < 0 or at + fmt.size > len(meta):
        raise struct.error(f"flatbuffer position {at} is outside the {len(meta)}-byte metadata")
    value: int = fmt.unpack_from(meta, at)[0]
    return value


def _ipc_body_is_compressed(meta: memoryview) -> bool:
    """Whether an IPC record-batch message declares Arrow buffer compression.

    pyarrow decompresses such buffers inside ``read_record_batch`` to whatever size their
    prefixes claim, past any limit of ours, so they are refused before decoding.
    """
    header = _fb_field(meta, _fb_unpack(_FB_UOFFSET, meta, 0), 2)
    if header is None:
        return False
    return _fb_field(meta, header + _fb_unpack(_FB_UOFFSET, meta, header), 3) is not None


def read_control_record(buf: Bytes, pos: int, header: BatchHeader) -> ControlRecord:
    body = decode_body(buf, pos, header)
    return parse_control_record(body.column(2)[0].as_py(), body.column(3)[0].as_py())


def validate_batch_body(
    buf: Bytes, pos: int, header: BatchHeader, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> None:
    """Check the body of a batch that passed :func:`validate_batch`; raise CorruptRecordError.

    :func:`validate_batch` checks the header and the CRC only, which is all that recovery and
    serving need. A CRC recomputed by a buggy or hostile producer can still cover a body no
    reader can decode, so whoever accepts batches from the outside (the broker on produce)
    calls this too: it decompresses and decodes the body with every check of
    :func:`decode_body`, and parses the marker of a control batch.
    """
    if header.is_varint and not header.is_control:
        payload = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
        check_body(
            codec_for_id(header.codec_id).decompress(payload, max_output_bytes=max_body_bytes),
            header,
        )
        return
    body = decode_body(buf, pos, header, max_body_bytes=max_body_bytes)
    if header.is_control:
        parse_control_record(body.column(2)[0].as_py(), body.column(3)[0].as_py())


def _to_records(body: pa.RecordBatch, header: BatchHeader) -> pa.RecordBatch:
    n = body.num_rows
    # numpy, not pyarrow.compute: a compute call's fixed dispatch cost dominates small
    # batches (measured in benchmarks/bench_storage.py; the figure is in docs/benchmarks.md).
    offsets = from_numpy(np.add(to_numpy(body.column(0)), header.base_offset, dtype=np.int64))
    stamps = body.column(1)
    log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    if log_append_time:
        # With LogAppendTime the broker's time is the batch's maxTimestamp, for every record.
        stamps = from_numpy(np.full(n, header.max_timestamp, dtype=np.int64))
    ts_type = from_numpy(np.full(n, int(log_append_time), dtype=np.int8))
    return pa.RecordBatch.from_arrays(
        [offsets, stamps, ts_type, body.column(2), body.column(3), body.column(4)],
        schema=RECORD_SCHEMA,
    )


class PartialRecords(NamedTuple):
    """What :func:`decode_records_until_corrupt` returns.

    ``records`` holds every record of the whole batches before the first corrupt one (all of
    them when ``error`` is None); ``error`` describes the first corrupt batch: its ``offset``
    is the batch's base offset, ``position`` its position in the buffer, and ``next_offset``
    the offset after it when that can be trusted (see :func:`offset_after_corrupt`), else None.
    """

    records: pa.Table
    error: CorruptRecordError | None


def offset_after_corrupt(buf: Bytes, pos: int) -> int | None:
    """Where a reader may go on after the corrupt batch at ``pos``, or None if unknown.

    The best witness is an intact batch right after it (its own length field led there and
    its CRC matches), whose base offset is the answer. Without one in ``buf``, the corrupt
    batch's own header answers (``baseOffset + lastOffsetDelta + 1``) when its magic byte and
    length are sane: a CRC mismatch can come from a flipped byte anywhere in the batch, and
    the header's fields are right far more often than not, so the caller must present this
    as the header's claim. A header that is itself unreadable gives None.
    """
    size = peek_size(buf, pos)
    if size is None or len(buf) - pos < HEADER_SIZE:
        return None
    header = BatchHeader.unpack_from(buf, pos)
    if header.magic != MAGIC or size < HEADER_SIZE or header.last_offset_delta < 0:
        return None
    after = pos + size
    following = peek_size(buf, after)
    if following is not None and following >= HEADER_SIZE and after + following <= len(buf):
        try:
            nxt = validate_batch(buf, after)
        except CorruptRecordError:
            nxt = None
        if nxt is not None and nxt.base_offset > header.base_offset:
            return nxt.base_offset
    return header.next_offset


def decode_records(
    buf: Bytes,
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    verify_crc: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    aborted_transactions: Sequence[AbortedTxnLike] | None = None,
) -> pa.Table:
    """Decode every whole data batch in ``buf`` into one table of :data:`RECORD_SCHEMA`.

    Records below ``start_offset`` (the head of the first batch) and at or past ``end_offset``
    are cut off by slicing, control batches are skipped, and a partial trailing batch is
    ignored. With ``aborted_transactions`` (a ``read_committed`` fetch) the batches of those
    transactions are dropped, as Kafka's consumer does: a producer becomes "aborted" once the
    reader reaches its transaction's first offset and stops being so at its abort marker.
    Transactions are whole batches, so the decision is per batch; nothing runs per record.
    A corrupt batch raises :class:`CorruptRecordError` (readers that must keep the records
    before it use :func:`decode_records_until_corrupt`).
    """
    records, error = decode_records_until_corrupt(
        buf,
        start_offset=start_offset,
        end_offset=end_offset,
        verify_crc=verify_crc,
        max_body_bytes=max_body_bytes,
        aborted_transactions=aborted_transactions,
    )
    if error is not None:
        raise error
    return records


def decode_records_until_corrupt(
    buf: Bytes,
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    verify_crc: bool = True,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    aborted_transactions: Sequence[AbortedTxnLike] | None = None,
) -> PartialRecords:
    """:func:`decode_records` that stops at the first corrupt batch instead of raising.

    The records before it are returned with the error (:class:`PartialRecords`), so that a
    consumer can hand them out and report the corrupt batch afterwards, as Kafka's does: one
    damaged batch must not hide the intact ones before it.
    """
    pieces: list[pa.RecordBatch] = []
    pending = deque(sorted(aborted_transactions or (), key=lambda txn: txn.first_offset))
    aborted_producers: set[int] = set()
    pos = 0
    end = len(buf)
    view = memoryview(buf).cast("B")
    while pos < end:
        # Runs of uncompressed varint batches (a fetch of small batches) are decoded in one
        # call into one record batch; the loop below takes whatever batch the scan stops at.
        # A read_committed fetch leaves transactional batches to the loop, which keeps track
        # of aborted transactions (the scan only has to pass non-transactional ones).
        # Only a batch whose attributes (bytes 21-22) set the varint bit starts a scan, so
        # that a log of Arrow batches pays nothing for it.
        if end - pos >= HEADER_SIZE and view[pos + 22] & ATTR_VARINT_BODY:
            scanned = scan(
                buf,
                pos,
                start_offset=start_offset,
                end_offset=end_offset,
                verify_crc=verify_crc,
                stop_at_transactional=aborted_transactions is not None,
            )
            if scanned.records is not None:
                pieces.append(scanned.records)
            pos = scanned.position
            if not scanned.at_batch:
                break
        size = peek_size(buf, pos)
        if size is None or pos + size > end:
            break  # a partial trailing batch (a fetch cut by its size limit)
        try:
            header = validate_batch(buf, pos, verify_crc=verify_crc)
            if end_offset is not None and header.base_offset >= end_offset:
                break  # offsets only grow: nothing from here on is returned
            records = _decode_one(
                buf,
                pos,
                header,
                start_offset=start_offset,
                end_offset=end_offset,
                max_body_bytes=max_body_bytes,
                pending=pending if aborted_transactions is not None else None,
                aborted_producers=aborted_producers,
            )
        except CorruptRecordError as exc:
            if len(buf) - pos >= LOG_OVERHEAD:
                exc.offset = _OFFSET_AND_LENGTH.unpack_from(buf, pos)[0]
            exc.position = pos
            exc.next_offset = offset_after_corrupt(buf, pos)
            return PartialRecords(pa.Table.from_batches(pieces, schema=RECORD_SCHEMA), exc)
        if records is not None and records.num_rows:
            pieces.append(records)
        pos += size
    return PartialRecords(pa.Table.from_batches(pieces, schema=RECORD_SCHEMA), None)


def _decode_one(
    buf: Bytes,
    pos: int,
    header: BatchHeader,
    *,
    start_offset: int | None,
    end_offset: int | None,
    max_body_bytes: int,
    pending: deque[AbortedTxnLike] | None,
    aborted_producers: set[int],
) -> pa.RecordBatch | None:
    """The records of one validated batch below ``end_offset``, cut to ``[start_offset,
    end_offset)``; None for a batch with none to return (control, emptied, aborted, or
    wholly below the start)."""
    if pending is not None:
        while pending and pending[0].first_offset <= header.last_offset:
            aborted_producers.add(pending.popleft().producer_id)
        if header.producer_id in aborted_producers:
            if header.is_control:
                if read_control_record(buf, pos, header).type is ControlType.ABORT:
                    aborted_producers.discard(header.producer_id)
                return None
            if header.is_transactional:
                return None
    if header.is_control or header.record_count == 0:
        return None
    if start_offset is not None and header.last_offset < start_offset:
        return None
    records = _to_records(decode_body(buf, pos, header, max_body_bytes=max_body_bytes), header)
    cut_head = start_offset is not None and header.base_offset < start_offset
    cut_tail = end_offset is not None and header.last_offset >= end_offset
    if cut_head or cut_tail:
        offsets = to_numpy(records.column(0))
        lo = int(np.searchsorted(offsets, start_offset)) if start_offset is not None else 0
        hi = int(np.searchsorted(offsets, end_offset)) if end_offset is not None else len(offsets)
        # An end at or before the start selects nothing (not a negative-length slice).
        records = records.slice(lo, max(hi - lo, 0))
    return records
