"""Varint bodies: Kafka's v2 record layout as the body of a small batch.

A batch whose attributes set bit 6 (:data:`ATTR_VARINT_BODY`) holds its records in Kafka's own
record layout instead of an Arrow IPC message, compressed as a whole by the batch codec like
any body. An Arrow message costs about 600 bytes of framing however few records it holds; this
layout costs 7 bytes and up per record and nothing per batch, so a batch of one 10-byte record
is 61 + 18 bytes instead of about 700. Producers write it for small batches
(:data:`VARINT_MAX_RECORDS`); bulk stays Arrow. Readers decode both to the same Arrow arrays.
Each record, back to back (zigzag varints as in Kafka; ``varlong`` up to 10 bytes)::

    length          varint   bytes of the record after this field
    attributes      int8     bit 0: the record's header list is null (no headers given);
                             every other bit zero
    timestampDelta  varlong  timestamp - the batch's baseTimestamp
    offsetDelta     varint   offset - the batch's baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value (a tombstone)
    value           bytes
    headerCount     varint   0 when bit 0 is set
    headers         headerKeyLength varint (>= 0), headerKey (UTF-8),
                    headerValueLength varint (-1 null), headerValue

The full layout and the checks a reader makes are in ``docs/format.md`` ("Varint body").

Decoding: :func:`scan` decodes a run of uncompressed varint batches (a fetch of one-record
batches) into one Arrow record batch in one pass, in C (``_varint_scan.c``) when the
extension is built, or in Python otherwise, with identical results; :func:`parse_body`
decodes one body (decompressed) and raises :class:`CorruptRecordError` saying what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa

from spark_mq.errors import CorruptRecordError
from spark_mq.storage.arrow_arrays import from_numpy

try:
    from spark_mq.storage import _varint_scan as _c  # type: ignore[attr-defined]
except ImportError:  # the optional extension was not built: the Python fallback decodes
    _c = None

#: Attribute bit 6: the body is varint records, not an Arrow IPC message.
ATTR_VARINT_BODY: Final = 0x40
#: Record attribute bit 0: the record's header list is null.
RECORD_NULL_HEADERS: Final = 0x01
#: The producers' choice: batches of at most this many records get a varint body. Measured
#: in benchmarks/bench_small_batches.py ("encode", "validate", "decode"): a varint body is
#: smaller at every count; from the accumulator's lists it is cheaper to encode than an Arrow
#: body up to about a hundred records (Arrow's cost is mostly fixed, ~100 us a batch; varint's
#: ~1 us a record); and the broker's body check of every produced batch and the consumer's
#: decode cost a small Arrow body 100-200 us each, a varint body a few us. A low-latency
#: producer (linger.ms=0) that falls behind builds batches of tens of records: with Arrow
#: bodies those cost the broker and the consumer the most exactly when they are already late.
#: 64 stays below the encode crossing, so every batch that bulk producers build (hundreds of
#: records) keeps its columnar body and its speed, and the pure-Python fallback decoder
#: (when the C extension is not built) only ever meets small batches.
VARINT_MAX_RECORDS: Final = 64
#: The fewest bytes a record takes (every field one byte, no key, value or headers bytes).
MIN_RECORD_BYTES: Final = 7

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def has_c_decoder() -> bool:
    """Whether the C extension is built (the fallback gives the same results, slower)."""
    return _c is not None


def c_extension() -> Any:
    """The C extension module, or None when it is not built."""
    return _c


def c_function(name: str) -> Any:
    """The C extension's function ``name``, or None when the extension is not built or was
    built from a source without it (a checkout updated without installing again keeps its
    older build; scripts/bootstrap.sh reinstalls when the source changes): its callers then
    take their Python path."""
    return getattr(_c, name, None)


#: The C encoder (see :func:`c_function`).
_c_encode: Any = c_function("encode_records")


# ---------------------------------------------------------------------------------------------
# Encoding (small batches: a producer's few records, in C when the extension is built)


def _uvarint(out: bytearray, u: int) -> None:
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)


def varint_size(n: int) -> int:
    """Bytes of ``n`` as a zigzag varint (or varlong)."""
    u = (n << 1) ^ (n >> 63)
    size = 1
    while u > 0x7F:
        u >>= 7
        size += 1
    return size


def _bytes_field(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _uvarint(out, len(data) << 1)
        out += data


def encode_records(
    timestamps: Sequence[int],
    keys: Sequence[bytes | None] | None,
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[bytes, bytes | None]] | None] | None,
    *,
    offset_deltas: Sequence[int] | None = None,
    base_timestamp: int,
) -> bytearray:
    """The varint body of these records (header keys already UTF-8 bytes; ``keys`` or
    ``headers`` None: none at all; ``offset_deltas`` None: 0, 1, 2, ...). OverflowError
    when two timestamps are further apart than an int64 (the Arrow body has no such limit:
    an encoder asked for ``"auto"`` writes Arrow then).

    In C when the extension is built and the sequences are lists (the producer's batches
    are: about 0.2 us a record against 1.7 in Python), else in Python, byte for byte alike.
    """
    if (
        _c_encode is not None
        and type(timestamps) is list
        and type(values) is list
        and (keys is None or type(keys) is list)
        and (headers is None or type(headers) is list)
        and (offset_deltas is None or type(offset_deltas) is list)
    ):
        encoded: bytearray = _c_encode(
            timestamps, keys, values, headers, offset_deltas, base_timestamp
        )
        return encoded
    return _encode_records_py(
        timestamps,
        [None] * len(values) if keys is None else keys,
        values,
        [None] * len(values) if headers is None else headers,
        range(len(values)) if offset_deltas is None else offset_deltas,
        base_timestamp,
    )


def _encode_records_py(  # noqa: PLR0917
    timestamps: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[bytes, bytes | None]] | None],
    offset_deltas: Sequence[int],
    base_timestamp: int,
) -> bytearray:
    """:func:`encode_records` in Python (the extension not built, or other sequences)."""
    body = bytearray()
    record = bytearray()
    for ts, key, value, hdrs, delta in zip(
        timestamps, keys, values, headers, offset_deltas, strict=True
    ):
        record.clear()
        record.append(RECORD_NULL_HEADERS if hdrs is None else 0)
        ts_delta = ts - base_timestamp
        if not _INT64_MIN <= ts_delta <= _INT64_MAX:
            raise OverflowError(
                f"timestamps {base_timestamp} and {ts} are too far apart for a varint body"
            )
        _uvarint(record, (ts_delta << 1) ^ (ts_delta >> 63))
        _uvarint(record, delta << 1)
        _bytes_field(record, key)
        _bytes_field(record, value)
        if hdrs is None:
            record.append(0)
        else:
            _uvarint(record, len(hdrs) << 1)
            for hkey, hvalue in hdrs:
                _bytes_field(record, hkey)
                _bytes_field(record, hvalue)
        _uvarint(body, len(record) << 1)
        body += record
    return body


def record_size(key_bytes: int, value_bytes: int, header_bytes: int = 0) -> int:
    """An upper bound of what a record of a single-record batch takes in a varint body
    (``*_bytes`` -1 for null; ``header_bytes`` the headers' own estimate): what a producer
    checks ``max.request.size`` against for a record alone in its batch."""
    inner = 1 + 1 + 1  # attributes, timestampDelta 0, offsetDelta 0
    for n in (key_bytes, value_bytes):
        inner += 1 if n < 0 else varint_size(n) + n
    inner += varint_size(header_bytes) + header_bytes
    return varint_size(inner) + inner


# ---------------------------------------------------------------------------------------------
# Decoding


class _Columns(NamedTuple):
    """Decoded columns as buffers (what the C extension returns, and the fallback builds)."""

    rows: int
    headers: int
    offsets: bytes
    timestamps: bytes
    ts_types: bytes
    key_validity: bytes | None
    key_nulls: int
    key_offsets: bytes
    key_data: bytes
    value_validity: bytes | None
    value_nulls: int
    value_offsets: bytes
    value_data: bytes
    headers_validity: bytes | None
    headers_nulls: int
    headers_offsets: bytes
    hkey_offsets: bytes
    hkey_data: bytes
    hvalue_validity: bytes | None
    hvalue_nulls: int
    hvalue_offsets: bytes
    hvalue_data: bytes


def _buf(data: bytes | None) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _binary(  # noqa: PLR0917 (the four buffers of one column, in Arrow's order)
    kind: pa.DataType,
    n: int,
    validity: bytes | None,
    offsets: bytes,
    data: bytes,
    nulls: int,
) -> pa.Array:
    """A binary (or string) column of ``n`` entries from its buffers; all null: one call."""
    if nulls == n:
        # Keyless records are the common case, and the buffers cost several calls each (a
        # fetch of a few small records pays them per fetch).
        return pa.nulls(n, kind)
    return pa.Array.from_buffers(
        kind, n, [_buf(validity), pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _arrays(cols: _Columns) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array, pa.Array, pa.Array]:
    """offsets, timestamps, timestamp types, keys, values, headers as Arrow arrays."""
    from spark_mq.storage.record_batch import HEADER_TYPE  # noqa: PLC0415 (import cycle)

    n, h = cols.rows, cols.headers
    offsets = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets)])
    stamps = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.timestamps)])
    ts_types = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(cols.ts_types)])
    keys = _binary(
        pa.binary(), n, cols.key_validity, cols.key_offsets, cols.key_data, cols.key_nulls
    )
    values = _binary(
        pa.binary(), n, cols.value_validity, cols.value_offsets, cols.value_data, cols.value_nulls
    )
    if cols.headers_nulls == n:
        # Records without headers (the common case): one call, as for keys.
        return offsets, stamps, ts_types, keys, values, pa.nulls(n, HEADER_TYPE)
    entries = pa.StructArray.from_arrays(
        [
            _binary(pa.string(), h, None, cols.hkey_offsets, cols.hkey_data, 0),
            _binary(
                pa.binary(),
                h,
                cols.hvalue_validity,
                cols.hvalue_offsets,
                cols.hvalue_data,
                cols.hvalue_nulls,
            ),
        ],
        fields=list(HEADER_TYPE.value_type),
    )
    header_lists = pa.ListArray.from_buffers(
        HEADER_TYPE,
        n,
        [_buf(cols.headers_validity), pa.py_buffer(cols.headers_offsets)],
        null_count=cols.headers_nulls,
        children=[entries],
    )
    return offsets, stamps, ts_types, keys, values, header_lists


class _Builder:
    """The Python fallback's column buffers (the C extension's ``Out``)."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.ts_types: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.header_lists: list[list[tuple[bytes, bytes | None]] | None] = []

    def mark(self) -> int:
        return len(self.offsets)

    def reset(self, mark: int) -> None:
        for column in (
            self.offsets,
            self.timestamps,
            self.ts_types,
            self.keys,
            self.values,
            self.header_lists,
        ):
            del column[mark:]

    def columns(self) -> _Columns:
        n = len(self.offsets)
        pairs = [pair for hdrs in self.header_lists if hdrs for pair in hdrs]
        counts = [0 if hdrs is None else len(hdrs) for hdrs in self.header_lists]
        return _Columns._make(
            [
                n,
                len(pairs),
                np.array(self.offsets, dtype=np.int64).tobytes(),
                np.array(self.timestamps, dtype=np.int64).tobytes(),
                np.array(self.ts_types, dtype=np.int8).tobytes(),
                *_binary_buffers(self.keys),
                *_binary_buffers(self.values),
                *_validity([hdrs is not None for hdrs in self.header_lists]),
                _offsets(counts),
                _offsets([len(key) for key, _ in pairs]),
                b"".join(key for key, _ in pairs),
                *_binary_buffers([value for _, value in pairs]),
            ]
        )


def _validity(valid: list[bool]) -> tuple[bytes | None, int]:
    nulls = valid.count(False)
    if not nulls:
        return None, 0
    return np.packbits(np.array(valid, dtype=np.bool_), bitorder="little").tobytes(), nulls


def _offsets(lengths: list[int]) -> bytes:
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(np.array(lengths, dtype=np.int64), out=out[1:], dtype=np.int32)
    return out.tobytes()


def _binary_buffers(items: list[bytes | None]) -> tuple[bytes | None, int, bytes, bytes]:
    validity, nulls = _validity([item is not None for item in items])
    return (
        validity,
        nulls,
        _offsets([0 if item is None else len(item) for item in items]),
        b"".join(item for item in items if item),
    )


class _Reader:
    """Reads a varint body, raising CorruptRecordError naming the record and field."""

    __slots__ = ("base_offset", "data", "end", "pos", "record")

    def __init__(self, data: memoryview, base_offset: int) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)
        self.base_offset = base_offset
        self.record = 0

    def fail(self, what: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"batch at offset {self.base_offset} has a corrupt varint body: record "
            f"{self.record} {what} (body byte {self.pos})",
            offset=self.base_offset,
        )

    def varint(self, name: str, limit: int, bits: int = 32) -> int:
        u = 0
        for i in range(bits // 7 + 1):
            if self.pos >= limit:
                raise self.fail(f"{name} runs past the record's end")
            b = self.data[self.pos]
            self.pos += 1
            if i == bits // 7 and b > (0x0F if bits == 32 else 0x01):
                raise self.fail(f"{name} is a varint longer than {bits} bits")
            u |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                return (u >> 1) ^ -(u & 1)
        raise self.fail(f"{name} is a varint longer than {bits} bits")

    def bytes_field(self, name: str, limit: int, *, nullable: bool = True) -> bytes | None:
        n = self.varint(f"{name} length", limit)
        if n == -1 and nullable:
            return None
        if n < 0 or n > limit - self.pos:
            raise self.fail(f"{name} length {n} is negative or past the record's end")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out


def _parse_python(
    data: memoryview,
    *,
    base_offset: int,
    record_count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    log_append_time: bool,
    start_offset: int,
    end_offset: int,
    out: _Builder,
) -> None:
    """The records of one body into ``out`` (those within ``[start_offset, end_offset)``);
    CorruptRecordError on the first thing wrong. The C ``parse_records`` checks the same."""
    reader = _Reader(data, base_offset)
    if record_count * MIN_RECORD_BYTES > len(data):
        raise reader.fail(f"count: {record_count} records cannot fit {len(data)} bytes")
    prev_delta = -1
    for index in range(record_count):
        reader.record = index
        length = reader.varint("length", reader.end)
        if length < 0 or length > reader.end - reader.pos:
            raise reader.fail(f"length {length} is negative or past the body's end")
        limit = reader.pos + length
        if reader.pos >= limit:
            raise reader.fail("is empty")
        attributes = data[reader.pos]
        reader.pos += 1
        if attributes & ~RECORD_NULL_HEADERS:
            raise reader.fail(f"attributes {attributes:#04x} set unknown bits")
        ts_delta = reader.varint("timestampDelta", limit, 64)
        delta = reader.varint("offsetDelta", limit)
        if delta <= prev_delta or delta > last_offset_delta:
            raise reader.fail(
                f"offsetDelta {delta} is not above the previous one ({prev_delta}) or past "
                f"lastOffsetDelta {last_offset_delta}"
            )
        prev_delta = delta
        timestamp = base_timestamp + ts_delta
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise reader.fail(f"timestampDelta {ts_delta} overflows the timestamp")
        key = reader.bytes_field("key", limit)
        value = reader.bytes_field("value", limit)
        count = reader.varint("headerCount", limit)
        if count < 0 or count > (limit - reader.pos) // 2:
            raise reader.fail(f"headerCount {count} is negative or past the record's end")
        if attributes & RECORD_NULL_HEADERS and count:
            raise reader.fail("has a null header list with headers in it")
        hdrs: list[tuple[bytes, bytes | None]] = []
        for _ in range(count):
            hkey = reader.bytes_field("header key", limit, nullable=False)
            assert hkey is not None
            try:
                hkey.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise reader.fail(f"header key is not UTF-8: {exc}") from None
            hdrs.append((hkey, reader.bytes_field("header value", limit)))
        if reader.pos != limit:
            raise reader.fail(f"length {length} does not match its fields")
        offset = base_offset + delta
        if start_offset <= offset < end_offset:
            out.offsets.append(offset)
            out.timestamps.append(max_timestamp if log_append_time else timestamp)
            out.ts_types.append(int(log_append_time))
            out.keys.append(key)
            out.values.append(value)
            out.header_lists.append(None if attributes & RECORD_NULL_HEADERS else hdrs)
    if reader.pos != reader.end:
        reader.record = record_count
        raise reader.fail(f"is followed by {reader.end - reader.pos} stray bytes")


def parse_body(raw: Any, header: Any) -> pa.RecordBatch:
    """One decompressed varint body of ``header``'s batch as a record batch of
    ``BODY_SCHEMA``; CorruptRecordError saying what is wrong."""
    from spark_mq.storage.record_batch import BODY_SCHEMA  # noqa: PLC0415 (import cycle)

    # The body's own timestamps, as an Arrow body gives them: with LogAppendTime the record
    # view (batch_decoder._to_records) is where maxTimestamp replaces them.
    cols = None
    if _c is not None:
        found = _c.parse_body(
            raw,
            header.record_count,
            header.last_offset_delta,
            header.base_timestamp,
            header.max_timestamp,
            False,
        )
        cols = None if found is None else _Columns(*found)
    if cols is None:
        # Without the extension, or to say what is wrong with a body it refused.
        builder = _Builder()
        _parse_python(
            memoryview(raw).cast("B"),
            base_offset=0,
            record_count=header.record_count,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=header.base_timestamp,
            max_timestamp=header.max_timestamp,
            log_append_time=False,
            start_offset=_INT64_MIN,
            end_offset=_INT64_MAX,
            out=builder,
        )
        cols = builder.columns()
        if _c is not None:
            raise AssertionError("the C decoder refused a body the Python one accepts")
    _, stamps, _, keys, values, headers = _arrays(cols)
    deltas = from_numpy(np.frombuffer(cols.offsets, dtype=np.int64).astype(np.int32))
    return pa.RecordBatch.from_arrays([deltas, stamps, keys, values, headers], schema=BODY_SCHEMA)


def check_body(raw: Any, header: Any) -> None:
    """Check a decompressed varint body as :func:`parse_body` does, without building the
    Arrow arrays (the broker checks every produced batch this way, and for a one-record batch
    building them costs more than the check); CorruptRecordError when it is corrupt."""
    if _c is not None:
        found = _c.parse_body(
            raw,
            header.record_count,
            header.last_offset_delta,
            header.base_timestamp,
            header.max_timestamp,
            False,
        )
        if found is not None:
            return
    parse_body(raw, header)


class ScanResult(NamedTuple):
    """What :func:`scan` decoded: where it stopped, whether a batch it did not take is there
    (False: the buffer ended, or only a partial batch follows), and the records (None if
    none)."""

    position: int
    at_batch: bool
    records: pa.RecordBatch | None


def scan(
    buf: Any,
    pos: int,
    *,
    start_offset: int | None,
    end_offset: int | None,
    verify_crc: bool,
    stop_at_transactional: bool,
    use_c: bool = True,
) -> ScanResult:
    """Decode the uncompressed varint data batches from ``pos`` on into one record batch of
    ``RECORD_SCHEMA``, stopping before the first batch of any other kind (see
    ``_varint_scan.c``). ``use_c=False`` forces the Python fallback (for tests)."""
    start = _INT64_MIN if start_offset is None else start_offset
    end = _INT64_MAX if end_offset is None else end_offset
    if use_c and _c is not None:
        position, reason, found = _c.scan(
            buf, pos, start, end, bool(verify_crc), bool(stop_at_transactional)
        )
        cols = _Columns(*found)
        at_batch = bool(reason)
    else:
        position, at_batch, cols = _scan_python(
            buf, pos, start, end, verify_crc=verify_crc, stop_at_txn=stop_at_transactional
        )
    if not cols.rows:
        return ScanResult(position, at_batch, None)
    from spark_mq.storage.record_batch import RECORD_SCHEMA  # noqa: PLC0415 (import cycle)

    return ScanResult(
        position, at_batch, pa.RecordBatch.from_arrays(list(_arrays(cols)), schema=RECORD_SCHEMA)
    )


def _scan_python(
    buf: Any, pos: int, start: int, end: int, *, verify_crc: bool, stop_at_txn: bool
) -> tuple[int, bool, _Columns]:
    from spark_mq.storage.batch_decoder import peek_size, validate_batch  # noqa: PLC0415
    from spark_mq.storage.record_batch import HEADER_SIZE  # noqa: PLC0415

    out = _Builder()
    view = memoryview(buf).cast("B")
    while pos < len(view):
        size = peek_size(view, pos)
        if size is None or pos + size > len(view):
            return pos, False, out.columns()
        try:
            header = validate_batch(view, pos, verify_crc=verify_crc)
        except CorruptRecordError:
            return pos, True, out.columns()
        if (
            header.is_control
            or header.codec_id
            or not header.attributes & ATTR_VARINT_BODY
            or (stop_at_txn and header.is_transactional)
            or header.base_offset >= end
        ):
            return pos, True, out.columns()
        if header.record_count and header.last_offset >= start:
            mark = out.mark()
            try:
                _parse_python(
                    view[pos + HEADER_SIZE : pos + size],
                    base_offset=header.base_offset,
                    record_count=header.record_count,
                    last_offset_delta=header.last_offset_delta,
                    base_timestamp=header.base_timestamp,
                    max_timestamp=header.max_timestamp,
                    log_append_time=header.timestamp_type == 1,
                    start_offset=start,
                    end_offset=end,
                    out=out,
                )
            except CorruptRecordError:
                out.reset(mark)
                return pos, True, out.columns()
        pos += size
    return pos, False, out.columns()


__all__ = [
    "ATTR_VARINT_BODY",
    "VARINT_MAX_RECORDS",
    "ScanResult",
    "encode_records",
    "has_c_decoder",
    "parse_body",
    "record_size",
    "scan",
    "varint_size",
]
