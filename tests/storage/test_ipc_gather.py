"""Tests for spark_mq.storage.ipc_gather and encode_batch_gathered: a body gathered from the
columns' own buffers is an Arrow IPC message that pyarrow reads back to the same batch (under
full validation), that the broker's body checks accept, and that copies no key or value bytes.
"""

from __future__ import annotations

import itertools
import random

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mq.client.accumulator import stamp_header
from spark_mq.errors import InvalidRecordError
from spark_mq.storage.batch_decoder import decode_records, validate_batch, validate_batch_body
from spark_mq.storage.ipc_gather import gather_body
from spark_mq.storage.record_batch import (
    BODY_SCHEMA,
    HEADER_SIZE,
    HEADER_TYPE,
    encode_batch_gathered,
    encode_batch_parts,
)


def _read(parts: list[memoryview]) -> pa.RecordBatch:
    message = pa.ipc.read_message(pa.py_buffer(b"".join(parts)))
    batch = pa.ipc.read_record_batch(message, BODY_SCHEMA)
    batch.validate(full=True)
    return batch


def _columns(
    values: pa.Array, keys: pa.Array | None = None, stamps: pa.Array | None = None
) -> list[pa.Array]:
    n = len(values)
    return [
        pa.array(np.arange(n, dtype=np.int32)),
        stamps if stamps is not None else pa.array(np.full(n, 1_700_000_000_000, np.int64)),
        keys if keys is not None else pa.nulls(n, pa.binary()),
        values,
        pa.nulls(n, HEADER_TYPE),
    ]


_entry = st.one_of(st.none(), st.binary(max_size=40))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(_entry, max_size=120),
    keys=st.one_of(st.none(), st.lists(_entry, min_size=120, max_size=120)),
    cut=st.tuples(st.integers(0, 120), st.integers(0, 120)),
)
def test_a_gathered_body_reads_back_as_the_same_batch(
    values: list[bytes | None], keys: list[bytes | None] | None, cut: tuple[int, int]
) -> None:
    # Slices at any row, so bitmaps start off byte boundaries and offsets do not start at 0.
    start = min(cut[0], len(values))
    stop = max(start, min(cut[1], len(values)))
    value_array = pa.array(values, pa.binary()).slice(start, stop - start)
    key_array = (
        None
        if keys is None
        else pa.array(keys[: len(values)], pa.binary()).slice(start, stop - start)
    )
    stamps = pa.array(np.arange(len(values), dtype=np.int64) * 3).slice(start, stop - start)
    columns = _columns(value_array, key_array, stamps)
    parts = gather_body(columns)
    assert parts is not None
    batch = _read(parts)
    assert batch.equals(pa.RecordBatch.from_arrays(columns, schema=BODY_SCHEMA))
    assert sum(len(part) for part in parts) % 8 == 0


def test_the_keys_and_values_are_not_copied() -> None:
    values = pa.array([b"%05d-value" % i for i in range(1000)], pa.binary()).slice(100, 800)
    keys = pa.array([b"k%d" % i for i in range(1000)], pa.binary()).slice(100, 800)
    parts = gather_body(_columns(values, keys))
    assert parts is not None
    addresses = {np.frombuffer(part, np.uint8).ctypes.data for part in parts if len(part)}
    for array in (values, keys):
        offsets = np.frombuffer(array.buffers()[1], np.int32)[array.offset :]
        assert array.buffers()[2].address + int(offsets[0]) in addresses


def test_null_header_lists_have_no_child_rows() -> None:
    """pyarrow's pa.nulls(n, list<struct>) gives the struct's children n rows each: 8 bytes a
    record that nobody reads. The gathered body has none."""
    values = pa.array([b"x" * 100] * 1000, pa.binary())
    columns = _columns(values)
    parts = gather_body(columns)
    assert parts is not None
    gathered = sum(len(part) for part in parts)
    serialized = pa.RecordBatch.from_arrays(columns, schema=BODY_SCHEMA).serialize().size
    # Less the children's own one-entry offsets and their padding.
    assert serialized - gathered >= 8 * 1000 - 16
    headers = _read(parts).column(4)
    assert headers.null_count == 1000
    assert len(headers.values) == 0


def test_headers_with_content_are_left_to_pyarrow() -> None:
    values = pa.array([b"a", b"b"], pa.binary())
    headers = pa.array([[{"key": "h", "value": b"1"}], None], HEADER_TYPE)
    columns = _columns(values)
    columns[4] = headers
    assert gather_body(columns) is None
    header, parts = encode_batch_gathered(values, headers=headers, now_ms=5)
    assert len(parts) == 1
    batch = bytes(stamp_header(bytes(header), parts, -1, -1, -1)) + b"".join(
        bytes(memoryview(part)) for part in parts
    )
    records = decode_records(batch)
    assert records.column("headers").to_pylist() == [[{"key": "h", "value": b"1"}], None]


@pytest.mark.parametrize("rows", [0, 1, 7, 8, 9, 1000])
def test_an_empty_or_all_null_column_reads_back_as_nulls(rows: int) -> None:
    values = pa.array([None] * rows, pa.binary())
    parts = gather_body(_columns(values))
    assert parts is not None
    batch = _read(parts)
    assert batch.num_rows == rows
    assert batch.column(3).null_count == rows
    assert batch.column(2).null_count == rows


def test_encode_batch_gathered_matches_encode_batch_parts() -> None:
    """Header for header, the same batch as the copying encoder; the joined parts pass the
    broker's checks (CRC and full body validation) and decode to the same records."""
    rng = random.Random(7)
    values = pa.array(
        [None if rng.random() < 0.1 else bytes(rng.randrange(60)) for _ in range(500)]
    ).slice(3, 490)
    keys = pa.array([b"k%d" % rng.randrange(9) for _ in range(500)]).slice(3, 490)
    stamps = pa.array([1_700_000_000_000 + rng.randrange(10**6) for _ in range(490)], pa.int64())
    header, parts = encode_batch_gathered(values, key=keys, timestamp=stamps)
    copied_header, copied_body = encode_batch_parts(values, key=keys, timestamp=stamps)
    size = sum(memoryview(part).nbytes for part in parts)
    # Every field but batchLength (bytes 8-12): the gathered body is smaller.
    assert (
        bytes(header)[:8] + bytes(header)[12:]
        == bytes(copied_header)[:8] + bytes(copied_header)[12:]
    )
    stamped = stamp_header(bytes(header), parts, 11, 2, 30, transactional=True)
    batch = stamped + b"".join(bytes(memoryview(part)) for part in parts)
    checked = validate_batch(batch, 0)
    assert checked.size == HEADER_SIZE + size
    assert checked.crc == crc32c.crc32c(batch[21:])
    validate_batch_body(memoryview(batch), 0, checked)
    copied = stamp_header(bytes(copied_header), copied_body, 11, 2, 30, transactional=True)
    expected = decode_records(copied + bytes(memoryview(copied_body)))
    assert decode_records(batch).equals(expected)


def test_string_values_and_timestamp_types_are_coerced_as_for_encode_batch_parts() -> None:
    values = pa.array(["é", None, "abc"])
    stamps = pa.array([1, 2, 3], pa.timestamp("s"))
    header, parts = encode_batch_gathered(values, timestamp=stamps)
    batch = stamp_header(bytes(header), parts, -1, -1, -1) + b"".join(
        bytes(memoryview(part)) for part in parts
    )
    records = decode_records(batch)
    assert records.column("value").to_pylist() == ["é".encode(), None, b"abc"]
    assert records.column("timestamp").to_pylist() == [1000, 2000, 3000]


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_compressed_body_is_one_part_as_encode_batch_parts_writes_it(codec: str) -> None:
    values = pa.array([b"v%d" % i for i in range(50)])
    header, parts = encode_batch_gathered(values, codec=codec, now_ms=9)
    copied_header, copied_body = encode_batch_parts(values, codec=codec, now_ms=9)
    assert len(parts) == 1
    assert bytes(header) == bytes(copied_header)
    batch = stamp_header(bytes(header), parts, -1, -1, -1) + bytes(memoryview(parts[0]))
    assert decode_records(batch).column("value").to_pylist() == values.to_pylist()
    assert bytes(memoryview(parts[0])) == bytes(memoryview(copied_body))


def _chunked(array: pa.Array, cuts: list[int]) -> pa.ChunkedArray:
    """``array`` cut at ``cuts`` (any positions, so chunks start at any offset), with an
    empty chunk where two cuts coincide."""
    bounds = [0, *sorted(min(c, len(array)) for c in cuts), len(array)]
    return pa.chunked_array(
        [array.slice(a, b - a) for a, b in itertools.pairwise(bounds)],
        type=array.type,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(_entry, max_size=120),
    keys=st.one_of(st.none(), st.lists(_entry, min_size=120, max_size=120)),
    value_cuts=st.lists(st.integers(0, 120), max_size=5),
    key_cuts=st.lists(st.integers(0, 120), max_size=5),
    head=st.integers(0, 9),
)
def test_chunked_columns_gather_into_the_batch_of_their_concatenation(
    values: list[bytes | None],
    keys: list[bytes | None] | None,
    value_cuts: list[int],
    key_cuts: list[int],
    head: int,
) -> None:
    """A table made of several record batches: key and value columns in chunks that start
    anywhere, with nulls or without, and chunks of the timestamps too."""
    skip = min(head, len(values))
    value_array = pa.array(values, pa.binary()).slice(skip)
    n = len(value_array)
    key_array = None if keys is None else pa.array(keys, pa.binary()).slice(skip, n)
    stamps = pa.array(np.arange(n, dtype=np.int64) * 7)
    columns = _columns(value_array, key_array, stamps)
    expected = pa.RecordBatch.from_arrays(columns, schema=BODY_SCHEMA)
    chunked: list[pa.Array | pa.ChunkedArray] = list(columns)
    chunked[3] = _chunked(value_array, value_cuts)
    chunked[1] = _chunked(stamps, key_cuts)
    if key_array is not None:
        chunked[2] = _chunked(key_array, key_cuts)
    parts = gather_body(chunked)
    assert parts is not None
    assert _read(parts).equals(expected)
    assert sum(len(part) for part in parts) % 8 == 0


def test_chunked_values_are_not_copied() -> None:
    batches = [
        pa.array([b"%05d-value-%d" % (i, c) for i in range(300)], pa.binary()) for c in range(3)
    ]
    values = pa.chunked_array([batches[0].slice(50), batches[1], batches[2].slice(0, 200)])
    parts = gather_body(_columns(values))  # type: ignore[arg-type]
    assert parts is not None
    addresses = {np.frombuffer(part, np.uint8).ctypes.data for part in parts if len(part)}
    for chunk in values.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], np.int32)[chunk.offset :]
        assert chunk.buffers()[2].address + int(offsets[0]) in addresses


def test_encode_batch_gathered_of_chunks_is_the_batch_of_the_concatenation() -> None:
    """Header and records as for the same rows in one array; the broker's checks pass."""
    rng = random.Random(11)
    whole = pa.array([bytes(rng.randrange(1, 50)) for _ in range(700)])
    keys = pa.array([None if rng.random() < 0.2 else b"k%d" % i for i in range(700)])
    chunks = [(0, 250), (250, 251), (251, 700)]
    values = pa.chunked_array([whole.slice(a, b - a) for a, b in chunks])
    key_chunks = pa.chunked_array([keys.slice(a, b - a) for a, b in chunks])
    header, parts = encode_batch_gathered(values, key=key_chunks, now_ms=3)
    one_header, one_parts = encode_batch_gathered(whole, key=keys, now_ms=3)
    assert bytes(header) == bytes(one_header)
    batch = stamp_header(bytes(header), parts, 4, 0, 0) + b"".join(
        bytes(memoryview(part)) for part in parts
    )
    one = stamp_header(bytes(one_header), one_parts, 4, 0, 0) + b"".join(
        bytes(memoryview(part)) for part in one_parts
    )
    assert batch == one
    validate_batch_body(memoryview(batch), 0, validate_batch(batch, 0))
    # Compressed: the chunks are concatenated for the codec, with the same records.
    header, parts = encode_batch_gathered(values, key=key_chunks, codec="lz4", now_ms=3)
    assert len(parts) == 1
    batch = stamp_header(bytes(header), parts, 4, 0, 0) + bytes(memoryview(parts[0]))
    assert decode_records(batch).column("value").to_pylist() == whole.to_pylist()


def test_chunks_whose_bytes_pass_int32_offsets_are_refused() -> None:
    """Two chunks of 1 GiB each: 2^31 bytes, one past what int32 offsets can address. The
    buffer is allocated, never touched (the check comes before any offset is moved)."""
    gib = 1 << 30
    offsets = pa.py_buffer(np.array([0, gib], dtype=np.int32).tobytes())
    chunk = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.allocate_buffer(gib)])
    with pytest.raises(InvalidRecordError, match="do not fit Arrow's int32 offsets"):
        encode_batch_gathered(pa.chunked_array([chunk, chunk]), now_ms=1)
