"""The offset map of a cleaning pass: the newest offset of every key of the dirty section.

:class:`OffsetMap` is Kafka's ``SkimpyOffsetMap`` done on whole Arrow columns. The cleaner
(:mod:`~spark_mq.storage.log_cleaner`) fills it from the dirty section, freezes it, and the
rewrite (:mod:`~spark_mq.storage.cleaner_swap`) asks it for the newest offset of every key of
a run of batches at once. Keys are kept exactly (a hash collision costs time, never a
record), and memory is bounded by ``max_bytes`` (Kafka's ``log.cleaner.dedupe.buffer.size``).

Threads: a map belongs to one cleaning pass, on the cleaner's thread.
"""

from __future__ import annotations

import logging
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.storage.arrow_arrays import binary_array, from_numpy, mask, to_numpy, to_numpy_filled

__all__ = ["MAP_ENTRY_OVERHEAD_BYTES", "OffsetMap"]

logger = logging.getLogger(__name__)

#: Memory counted per offset map entry besides its key bytes: the key's Arrow offset (4), its
#: newest offset (8), its hash (8), and slack for the sorted copy made when the map is frozen.
MAP_ENTRY_OVERHEAD_BYTES: Final = 32
#: The map counts as full when this share of its buffer is used (Kafka's dedupe load factor).
_LOAD_FACTOR: Final = 0.9

Int64Array = npt.NDArray[np.int64]


def _hash_keys(keys: pa.Array) -> Int64Array:
    """A 64-bit hash per key (null keys get some value; callers mask them).

    Python's own bytes hash, run by ``map`` in C over the column's values: no Python call
    per key, unlike a hash library (see ``docs/benchmarks.md`` for the cost). It is randomised per
    process, which does not matter: a map lives for one cleaning pass. Equal hashes are
    always confirmed by comparing the keys, so collisions cost time, never correctness.
    """
    return np.fromiter(map(hash, keys.to_pylist()), dtype=np.int64, count=len(keys))


def _key_bytes(keys: pa.Array) -> int:
    return int(pc.sum(pc.binary_length(keys)).as_py() or 0)


class OffsetMap:
    """The newest offset of every key of the dirty section (Kafka's SkimpyOffsetMap).

    Built by :meth:`add` (records in offset order), then :meth:`freeze`-d for
    :meth:`latest_offsets`. Keys are kept exactly, not as hashes. Added records are buffered
    and merged into the map (one Arrow dictionary encoding of the keys, then the largest offset
    per code) when the buffer is full or the map is frozen. Frozen, the map is sorted by
    64-bit key hash; a lookup hashes the probe keys, sorts them (so the binary search walks
    the map in order), and confirms every hash match by comparing the keys themselves.

    Memory is bounded by ``max_bytes``: each entry counts as its key bytes plus
    :data:`MAP_ENTRY_OVERHEAD_BYTES`, and buffered records count the same. When a run of
    records does not fit even after merging, :meth:`add` takes the longest prefix whose *new*
    keys fit, and the map is :attr:`full` (also once it uses 90% of the buffer, as Kafka's);
    the dirty section then ends after the last record taken.

    >>> offset_map = OffsetMap(max_bytes=1 << 20)
    >>> offset_map.add(pa.array([b"a", b"b", b"a"]), np.array([5, 6, 7]))
    3
    >>> offset_map.freeze()
    >>> offset_map.latest_offsets(pa.array([b"a", b"c", None], pa.binary())).tolist()
    [7, -1, -1]
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._keys: pa.Array = binary_array([])
        self._offsets: Int64Array = np.empty(0, np.int64)
        self._bytes = 0
        self._pending: list[tuple[pa.Array, Int64Array]] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._hashes: Int64Array | None = None
        self.full = False
        self._collisions: dict[bytes, int] = {}
        self._collision_hashes: Int64Array = np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self._keys) + self._pending_rows

    @property
    def size_bytes(self) -> int:
        return self._bytes + self._pending_bytes

    def add(self, keys: pa.Array, offsets: Int64Array) -> int:
        """Add records (non-null keys, increasing offsets); return how many were taken.

        Fewer than all means the map is full, and so does :attr:`full` afterwards.
        """
        assert self._hashes is None, "the map is frozen"
        n = len(keys)
        if n == 0:
            return 0
        cost = _key_bytes(keys) + MAP_ENTRY_OVERHEAD_BYTES * n
        if self.size_bytes + cost > self.max_bytes:
            self._merge()
        if self._bytes + cost <= self.max_bytes:
            # Buffered as they are (the caller's concat_arrays copied them out of the read
            # buffer): merging costs the map's size, so it waits for the buffer to fill.
            self._pending.append((keys, offsets))
            self._pending_rows += n
            self._pending_bytes += cost
            return n
        taken = self._fitting_prefix(keys)
        if taken:
            self._pending.append((keys[:taken], offsets[:taken]))
            self._pending_rows += taken
            self._merge()
        # As Kafka's map fills at 90% of its slots: with under a tenth of the buffer free,
        # exact fitting would run for every further run of records.
        self.full = taken < n or self._bytes > self.max_bytes * _LOAD_FACTOR
        return taken

    def _fitting_prefix(self, keys: pa.Array) -> int:
        """How many leading records fit, counting only keys new to the map, once each."""
        n = len(keys)
        new = ~mask(pc.is_in(keys, value_set=self._keys))
        codes = to_numpy_filled(pc.dictionary_encode(keys).indices, -1)
        first = np.zeros(n, np.bool_)
        first[np.unique(codes, return_index=True)[1]] = True
        lengths = to_numpy_filled(pc.binary_length(keys), 0).astype(np.int64)
        costs = np.where(new & first, lengths + MAP_ENTRY_OVERHEAD_BYTES, 0)
        taken = int(np.searchsorted(np.cumsum(costs), self.max_bytes - self._bytes, "right"))
        if taken == 0 and len(self._keys) == 0:
            # A single key larger than the whole buffer: take it anyway, or no clean could
            # ever make progress. Its size is bounded by max.message.bytes.
            logger.warning("a %d-byte key exceeds the dedupe buffer; cleaning it anyway", costs[0])
            taken = 1
        return taken

    def _merge(self) -> None:
        if not self._pending:
            return
        parts = [(self._keys, self._offsets), *self._pending]
        parts = [(k, o) for k, o in parts if len(k)]
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        if not parts:
            return
        # One hash table over every part: the chunks of the result share one dictionary, the
        # distinct keys in order of first appearance.
        encoded = pc.dictionary_encode(pa.chunked_array([k for k, _ in parts], pa.binary()))
        codes = np.concatenate([to_numpy(c.indices) for c in encoded.chunks])
        self._keys = encoded.chunks[-1].dictionary
        self._offsets = np.full(len(self._keys), -1, np.int64)
        np.maximum.at(self._offsets, codes, np.concatenate([o for _, o in parts]))
        self._bytes = _key_bytes(self._keys) + MAP_ENTRY_OVERHEAD_BYTES * len(self._keys)

    def freeze(self) -> None:
        """End building: sort the entries by key hash for lookups."""
        self._merge()
        hashes = _hash_keys(self._keys)
        order = np.argsort(hashes, kind="stable")
        self._hashes = hashes[order]
        self._offsets = self._offsets[order]
        self._keys = self._keys.take(from_numpy(order))
        same = np.flatnonzero(self._hashes[1:] == self._hashes[:-1])
        if len(same):
            # Distinct keys with one hash: a binary search finds only the first of them, so
            # these few go to a dict instead.
            clashing = np.union1d(same, same + 1)
            self._collision_hashes = np.unique(self._hashes[clashing])
            values = self._keys.take(from_numpy(clashing)).to_pylist()
            self._collisions = dict(zip(values, self._offsets[clashing].tolist(), strict=True))

    def latest_offsets(self, keys: pa.Array) -> Int64Array:
        """The newest offset of each key in the map; -1 for absent and null keys."""
        assert self._hashes is not None, "freeze() the map first"
        n = len(keys)
        result = np.full(n, -1, np.int64)
        if n == 0 or len(self._hashes) == 0:
            return result
        probe = _hash_keys(keys)
        order = np.argsort(probe)
        found = np.searchsorted(self._hashes, probe[order])
        found[found == len(self._hashes)] = 0
        hit = self._hashes[found] == probe[order]
        rows, entries = order[hit], found[hit]
        same_key = pc.equal(keys.take(from_numpy(rows)), self._keys.take(from_numpy(entries)))
        confirmed = mask(same_key)
        result[rows[confirmed]] = self._offsets[entries[confirmed]]
        if len(self._collision_hashes):
            for row in np.flatnonzero(np.isin(probe, self._collision_hashes)).tolist():
                key = keys[row].as_py()
                if key is not None:
                    result[row] = self._collisions.get(key, -1)
        return result
