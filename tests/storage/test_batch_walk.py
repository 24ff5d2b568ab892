"""Walking batch headers in one call (spark_mq.storage.batch_walk) against a per-batch loop.

The reference is the loop the walkers replaced: ``FileRecords.headers`` with the size rule of
``LogSegment.read`` (the broker's extent of a fetch), a plain header loop (the consumer's
next fetch offset) and the first header with ``last_offset >= offset`` (the batch a fetch
starts at, ``FileRecords.seek``). The C walker and its Python fallback must agree with it on
any mix of small and large batches, any byte limit and any torn tail.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.client.fetcher import end_of_last_batch
from spark_mq.storage.batch_walk import seek_batch, walk_batches
from spark_mq.storage.file_records import SCAN_BLOCK_BYTES, FileRecords
from spark_mq.storage.record_batch import encode_batch, set_base_offset


def _log(sizes: list[int]) -> tuple[bytes, list[int]]:
    """Batches of ``sizes`` records (values of 1 to 100 KB), and each one's next offset."""
    out = bytearray()
    nexts = []
    offset = 0
    for n in sizes:
        value = b"x" * (100_000 if n == 0 else 10)
        count = max(n, 1)
        batch = bytearray(encode_batch(pa.array([value] * count), now_ms=1, body_encoding="auto"))
        set_base_offset(batch, 0, offset)
        out += batch
        offset += count
        nexts.append(offset)
    return bytes(out), nexts


def _reference_extent(records: FileRecords, end: int, max_bytes: int, min_one: bool) -> int:
    size = 0
    for header, pos in records.headers(0, end):
        if size + header.size > max_bytes and not (size == 0 and min_one):
            break
        size = pos + header.size
    return size


@given(
    sizes=st.lists(st.integers(0, 20), min_size=0, max_size=40),
    cut=st.integers(0, 200),
    limit=st.integers(0, 400_000),
    min_one=st.booleans(),
)
@settings(max_examples=80, deadline=None)
def test_walk_and_extent_match_the_per_batch_loop(
    sizes: list[int], cut: int, limit: int, min_one: bool
) -> None:
    data, nexts = _log(sizes)
    data = data[: max(len(data) - cut, 0)]
    for use_c in (True, False):
        walked = walk_batches(data, 0, len(data), use_c=use_c)
        whole = [n for n, end in zip(nexts, _ends(data), strict=False) if end <= len(data)]
        assert walked.batches == len(whole)
        assert walked.next_offset == (whole[-1] if whole else None)
        assert walk_batches(data, 0, limit, use_c=use_c) == walk_batches(
            data, 0, limit, use_c=not use_c
        )
    assert end_of_last_batch(memoryview(data)) == walked.next_offset
    with tempfile.TemporaryDirectory() as tmp:
        records = FileRecords(Path(tmp) / "00000000000000000000.log")
        try:
            records.append([data])
            for end in (len(data), len(data) // 2):
                assert records.extent(0, end, limit, min_one) == _reference_extent(
                    records, end, limit, min_one
                )
        finally:
            records.close()


def _ends(data: bytes) -> list[int]:
    ends = []
    pos = 0
    while len(data) - pos >= 12:
        pos += int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
        ends.append(pos)
    return ends


def test_extent_of_many_small_batches_spans_scan_blocks(tmp_path: Path) -> None:
    data, _ = _log([1] * 3000)  # about 3000 * 78 bytes: several 64 KiB blocks
    assert len(data) > 3 * SCAN_BLOCK_BYTES
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append([data])
    assert records.extent(0, len(data), 1 << 20, True) == len(data)
    assert records.extent(0, len(data), 100_000, True) == _reference_extent(
        records, len(data), 100_000, True
    )
    records.close()


def _reference_seek(records: FileRecords, offset: int, start: int) -> tuple[object, int] | None:
    for header, pos in records.headers(start):
        if header.last_offset >= offset:
            return header, pos
    return None


@given(
    sizes=st.lists(st.integers(0, 20), min_size=0, max_size=40),
    cut=st.integers(0, 200),
    damage=st.one_of(st.none(), st.integers(0, 10_000)),
    data_=st.data(),
)
@settings(max_examples=80, deadline=None)
def test_seek_finds_the_batch_the_header_loop_finds(
    sizes: list[int], cut: int, damage: int | None, data_: st.DataObject
) -> None:
    """On any mix of batch sizes (some larger than a scan block), a torn tail and a batch
    length overwritten with garbage, from any start position of a batch."""
    data, nexts = _log(sizes)
    data = bytearray(data[: max(len(data) - cut, 0)])
    starts = [0, *[e for e in _ends(bytes(data)) if e < len(data)]]
    if damage is not None and starts:
        at = starts[damage % len(starts)]
        if at + 12 <= len(data):
            data[at + 8 : at + 12] = (damage % 70).to_bytes(4, "big")
    offset = data_.draw(st.integers(-1, (nexts[-1] if nexts else 0) + 2))
    start = data_.draw(st.sampled_from(starts)) if starts else 0
    for use_c in (True, False):
        found = seek_batch(bytes(data), start, offset, use_c=use_c)
        assert found == seek_batch(bytes(data), start, offset, use_c=not use_c)
    with tempfile.TemporaryDirectory() as tmp:
        records = FileRecords(Path(tmp) / "00000000000000000000.log")
        try:
            records.append([bytes(data)])
            assert records.seek(offset, start) == _reference_seek(records, offset, start)
        finally:
            records.close()


def test_seek_across_scan_blocks_of_small_batches(tmp_path: Path) -> None:
    data, _ = _log([1] * 3000)
    assert len(data) > 3 * SCAN_BLOCK_BYTES
    records = FileRecords(tmp_path / "00000000000000000000.log")
    records.append([data])
    for offset in (0, 1, 999, 1500, 2999):
        assert records.seek(offset, 0) == _reference_seek(records, offset, 0)
        found = records.seek(offset, 0)
        assert found is not None and found[0].base_offset == offset
    assert records.seek(3000, 0) is None
    records.close()
