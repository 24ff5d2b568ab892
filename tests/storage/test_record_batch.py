"""Tests for spark_mq.storage.record_batch: the 61-byte header over an Arrow IPC body.

The header layout is checked byte by byte against the table in docs/format.md; round trips go
through every codec; every check of validate_batch and decode_body is provoked with crafted
bytes (a CRC recomputed over a bad body is the interesting case: only the body checks catch
it). Property tests use Hypothesis with a fixed budget and no deadline.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import struct
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mq.errors import CorruptRecordError, InvalidRecordError
from spark_mq.storage.batch_decoder import (
    decode_body,
    decode_records,
    iter_batches,
    peek_size,
    read_control_record,
    validate_batch,
    validate_batch_body,
)
from spark_mq.storage.codecs import CODEC_NAMES, codec_for_name
from spark_mq.storage.record_batch import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BODY_SCHEMA,
    CRC_START,
    HEADER_SIZE,
    HEADER_TYPE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_SCHEMA,
    SHARED_COLUMN_ROWS,
    BatchHeader,
    ControlRecord,
    ControlType,
    TimestampType,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
    parse_control_record,
    set_base_offset,
    set_partition_leader_epoch,
)

FORMAT_DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"

#: The documented header: (field, offset, size, struct format), big-endian.
LAYOUT: list[tuple[str, int, int, str]] = [
    ("baseOffset", 0, 8, ">q"),
    ("batchLength", 8, 4, ">i"),
    ("partitionLeaderEpoch", 12, 4, ">i"),
    ("magic", 16, 1, ">b"),
    ("crc", 17, 4, ">I"),
    ("attributes", 21, 2, ">h"),
    ("lastOffsetDelta", 23, 4, ">i"),
    ("baseTimestamp", 27, 8, ">q"),
    ("maxTimestamp", 35, 8, ">q"),
    ("producerId", 43, 8, ">q"),
    ("producerEpoch", 51, 2, ">h"),
    ("baseSequence", 53, 4, ">i"),
    ("recordCount", 57, 4, ">i"),
]
OFFSET_OF = {name: offset for name, offset, _, _ in LAYOUT}
FORMAT_OF = {name: fmt for name, _, _, fmt in LAYOUT}


# ---------------------------------------------------------------------------------------------
# Helpers


def _field(buf: bytes | bytearray, name: str, pos: int = 0) -> int:
    value: int = struct.unpack_from(FORMAT_OF[name], buf, pos + OFFSET_OF[name])[0]
    return value


def _patch(buf: bytes | bytearray, name: str, value: int, *, recrc: bool = True) -> bytearray:
    """A copy of a single batch with one header field replaced (and the CRC made to match)."""
    out = bytearray(buf)
    struct.pack_into(FORMAT_OF[name], out, OFFSET_OF[name], value)
    return _recrc(out) if recrc else out


def _recrc(buf: bytearray, pos: int = 0) -> bytearray:
    size = struct.unpack_from(">i", buf, pos + 8)[0] + LOG_OVERHEAD
    crc = crc32c.crc32c(bytes(buf[pos + CRC_START : pos + size]))
    struct.pack_into(">I", buf, pos + OFFSET_OF["crc"], crc)
    return buf


def _raw_batch(
    payload: bytes,
    *,
    attributes: int = 0,
    record_count: int = 1,
    last_offset_delta: int | None = None,
    base_offset: int = 0,
) -> bytes:
    """A batch around arbitrary body bytes, with a correct CRC: what a hostile producer sends."""
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        magic=MAGIC,
        crc=0,
        attributes=attributes,
        last_offset_delta=record_count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        record_count=record_count,
    )
    return bytes(_recrc(bytearray(header.pack() + payload)))


def _body(
    deltas: list[int | None],
    *,
    values: list[bytes | None] | None = None,
    timestamps: list[int | None] | None = None,
) -> pa.RecordBatch:
    n = len(deltas)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(deltas, pa.int32()),
            pa.array(timestamps if timestamps is not None else [0] * n, pa.int64()),
            pa.nulls(n, pa.binary()),
            pa.array(values if values is not None else [b"v"] * n, pa.binary()),
            pa.nulls(n, HEADER_TYPE),
        ],
        schema=BODY_SCHEMA,
    )


def _simple(n: int = 3, *, codec: str = "none", base_offset: int = 0, **kwargs: Any) -> bytes:
    return encode_batch(
        pa.array([f"value-{i}".encode() for i in range(n)], pa.binary()),
        key=pa.array([f"key-{i}".encode() for i in range(n)], pa.binary()),
        timestamp=pa.array(np.arange(1000, 1000 + n, dtype=np.int64)),
        codec=codec,
        base_offset=base_offset,
        **kwargs,
    )


def _concat(sizes: list[int], *, codec: str = "none", gap: int = 0) -> tuple[bytes, list[int]]:
    """Consecutive batches of the given sizes; returns the bytes and every record's offset."""
    out = bytearray()
    offsets: list[int] = []
    next_offset = 10
    for i, n in enumerate(sizes):
        deltas = [j * (gap + 1) for j in range(n)]
        out += encode_batch(
            pa.array([b"x%d" % (next_offset + d) for d in deltas], pa.binary()),
            timestamp=pa.array(np.full(n, i, dtype=np.int64)),
            offset_delta=deltas,
            codec=codec,
            base_offset=next_offset,
        )
        offsets += [next_offset + d for d in deltas]
        next_offset += (deltas[-1] + 1) if n else 0
    return bytes(out), offsets


def _decoded_offsets(buf: bytes | bytearray | memoryview, **kwargs: Any) -> list[int]:
    offsets: list[int] = decode_records(buf, **kwargs).column("offset").to_pylist()
    return offsets


# ---------------------------------------------------------------------------------------------
# Header layout


def test_header_is_61_bytes_in_kafka_v2_field_order() -> None:
    assert HEADER_SIZE == 61
    assert LOG_OVERHEAD == 12
    assert CRC_START == 21
    assert MAGIC == 83
    end = 0
    for _name, offset, size, fmt in LAYOUT:
        assert offset == end
        assert struct.calcsize(fmt) == size
        end = offset + size
    assert end == HEADER_SIZE
    assert list(BatchHeader._fields) == [
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "record_count",
    ]


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_fields_sit_at_the_documented_offsets(codec: str) -> None:
    data = encode_batch(
        pa.array([b"a", b"bb", b"ccc"]),
        timestamp=[1_700_000_000_300, 1_700_000_000_100, 1_700_000_000_200],
        codec=codec,
        base_offset=0x0102030405060708,
        partition_leader_epoch=0x11223344,
        producer_id=0x0A0B0C0D0E0F,
        producer_epoch=0x1234,
        base_sequence=0x01020304,
        is_transactional=True,
        offset_delta=[0, 2, 5],
    )
    header = BatchHeader.unpack_from(data)
    assert len(data) == header.size
    assert _field(data, "baseOffset") == header.base_offset == 0x0102030405060708
    assert _field(data, "batchLength") == header.batch_length == len(data) - 12
    assert _field(data, "partitionLeaderEpoch") == 0x11223344
    assert _field(data, "magic") == data[16] == MAGIC
    assert _field(data, "crc") == header.crc == crc32c.crc32c(data[21:])
    assert _field(data, "attributes") == codec_for_name(codec).id | ATTR_TRANSACTIONAL
    assert _field(data, "lastOffsetDelta") == 5
    assert _field(data, "baseTimestamp") == 1_700_000_000_300  # the first record's, not the min
    assert _field(data, "maxTimestamp") == 1_700_000_000_300
    assert _field(data, "producerId") == 0x0A0B0C0D0E0F
    assert _field(data, "producerEpoch") == 0x1234
    assert _field(data, "baseSequence") == 0x01020304
    assert _field(data, "recordCount") == 3
    assert header.pack() == data[:HEADER_SIZE]


def test_header_table_in_format_doc_matches_the_code() -> None:
    """docs/format.md is the single source of truth: its header table must match the code."""
    text = FORMAT_DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*`?(\w+)`?\s*\|\s*(\w+)\s*\|", text, re.M)
    documented = [(name, int(offset), int(size)) for offset, size, name, _type in rows]
    assert documented[: len(LAYOUT)] == [(name, offset, size) for name, offset, size, _ in LAYOUT]
    type_of = {name: kind for _o, _s, name, kind in rows}
    expected_types = {">q": "int64", ">i": "int32", ">h": "int16", ">b": "int8", ">I": "uint32"}
    for name, _offset, _size, fmt in LAYOUT:
        assert type_of[name] == expected_types[fmt], name


def _doc_example(name: str) -> bytes:
    text = FORMAT_DOC.read_text(encoding="utf-8")
    block = re.search(rf"<!-- example-batch: {name} -->\s*```text\n(.*?)```", text, re.S)
    assert block is not None, f"docs/format.md lost its {name} example"
    lines = re.findall(r"^[0-9a-f]{8}: ((?:[0-9a-f]{2} ?){1,16})", block.group(1), re.M)
    return bytes.fromhex("".join(lines))


@pytest.mark.parametrize(("name", "codec_id", "size"), [("none", 0, 669), ("zstd", 4, 233)])
def test_worked_example_in_format_doc_is_a_real_batch(name: str, codec_id: int, size: int) -> None:
    data = _doc_example(name)
    assert len(data) == size
    header = validate_batch(data)
    assert header == header._replace(
        base_offset=42,
        batch_length=size - 12,
        partition_leader_epoch=3,
        magic=MAGIC,
        attributes=codec_id,
        last_offset_delta=0,
        base_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_000,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        record_count=1,
    )
    assert decode_records(data).to_pylist() == [
        {
            "offset": 42,
            "timestamp": 1_700_000_000_000,
            "timestamp_type": 0,
            "key": b"key",
            "value": b"hello",
            "headers": None,
        }
    ]
    # The code still writes these header fields (the body bytes, and so batchLength and the
    # CRC, depend on the pyarrow version).
    again = encode_batch(
        pa.array([b"hello"]),
        key=pa.array([b"key"]),
        timestamp=[1_700_000_000_000],
        base_offset=42,
        partition_leader_epoch=3,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        codec=name,
    )
    assert again[CRC_START:HEADER_SIZE] == data[CRC_START:HEADER_SIZE]
    assert again[:8] == data[:8]
    assert again[12:17] == data[12:17]


def test_header_properties() -> None:
    header = BatchHeader.unpack_from(
        _simple(4, base_offset=100, producer_id=7, producer_epoch=1, base_sequence=10)
    )
    assert header.last_offset == 103
    assert header.next_offset == 104
    assert header.codec_id == 0
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not header.is_transactional
    assert not header.is_control
    assert header.has_producer_id
    assert header.last_sequence == 13


def test_defaults_mean_no_producer_and_no_epoch() -> None:
    header = BatchHeader.unpack_from(_simple(2))
    assert header.base_offset == 0
    assert header.partition_leader_epoch == NO_PARTITION_LEADER_EPOCH == -1
    assert header.producer_id == NO_PRODUCER_ID == -1
    assert header.producer_epoch == NO_PRODUCER_EPOCH == -1
    assert header.base_sequence == NO_SEQUENCE == -1
    assert not header.has_producer_id
    assert header.last_sequence == NO_SEQUENCE


def test_last_sequence_wraps_like_kafka() -> None:
    header = BatchHeader.unpack_from(_simple(3, producer_id=1, base_sequence=2**31 - 2))
    # 2**31-2, 2**31-1, then 0: Kafka's sequences wrap at Integer.MAX_VALUE.
    assert header.last_sequence == 0


def test_encoding_is_deterministic() -> None:
    assert _simple(5, codec="zstd") == _simple(5, codec="zstd")


# ---------------------------------------------------------------------------------------------
# Round trips


def _full_example(codec: str, **kwargs: Any) -> tuple[bytes, list[dict[str, Any]]]:
    keys = [b"k0", None, b"", b"k3", None]
    values = [b"v0", b"v1", None, b"", None]
    stamps = [10, 30, 20, 30, 5]
    headers: list[list[tuple[str, bytes | None]] | None] = [
        [("trace", b"abc"), ("empty", b""), ("null", None)],
        [],
        None,
        [("k", b"\x00\xff")],
        [("dup", b"1"), ("dup", b"2")],
    ]
    data = encode_batch(
        values, key=keys, timestamp=stamps, headers=headers, codec=codec, base_offset=500, **kwargs
    )
    expected = [
        {
            "offset": 500 + i,
            "timestamp": stamps[i],
            "timestamp_type": 0,
            "key": keys[i],
            "value": values[i],
            "headers": None
            if headers[i] is None
            else [{"key": k, "value": v} for k, v in headers[i] or []],
        }
        for i in range(5)
    ]
    return data, expected


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_round_trip_with_nulls_and_headers(codec: str) -> None:
    data, expected = _full_example(codec)
    table = decode_records(data)
    assert table.schema == RECORD_SCHEMA
    assert table.to_pylist() == expected
    header = validate_batch(data)
    assert header.codec_id == codec_for_name(codec).id
    assert header.record_count == 5
    assert header.last_offset_delta == 4
    assert header.base_timestamp == 10
    assert header.max_timestamp == 30
    body = decode_body(data, 0, header)
    assert body.schema == BODY_SCHEMA
    assert body.column("offset_delta").to_pylist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_empty_batch(codec: str) -> None:
    data = encode_batch(pa.array([], pa.binary()), codec=codec, base_offset=42, now_ms=1)
    header = validate_batch(data)
    assert header.record_count == 0
    assert header.last_offset_delta == -1
    assert header.base_timestamp == header.max_timestamp == -1
    assert header.next_offset == 42  # occupies no offsets
    assert decode_body(data, 0, header).num_rows == 0
    table = decode_records(data)
    assert table.num_rows == 0
    assert table.schema == RECORD_SCHEMA
    validate_batch_body(data, 0, header)


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_8_mb_values(codec: str) -> None:
    rng = np.random.default_rng(8)
    big_random = rng.integers(0, 256, 8 * 1024 * 1024, dtype=np.uint8).tobytes()
    big_repetitive = b"0123456789abcdef" * (512 * 1024)
    data = encode_batch([big_random, b"small", big_repetitive], codec=codec, now_ms=1)
    values = decode_records(data).column("value").to_pylist()
    assert values == [big_random, b"small", big_repetitive]
    if codec != "none":
        assert len(data) < 2 * 8 * 1024 * 1024  # the repetitive value compressed


@pytest.mark.parametrize(
    "array",
    [
        pa.array(["a", None, "ü"], pa.string()),
        pa.array(["a", None, "ü"], pa.large_string()),
        pa.array([b"a", None, "ü".encode()], pa.large_binary()),
        pa.array([b"a", None, "ü".encode()], pa.binary_view()),
        pa.array(["a", None, "ü"], pa.string_view()),
        pa.chunked_array([pa.array([b"a", None]), pa.array(["ü".encode()])]),
        [b"a", None, "ü".encode()],
        ["a", None, "ü"],
    ],
    ids=[
        "string",
        "large_string",
        "large_binary",
        "binary_view",
        "string_view",
        "chunked",
        "bytes_list",
        "str_list",
    ],
)
def test_key_and_value_column_types(array: Any) -> None:
    expected = [b"a", None, "ü".encode()]
    data = encode_batch(array, key=array, now_ms=1)
    table = decode_records(data)
    assert table.column("value").to_pylist() == expected
    assert table.column("key").to_pylist() == expected


def test_all_null_columns() -> None:
    data = encode_batch(pa.nulls(3), key=pa.nulls(3), now_ms=1)
    table = decode_records(data)
    assert table.column("value").to_pylist() == [None] * 3
    assert table.column("key").to_pylist() == [None] * 3


def test_sliced_input_arrays() -> None:
    values = pa.array([b"a", b"b", b"c", b"d"]).slice(1, 2)
    stamps = pa.array([1, 2, 3, 4], pa.int64()).slice(1, 2)
    table = decode_records(encode_batch(values, timestamp=stamps))
    assert table.column("value").to_pylist() == [b"b", b"c"]
    assert table.column("timestamp").to_pylist() == [2, 3]


@pytest.mark.parametrize(
    ("timestamps", "expected"),
    [
        (pa.array([1, 2], pa.timestamp("s")), [1000, 2000]),
        (pa.array([1_500, 2_000], pa.timestamp("ms")), [1_500, 2_000]),
        (pa.array([1_500_999, 2_000_000], pa.timestamp("us", tz="UTC")), [1_500, 2_000]),
        (pa.array([1_500_999_999, 7], pa.timestamp("ns", tz="Europe/Paris")), [1_500, 0]),
        (np.array(["1970-01-01T00:00:01.5", "2020-01-01"], dtype="datetime64[ns]"), None),
        (
            [
                dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC),
                dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
            ],
            [1_704_164_645_006, 0],
        ),
        (pa.chunked_array([pa.array([5], pa.int64()), pa.array([6], pa.int64())]), [5, 6]),
        (np.array([7, 8], dtype=np.int32), [7, 8]),
        ([9, None], [9, 12345]),
        (pa.array([None, 3], pa.int64()), [12345, 3]),
    ],
)
def test_timestamp_inputs(timestamps: Any, expected: list[int] | None) -> None:
    if expected is None:
        expected = [1500, 1_577_836_800_000]
    data = encode_batch([b"a", b"b"], timestamp=timestamps, now_ms=12345)
    assert decode_records(data).column("timestamp").to_pylist() == expected
    header = BatchHeader.unpack_from(data)
    assert header.base_timestamp == expected[0]
    assert header.max_timestamp == max(expected)


def test_default_timestamp_is_now() -> None:
    data = encode_batch([b"a", b"b"], now_ms=777)
    assert decode_records(data).column("timestamp").to_pylist() == [777, 777]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_columns_shared_between_batches_leave_each_batch_as_if_alone(codec: str) -> None:
    """Null keys and headers, offset deltas and "now" timestamps are slices of columns kept
    from batch to batch: a batch encodes to the same bytes whatever was encoded before it,
    shorter or longer, over the shared length or not, at the same time or another."""
    rows = [3, SHARED_COLUMN_ROWS + 5, 2_000, 1, 2_000]

    def encode(n: int, now_ms: int) -> bytes:
        return bytes(encode_batch([b"v%d" % i for i in range(n)], codec=codec, now_ms=now_ms))

    first = {n: encode(n, 1_000) for n in rows}
    assert encode(3, 2_000) != first[3]  # another time, other timestamps
    for n in reversed(rows):
        assert encode(n, 1_000) == first[n]
    for n in rows:
        records = decode_records(first[n])
        assert records.column("offset").to_pylist() == list(range(n))
        assert records.column("timestamp").to_pylist() == [1_000] * n
        assert records.column("key").null_count == n
        assert records.column("headers").null_count == n
    if codec == "none":
        # Per row: the value and its offset, offset delta, timestamp, key offset, header list
        # offset, two bitmap bits. Null header lists carry no child rows (``pa.nulls`` gives
        # each of the struct's key and value children an offset per row, 8 bytes more).
        values = sum(len(b"v%d" % i) for i in range(2_000))
        assert len(first[2_000]) - len(first[1]) < values + 2_000 * (4 + 4 + 8 + 4 + 4 + 1) + 200


@pytest.mark.parametrize("bad", [[1.5, 2.0], ["a", "b"], pa.array([1, 2], pa.float64())])
def test_timestamp_of_wrong_type_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidRecordError, match="timestamp"):
        encode_batch([b"a", b"b"], timestamp=bad)


def test_arrow_header_arrays_are_cast_to_the_schema() -> None:
    other_item = pa.list_(
        pa.field(
            "element",
            pa.struct([pa.field("key", pa.string()), pa.field("value", pa.large_binary())]),
        )
    )
    headers = pa.array([[{"key": "h", "value": b"1"}], None], other_item)
    table = decode_records(encode_batch([b"a", b"b"], headers=headers, now_ms=1))
    assert table.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}], None]


def test_header_lists_become_the_column_pa_array_would_build() -> None:
    """Python header lists are built from buffers (no pandas import): str keys, or bytes
    keys that are UTF-8; bytes-like, str (stored as UTF-8) or None values; empty lists."""
    given = [[("a", b"1"), (b"b", None)], None, [], [("c", bytearray(b"3")), ("d", "4")]]
    table = decode_records(encode_batch([b"v"] * 4, headers=given, now_ms=1))
    expected = [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
        None,
        [],
        [{"key": "c", "value": b"3"}, {"key": "d", "value": b"4"}],
    ]
    assert table.column("headers").to_pylist() == expected
    assert pa.array(expected, HEADER_TYPE).to_pylist() == expected


@pytest.mark.parametrize(
    "headers", [[[(b"\xff", b"x")], None], [[("k", 5)], None], [[("k",)], None], [5, None]]
)
def test_bad_header_lists_are_refused(headers: list[Any]) -> None:
    with pytest.raises(InvalidRecordError, match="headers must be"):
        encode_batch([b"a", b"b"], now_ms=1, headers=headers)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key": [b"a"]}, "key column has 1 entries but value has 2"),
        ({"timestamp": [1, 2, 3]}, "timestamp column has 3"),
        ({"headers": [None]}, "headers column has 1"),
        ({"offset_delta": [0]}, "offset_delta column has 1"),
        ({"key": pa.array([1, 2])}, "key column must be binary or string"),
        ({"headers": pa.array([1, 2])}, "headers column must be"),
        ({"headers": [[(1, b"x")], None]}, "headers must be"),
        ({"offset_delta": [1, 1]}, "strictly increasing"),
        ({"offset_delta": [3, 2]}, "strictly increasing"),
        ({"offset_delta": [-1, 2]}, "non-negative"),
        ({"offset_delta": [0, None]}, "nulls"),
        ({"offset_delta": ["a", "b"]}, "offset_delta"),
        ({"offset_delta": [0, 2**40]}, "offset_delta"),
        ({"timestamp": [2**70, 1]}, "timestamp"),
        ({"codec": "brotli"}, "compression.type"),
    ],
)
def test_bad_input_is_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises((InvalidRecordError, ValueError), match=match):
        encode_batch([b"a", b"b"], now_ms=1, **kwargs)


def test_value_column_is_required() -> None:
    with pytest.raises(InvalidRecordError, match="value column is required"):
        encode_batch(None)


# Hypothesis: random batches round trip through every codec.

_header_lists = st.none() | st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=3
)
_records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=16),
        st.none() | st.binary(max_size=40),
        st.integers(-1, 2**45),
        _header_lists,
        st.integers(1, 4),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=_records,
    codec=st.sampled_from(CODEC_NAMES),
    base_offset=st.integers(0, 2**40),
    log_append_time=st.booleans(),
)
def test_random_batches_round_trip(
    records: list[tuple[Any, ...]], codec: str, base_offset: int, log_append_time: bool
) -> None:
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    stamps = [r[2] for r in records]
    headers = [r[3] for r in records]
    deltas = list(np.cumsum([r[4] for r in records]) - records[0][4]) if records else []
    ts_type = TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME
    data = encode_batch(
        pa.array(values, pa.binary()),
        key=pa.array(keys, pa.binary()),
        timestamp=pa.array(stamps, pa.int64()),
        headers=headers,
        offset_delta=deltas,
        codec=codec,
        base_offset=base_offset,
        timestamp_type=ts_type,
    )
    header = validate_batch(data)
    validate_batch_body(data, 0, header)
    assert header.record_count == len(records)
    max_ts = max(stamps) if stamps else -1
    assert header.max_timestamp == max_ts
    table = decode_records(data)
    expected = [
        {
            "offset": base_offset + int(deltas[i]),
            "timestamp": max_ts if log_append_time else stamps[i],
            "timestamp_type": int(ts_type),
            "key": keys[i],
            "value": values[i],
            "headers": None
            if headers[i] is None
            else [{"key": k, "value": v} for k, v in headers[i] or []],
        }
        for i in range(len(records))
    ]
    assert table.to_pylist() == expected


# ---------------------------------------------------------------------------------------------
# Header fields: producer, transactions, timestamp type


def test_producer_fields_and_transactional_bit() -> None:
    data = _simple(
        3,
        codec="lz4",
        producer_id=123456789,
        producer_epoch=7,
        base_sequence=41,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header = validate_batch(data)
    assert header.producer_id == 123456789
    assert header.producer_epoch == 7
    assert header.base_sequence == 41
    assert header.last_sequence == 43
    assert header.partition_leader_epoch == 9
    assert header.is_transactional
    assert not header.is_control
    assert header.attributes == 3 | ATTR_TRANSACTIONAL


def test_gaps_in_offset_deltas_after_compaction() -> None:
    data = encode_batch([b"a", b"b", b"c"], offset_delta=[1, 4, 9], base_offset=100, now_ms=1)
    header = validate_batch(data)
    assert header.record_count == 3
    assert header.last_offset_delta == 9
    assert header.next_offset == 110
    assert _decoded_offsets(data) == [101, 104, 109]


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_log_append_time(codec: str) -> None:
    data = encode_batch(
        [b"a", b"b", b"c"],
        timestamp=[5, 9, 7],
        codec=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    header = validate_batch(data)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.attributes & ATTR_TIMESTAMP_TYPE
    assert header.max_timestamp == 9
    table = decode_records(data)
    assert table.column("timestamp").to_pylist() == [9, 9, 9]
    assert table.column("timestamp_type").to_pylist() == [1, 1, 1]
    # A broker stamping the batch rewrites maxTimestamp (inside the CRC, so it re-checksums);
    # every record then reads as the broker's time.
    stamped = _patch(data, "maxTimestamp", 1_000_000)
    validate_batch(stamped)
    assert decode_records(bytes(stamped)).column("timestamp").to_pylist() == [1_000_000] * 3


def test_create_time_keeps_record_timestamps() -> None:
    table = decode_records(encode_batch([b"a", b"b"], timestamp=[5, 3]))
    assert table.column("timestamp").to_pylist() == [5, 3]
    assert table.column("timestamp_type").to_pylist() == [0, 0]


# ---------------------------------------------------------------------------------------------
# Control batches


@pytest.mark.parametrize("kind", list(ControlType))
def test_control_batch(kind: ControlType) -> None:
    data = encode_control_batch(
        kind,
        producer_id=99,
        producer_epoch=3,
        coordinator_epoch=17,
        timestamp_ms=5000,
        base_offset=77,
        partition_leader_epoch=2,
    )
    header = validate_batch(data)
    assert header.is_control
    assert header.is_transactional
    assert header.attributes == ATTR_CONTROL | ATTR_TRANSACTIONAL
    assert header.record_count == 1
    assert header.last_offset_delta == 0
    assert header.base_offset == 77
    assert header.partition_leader_epoch == 2
    assert header.producer_id == 99
    assert header.producer_epoch == 3
    assert header.base_sequence == NO_SEQUENCE
    assert header.base_timestamp == header.max_timestamp == 5000
    assert read_control_record(data, 0, header) == ControlRecord(kind, 17)
    validate_batch_body(data, 0, header)
    # Kafka's control record layout: key (version int16, type int16), value (version int16,
    # coordinatorEpoch int32).
    body = decode_body(data, 0, header)
    assert body.column("key")[0].as_py() == struct.pack(">hh", 0, int(kind))
    assert body.column("value")[0].as_py() == struct.pack(">hi", 0, 17)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1), "3-byte key"),
        (b"\x00\x00\x00\x01\x00", struct.pack(">hi", 0, 1), "5-byte key"),
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00\x00\x01", "5-byte value"),
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), "unknown type 2"),
        (struct.pack(">hh", 0, -1), struct.pack(">hi", 0, 1), "unknown type -1"),
        (None, struct.pack(">hi", 0, 1), "null"),
        (struct.pack(">hh", 0, 1), None, "null"),
    ],
)
def test_parse_control_record_errors(key: Any, value: Any, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        parse_control_record(key, value)


def test_parse_control_record_accepts_longer_values() -> None:
    # Later versions may append fields to the value, as Kafka's do.
    record = parse_control_record(struct.pack(">hh", 0, 0), struct.pack(">hi", 1, 5) + b"more")
    assert record == ControlRecord(ControlType.ABORT, 5)


def test_control_batch_with_a_null_key_is_corrupt() -> None:
    body = pa.RecordBatch.from_arrays(
        [
            pa.array([0], pa.int32()),
            pa.array([0], pa.int64()),
            pa.nulls(1, pa.binary()),
            pa.array([struct.pack(">hi", 0, 1)]),
            pa.nulls(1, HEADER_TYPE),
        ],
        schema=BODY_SCHEMA,
    )
    data = _raw_batch(body.serialize().to_pybytes(), attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL)
    header = validate_batch(data)
    with pytest.raises(CorruptRecordError, match="null"):
        read_control_record(data, 0, header)
    with pytest.raises(CorruptRecordError, match="null"):
        validate_batch_body(data, 0, header)


def test_decode_records_skips_control_batches() -> None:
    first = _simple(3, base_offset=0, producer_id=5, producer_epoch=0, is_transactional=True)
    marker = encode_control_batch(
        ControlType.COMMIT, producer_id=5, producer_epoch=0, coordinator_epoch=1, base_offset=3
    )
    second = _simple(2, base_offset=4)
    data = first + marker + second
    assert [h.is_control for h, _ in iter_batches(data)] == [False, True, False]
    assert _decoded_offsets(data) == [0, 1, 2, 4, 5]
    assert _decoded_offsets(data, start_offset=3) == [4, 5]
    assert _decoded_offsets(data, end_offset=4) == [0, 1, 2]
    assert decode_records(marker).num_rows == 0


# ---------------------------------------------------------------------------------------------
# decode_records: slicing and partial batches


def test_slicing_inside_one_batch() -> None:
    data = _simple(10, base_offset=100)
    assert _decoded_offsets(data, start_offset=103) == list(range(103, 110))
    assert _decoded_offsets(data, end_offset=105) == list(range(100, 105))
    assert _decoded_offsets(data, start_offset=102, end_offset=104) == [102, 103]
    assert _decoded_offsets(data, start_offset=0, end_offset=1000) == list(range(100, 110))
    assert _decoded_offsets(data, start_offset=110) == []
    assert _decoded_offsets(data, end_offset=100) == []
    assert _decoded_offsets(data, start_offset=105, end_offset=105) == []
    # An end before the start selects nothing (it used to build a negative-length slice).
    assert _decoded_offsets(data, start_offset=105, end_offset=103) == []
    assert decode_records(data, start_offset=105, end_offset=103).num_rows == 0
    table = decode_records(data, start_offset=102, end_offset=104)
    assert table.column("value").to_pylist() == [b"value-2", b"value-3"]
    assert table.column("key").to_pylist() == [b"key-2", b"key-3"]


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_slicing_across_batches(codec: str) -> None:
    data, offsets = _concat([3, 0, 4, 1, 5], codec=codec)
    assert _decoded_offsets(data) == offsets
    for start in range(offsets[0] - 1, offsets[-1] + 2):
        for end in range(start, offsets[-1] + 3):
            expected = [o for o in offsets if start <= o < end]
            assert _decoded_offsets(data, start_offset=start, end_offset=end) == expected


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=6),
    gap=st.integers(0, 2),
    start=st.none() | st.integers(0, 60),
    end=st.none() | st.integers(0, 60),
)
def test_slicing_matches_a_reference_model(
    sizes: list[int], gap: int, start: int | None, end: int | None
) -> None:
    data, offsets = _concat(sizes, gap=gap)
    expected = [o for o in offsets if (start is None or o >= start) and (end is None or o < end)]
    table = decode_records(data, start_offset=start, end_offset=end)
    assert table.column("offset").to_pylist() == expected
    assert table.column("value").to_pylist() == [b"x%d" % o for o in expected]


def test_trailing_partial_batch_is_ignored() -> None:
    data, offsets = _concat([3, 2, 4])
    positions = [pos for _, pos in iter_batches(data)]
    last = positions[-1]
    for cut in range(last, len(data)):
        assert _decoded_offsets(data[:cut]) == offsets[:5]
        assert [pos for _, pos in iter_batches(data[:cut])] == positions[:2]
    assert _decoded_offsets(data) == offsets


def test_decode_records_accepts_memoryview_and_bytearray() -> None:
    data, offsets = _concat([2, 3])
    assert _decoded_offsets(memoryview(data)) == offsets
    assert _decoded_offsets(bytearray(data)) == offsets


def test_decode_records_limits_the_body_size() -> None:
    data = encode_batch([bytes(100_000)], codec="zstd", now_ms=1)
    with pytest.raises(CorruptRecordError, match="more than"):
        decode_records(data, max_body_bytes=10_000)
    assert decode_records(data, max_body_bytes=1_000_000).num_rows == 1


def test_verify_crc_false_skips_only_the_crc() -> None:
    data = bytearray(encode_batch([b"hello"], now_ms=1))
    data[data.rindex(b"hello")] ^= 0x20  # "Hello": the Arrow body stays well-formed
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(bytes(data))
    assert decode_records(bytes(data), verify_crc=False).column("value").to_pylist() == [b"Hello"]


# ---------------------------------------------------------------------------------------------
# Patching the fields outside the CRC


def test_set_base_offset_and_leader_epoch_keep_the_crc_valid() -> None:
    data, _ = _concat([3, 4])
    buf = bytearray(data)
    positions = [pos for _, pos in iter_batches(data)]
    crcs = [h.crc for h, _ in iter_batches(data)]
    set_base_offset(buf, positions[0], 1000)
    set_base_offset(buf, positions[1], 1003)
    set_partition_leader_epoch(buf, positions[0], 5)
    set_partition_leader_epoch(memoryview(buf), positions[1], 6)
    headers = [validate_batch(buf, pos) for pos in positions]
    assert [h.crc for h in headers] == crcs
    assert [h.base_offset for h in headers] == [1000, 1003]
    assert [h.partition_leader_epoch for h in headers] == [5, 6]
    assert _field(buf, "baseOffset", positions[1]) == 1003
    assert _field(buf, "partitionLeaderEpoch", positions[1]) == 6
    assert _decoded_offsets(bytes(buf)) == [1000, 1001, 1002, 1003, 1004, 1005, 1006]


# ---------------------------------------------------------------------------------------------
# validate_batch


def test_peek_size() -> None:
    data = _simple(3)
    assert peek_size(data) == len(data)
    assert peek_size(data[:12]) == len(data)
    assert peek_size(data[:11]) is None
    assert peek_size(data + data, len(data)) == len(data)


def test_truncated_header() -> None:
    data = _simple(3)
    for cut in range(HEADER_SIZE):
        with pytest.raises(CorruptRecordError, match="truncated batch"):
            validate_batch(data[:cut])


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_truncated_body(codec: str) -> None:
    data = _simple(3, codec=codec)
    for cut in range(HEADER_SIZE, len(data)):
        with pytest.raises(CorruptRecordError, match="truncated batch") as info:
            validate_batch(data[:cut])
        assert info.value.offset == 0


@pytest.mark.parametrize("magic", [0, 1, 2, 82, 84, -1])
def test_wrong_magic(magic: int) -> None:
    data = _patch(_simple(3), "magic", magic, recrc=False)
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batch(data)


def test_batch_length_smaller_than_the_header() -> None:
    for length in (-12, -1, 0, 48):
        data = _patch(_simple(3), "batchLength", length, recrc=False)
        with pytest.raises(CorruptRecordError, match=r"smaller than the header|truncated"):
            validate_batch(data)


@pytest.mark.parametrize("codec", ["none", "zstd"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_flipped_bit_in_the_crc_range_is_caught(codec: str, data: st.DataObject) -> None:
    batch = _simple(4, codec=codec, producer_id=3, base_sequence=0)
    bit = data.draw(st.integers(CRC_START * 8, len(batch) * 8 - 1), label="bit")
    corrupt = bytearray(batch)
    corrupt[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        validate_batch(corrupt)
    assert info.value.offset == 0


@pytest.mark.parametrize("byte", range(OFFSET_OF["crc"], CRC_START))
def test_flipped_stored_crc_is_caught(byte: int) -> None:
    corrupt = bytearray(_simple(2))
    corrupt[byte] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batch(corrupt)


@pytest.mark.parametrize("byte", [*range(0, 8), *range(12, 16)])
def test_bits_outside_the_crc_are_not_covered(byte: int) -> None:
    # baseOffset and partitionLeaderEpoch are patched by the log after the producer computed
    # the CRC, so by design the CRC does not cover them.
    corrupt = bytearray(_simple(2))
    corrupt[byte] ^= 0x80
    validate_batch(corrupt)


def test_flipped_length_is_caught() -> None:
    batch = _simple(3)
    for bit in range(32):
        corrupt = bytearray(batch)
        corrupt[8 + bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptRecordError):
            validate_batch(corrupt)


@pytest.mark.parametrize("bit", range(7, 16))
def test_unknown_attribute_bits(bit: int) -> None:
    data = _patch(_simple(2), "attributes", struct.unpack(">h", struct.pack(">H", 1 << bit))[0])
    with pytest.raises(CorruptRecordError, match="unknown bits"):
        validate_batch(data)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_id(codec_id: int) -> None:
    data = _patch(_simple(2), "attributes", codec_id)
    with pytest.raises(CorruptRecordError, match=f"codec id {codec_id}") as info:
        validate_batch(data, path="00000.log", file_position=4096)
    assert info.value.path == "00000.log"
    assert info.value.position == 4096


@pytest.mark.parametrize(
    ("record_count", "last_offset_delta"),
    [(-1, 2), (4, 2), (1, -1), (2, 0), (0, -2), (3, -5), (-(2**31), 2)],
)
def test_bad_record_counts(record_count: int, last_offset_delta: int) -> None:
    data = _patch(_simple(3), "recordCount", record_count)
    data = _patch(data, "lastOffsetDelta", last_offset_delta)
    with pytest.raises(CorruptRecordError, match="record count"):
        validate_batch(data)


def test_record_count_that_disagrees_with_the_body() -> None:
    # The header is self-consistent (2 records within 3 offsets) but the body holds 3.
    data = bytes(_patch(_simple(3), "recordCount", 2))
    header = validate_batch(data)
    with pytest.raises(CorruptRecordError, match="declares 2 records but its body holds 3"):
        decode_body(data, 0, header)
    with pytest.raises(CorruptRecordError):
        decode_records(data)


def test_empty_batch_that_keeps_its_offset_range_is_valid() -> None:
    # After compaction removes every record, Kafka keeps an empty batch whose lastOffsetDelta
    # still spans the original offsets (it carries the producer's last sequence).
    data = encode_batch(pa.array([], pa.binary()), base_offset=10, producer_id=1, base_sequence=0)
    data = bytes(_patch(data, "lastOffsetDelta", 4))
    header = validate_batch(data)
    assert header.next_offset == 15
    assert header.last_sequence == 4
    assert decode_records(data).num_rows == 0


@pytest.mark.parametrize(
    "attributes",
    [ATTR_CONTROL, ATTR_CONTROL | 4],
)
def test_control_batch_must_be_transactional(attributes: int) -> None:
    data = _patch(_simple(1), "attributes", attributes)
    with pytest.raises(CorruptRecordError, match="control batch"):
        validate_batch(data)


def test_control_batch_must_hold_one_record() -> None:
    data = _patch(_simple(2), "attributes", ATTR_CONTROL | ATTR_TRANSACTIONAL)
    with pytest.raises(CorruptRecordError, match="control batch"):
        validate_batch(data)


def test_errors_locate_the_bad_batch() -> None:
    data, _ = _concat([2, 3, 1])
    positions = [pos for _, pos in iter_batches(data)]
    corrupt = bytearray(data)
    corrupt[positions[1] + HEADER_SIZE + 5] ^= 0x01
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batches(corrupt, path="/log/00000000000000000000.log", file_position=1000))
    assert info.value.path == "/log/00000000000000000000.log"
    assert info.value.position == 1000 + positions[1]
    assert info.value.offset == 12
    validate_batch(corrupt, positions[2])  # the batches around it are fine
    list(iter_batches(corrupt, verify_crc=False))


# ---------------------------------------------------------------------------------------------
# Bodies with a matching CRC but bad content: the CRC only proves the bytes arrived intact.


@pytest.mark.parametrize("codec", CODEC_NAMES)
@settings(max_examples=25, deadline=None)
@given(garbage=st.binary(max_size=400))
def test_garbage_body_with_a_matching_crc(codec: str, garbage: bytes) -> None:
    codec_obj = codec_for_name(codec)
    payload = garbage if codec == "none" else bytes(codec_obj.compress(garbage))
    data = _raw_batch(payload, attributes=codec_obj.id, record_count=2)
    header = validate_batch(data)  # the header alone is fine
    with pytest.raises(CorruptRecordError):
        decode_body(data, 0, header)
    with pytest.raises(CorruptRecordError):
        validate_batch_body(data, 0, header)
    with pytest.raises(CorruptRecordError):
        decode_records(data)


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_garbage_compressed_stream_with_a_matching_crc(codec: str) -> None:
    data = _raw_batch(random.Random(3).randbytes(500), attributes=codec_for_name(codec).id)
    header = validate_batch(data)
    with pytest.raises(CorruptRecordError):
        decode_records(data)
    with pytest.raises(CorruptRecordError):
        validate_batch_body(data, 0, header)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_arrow_body_with_a_matching_crc(data: st.DataObject) -> None:
    """Flip bytes of a real Arrow body and fix the CRC: decoding raises or yields sane rows."""
    original, _ = _full_example("none")
    batch = bytearray(original)
    flips = data.draw(
        st.lists(
            st.tuples(st.integers(HEADER_SIZE, len(batch) - 1), st.integers(1, 255)),
            min_size=1,
            max_size=4,
        )
    )
    for index, mask in flips:
        batch[index] ^= mask
    corrupt = bytes(_recrc(batch))
    header = validate_batch(corrupt)
    try:
        table = decode_records(corrupt)
    except CorruptRecordError:
        return
    # Whatever survives must be fully materialisable and keep the offset invariants.
    rows = table.to_pylist()
    offsets = [row["offset"] for row in rows]
    assert offsets == sorted(set(offsets))
    assert all(header.base_offset <= o <= header.last_offset for o in offsets)


def test_body_with_decreasing_offset_deltas() -> None:
    data = _raw_batch(_body([0, 2, 1]).serialize().to_pybytes(), record_count=3)
    header = validate_batch(data)
    with pytest.raises(CorruptRecordError, match="offset deltas"):
        decode_body(data, 0, header)


def test_body_with_offset_deltas_past_the_header() -> None:
    data = _raw_batch(_body([0, 1, 5]).serialize().to_pybytes(), record_count=3)
    header = validate_batch(data)
    assert header.last_offset_delta == 2
    with pytest.raises(CorruptRecordError, match="lastOffsetDelta"):
        decode_body(data, 0, header)


def test_body_with_negative_offset_delta() -> None:
    data = _raw_batch(
        _body([-1, 0, 1]).serialize().to_pybytes(), record_count=3, last_offset_delta=2
    )
    with pytest.raises(CorruptRecordError, match="offset deltas"):
        decode_body(data, 0, validate_batch(data))


@pytest.mark.parametrize(
    "body",
    [
        _body([0, None]),
        _body([0, 1], timestamps=[1, None]),
    ],
    ids=["null_delta", "null_timestamp"],
)
def test_body_with_nulls_in_required_columns(body: pa.RecordBatch) -> None:
    data = _raw_batch(body.serialize().to_pybytes(), record_count=2)
    with pytest.raises(CorruptRecordError, match="null"):
        decode_body(data, 0, validate_batch(data))


def test_body_with_a_different_schema() -> None:
    other = pa.RecordBatch.from_arrays([pa.array([1, 2], pa.int64())], names=["x"])
    data = _raw_batch(other.serialize().to_pybytes(), record_count=2)
    with pytest.raises(CorruptRecordError, match="unreadable Arrow body"):
        decode_body(data, 0, validate_batch(data))


def test_body_that_is_a_schema_message() -> None:
    data = _raw_batch(BODY_SCHEMA.serialize().to_pybytes(), record_count=0)
    with pytest.raises(CorruptRecordError, match="schema"):
        decode_body(data, 0, validate_batch(data))


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_body_with_arrow_buffer_compression_is_refused(compression: str) -> None:
    # Arrow's own IPC buffer compression would be inflated by pyarrow past max_body_bytes:
    # the format allows only the batch codec.
    body = _body([0], values=[bytes(1_000_000)])
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, BODY_SCHEMA, options=options) as writer:
        writer.write_batch(body)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    reader.read_next_message()  # the schema
    message = reader.read_next_message().serialize().to_pybytes()
    assert len(message) < 100_000
    data = _raw_batch(message, record_count=1)
    with pytest.raises(CorruptRecordError, match="IPC buffer compression"):
        decode_body(data, 0, validate_batch(data))


def test_uncompressed_body_is_read_without_a_copy() -> None:
    data = encode_batch([b"payload-bytes"], now_ms=1)
    body = decode_body(data, 0, validate_batch(data))
    value_buffer = body.column("value").buffers()[2]
    start = np.frombuffer(data, dtype=np.uint8).ctypes.data
    assert start <= value_buffer.address < start + len(data)


# ---------------------------------------------------------------------------------------------
# Empty batches (what compaction keeps of a producer's last batch)


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_an_emptied_batch_keeps_its_header_and_decodes_to_nothing(codec: str) -> None:
    full = encode_batch(
        pa.array([b"a", b"b", b"c"]),
        key=pa.array([b"k1", b"k2", b"k3"]),
        timestamp=[5, 9, 7],
        codec=codec,
        base_offset=40,
        partition_leader_epoch=3,
        producer_id=12,
        producer_epoch=2,
        base_sequence=100,
        is_transactional=True,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    original = BatchHeader.unpack_from(full)
    empty = encode_empty_batch(original)
    header = validate_batch(empty)
    assert header.record_count == 0
    changed = {"batch_length", "crc", "record_count"}
    for field in BatchHeader._fields:
        if field not in changed:
            assert getattr(header, field) == getattr(original, field), field
    assert (header.next_offset, header.last_sequence) == (43, 102)
    validate_batch_body(empty, 0, header)
    assert decode_body(empty, 0, header).num_rows == 0
    assert decode_records(empty + full).column("offset").to_pylist() == [40, 41, 42]
    assert decode_records(empty).num_rows == 0


def test_a_marker_cannot_be_emptied() -> None:
    marker = encode_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0
    )
    with pytest.raises(InvalidRecordError, match="control batch"):
        encode_empty_batch(BatchHeader.unpack_from(marker))
