"""Batch bodies written by gathering the columns' own buffers: no copy of the data.

``pyarrow.RecordBatch.serialize()`` copies every buffer of a batch into one new buffer. For
an uncompressed batch that copy is pure cost: the producer only hands the bytes to
``sendmsg``, which copies them into the socket anyway. :func:`gather_body` instead returns an
Arrow IPC record-batch message of the body schema (``docs/format.md``) as a list of parts: the
encapsulated message metadata, then each buffer of each column as a view of the column's own
memory, with the padding the IPC format asks for between them. Joined, the parts are a message
any Arrow reader reads; the tests check that pyarrow reads back the batch it would have
serialized itself, under full validation.

Only the offsets of a binary column that does not start at offset 0 are rewritten (one int32
per row) and a validity bitmap that does not start on a byte boundary is shifted (one bit per
row): everything else, above all the keys' and values' bytes, stays where it is. A column of
several chunks (a table made of several record batches) is gathered the same way, a part per
chunk, its offsets rewritten to run on across the chunks.

The null ``key`` and ``headers`` columns of keyless, headerless records come from shared
zero-filled buffers. A null header list has no child rows here, where pyarrow's
``pa.nulls(n, list<struct>)`` gives its struct children ``n`` rows each (8 bytes a record of
offsets nobody reads).

Only what the body schema allows is handled; :func:`gather_body` returns None for a headers
column with any header in it, and the caller serializes with pyarrow instead.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa

from spark_mq.errors import InvalidRecordError
from spark_mq.storage.arrow_arrays import BINARY_MAX_BYTES

#: Arrow IPC aligns every body buffer to 8 bytes.
_ALIGN: Final = 8
_PADDING: Final = bytes(_ALIGN)
#: The encapsulation of an IPC message: continuation marker, then the metadata's size.
_PREFIX: Final = struct.Struct("<Ii")
_CONTINUATION: Final = 0xFFFFFFFF
#: Flatbuffer enums of format/Message.fbs and format/Schema.fbs.
_METADATA_V5: Final = 4
_HEADER_RECORD_BATCH: Final = 3

# The metadata flatbuffer, laid out by hand (positions from the flatbuffer's start):
#   0  root offset -> Message table at 24
#   8  Message vtable: 12 bytes (vtable size, table size, 4 field offsets)
#  24  Message table: soffset to its vtable, header offset, bodyLength int64, version int16,
#      header type uint8 (20 bytes, padded to 24)
#  48  RecordBatch vtable: 10 bytes (vtable size, table size, 3 field offsets), padded to 16
#  64  RecordBatch table: soffset, nodes offset, length int64, buffers offset (24 bytes,
#      then 4 bytes of padding)
#  92  nodes vector: uint32 count, then FieldNode {length, null_count} structs from 96
#      buffers vector: uint32 count, then Buffer {offset, length} structs (8-aligned)
# Structs and int64 fields sit on 8-byte boundaries, which flatbuffer verifiers check.
_FIXED: Final = struct.Struct("<I4x" + "6H" + "4x" + "iIqhB5x" + "5H6x" + "iIqI8x")
_MESSAGE_TABLE: Final = 24
_RECORD_BATCH_TABLE: Final = 64
_NODES_COUNT_AT: Final = 92
assert _FIXED.size == _NODES_COUNT_AT


def _zeros(nbytes: int) -> memoryview:
    """A read-only view of ``nbytes`` zero bytes, from one shared buffer grown on demand."""
    buffer = _Shared.zeros
    if len(buffer) < nbytes:
        with _Shared.lock:
            if len(_Shared.zeros) < nbytes:
                _Shared.zeros = memoryview(bytes(max(nbytes, 2 * len(_Shared.zeros))))
            buffer = _Shared.zeros
    return buffer[:nbytes]


class _Shared:
    lock = threading.Lock()
    zeros = memoryview(bytes(1 << 16))


class _Writer:
    """Collects the field nodes, the buffer descriptions and the parts of one body."""

    __slots__ = ("buffers", "nodes", "parts", "size")

    def __init__(self) -> None:
        self.nodes: list[int] = []
        self.buffers: list[int] = []
        self.parts: list[memoryview] = []
        self.size = 0

    def node(self, length: int, null_count: int) -> None:
        self.nodes += (length, null_count)

    def buffer(self, data: Any) -> None:
        """One buffer of the body: None (absent), a bytes-like object, or a list of them that
        joined are the buffer (a column in several chunks)."""
        if data is None:
            self.buffers += (self.size, 0)
            return
        if isinstance(data, list):
            views = [view for view in (memoryview(d).cast("B") for d in data) if len(view)]
            nbytes = sum(len(view) for view in views)
            self.parts += views
        else:
            view = memoryview(data).cast("B")
            nbytes = len(view)
            if nbytes:
                self.parts.append(view)
        self.buffers += (self.size, nbytes)
        if not nbytes:
            return
        pad = -nbytes % _ALIGN
        if pad:
            self.parts.append(memoryview(_PADDING)[:pad])
        self.size += nbytes + pad

    def message(self, length: int) -> list[memoryview]:
        """The parts of the whole encapsulated message for a batch of ``length`` rows."""
        node_count = len(self.nodes) // 2
        buffer_count = len(self.buffers) // 2
        buffers_count_at = _NODES_COUNT_AT + 4 + 16 * node_count + 4
        end = buffers_count_at + 4 + 16 * buffer_count
        end += -(end + _PREFIX.size) % _ALIGN
        meta = bytearray(_PREFIX.size + end)
        _PREFIX.pack_into(meta, 0, _CONTINUATION, end)
        _FIXED.pack_into(
            meta,
            _PREFIX.size,
            _MESSAGE_TABLE,
            # Message vtable: its size, the table's size, version, header type, header,
            # bodyLength (offsets within the table).
            12,
            20,
            16,
            18,
            4,
            8,
            # Message table.
            _MESSAGE_TABLE - 8,
            _RECORD_BATCH_TABLE - (_MESSAGE_TABLE + 4),
            self.size,
            _METADATA_V5,
            _HEADER_RECORD_BATCH,
            # RecordBatch vtable: its size, the table's size, length, nodes, buffers.
            10,
            24,
            8,
            4,
            16,
            # RecordBatch table.
            _RECORD_BATCH_TABLE - 48,
            _NODES_COUNT_AT - (_RECORD_BATCH_TABLE + 4),
            length,
            buffers_count_at - (_RECORD_BATCH_TABLE + 16),
        )
        base = _PREFIX.size
        struct.pack_into(
            f"<I{2 * node_count}q", meta, base + _NODES_COUNT_AT, node_count, *self.nodes
        )
        struct.pack_into(
            f"<I{2 * buffer_count}q", meta, base + buffers_count_at, buffer_count, *self.buffers
        )
        return [memoryview(meta), *self.parts]


def _bitmap(array: pa.Array) -> Any:
    """The validity bitmap of ``array`` starting at its first row (a view when the array
    starts on a byte boundary, else shifted into a new one)."""
    validity = array.buffers()[0]
    offset, length = array.offset, len(array)
    if offset % 8 == 0:
        return memoryview(validity)[offset // 8 : offset // 8 + (length + 7) // 8]
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return np.packbits(bits[offset : offset + length], bitorder="little")


def _chunks(array: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The non-empty arrays a column is made of (itself when it is one array)."""
    if isinstance(array, pa.ChunkedArray):
        return [chunk for chunk in array.chunks if len(chunk)]
    return [array]


def _fixed_width(writer: _Writer, array: pa.Array | pa.ChunkedArray, width: int) -> None:
    """An int column without nulls: no bitmap, then its values (each chunk's, in place)."""
    writer.node(len(array), 0)
    writer.buffer(None)
    writer.buffer(
        [
            memoryview(chunk.buffers()[1])[
                chunk.offset * width : (chunk.offset + len(chunk)) * width
            ]
            for chunk in _chunks(array)
        ]
    )


def _binary(writer: _Writer, array: pa.Array | pa.ChunkedArray) -> None:
    """A binary column: bitmap (only with nulls), offsets from 0, and its bytes in place.

    A column in several chunks gives one part of bytes per chunk and one new offsets buffer
    (each chunk's offsets moved to follow the chunks before it). With some nulls but not all,
    its chunks are first concatenated (a copy), which keeps the bitmap simple: keys and values
    with nulls in a multi-chunk table are rare."""
    length = len(array)
    nulls = array.null_count
    writer.node(length, nulls)
    if nulls == length:
        writer.buffer(_zeros((length + 7) // 8))
        writer.buffer(_zeros(4 * (length + 1)))
        writer.buffer(None)
        return
    chunks = _chunks(array)
    if len(chunks) > 1 and nulls:
        chunks = [pa.concat_arrays(chunks)]
    if len(chunks) == 1:
        chunk = chunks[0]
        _, offsets, data = chunk.buffers()
        writer.buffer(_bitmap(chunk) if nulls else None)
        positions = np.frombuffer(
            offsets, dtype=np.int32, count=length + 1, offset=4 * chunk.offset
        )
        start, end = int(positions[0]), int(positions[length])
        writer.buffer(positions if start == 0 else positions - np.int32(start))
        writer.buffer(memoryview(data)[start:end] if end > start else None)
        return
    spans = []
    total = 0
    for chunk in chunks:
        _, offsets, data = chunk.buffers()
        positions = np.frombuffer(
            offsets, dtype=np.int32, count=len(chunk) + 1, offset=4 * chunk.offset
        )
        start, end = int(positions[0]), int(positions[-1])
        spans.append((positions, start, end, data))
        total += end - start
    if total > BINARY_MAX_BYTES:
        raise InvalidRecordError(
            f"one batch's {total} bytes of keys or values do not fit Arrow's int32 offsets; "
            "send fewer rows per batch (max.request.size)"
        )
    # Each chunk's offsets, moved to follow the chunks before it, written straight into one
    # int32 buffer: every moved offset lies in [0, total], so int32 arithmetic cannot overflow.
    moved = np.empty(length + 1, dtype=np.int32)
    data_parts = []
    at = 0
    base = 0
    for positions, start, end, data in spans:
        rows = len(positions) - 1
        np.subtract(positions[:-1], np.int32(start - base), out=moved[at : at + rows])
        at += rows
        if end > start:
            data_parts.append(memoryview(data)[start:end])
        base += end - start
    moved[length] = base
    writer.buffer(None)
    writer.buffer(moved)
    writer.buffer(data_parts or None)


def _null_headers(writer: _Writer, length: int) -> None:
    """A headers column of ``length`` null lists: the list's bitmap and offsets, and a struct
    of empty key and value children."""
    writer.node(length, length)
    writer.buffer(_zeros((length + 7) // 8))
    writer.buffer(_zeros(4 * (length + 1)))
    writer.node(0, 0)  # the struct
    writer.buffer(None)
    for _child in ("key", "value"):
        writer.node(0, 0)
        writer.buffer(None)
        writer.buffer(_zeros(4))
        writer.buffer(None)


def gather_body(columns: Sequence[pa.Array | pa.ChunkedArray]) -> list[memoryview] | None:
    """The body of a batch of the body schema's columns (offset deltas int32 and timestamps
    int64, both without nulls; keys and values binary; headers), as the parts of one Arrow
    IPC record-batch message: see the module docstring. Any column may be a ChunkedArray (a
    table built of several record batches): its chunks' buffers are gathered as they are.
    None when ``headers`` holds any header, which pyarrow serializes instead."""
    deltas, stamps, keys, values, headers = columns
    if headers.null_count != len(headers):
        return None
    writer = _Writer()
    _fixed_width(writer, deltas, 4)
    _fixed_width(writer, stamps, 8)
    _binary(writer, keys)
    _binary(writer, values)
    _null_headers(writer, len(headers))
    return writer.message(len(values))
