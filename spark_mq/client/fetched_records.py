"""The records ``Consumer.poll()`` returns, made from a fetch's data.

``poll_batch()`` hands out Arrow tables, and every fetch can be decoded to one
(:mod:`~spark_mq.client.fetcher`). ``poll()`` hands out :class:`ConsumerRecord` tuples. From a
table they are made column by column (:func:`records_from_table`). A fetch made only of
uncompressed varint batches (what a producer writes for small batches, and so what a
low-latency topic holds) is instead decoded straight into records by the C extension
(:func:`records_of_fetch`): for the few records of such a fetch, building Arrow arrays only
to read them back costs several times the decoding (measured in
benchmarks/bench_small_batches.py's latency case: docs/benchmarks.md).

Both give the same records; ``tests/client/test_fetched_records.py`` checks it on data of
every kind. Any fetch the C path does not take whole (Arrow or compressed bodies, control
batches, transactional batches in a ``read_committed`` fetch with aborted transactions, a
corrupt batch, or no C extension) goes through the table.
"""

from __future__ import annotations

import functools
import gc
import itertools
from collections.abc import Iterable
from typing import Final

import pyarrow as pa

from spark_mq.client.records import ConsumerRecord, TopicPartition
from spark_mq.storage.record_batch import HEADER_SIZE
from spark_mq.storage.varint_records import ATTR_VARINT_BODY, c_function

_make_record = functools.partial(tuple.__new__, ConsumerRecord)
_NO_HEADERS: tuple[tuple[str, bytes | None], ...] = ()
_INT64_MAX: Final = 2**63 - 1
_STOP_AT_BATCH: Final = 1


def _header_tuples(column: pa.Array) -> Iterable[tuple[tuple[str, bytes | None], ...]]:
    if column.null_count == len(column):
        return itertools.repeat(_NO_HEADERS, len(column))
    return [
        _NO_HEADERS if row is None else tuple((h["key"], h["value"]) for h in row)
        for row in column.to_pylist()
    ]


def records_from_table(tp: TopicPartition, table: pa.Table) -> list[ConsumerRecord]:
    """Python records from one partition's table of ``RECORD_SCHEMA``: one ``to_pylist``
    per column, then ``zip`` into tuples built by ``tuple.__new__`` (no Python per field).

    The garbage collector is paused meanwhile: building many tuples at once otherwise sets
    off collection after collection, each scanning every tracked object (several times
    slower: see ``docs/benchmarks.md``), and these tuples of bytes and ints cannot form
    reference cycles.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return list(
            map(
                _make_record,
                zip(
                    itertools.repeat(tp.topic),
                    itertools.repeat(tp.partition),
                    *(table.column(i).to_pylist() for i in range(5)),
                    _header_tuples(table.column(5).combine_chunks()),
                    strict=False,
                ),
            )
        )
    finally:
        if paused:
            gc.enable()


def records_of_fetch(
    tp: TopicPartition, data: memoryview, fetch_offset: int, *, verify_crc: bool
) -> list[ConsumerRecord] | None:
    """The records of one partition's fetch data from ``fetch_offset`` on, decoded straight
    from its varint batches; None when the data holds anything else (see the module
    docstring), which the caller then decodes through a table. A partial batch at the end
    (a fetch cut by its size limit) is left out, as the table path leaves it out."""
    scan_rows = c_function("scan_rows")
    if scan_rows is None or len(data) < HEADER_SIZE or not data[22] & ATTR_VARINT_BODY:
        return None
    paused = gc.isenabled()
    if paused:
        gc.disable()  # as in records_from_table
    try:
        _, reason, rows = scan_rows(
            data,
            0,
            fetch_offset,
            _INT64_MAX,
            verify_crc,
            False,
            ConsumerRecord,
            tp.topic,
            tp.partition,
        )
    finally:
        if paused:
            gc.enable()
    if reason == _STOP_AT_BATCH:
        return None
    records: list[ConsumerRecord] = rows
    return records
