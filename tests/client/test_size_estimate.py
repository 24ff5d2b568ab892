"""The producer's size estimate against encoded batches.

A batch is cut when the estimated sizes of its records (``RECORD_OVERHEAD_BYTES`` + key +
value + headers each) reach ``max.request.size`` - ``BATCH_OVERHEAD_BYTES``. The estimate must
never be under what the encoders write (a piece over ``max.request.size`` is split in two) and
should not be far over it (every record batch would be that much short of the limit).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from spark_mq.client.accumulator import RECORD_OVERHEAD_BYTES, record_size
from spark_mq.client.producer import BATCH_OVERHEAD_BYTES, Producer, _normalize_headers
from spark_mq.storage.record_batch import (
    HEADER_SIZE,
    encode_batch_gathered,
    encode_batch_parts,
    encode_varint_batch_parts,
)
from spark_mq.storage.varint_records import VARINT_MAX_RECORDS

ROWS = 2_000


def _values(n: int, *, nulls: bool = False) -> list[bytes | None]:
    return [None if nulls and i % 3 == 0 else b"v" * (i % 120) for i in range(n)]


def _keys(n: int, *, nulls: bool) -> list[bytes | None]:
    return [None if nulls and i % 2 else f"key-{i}".encode() for i in range(n)]


def _headers(n: int) -> list[list[tuple[str, bytes | None]] | None]:
    out: list[list[tuple[str, bytes | None]] | None] = []
    for i in range(n):
        if i % 4 == 0:
            out.append(None)
        else:
            out.append([("trace", b"t" * (i % 17)), ("empty", None)][: 1 + i % 2])
    return out


CASES: dict[str, dict[str, Any]] = {
    "values": {},
    "tombstones": {"nulls": True},
    "keys": {"keys": "all"},
    "some keys": {"keys": "some"},
    "timestamps": {"timestamps": True},
    "headers": {"headers": True},
    "everything": {"nulls": True, "keys": "some", "timestamps": True, "headers": True},
}


def _columns(
    n: int, *, nulls: bool = False, keys: str = "", timestamps: bool = False, headers: bool = False
) -> dict[str, Any]:
    columns: dict[str, Any] = {"value": _values(n, nulls=nulls)}
    if keys:
        columns["key"] = _keys(n, nulls=keys == "some")
    if timestamps:
        columns["timestamp"] = [1_700_000_000_000 + i for i in range(n)]
    if headers:
        columns["headers"] = _headers(n)
    return columns


def _send_estimates(columns: dict[str, Any]) -> list[int]:
    """What ``Producer.send`` estimates for each record."""
    out = []
    for i, value in enumerate(columns["value"]):
        key = columns["key"][i] if "key" in columns else None
        headers = columns["headers"][i] if "headers" in columns else None
        header_bytes = _normalize_headers(headers)[1] if headers is not None else 0
        out.append(record_size(key, value, header_bytes))
    return out


def _encoded_size(header: Any, body: Any) -> int:
    parts = body if isinstance(body, list) else [body]
    return HEADER_SIZE + sum(memoryview(part).nbytes for part in parts)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rows", [1, 7, ROWS])
def test_send_estimate_bounds_the_batch_the_sender_encodes(case: str, rows: int) -> None:
    columns = _columns(rows, **CASES[case])
    estimate = sum(_send_estimates(columns))
    # As the accumulator encodes a drained batch (spark_mq.client.accumulator.ProducerBatch).
    header, body = encode_batch_parts(
        pa.array(columns["value"], pa.binary()),
        key=pa.array(columns["key"], pa.binary()) if "key" in columns else None,
        timestamp=pa.array(columns.get("timestamp", [0] * rows), pa.int64()),
        headers=columns.get("headers"),
    )
    actual = _encoded_size(header, body)
    assert actual <= estimate + BATCH_OVERHEAD_BYTES
    # At most a byte a record over what is written, and the batch's own cost.
    assert estimate <= actual + rows


@pytest.mark.parametrize("case", [c for c in CASES if c not in {"headers", "everything"}])
@pytest.mark.parametrize("rows", [1, 7, ROWS])
def test_send_batch_estimate_bounds_the_gathered_batch(case: str, rows: int) -> None:
    columns = _columns(rows, **CASES[case])
    arrays: dict[str, pa.Array] = {
        "value": pa.array(columns["value"], pa.binary()),
        **({"key": pa.array(columns["key"], pa.binary())} if "key" in columns else {}),
        **(
            {"timestamp": pa.array(columns["timestamp"], pa.int64())}
            if "timestamp" in columns
            else {}
        ),
    }
    estimate = int(Producer._row_sizes(arrays).sum())
    header, body = encode_batch_gathered(
        arrays["value"], key=arrays.get("key"), timestamp=arrays.get("timestamp"), now_ms=1
    )
    actual = _encoded_size(header, body)
    assert actual <= estimate + BATCH_OVERHEAD_BYTES
    assert estimate <= actual + rows


def test_send_batch_headers_estimate_is_an_upper_bound() -> None:
    columns = _columns(ROWS, keys="some", headers=True)
    arrays = {
        "value": pa.array(columns["value"], pa.binary()),
        "key": pa.array(columns["key"], pa.binary()),
        "headers": pa.array(
            [
                None if h is None else [{"key": k, "value": v} for k, v in h]
                for h in columns["headers"]
            ],
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        ),
    }
    estimate = int(Producer._row_sizes(arrays).sum())
    header, body = encode_batch_gathered(
        arrays["value"], key=arrays["key"], headers=arrays["headers"], now_ms=1
    )
    assert _encoded_size(header, body) <= estimate + BATCH_OVERHEAD_BYTES


def test_full_record_batches_of_100_byte_values_fill_max_request_size() -> None:
    """The sink's common case: keyless 100-byte values cut at 1 MB come within 1% of it."""
    limit = 1024 * 1024
    per_row = 100 + RECORD_OVERHEAD_BYTES
    rows = (limit - BATCH_OVERHEAD_BYTES) // per_row
    values = pa.array([b"x" * 100] * rows, pa.binary())
    header, body = encode_batch_gathered(values, now_ms=1)
    size = _encoded_size(header, body)
    assert 0.99 * limit <= size <= limit


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rows", [1, 7, VARINT_MAX_RECORDS])
def test_send_estimate_bounds_a_small_varint_batch_with_its_header_alone(
    case: str, rows: int
) -> None:
    """A batch of at most VARINT_MAX_RECORDS records gets a varint body (as the accumulator
    encodes it: ProducerBatch._encode_small): its records' estimates plus the 61-byte header
    bound it, so a record fits max.request.size when it fits with the header alone, as in
    Kafka; and the estimate is within 25 bytes a record (and 8 a header) of what is
    written."""
    columns = _columns(rows, **CASES[case])
    estimates = _send_estimates(columns)
    header, body = encode_varint_batch_parts(
        columns["value"],
        columns.get("key"),
        columns.get("timestamp", [1_700_000_000_000] * rows),
        columns.get("headers"),
    )
    actual = _encoded_size(header, body)
    assert actual <= sum(estimates) + HEADER_SIZE
    headers = sum(len(h) for h in columns.get("headers", []) if h)
    assert sum(estimates) + HEADER_SIZE <= actual + 25 * rows + 8 * headers
    # One record alone: exactly what send() checks against max.request.size.
    for i, estimate in enumerate(estimates):
        one = {name: column[i : i + 1] for name, column in columns.items()}
        header, body = encode_varint_batch_parts(
            one["value"], one.get("key"), one.get("timestamp", [0]), one.get("headers")
        )
        assert _encoded_size(header, body) <= estimate + HEADER_SIZE
