"""Record batches: a Kafka v2 style header over a columnar Arrow body.

A batch is the unit the producer compresses, the log appends, indexes and serves, and the
reader decodes. Its header mirrors Kafka's record batch v2 field for field (big-endian)::

     offset  size  field                 notes
     ------  ----  --------------------  ------------------------------------------------
          0     8  baseOffset            assigned by the log on append (outside the CRC)
          8     4  batchLength           bytes after this field: total size - 12
         12     4  partitionLeaderEpoch  stamped by the leader on append (outside the CRC)
         16     1  magic                 MAGIC (83, 'S'): not Kafka's 2, the body differs
         17     4  crc                   CRC-32C (Castagnoli) of bytes 21 .. end of batch
         21     2  attributes            bits 0-2 codec, 3 timestamp type, 4 transactional,
                                         5 control, 6 varint body; the rest are zero
         23     4  lastOffsetDelta       offset of the last record - baseOffset
         27     8  baseTimestamp         timestamp of the first record (ms since epoch)
         35     8  maxTimestamp          largest timestamp in the batch (ms)
         43     8  producerId            -1 when not idempotent
         51     2  producerEpoch         -1 when not idempotent
         53     4  baseSequence          -1 when not idempotent
         57     4  recordCount           number of records in the body
         61     -  body                  Arrow IPC record-batch message (or, with bit 6,
                                         Kafka's v2 varint records), compressed as a whole
                                         by the codec of the attributes

The body's Arrow schema is fixed (:data:`BODY_SCHEMA`): ``offset_delta int32``,
``timestamp int64`` (ms), ``key binary``, ``value binary``, ``headers
list<struct<key: string, value: binary>>``. Keys, values and header lists may be null. A
control batch (bit 5, always transactional) holds exactly one record whose key is
``version int16, type int16`` (0 abort, 1 commit) and whose value is ``version int16,
coordinatorEpoch int32``, as in Kafka.

Small batches may instead hold Kafka's v2 record layout (varint records, attribute bit 6:
:mod:`spark_mq.storage.varint_records`), which costs no framing; readers decode both bodies to
the same Arrow arrays. The encoders write Arrow unless asked (``body_encoding``); producers
ask for ``"auto"``: varint for at most ``VARINT_MAX_RECORDS`` records, Arrow above.

Encoding Arrow bodies works on whole Arrow arrays, with no Python code per record. Validation
and decoding live in :mod:`spark_mq.storage.batch_decoder`. The full byte layout with examples is in
``docs/format.md``.
"""

from __future__ import annotations

import enum
import inspect
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, NamedTuple, ParamSpec, TypeAlias

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.errors import CorruptRecordError, InvalidRecordError
from spark_mq.storage.arrow_arrays import binary_array, from_numpy, to_numpy, to_numpy_filled
from spark_mq.storage.codecs import CODEC_NAMES, Bytes, Codec, codec_for_id, codec_for_name
from spark_mq.storage.ipc_gather import gather_body
from spark_mq.storage.varint_records import (
    ATTR_VARINT_BODY,
    VARINT_MAX_RECORDS,
    encode_records,
)

MAGIC: Final = 83
HEADER_SIZE: Final = 61
#: baseOffset + batchLength: the bytes that precede what batchLength counts.
LOG_OVERHEAD: Final = 12
#: First byte covered by the CRC (attributes).
CRC_START: Final = 21

#: A batch body as encoded: bytes, or the Arrow buffer a codec that copies nothing returns.
Body: TypeAlias = Bytes | pa.Buffer
_P = ParamSpec("_P")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
assert _HEADER.size == HEADER_SIZE

ATTR_CODEC_MASK: Final = 0x07
ATTR_TIMESTAMP_TYPE: Final = 0x08
ATTR_TRANSACTIONAL: Final = 0x10
ATTR_CONTROL: Final = 0x20
ATTR_KNOWN: Final = (
    ATTR_CODEC_MASK | ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL | ATTR_VARINT_BODY
)
KNOWN_CODEC_IDS: Final = frozenset(range(len(CODEC_NAMES)))

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

#: How a batch's records are laid out: ``"arrow"`` (an Arrow IPC message), ``"varint"``
#: (Kafka's v2 records), or ``"auto"``: varint for at most ``VARINT_MAX_RECORDS`` records.
BodyEncoding: TypeAlias = Literal["arrow", "varint", "auto"]

#: A decoded body may not exceed this unless the caller allows more.
DEFAULT_MAX_BODY_BYTES: Final = 512 * 1024 * 1024


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


HEADER_TYPE: Final = pa.list_(
    pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
)

BODY_SCHEMA: Final = pa.schema(
    [
        pa.field("offset_delta", pa.int32(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
    ]
)

#: What the decoding reader returns: absolute offsets and the batch's timestamp type.
RECORD_SCHEMA: Final = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
    ]
)

_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class BatchHeader(NamedTuple):
    """The 61 header bytes of a batch, unpacked."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def unpack_from(cls, buf: Bytes, pos: int = 0) -> BatchHeader:
        return cls._make(_HEADER.unpack_from(buf, pos))

    def pack(self) -> bytes:
        return _HEADER.pack(*self)

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec_id(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_varint(self) -> bool:
        """Whether the body is varint records (Kafka's v2 layout) rather than Arrow."""
        return bool(self.attributes & ATTR_VARINT_BODY)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at 2^31-1 as Kafka's does."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


class ControlRecord(NamedTuple):
    type: ControlType
    coordinator_epoch: int


# ---------------------------------------------------------------------------------------------
# Encoding

#: Longest column the encoders keep a shared copy of (see :func:`_shared_prefix`): a batch of
#: 1 MB of 100-byte records has about 10,000 rows.
SHARED_COLUMN_ROWS: Final = 1 << 16

_shared_columns: dict[str, pa.Array] = {}
_shared_stamps: tuple[int, pa.Array] | None = None


def _shared_prefix(kind: str, length: int, make: Callable[[int], pa.Array]) -> pa.Array:
    """The first ``length`` rows of a column that only depends on its length (null keys, null
    headers, offset deltas 0..n-1), sliced from one array kept per kind: a producer encodes
    such columns for every batch, and a slice costs nothing where building one allocates and
    fills a buffer per batch. Longer columns than :data:`SHARED_COLUMN_ROWS` are built and
    not kept. Arrow arrays are immutable, so sharing them between batches and threads is safe
    (two threads growing one at once only build it twice)."""
    if length > SHARED_COLUMN_ROWS:
        return make(length)
    shared = _shared_columns.get(kind)
    if shared is None or len(shared) < length:
        grown = min(2 * len(shared), SHARED_COLUMN_ROWS) if shared is not None else 1024
        shared = make(max(length, grown))
        _shared_columns[kind] = shared
    return shared.slice(0, length)


def _stamps_now(now: int, length: int) -> pa.Array:
    """``length`` timestamps of ``now``: the batches a producer cuts from one table in one call
    are stamped with one time, so the last such column is kept and sliced."""
    global _shared_stamps  # noqa: PLW0603 (one cache per process)
    if length > SHARED_COLUMN_ROWS:
        return from_numpy(np.full(length, now, dtype=np.int64))
    shared = _shared_stamps
    if shared is None or shared[0] != now or len(shared[1]) < length:
        shared = (now, from_numpy(np.full(length, now, dtype=np.int64)))
        _shared_stamps = shared
    return shared[1].slice(0, length)


def _as_binary(
    name: str, array: Any, length: int | None, *, keep_chunks: bool = False
) -> pa.Array | pa.ChunkedArray:
    """Coerce a key or value column to ``binary`` without copying data where Arrow allows. A
    ChunkedArray of several chunks stays one with ``keep_chunks`` (for the gathered body), and
    is concatenated otherwise."""
    if array is None:
        if length is None:
            raise InvalidRecordError(f"{name} column is required")
        return _shared_prefix("null binary", length, lambda n: pa.nulls(n, pa.binary()))
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 1:
            array = array.chunk(0)
        elif not keep_chunks:
            array = array.combine_chunks()
    if not isinstance(array, (pa.Array, pa.ChunkedArray)):
        try:
            array = pa.array(array, type=pa.binary())
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise InvalidRecordError(f"{name} column is not convertible to binary: {exc}") from exc
    if array.type == pa.binary():
        return array
    if array.type in (
        pa.string(),
        pa.large_binary(),
        pa.large_string(),
        pa.binary_view(),
        pa.string_view(),
    ):
        try:
            return array.cast(pa.binary())
        except pa.ArrowException as exc:  # a large_binary column over 2 GiB
            raise InvalidRecordError(f"{name} column does not fit in a batch: {exc}") from exc
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), pa.binary())
    raise InvalidRecordError(f"{name} column must be binary or string, got Arrow type {array.type}")


def _timestamps(timestamp: Any, length: int, now_ms: int | None) -> pa.Array:
    if timestamp is None:
        return _stamps_now(int(time.time() * 1000) if now_ms is None else now_ms, length)
    if isinstance(timestamp, pa.ChunkedArray):
        timestamp = timestamp.combine_chunks()
    if not isinstance(timestamp, pa.Array):
        # Let Arrow infer the type rather than forcing int64 through numpy: numpy datetime64
        # values must keep their unit (not be read as ms), and None entries mean "now".
        try:
            timestamp = pa.array(timestamp)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise InvalidRecordError(f"timestamp column is not convertible: {exc}") from exc
    try:
        if pa.types.is_timestamp(timestamp.type):
            timestamp = timestamp.cast(pa.timestamp("ms", tz=timestamp.type.tz), safe=False)
            timestamp = timestamp.view(pa.int64())
        elif pa.types.is_integer(timestamp.type) or pa.types.is_null(timestamp.type):
            timestamp = timestamp.cast(pa.int64())
        else:
            raise InvalidRecordError(
                f"timestamp column must be int64 milliseconds or an Arrow timestamp, got "
                f"{timestamp.type}"
            )
    except pa.ArrowException as exc:  # an unsigned value past 2**63
        raise InvalidRecordError(f"timestamp column does not fit int64: {exc}") from exc
    if timestamp.null_count:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        timestamp = from_numpy(to_numpy_filled(timestamp, now))
    return timestamp


def _headers(headers: Any, length: int) -> pa.Array:
    if headers is None:
        return _shared_prefix("null headers", length, _null_headers)
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    if isinstance(headers, pa.Array):
        if headers.type != HEADER_TYPE:
            try:
                headers = headers.cast(HEADER_TYPE)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidRecordError(
                    f"headers column must be {HEADER_TYPE}, got {headers.type}"
                ) from exc
        return headers
    # A Python list of per-record header lists ([(key, value), ...] or None): the convenience
    # path for single records. Bulk producers pass Arrow arrays and never reach this line.
    try:
        return _header_rows(headers)
    except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeError) as exc:
        raise InvalidRecordError(
            f"headers must be a list of [(str key, bytes value), ...] or None per record: {exc}"
        ) from exc


def _header_rows(rows: Sequence[Any]) -> pa.Array:
    """The headers column of per-record lists of ``(key, value)`` pairs (or None), built
    from buffers (:mod:`spark_mq.storage.arrow_arrays`). Keys are str (or UTF-8 bytes),
    values bytes-like, str (stored as UTF-8) or None."""
    length = len(rows)
    pairs = []
    counts = np.zeros(length + 1, dtype=np.int64)
    absent = np.zeros(length, dtype=np.bool_)
    for i, row in enumerate(rows):
        if row is None:
            absent[i] = True
            continue
        for key, value in row:
            pairs.append((_header_key(key), _header_value(value)))
        counts[i + 1] = len(row)
    keys = binary_array([key for key, _ in pairs])
    entries = pa.StructArray.from_arrays(
        [
            pa.Array.from_buffers(pa.string(), len(keys), keys.buffers()),
            binary_array([value for _, value in pairs]),
        ],
        fields=list(HEADER_TYPE.value_type),
    )
    return pa.ListArray.from_arrays(
        from_numpy(np.cumsum(counts).astype(np.int32)),
        entries,
        type=HEADER_TYPE,
        mask=from_numpy(absent) if absent.any() else None,
    )


def _header_key(key: Any) -> bytes:
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, bytes | bytearray | memoryview):
        data = bytes(key)
        data.decode()  # a header key is a string: its bytes must be UTF-8
        return data
    raise TypeError(f"a header key must be str, got {type(key).__name__}")


def _header_value(value: Any) -> bytes | bytearray | memoryview | None:
    if isinstance(value, str):
        return value.encode()
    if value is None or isinstance(value, bytes | bytearray | memoryview):
        return value
    raise TypeError(f"a header value must be bytes or None, got {type(value).__name__}")


def _null_headers(length: int) -> pa.Array:
    """``length`` null header lists over an empty struct child. (``pa.nulls`` gives the struct
    ``length`` rows of children, and slices of it serialize every row of its buffers.)"""
    return pa.ListArray.from_arrays(
        from_numpy(np.zeros(length + 1, dtype=np.int32)),
        pa.nulls(0, HEADER_TYPE.value_type),
        type=HEADER_TYPE,
        mask=from_numpy(np.ones(length, dtype=np.bool_)),
    )


def _offset_deltas(offset_delta: Any, length: int) -> pa.Array:
    if offset_delta is None:
        return _shared_prefix(
            "offset deltas", length, lambda n: from_numpy(np.arange(n, dtype=np.int32))
        )
    try:
        if isinstance(offset_delta, pa.ChunkedArray):
            offset_delta = offset_delta.combine_chunks()
        if not isinstance(offset_delta, pa.Array):
            offset_delta = pa.array(offset_delta, pa.int32())
        deltas = offset_delta.cast(pa.int32())
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        raise InvalidRecordError(f"offset_delta column is not convertible to int32: {exc}") from exc
    # Readers find offsets by binary search and the log derives the next offset from the last
    # delta, so the deltas must be known, start at 0 or later and strictly increase.
    if deltas.null_count:
        raise InvalidRecordError("offset_delta column has nulls")
    if len(deltas) and not offset_deltas_valid(to_numpy(deltas)):
        raise InvalidRecordError("offset_delta column must be non-negative and strictly increasing")
    return deltas


def offset_deltas_valid(deltas: np.ndarray[Any, Any]) -> bool:
    return bool(deltas[0] >= 0 and np.all(deltas[1:] > deltas[:-1]))


def encode_batch_parts(
    value: Any,
    key: Any = None,
    timestamp: Any = None,
    headers: Any = None,
    *,
    codec: Codec | str = "none",
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    offset_delta: Any = None,
    now_ms: int | None = None,
    last_offset_delta: int | None = None,
    body_encoding: BodyEncoding = "arrow",
) -> tuple[bytearray, Body]:
    """One batch from columns (Arrow arrays, or sequences that Arrow can convert), as its
    61-byte header, CRC field left 0, and its body, not joined: for a producer, which sets its
    producer fields and the CRC once, just before it sends the two parts as they are
    (:func:`spark_mq.client.accumulator.stamp_header`), sparing a copy of the body and a CRC
    pass over it. :func:`encode_batch` takes the same arguments and returns the whole batch.

    ``value`` is required (its entries may be null); ``key``, ``timestamp`` (int64 ms or an
    Arrow timestamp), and ``headers`` default to null / now / null. ``offset_delta`` is only
    for rewriting batches with gaps (compaction); by default records get deltas 0..n-1.
    ``last_offset_delta`` overrides the header's lastOffsetDelta (by default the last record's
    delta, -1 when empty): compaction keeps a rewritten batch's original span, as Kafka does,
    so the producer's last sequence and the batch's last offset survive removed records. It
    must be at least the last record's delta. ``body_encoding`` chooses the body's layout
    (:data:`BodyEncoding`).
    """
    columns, stamped_now = _body_columns(
        value, key, timestamp, headers, offset_delta=offset_delta, now_ms=now_ms
    )
    codec_obj = codec_for_name(codec) if isinstance(codec, str) else codec
    varint_body = _varint_body(columns, body_encoding)
    varint = varint_body is not None
    if varint_body is not None:
        payload: Body = codec_obj.compress(varint_body)
    else:
        body = pa.RecordBatch.from_arrays(columns, schema=BODY_SCHEMA)
        payload = codec_obj.compress(body.serialize())
    return _body_header(
        columns,
        stamped_now,
        memoryview(payload).nbytes,
        codec_id=codec_obj.id | (ATTR_VARINT_BODY if varint else 0),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        timestamp_type=timestamp_type,
        last_offset_delta=last_offset_delta,
    ), payload


def _varint_body(columns: list[Any], body_encoding: BodyEncoding) -> bytearray | None:
    """The varint body of these body columns, or None when the batch gets an Arrow body:
    as asked, or with ``"auto"`` for more than ``VARINT_MAX_RECORDS`` records or timestamps
    a varint body cannot hold. Varint batches are small, so this goes through Python
    lists."""
    if body_encoding == "arrow":
        return None
    if body_encoding == "auto":
        if len(columns[0]) > VARINT_MAX_RECORDS:
            return None
    elif body_encoding != "varint":
        raise InvalidRecordError(
            f"body_encoding must be arrow, varint or auto, not {body_encoding!r}"
        )
    try:
        return _varint_records(columns)
    except OverflowError as exc:
        if body_encoding == "auto":
            return None
        raise InvalidRecordError(str(exc)) from exc


def _varint_records(columns: list[Any]) -> bytearray:
    """The varint body of a small batch's body columns."""
    deltas, stamps, keys, values, header_col = (
        c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns
    )
    timestamps = stamps.to_pylist()
    header_lists = [
        None if row is None else [(entry["key"].encode(), entry["value"]) for entry in row]
        for row in header_col.to_pylist()
    ]
    return encode_records(
        timestamps,
        keys.to_pylist(),
        values.to_pylist(),
        header_lists,
        offset_deltas=deltas.to_pylist(),
        base_timestamp=timestamps[0] if timestamps else 0,
    )


def encode_varint_batch_parts(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    timestamps: Sequence[int],
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
    *,
    codec: Codec | str = "none",
) -> tuple[bytearray, Body]:
    """A batch with a varint body, from Python lists, as :func:`encode_batch_parts` returns
    it (producer fields and CRC unset): the producer's path for a small batch of ``send()``
    records, which are lists already (converting a handful of records to Arrow and back costs
    more than encoding them). ``timestamps`` are int milliseconds; header keys str."""
    n = len(values)
    header_lists: Sequence[Sequence[tuple[bytes, bytes | None]] | None] | None = None
    if headers is not None:
        header_lists = [
            None if row is None else [(k.encode(), v) for k, v in row] for row in headers
        ]
    base_timestamp = timestamps[0] if n else -1
    codec_obj = codec_for_name(codec) if isinstance(codec, str) else codec
    payload = codec_obj.compress(
        encode_records(
            timestamps,
            keys,
            values,
            header_lists,
            base_timestamp=base_timestamp,
        )
    )
    return _header(
        memoryview(payload).nbytes,
        base_offset=0,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        attributes=codec_obj.id | ATTR_VARINT_BODY,
        last_offset_delta=n - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max(timestamps) if n else -1,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        record_count=n,
    ), payload


def encode_batch_gathered(
    value: Any,
    key: Any = None,
    timestamp: Any = None,
    headers: Any = None,
    *,
    codec: Codec | str = "none",
    now_ms: int | None = None,
    body_encoding: BodyEncoding = "arrow",
) -> tuple[bytearray, list[Body]]:
    """A batch as :func:`encode_batch_parts` encodes it (same arguments, producer fields
    unset), its body given as parts that joined are the body. Uncompressed, the parts view
    the columns' own memory instead of one copied buffer
    (:func:`spark_mq.storage.ipc_gather.gather_body`), so the producer, which sends the parts
    as they are, spares a copy of every key and value. Keys and values may be ChunkedArrays
    (a table made of several record batches): they are gathered chunk by chunk, not
    concatenated first. A compressed body (the codec needs the serialized bytes) and a headers
    column with headers in it are one part, and so is a varint body (``body_encoding``).
    """
    codec_obj = codec_for_name(codec) if isinstance(codec, str) else codec
    columns, stamped_now = _body_columns(
        value, key, timestamp, headers, offset_delta=None, now_ms=now_ms, keep_chunks=True
    )
    varint_body = _varint_body(columns, body_encoding)
    if varint_body is not None:
        payload = codec_obj.compress(varint_body)
        size = memoryview(payload).nbytes
        header = _body_header(columns, stamped_now, size, codec_id=codec_obj.id | ATTR_VARINT_BODY)
        return header, [payload]
    gathered = gather_body(columns) if codec_obj.id == 0 else None
    if gathered is not None:
        parts: list[Body] = list(gathered)
    else:
        arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
        body = pa.RecordBatch.from_arrays(arrays, schema=BODY_SCHEMA).serialize()
        parts = [codec_obj.compress(body)]
    size = sum(memoryview(part).nbytes for part in parts)
    return _body_header(columns, stamped_now, size, codec_id=codec_obj.id), parts


def _body_columns(
    value: Any,
    key: Any,
    timestamp: Any,
    headers: Any,
    *,
    offset_delta: Any,
    now_ms: int | None,
    keep_chunks: bool = False,
) -> tuple[list[Any], int | None]:
    """The body schema's columns from the encoders' arguments, and the time every record was
    stamped with when none came with a timestamp (None otherwise). With ``keep_chunks`` the
    keys and values may be ChunkedArrays (see :func:`_as_binary`); every other column is one
    array."""
    values = _as_binary("value", value, None, keep_chunks=keep_chunks)
    n = len(values)
    keys = _as_binary("key", key, n, keep_chunks=keep_chunks)
    # Every record stamped "now" (the common case) needs no pass over the column for the max.
    stamped_now: int | None = None
    if timestamp is None:
        stamped_now = int(time.time() * 1000) if now_ms is None else now_ms
    stamps = _timestamps(timestamp, n, now_ms if stamped_now is None else stamped_now)
    header_col = _headers(headers, n)
    deltas = _offset_deltas(offset_delta, n)
    for name, col in (
        ("key", keys),
        ("timestamp", stamps),
        ("headers", header_col),
        ("offset_delta", deltas),
    ):
        if len(col) != n:
            raise InvalidRecordError(f"{name} column has {len(col)} entries but value has {n}")
    return [deltas, stamps, keys, values, header_col], stamped_now


def _body_header(
    columns: list[pa.Array],
    stamped_now: int | None,
    payload_size: int,
    *,
    codec_id: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    last_offset_delta: int | None = None,
) -> bytearray:
    """The header of a batch of these body columns and a body of ``payload_size`` bytes."""
    deltas, stamps = columns[0], columns[1]
    n = len(deltas)
    if n:
        base_timestamp = stamps[0].as_py()
        max_timestamp = stamped_now if stamped_now is not None else pc.max(stamps).as_py()
        records_delta: int = deltas[n - 1].as_py()
    else:
        base_timestamp = max_timestamp = -1
        records_delta = -1
    if last_offset_delta is None:
        last_offset_delta = records_delta
    elif last_offset_delta < records_delta:
        raise InvalidRecordError(
            f"last_offset_delta {last_offset_delta} is below the last record's offset delta "
            f"{records_delta}"
        )
    attributes = codec_id | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    return _header(
        payload_size,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=n,
    )


def _joined(parts: Callable[_P, tuple[bytearray, Body]]) -> Callable[_P, bytes]:
    """``parts`` with its result sealed (CRC set) and joined into one batch."""

    def encode(*args: _P.args, **kwargs: _P.kwargs) -> bytes:
        return _seal(*parts(*args, **kwargs))

    # help() and editors show the real parameters.
    encode.__signature__ = inspect.signature(parts).replace(  # type: ignore[attr-defined]
        return_annotation="bytes"
    )
    return encode


encode_batch = _joined(encode_batch_parts)
encode_batch.__name__ = encode_batch.__qualname__ = "encode_batch"
encode_batch.__doc__ = """Encode one batch: :func:`encode_batch_parts`' header, sealed, and its body
joined (see there for the arguments).

>>> data = encode_batch(pa.array([b"v1", b"v2"]), key=pa.array([b"k", None]), now_ms=5)
>>> from spark_mq.storage.batch_decoder import decode_records
>>> decode_records(data).column("value").to_pylist()
[b'v1', b'v2']
"""


def encode_empty_batch(header: BatchHeader) -> bytes:
    """``header``'s batch with every record removed: what compaction keeps of a producer's
    last batch when none of its records survive (Kafka's ``RETAIN_EMPTY``).

    Every header field stays (base offset, lastOffsetDelta, both timestamps, producer id,
    epoch, base sequence, attributes, leader epoch) except ``recordCount`` (0) and the CRC, so
    the batch still spans its offsets and a replay of the log still finds the producer's last
    sequence, epoch and timestamp. The body is an Arrow message of zero rows in the batch's
    codec. A control batch cannot be emptied: it must hold its marker.

    >>> full = encode_batch(pa.array([b"v"]), producer_id=7, producer_epoch=0, base_sequence=3,
    ...                     base_offset=10, now_ms=5)
    >>> empty = BatchHeader.unpack_from(encode_empty_batch(BatchHeader.unpack_from(full)))
    >>> empty.record_count, empty.next_offset, empty.last_sequence, empty.max_timestamp
    (0, 11, 3, 5)
    """
    if header.is_control:
        raise InvalidRecordError("a control batch cannot be emptied: it must hold its marker")
    codec = codec_for_id(header.codec_id)
    if header.is_varint:
        payload = codec.compress(b"")  # no records: an empty varint body
    else:
        payload = codec.compress(pa.RecordBatch.from_pylist([], schema=BODY_SCHEMA).serialize())
    fields = _header(
        memoryview(payload).nbytes,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=0,
    )
    return _seal(fields, payload)


def _header(
    payload_size: int,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytearray:
    """A batch header for a body of ``payload_size`` bytes, its CRC field 0."""
    return bytearray(
        _HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + payload_size,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
    )


def _seal(header: bytearray, payload: Body) -> bytes:
    """Set ``header``'s CRC (from ``attributes`` on, then the body) and join the two."""
    payload_view = memoryview(payload)
    crc = crc32c.crc32c(payload_view, crc32c.crc32c(memoryview(header)[CRC_START:]))
    struct.pack_into(">I", header, 17, crc)
    return b"".join((header, payload_view))


def encode_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A commit or abort marker: one control record, transactional and control bits set."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = pa.RecordBatch.from_arrays(
        [
            from_numpy(np.zeros(1, dtype=np.int32)),
            from_numpy(np.full(1, ts, dtype=np.int64)),
            binary_array([_CONTROL_KEY.pack(0, int(control_type))]),
            binary_array([_CONTROL_VALUE.pack(0, coordinator_epoch)]),
            pa.nulls(1, HEADER_TYPE),
        ],
        schema=BODY_SCHEMA,
    )
    payload = body.serialize()
    fields = _header(
        memoryview(payload).nbytes,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL,
        last_offset_delta=0,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        record_count=1,
    )
    return _seal(fields, payload)


def parse_control_record(key: bytes, value: bytes) -> ControlRecord:
    """The marker in a control batch's single record; malformed bytes raise CorruptRecordError."""
    # Both come from decoded (untrusted) bodies, where a null key or value reads as None.
    if key is None or value is None:
        raise CorruptRecordError("control record has a null key or value")
    if len(key) != _CONTROL_KEY.size or len(value) < _CONTROL_VALUE.size:
        raise CorruptRecordError(
            f"control record has a {len(key)}-byte key and {len(value)}-byte value; expected "
            f"{_CONTROL_KEY.size} and at least {_CONTROL_VALUE.size}"
        )
    _, kind = _CONTROL_KEY.unpack(key)
    _, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
    if kind not in (0, 1):
        raise CorruptRecordError(f"control record of unknown type {kind}")
    return ControlRecord(ControlType(kind), coordinator_epoch)


# ---------------------------------------------------------------------------------------------
# Patching the fields outside the CRC (done by the log on append)


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _LEADER_EPOCH.pack_into(buf, pos + 12, epoch)
