"""spark_mq/broker/half/expiry.py: the tombstones of forgotten half messages go in batches
that a log of the given segment.bytes accepts (it refuses a larger batch), every id once,
in order. (The expiry itself is in test_half_service.py, through the broker.)"""

from __future__ import annotations

import pytest

from spark_mq.broker.half.expiry import tombstone_batches
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.record_batch import encode_batch


@pytest.mark.parametrize("segment_bytes", [1024, 4096, 1 << 20])
@pytest.mark.parametrize("key_chars", [1, 32, 200])
def test_every_batch_fits_a_segment(segment_bytes: int, key_chars: int) -> None:
    ids = [f"{i:0{key_chars}d}" for i in range(2_000)]
    batches = tombstone_batches(ids, segment_bytes)
    assert [key for batch in batches for key, _ in batch] == [i.encode() for i in ids]
    for batch in batches:
        keys = binary_array([key for key, _ in batch])
        encoded = encode_batch(binary_array([None] * len(batch)), key=keys, now_ms=0)
        assert len(memoryview(encoded)) <= segment_bytes
    # Not one tombstone per batch either, when several fit.
    if segment_bytes > 1024:
        assert len(batches) < len(ids) // 2
