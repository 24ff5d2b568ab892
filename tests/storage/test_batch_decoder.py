"""Decoding a run of batches up to the first corrupt one (``decode_records_until_corrupt``).

A consumer must hand out the records of the intact batches before a corrupt one and say, of
the corrupt one, its base offset and where a reader may go on (issue 27, point 4).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_mq.errors import CorruptRecordError
from spark_mq.storage.batch_decoder import (
    decode_records,
    decode_records_until_corrupt,
    offset_after_corrupt,
)
from spark_mq.storage.record_batch import encode_batch

#: Three batches of ten records: offsets 0-9, 10-19, 20-29.
SIZES = [10, 10, 10]


def batches() -> list[bytearray]:
    out = []
    base = 0
    for n in SIZES:
        values = pa.array([b"v%d" % (base + i) for i in range(n)])
        out.append(bytearray(encode_batch(values, base_offset=base)))
        base += n
    return out


def joined(parts: list[bytearray]) -> bytes:
    return b"".join(bytes(p) for p in parts)


def flip(batch: bytearray, at: int = 80, count: int = 16) -> None:
    for i in range(at, at + count):
        batch[i] ^= 0xFF


def test_an_intact_run_decodes_whole() -> None:
    records, error = decode_records_until_corrupt(joined(batches()))
    assert error is None
    assert records.column("offset").to_pylist() == list(range(30))


def test_records_before_a_corrupt_batch_come_back_with_the_error() -> None:
    parts = batches()
    flip(parts[1])
    data = joined(parts)

    records, error = decode_records_until_corrupt(data)

    assert records.column("offset").to_pylist() == list(range(10))
    assert error is not None and "CRC mismatch" in str(error)
    assert (error.offset, error.position, error.next_offset) == (10, len(parts[0]), 20)
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        decode_records(data)


def test_a_start_inside_the_corrupt_batch_returns_nothing_before_it() -> None:
    parts = batches()
    flip(parts[1])
    records, error = decode_records_until_corrupt(joined(parts), start_offset=15)
    assert records.num_rows == 0
    assert error is not None and (error.offset, error.next_offset) == (10, 20)


def test_without_a_batch_after_it_the_header_says_where_it_ends() -> None:
    parts = batches()
    flip(parts[2])
    records, error = decode_records_until_corrupt(joined(parts))
    assert records.column("offset").to_pylist() == list(range(20))
    assert error is not None and (error.offset, error.next_offset) == (20, 30)


def test_a_body_that_passes_the_crc_but_not_decoding_is_reported_too() -> None:
    """With check.crcs off the CRC is not computed; the body check still stops there."""
    parts = batches()
    flip(parts[1], at=70, count=40)
    records, error = decode_records_until_corrupt(joined(parts), verify_crc=False)
    assert records.column("offset").to_pylist() == list(range(10))
    assert error is not None and error.offset == 10


def test_an_unreadable_header_gives_no_place_to_go_on() -> None:
    parts = batches()
    parts[1][16] ^= 0xFF  # the magic byte
    data = joined(parts)
    records, error = decode_records_until_corrupt(data)
    assert records.num_rows == 10
    assert error is not None and "magic" in str(error)
    assert error.next_offset is None
    assert offset_after_corrupt(data, len(parts[0])) is None


def test_a_trailing_partial_batch_is_not_corruption() -> None:
    data = joined(batches())[:-5]
    records, error = decode_records_until_corrupt(data)
    assert error is None and records.num_rows == 20
