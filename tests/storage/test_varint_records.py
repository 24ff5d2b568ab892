"""Varint bodies (spark_mq.storage.varint_records, _varint_scan.c) against the Arrow body.

The reference is the Arrow body: a batch encoded with a varint body must decode to exactly
the table the same records give with an Arrow body, through every reader (``decode_records``
and its one-pass scan, ``decode_body``), compressed or not, with the C scan and with the
Python fallback. Corrupt bodies (random damage with the CRC recomputed, hostile lengths)
must raise CorruptRecordError, and the C and Python decoders must agree on what they accept.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mq.errors import CorruptRecordError, InvalidRecordError
from spark_mq.storage import varint_records
from spark_mq.storage.batch_decoder import (
    decode_body,
    decode_records,
    validate_batch,
    validate_batch_body,
)
from spark_mq.storage.codecs import CODEC_NAMES
from spark_mq.storage.record_batch import (
    ATTR_TRANSACTIONAL,
    CRC_START,
    HEADER_SIZE,
    BatchHeader,
    ControlType,
    TimestampType,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
    set_base_offset,
)
from spark_mq.storage.varint_records import ATTR_VARINT_BODY, encode_records

FORMAT_DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
needs_c = pytest.mark.skipif(
    not varint_records.has_c_decoder(), reason="the C extension is not built"
)

keys_or_values = st.one_of(st.none(), st.just(b""), st.binary(max_size=40))
header_lists = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=12))), max_size=3
    ),
)
records = st.lists(
    st.tuples(
        keys_or_values,
        keys_or_values,
        header_lists,
        st.integers(-(2**40), 2**45),
    ),
    min_size=0,
    max_size=20,
)


def _batch(rows: list[Any], encoding: str, **kw: Any) -> bytes:
    return encode_batch(
        pa.array([r[1] for r in rows], pa.binary()),
        key=pa.array([r[0] for r in rows], pa.binary()),
        headers=[r[2] for r in rows],
        timestamp=pa.array([r[3] for r in rows], pa.int64()),
        body_encoding=encoding,  # type: ignore[arg-type]
        **kw,
    )


def _reseal(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c.crc32c(memoryview(data)[CRC_START:]))
    return bytes(data)


@given(
    rows=records,
    codec=st.sampled_from(CODEC_NAMES),
    base_offset=st.integers(0, 2**40),
    log_append=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_varint_and_arrow_bodies_decode_to_the_same_table(
    rows: list[Any], codec: str, base_offset: int, log_append: bool
) -> None:
    kw: dict[str, Any] = {"codec": codec, "base_offset": base_offset}
    if log_append:
        kw["timestamp_type"] = TimestampType.LOG_APPEND_TIME
    varint = _batch(rows, "varint", **kw)
    arrow = _batch(rows, "arrow", **kw)
    header = validate_batch(varint)
    assert header.is_varint and not BatchHeader.unpack_from(arrow).is_varint
    assert header._replace(crc=0, batch_length=0, attributes=0) == BatchHeader.unpack_from(
        arrow
    )._replace(crc=0, batch_length=0, attributes=0)
    expected = decode_records(arrow)
    assert decode_records(varint).equals(expected)
    assert decode_body(varint, 0, header).equals(
        decode_body(arrow, 0, BatchHeader.unpack_from(arrow))
    )
    if codec == "none" and rows:
        for use_c in (True, False):
            scanned = varint_records.scan(
                varint,
                0,
                start_offset=None,
                end_offset=None,
                verify_crc=True,
                stop_at_transactional=False,
                use_c=use_c,
            )
            assert scanned.records is not None and scanned.records.equals(expected.to_batches()[0])


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=30),
    encodings=st.lists(
        st.sampled_from(["arrow", "varint", "zstd-varint"]), min_size=30, max_size=30
    ),
    start=st.integers(0, 70),
    length=st.integers(0, 70),
    data=st.data(),
)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mixed_runs_read_back_in_order_with_cuts(
    sizes: list[int], encodings: list[str], start: int, length: int, data: st.DataObject
) -> None:
    """Old Arrow batches, new varint batches and compressed varint batches in one buffer, read
    from any offset to any end: the scan and the per-batch loop interleave in order."""
    pieces = []
    offset = 0
    expected: list[tuple[int, bytes]] = []
    for i, n in enumerate(sizes):
        values = [b"r%d" % (offset + j) for j in range(n)]
        enc = encodings[i]
        batch = bytearray(
            encode_batch(
                pa.array(values),
                now_ms=7,
                codec="zstd" if enc.startswith("zstd") else "none",
                body_encoding="arrow" if enc == "arrow" else "varint",
            )
        )
        set_base_offset(batch, 0, offset)
        pieces.append(bytes(batch))
        expected.extend((offset + j, v) for j, v in enumerate(values))
        offset += n
    buf = b"".join(pieces)
    cut = data.draw(st.integers(0, 40)) if data.draw(st.booleans()) else 0
    buf = buf[: len(buf) - cut]  # a fetch cut mid-batch
    end = start + length
    got = decode_records(buf, start_offset=start, end_offset=end)
    rows = list(zip(got.column("offset").to_pylist(), got.column("value").to_pylist(), strict=True))
    whole = decode_records(buf)
    assert rows == [
        (o, v)
        for o, v in zip(
            whole.column("offset").to_pylist(), whole.column("value").to_pylist(), strict=True
        )
        if start <= o < end
    ]
    if not cut:
        assert rows == [(o, v) for o, v in expected if start <= o < end]


def test_a_batch_of_one_10_byte_record_takes_at_most_128_bytes() -> None:
    from spark_mq.client.accumulator import ProducerBatch

    batch = ProducerBatch("t", 0, 0.0)
    batch.values.append(b"0123456789")
    batch.timestamps.append(1_700_000_000_000.0)
    batch.record_count = 1
    batch.encode("none", -1, -1, -1)
    size = sum(memoryview(part).nbytes for part in batch.wire)
    assert size <= 128
    data = b"".join(bytes(part) for part in batch.wire)
    assert decode_records(data).column("value").to_pylist() == [b"0123456789"]


def test_auto_encoding_chooses_by_record_count() -> None:
    small = encode_batch(pa.array([b"x"] * varint_records.VARINT_MAX_RECORDS), body_encoding="auto")
    large = encode_batch(
        pa.array([b"x"] * (varint_records.VARINT_MAX_RECORDS + 1)), body_encoding="auto"
    )
    assert BatchHeader.unpack_from(small).is_varint
    assert not BatchHeader.unpack_from(large).is_varint


def test_timestamps_too_far_apart_fall_back_to_arrow_or_are_refused() -> None:
    stamps = pa.array([-(2**63) + 1, 2**63 - 1], pa.int64())
    data = encode_batch(pa.array([b"a", b"b"]), timestamp=stamps, body_encoding="auto")
    assert not BatchHeader.unpack_from(data).is_varint
    assert decode_records(data).column("timestamp").to_pylist() == stamps.to_pylist()
    with pytest.raises(InvalidRecordError, match="too far apart"):
        encode_batch(pa.array([b"a", b"b"]), timestamp=stamps, body_encoding="varint")


def test_compaction_rewrites_keep_a_varint_body() -> None:
    header = validate_batch(
        encode_batch(
            pa.array([b"v"]),
            producer_id=7,
            producer_epoch=0,
            base_sequence=3,
            body_encoding="varint",
            codec="lz4",
        )
    )
    empty = encode_empty_batch(header)
    empty_header = validate_batch(empty)
    assert empty_header.is_varint and empty_header.record_count == 0
    assert decode_records(empty).num_rows == 0
    assert decode_body(empty, 0, empty_header).num_rows == 0


def test_control_batches_read_with_either_body() -> None:
    marker = encode_control_batch(
        ControlType.COMMIT, producer_id=5, producer_epoch=1, coordinator_epoch=9
    )
    body = decode_body(marker, 0, validate_batch(marker))
    key, value = body.column(2)[0].as_py(), body.column(3)[0].as_py()
    header = BatchHeader.unpack_from(marker)
    varint_body = encode_records(
        [header.base_timestamp],
        [key],
        [value],
        [None],
        offset_deltas=[0],
        base_timestamp=header.base_timestamp,
    )
    fields = bytearray(
        header._replace(
            attributes=header.attributes | ATTR_VARINT_BODY,
            batch_length=HEADER_SIZE - 12 + len(varint_body),
        ).pack()
    )
    data = _reseal(fields + varint_body)
    from spark_mq.storage.batch_decoder import read_control_record

    assert read_control_record(data, 0, validate_batch(data)).type is ControlType.COMMIT
    # Control batches are skipped by the record reader whatever their body.
    assert decode_records(data + _batch([(None, b"v", None, 1)], "varint")).num_rows == 1


def test_read_committed_leaves_transactional_varint_batches_to_the_filter() -> None:
    from spark_mq.storage.txn_index import AbortedTxn

    data = bytearray(
        _batch(
            [(None, b"a", None, 1)],
            "varint",
            producer_id=3,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )
    )
    other = bytearray(_batch([(None, b"b", None, 1)], "varint"))
    set_base_offset(other, 0, 1)
    marker = bytearray(
        encode_control_batch(
            ControlType.ABORT, producer_id=3, producer_epoch=0, coordinator_epoch=0
        )
    )
    set_base_offset(marker, 0, 2)
    buf = bytes(data + other + marker)
    aborted = [AbortedTxn(producer_id=3, first_offset=0, last_offset=2, last_stable_offset=3)]
    assert decode_records(buf, aborted_transactions=aborted).column("value").to_pylist() == [b"b"]
    assert decode_records(buf).column("value").to_pylist() == [b"a", b"b"]


# ---------------------------------------------------------------------------------------------
# Corrupt bodies


def _varint_batch_with_body(body: bytes, record_count: int, last_offset_delta: int = -2) -> bytes:
    base = BatchHeader.unpack_from(_batch([(None, b"v", None, 1)], "varint"))
    header = base._replace(
        record_count=record_count,
        last_offset_delta=record_count - 1 if last_offset_delta == -2 else last_offset_delta,
        batch_length=HEADER_SIZE - 12 + len(body),
    )
    return _reseal(bytearray(header.pack()) + body)


def _agree(data: bytes) -> None:
    """Every reader refuses ``data`` or every reader returns the same records."""
    results = []
    try:
        results.append(decode_records(data).to_pylist())
    except CorruptRecordError:
        results.append("corrupt")
    for use_c in (True, False):
        scanned = varint_records.scan(
            data,
            0,
            start_offset=None,
            end_offset=None,
            verify_crc=True,
            stop_at_transactional=False,
            use_c=use_c,
        )
        if scanned.at_batch:
            results.append("corrupt")
        else:
            results.append(
                []
                if scanned.records is None
                else pa.Table.from_batches([scanned.records]).to_pylist()
            )
    # The broker's check on produce refuses what the readers refuse. (Readers skip the body
    # of a batch of no records, which the check still reads, as for an Arrow body.)
    if BatchHeader.unpack_from(data).record_count:
        try:
            validate_batch_body(data, 0, validate_batch(data))
            results.append(results[0])
        except CorruptRecordError:
            results.append("corrupt")
    else:
        results.append(results[0])
    assert results[0] == results[1] == results[2] == results[3], results


@given(rows=records.filter(bool), data=st.data())
@settings(max_examples=300, deadline=None)
def test_damaged_varint_bodies_are_refused_alike_by_c_and_python(
    rows: list[Any], data: st.DataObject
) -> None:
    batch = bytearray(_batch(rows, "varint"))
    body_len = len(batch) - HEADER_SIZE
    kind = data.draw(st.sampled_from(["flip", "truncate", "extend", "count"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 3))):
            at = HEADER_SIZE + data.draw(st.integers(0, body_len - 1))
            batch[at] = data.draw(st.integers(0, 255))
    elif kind == "truncate":
        del batch[HEADER_SIZE + data.draw(st.integers(0, body_len - 1)) :]
    elif kind == "extend":
        batch += data.draw(st.binary(min_size=1, max_size=8))
    else:
        struct.pack_into(">i", batch, 57, data.draw(st.integers(0, 2**31 - 1)))
        struct.pack_into(">i", batch, 23, 2**31 - 1)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    _agree(_reseal(batch))


@pytest.mark.parametrize(
    ("body", "count", "what"),
    [
        (b"\xff\xff\xff\xff\x7f" + bytes(5), 1, "longer than 32 bits"),
        (b"\xfe\xff\xff\xff\x0f" + bytes(10), 1, "past the body's end"),  # 2^31-1 bytes
        (b"\x14\x01\x00\x00\xfe\xff\xff\xff\x07\x01\x00", 1, "key length"),  # a 1 GiB key
        (b"\x0c\x02\x00\x00\x01\x01\x00", 1, "attributes"),
        (b"\x0c\x01\x00\x02\x01\x01\x00", 1, "offsetDelta"),  # 1, past lastOffsetDelta 0
        (b"\x12\x01\x00\x00\x01\x01\x02\x02a\x01", 1, "null header list"),
        (b"\x12\x00\x00\x00\x01\x01\x02\x02\xff\x01", 1, "UTF-8"),
        (b"\x0e\x01\x00\x00\x01\x01\x00\x00", 1, "does not match its fields"),
        (b"\x0c\x01\x00\x00\x01\x01\x00\x00", 1, "stray"),
        (bytes(7 * 3), 4, "cannot fit"),
        (b"\x0c\x01\x00\x00\x01\x01\x00" * 2, 2, "offsetDelta"),  # deltas 0, 0
    ],
)
def test_corrupt_varint_bodies_raise_corrupt_record_error(
    body: bytes, count: int, what: str
) -> None:
    data = _varint_batch_with_body(body, count)
    header = validate_batch(data)
    with pytest.raises(CorruptRecordError, match=what):
        decode_body(data, 0, header)
    with pytest.raises(CorruptRecordError, match=what):  # the broker's check on produce
        validate_batch_body(data, 0, header)
    with pytest.raises(CorruptRecordError):
        decode_records(data)
    _agree(data)


def test_a_hostile_record_count_allocates_nothing() -> None:
    data = _varint_batch_with_body(b"\x0c\x01\x00\x00\x01\x01\x00", 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        decode_body(data, 0, validate_batch(data))


@needs_c
def test_the_c_scan_checks_the_crc() -> None:
    data = bytearray(_batch([(None, b"v", None, 1)], "varint"))
    data[-2] ^= 1  # the value's byte: the body stays well-formed
    for use_c in (True, False):
        scanned = varint_records.scan(
            bytes(data),
            0,
            start_offset=None,
            end_offset=None,
            verify_crc=True,
            stop_at_transactional=False,
            use_c=use_c,
        )
        assert scanned.at_batch and scanned.records is None and scanned.position == 0
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(bytes(data))
    assert decode_records(bytes(data), verify_crc=False).num_rows == 1


def test_the_worked_example_in_format_doc_is_a_real_varint_batch() -> None:
    text = FORMAT_DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- example-batch: varint -->\s*```text\n(.*?)```", text, re.S)
    assert block is not None, "docs/format.md lost its varint example"
    lines = re.findall(r"^[0-9a-f]{8}: ((?:[0-9a-f]{2} ?){1,16})", block.group(1), re.M)
    data = bytes.fromhex("".join(lines))
    assert data == encode_batch(
        pa.array([b"hello"]),
        key=pa.array([b"key"]),
        timestamp=[1_700_000_000_000],
        base_offset=42,
        partition_leader_epoch=3,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        body_encoding="varint",
    )
    assert len(data) == 76 and validate_batch(data).attributes == ATTR_VARINT_BODY
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


def test_transactional_bit_survives_the_varint_encoder() -> None:
    data = _batch(
        [(None, b"v", None, 1)],
        "varint",
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    assert validate_batch(data).attributes == ATTR_VARINT_BODY | ATTR_TRANSACTIONAL


def test_compaction_of_varint_batches_keeps_newest_per_key_in_varint_bodies(
    tmp_path: Path,
) -> None:
    from spark_mq.storage.batch_decoder import iter_batches
    from spark_mq.storage.log import PartitionLog
    from spark_mq.storage.log_cleaner import LogCleaner
    from spark_mq.storage.log_config import LogConfig

    now = [1_700_000_000_000]
    config = LogConfig.from_properties(
        {
            "cleanup.policy": "compact",
            "segment.bytes": 2000,
            "min.cleanable.dirty.ratio": 0.0,
            "delete.retention.ms": 10_000,
        }
    )
    log = PartitionLog.open(tmp_path, config, topic="t", partition=0, time_ms=lambda: now[0])
    try:
        for i in range(60):  # batches of 1 to 3 records, keys k0..k4, varint bodies
            rows = [
                (b"k%d" % ((i + j) % 5), b"v%d-%d" % (i, j), None, now[0]) for j in range(i % 3 + 1)
            ]
            log.append(_batch(rows, "varint"))
        before = decode_records(log.segments[0].records.read(0, 1 << 20))
        active = log.active_segment.base_offset
        assert LogCleaner(time_ms=lambda: now[0]).clean(log, first_dirty_offset=0) is not None
        newest: dict[bytes, int] = {}
        for offset, key in zip(
            before.column("offset").to_pylist(), before.column("key").to_pylist(), strict=True
        ):
            newest[key] = offset
        kept = []
        for segment in log.segments:
            data = segment.records.read(0, 1 << 20)
            headers = [h for h, _ in iter_batches(data)]
            assert all(h.is_varint for h in headers)
            table = decode_records(data)
            kept.extend(
                zip(
                    table.column("offset").to_pylist(), table.column("key").to_pylist(), strict=True
                )
            )
        cleaned = [(o, k) for o, k in kept if o < active]
        assert cleaned
        # Below the active segment only the newest record of each key (as of the cleaned
        # section) is left, at its original offset.
        for offset, key in cleaned:
            later = [o for o, k in kept if k == key and o > offset and o < active]
            assert not later, (offset, key)
    finally:
        log.close()


_SCAN_WITHOUT_THE_GIL = """
import pyarrow as pa
from spark_mq.storage import varint_records
from spark_mq.storage.record_batch import encode_batch

batches = b"".join(
    encode_batch(
        pa.array([b"v" * 100] * 16, pa.binary()),
        key=pa.array([b"k" * 50] * 16, pa.binary()),
        body_encoding="varint",
        base_offset=16 * i,
    )
    for i in range(200)
)
found = varint_records.scan(
    batches, 0, start_offset=None, end_offset=None, verify_crc=True, stop_at_transactional=False
)
assert found.records is not None and found.records.num_rows == 3200, found
"""


def test_the_c_scan_allocates_safely_without_the_gil() -> None:
    """The C scan releases the GIL while it decodes, so its buffers must come from the raw
    allocator: Python's debug allocator (PYTHONMALLOC=debug) aborts the process when
    PyMem_Malloc/Realloc run without the GIL, which is what corrupted the heap of a process
    fetching from several threads (a segfault far from the scan)."""
    if varint_records._c is None:
        pytest.skip("the C extension is not built (no compiler): the Python fallback is used")
    env = {**os.environ, "PYTHONMALLOC": "debug"}
    done = subprocess.run(
        [sys.executable, "-c", _SCAN_WITHOUT_THE_GIL],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


_records = st.lists(
    st.tuples(
        st.integers(min_value=-(2**62), max_value=2**62),
        keys_or_values,
        keys_or_values,
        st.one_of(
            st.none(),
            st.lists(st.tuples(st.binary(max_size=8), keys_or_values), max_size=3),
        ),
        st.integers(min_value=0, max_value=2**31 - 1),
    ),
    max_size=70,
)


@needs_c
@settings(max_examples=300, deadline=None)
@given(
    records=_records,
    no_keys=st.booleans(),
    no_headers=st.booleans(),
    no_deltas=st.booleans(),
    base=st.integers(min_value=-(2**62), max_value=2**62),
)
def test_the_c_encoder_writes_what_the_python_encoder_writes(
    records: list[Any], no_keys: bool, no_headers: bool, no_deltas: bool, base: int
) -> None:
    """Byte for byte, with keys, headers and offset deltas given or not (None: all null,
    and 0, 1, 2, ...), and at timestamps far from the base (a varlong of up to 10 bytes)."""
    n = len(records)
    timestamps = [r[0] for r in records]
    keys = None if no_keys else [r[1] for r in records]
    values = [r[2] for r in records]
    headers = None if no_headers else [r[3] for r in records]
    deltas = None if no_deltas else [r[4] for r in records]
    in_c = encode_records(
        timestamps, keys, values, headers, offset_deltas=deltas, base_timestamp=base
    )
    in_python = varint_records._encode_records_py(
        timestamps,
        [None] * n if keys is None else keys,
        values,
        [None] * n if headers is None else headers,
        range(n) if deltas is None else deltas,
        base,
    )
    assert bytes(in_c) == bytes(in_python)


@needs_c
def test_the_c_encoder_refuses_what_the_python_encoder_refuses() -> None:
    c = varint_records.c_extension()
    # Timestamps too far apart for a varlong: the producer then writes an Arrow body.
    with pytest.raises(OverflowError, match="too far apart"):
        c.encode_records([2**63 - 1], None, [b"v"], None, None, -10)
    with pytest.raises(OverflowError):
        varint_records._encode_records_py([2**63 - 1], [None], [b"v"], [None], [0], -10)
    with pytest.raises(TypeError, match="value must be bytes or None, not str"):
        c.encode_records([0], None, ["text"], None, None, 0)
    with pytest.raises(TypeError, match="header's key must not be None"):
        c.encode_records([0], None, [b"v"], [[(None, b"x")]], None, 0)
    with pytest.raises(ValueError, match="of one length"):
        c.encode_records([0, 1], None, [b"v"], None, None, 0)
    # Any bytes-like value is taken, as the Python encoder takes it.
    assert c.encode_records(
        [0], None, [bytearray(b"x")], [[(b"k", memoryview(b"v"))]], None, 0
    ) == (varint_records._encode_records_py([0], [None], [b"x"], [[(b"k", b"v")]], [0], 0))
