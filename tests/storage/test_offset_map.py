"""The cleaner's offset map (spark_mq.storage.offset_map) against a plain dict."""

from __future__ import annotations

import doctest

import numpy as np
import pyarrow as pa
import pytest

from spark_mq.storage import offset_map
from spark_mq.storage.offset_map import OffsetMap


def _map_of(keys: list[bytes], max_bytes: int = 1 << 20) -> tuple[OffsetMap, int]:
    the_map = OffsetMap(max_bytes)
    taken = the_map.add(pa.array(keys, pa.binary()), np.arange(len(keys), dtype=np.int64))
    the_map.freeze()
    return the_map, taken


@pytest.mark.parametrize("bad_hash", [False, True])
def test_offset_map_matches_a_dict(bad_hash: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if bad_hash:
        # Every key in one of three hash buckets: lookups must still be exact.
        monkeypatch.setattr(
            offset_map,
            "_hash_keys",
            lambda keys: np.array([len(k or b"") % 3 for k in keys.to_pylist()], np.int64),
        )
    rng = np.random.default_rng(3)
    keys = [b"k%d" % k for k in rng.integers(0, 300, 3000)] + [b"", b"\x00"]
    the_map, taken = _map_of(keys)
    assert taken == len(keys)
    reference: dict[bytes, int] = {}
    for i, k in enumerate(keys):
        reference[k] = i
    probe = [b"k%d" % k for k in range(-20, 320)] + [b"", b"\x00", b"\x00\x00", None]
    got = the_map.latest_offsets(pa.array(probe, pa.binary()))
    assert got.tolist() == [reference.get(k, -1) if k is not None else -1 for k in probe]
    assert len(the_map) == len(reference)


def test_offset_map_takes_the_prefix_that_fits() -> None:
    keys = [b"%04d" % (i % 50) for i in range(200)] + [b"%04d" % i for i in range(50, 150)]
    per_entry = 4 + offset_map.MAP_ENTRY_OVERHEAD_BYTES
    the_map, taken = _map_of(keys, max_bytes=per_entry * 60)
    assert taken == 200 + 10  # the 50 repeated keys, then 10 new ones
    assert the_map.size_bytes <= per_entry * 60


def test_docstring_examples_run() -> None:
    assert doctest.testmod(offset_map).failed == 0
