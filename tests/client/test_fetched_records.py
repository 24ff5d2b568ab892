"""poll()'s records straight from varint batches (spark_mq.client.fetched_records) against
the same data decoded through a table, the way every other fetch is.

The reference is ``records_from_table`` over ``decode_records_until_corrupt``: for any run
of uncompressed varint batches (keys, headers, nulls, LogAppendTime, a fetch offset inside a
batch, a partial batch at the end) the straight path must give exactly its records, and for
data it does not take whole (an Arrow or compressed body, a control batch, a corrupt batch)
it must decline, so that the table path reports what it reports.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.client.fetched_records import records_from_table, records_of_fetch
from spark_mq.client.records import ConsumerRecord, TopicPartition
from spark_mq.storage import varint_records
from spark_mq.storage.batch_decoder import decode_records_until_corrupt
from spark_mq.storage.record_batch import (
    ControlType,
    TimestampType,
    encode_batch,
    encode_control_batch,
    set_base_offset,
)

pytestmark = pytest.mark.skipif(
    varint_records.c_function("scan_rows") is None,
    reason="the C extension is not built: poll() decodes through tables",
)

TP = TopicPartition("events", 3)
keys_or_values = st.one_of(st.none(), st.just(b""), st.binary(max_size=30))
header_lists = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
    ),
)
row = st.tuples(keys_or_values, keys_or_values, header_lists, st.integers(0, 2**41))
batches = st.lists(
    st.tuples(st.lists(row, min_size=1, max_size=12), st.booleans()), min_size=1, max_size=6
)


def _log(
    spec: list[tuple[list[Any], bool]], encoding: str = "varint", codec: str = "none"
) -> bytes:
    out = bytearray()
    offset = 0
    for rows, log_append in spec:
        kw: dict[str, Any] = {"codec": codec}
        if log_append:
            kw["timestamp_type"] = TimestampType.LOG_APPEND_TIME
        batch = bytearray(
            encode_batch(
                pa.array([r[1] for r in rows], pa.binary()),
                key=pa.array([r[0] for r in rows], pa.binary()),
                headers=[r[2] for r in rows],
                timestamp=pa.array([r[3] for r in rows], pa.int64()),
                body_encoding=encoding,  # type: ignore[arg-type]
                **kw,
            )
        )
        set_base_offset(batch, 0, offset)
        out += batch
        offset += len(rows)
    return bytes(out)


def _through_table(data: bytes, fetch_offset: int) -> list[ConsumerRecord]:
    table, corrupt = decode_records_until_corrupt(data, start_offset=fetch_offset)
    assert corrupt is None
    return records_from_table(TP, table)


@given(spec=batches, cut=st.integers(0, 40), data_=st.data())
@settings(max_examples=200, deadline=None)
def test_varint_fetches_give_the_records_the_table_gives(
    spec: list[tuple[list[Any], bool]], cut: int, data_: st.DataObject
) -> None:
    data = _log(spec)
    total = sum(len(rows) for rows, _ in spec)
    fetch_offset = data_.draw(st.integers(0, total))
    # A fetch cut by its size limit ends in part of a batch, which neither path returns.
    data = data[: len(data) - cut] if cut < len(data) - 61 else data
    straight = records_of_fetch(TP, memoryview(data), fetch_offset, verify_crc=True)
    assert straight == _through_table(data, fetch_offset)
    assert all(type(r) is ConsumerRecord for r in straight or ())


def test_headers_keys_and_nulls_come_out_as_poll_returns_them() -> None:
    data = _log(
        [([(b"k", None, [("h1", b"v"), ("h\u00e9", None)], 5), (None, b"v", None, 6)], False)]
    )
    records = records_of_fetch(TP, memoryview(data), 0, verify_crc=True)
    assert records == [
        ConsumerRecord("events", 3, 0, 5, 0, b"k", None, (("h1", b"v"), ("h\u00e9", None))),
        ConsumerRecord("events", 3, 1, 6, 0, None, b"v", ()),
    ]


@pytest.mark.parametrize("kind", ["arrow", "compressed", "control", "corrupt"])
def test_data_the_straight_path_does_not_take_whole_goes_through_the_table(kind: str) -> None:
    spec = [([(None, b"a", None, 1), (None, b"b", None, 2)], False)]
    if kind == "arrow":
        data = _log(spec) + _log(spec, encoding="arrow")
    elif kind == "compressed":
        data = _log(spec, codec="gzip")
    elif kind == "control":
        data = _log(spec) + encode_control_batch(
            ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0
        )
    else:
        damaged = bytearray(_log(spec))
        damaged[-3] ^= 0xFF
        data = _log(spec) + bytes(damaged)
    assert records_of_fetch(TP, memoryview(data), 0, verify_crc=True) is None
