"""Choosing a partition for each produced record, one record at a time or a column at a time.

Keyed records hash their key: ``murmur3`` (the default, MurmurHash3 x86 32-bit of the key with
seed 0, unsigned, modulo the partition count) or ``murmur2``, which is exactly the Java
client's default partitioner (Kafka's ``Utils.murmur2``, then ``toPositive(h) %
partitions``), so a key lands on the same partition as it would from a Kafka producer.
Keyless records stick to one partition until about ``batch.size`` bytes went there, then move
on (Kafka's sticky partitioning), or with ``round_robin`` go to each partition in turn.
``sticky`` and ``round_robin`` name the keyless behaviour; keyed records still hash with
murmur3 under both, so a key always stays on one partition. A callable ``(topic, key,
partition_count) -> int`` decides everything itself.

The column versions (:meth:`Partitioner.partition_array`) hash a whole Arrow key column with
numpy: every key's 4-byte blocks are processed in lockstep, one numpy pass per block position,
so a column of short keys costs a few array operations in total.

>>> murmur2(b"21")
-973932308
>>> Partitioner("murmur2").partition("t", b"abc", 1000)
107
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa

from spark_mq.errors import ConfigError, UnknownTopicOrPartitionError
from spark_mq.storage.arrow_arrays import to_numpy

_M2 = 0x5BD1E995
_MASK = 0xFFFFFFFF
_U32 = np.uint32

PartitionerFn = Callable[[str, bytes | None, int], int]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2 with seed 0x9747b28c, as a signed int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    body = length - (length & 3)
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M2) & _MASK
        k ^= k >> 24
        k = (k * _M2) & _MASK
        h = ((h * _M2) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[body + 2] << 16
        if tail >= 2:
            h ^= data[body + 1] << 8
        h ^= data[body]
        h = (h * _M2) & _MASK
    h ^= h >> 13
    h = (h * _M2) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _key_buffers(keys: pa.Array) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(starts and lengths as int64, data bytes) of a binary array, honouring its offset."""
    if keys.type != pa.binary():
        keys = keys.cast(pa.binary())
    buffers = keys.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[keys.offset : keys.offset + len(keys) + 1]
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    return np.stack([starts, lengths]), data


def _block(data: np.ndarray[Any, Any], at: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The little-endian uint32 starting at each position of ``at``."""
    out: np.ndarray[Any, Any] = (
        data[at].astype(_U32)
        | (data[at + 1].astype(_U32) << _U32(8))
        | (data[at + 2].astype(_U32) << _U32(16))
        | (data[at + 3].astype(_U32) << _U32(24))
    )
    return out


def _rows_with(blocks: np.ndarray[Any, Any], i: int) -> slice | np.ndarray[Any, Any]:
    """The rows whose key has more than ``i`` whole blocks; a plain slice when all do (keys
    of equal length, the common case), which spares numpy a gather and a scatter."""
    if int(blocks.min()) > i:
        return slice(None)
    return np.nonzero(blocks > i)[0]


def _rotl(x: np.ndarray[Any, Any], r: int) -> np.ndarray[Any, Any]:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def murmur2_array(keys: pa.Array) -> np.ndarray[Any, Any]:
    """:func:`murmur2` of every key of a binary column as uint32 (nulls hash as empty)."""
    (starts, lengths), data = _key_buffers(keys)
    m = _U32(_M2)
    h: np.ndarray[Any, Any] = _U32(0x9747B28C) ^ lengths.astype(_U32)
    blocks = lengths // 4
    for i in range(int(blocks.max()) if len(blocks) else 0):
        rows = _rows_with(blocks, i)
        k = _block(data, starts[rows] + 4 * i) * m
        k ^= k >> _U32(24)
        k *= m
        h[rows] = (h[rows] * m) ^ k
    tail = lengths & 3
    tail_at = starts + lengths - tail
    for t, shift in ((3, 16), (2, 8), (1, 0)):
        rows = np.nonzero(tail >= t)[0]
        h[rows] ^= data[tail_at[rows] + t - 1].astype(_U32) << _U32(shift)
    rows = np.nonzero(tail > 0)[0]
    h[rows] *= m
    h ^= h >> _U32(13)
    h *= m
    h ^= h >> _U32(15)
    return h


def murmur3_array(keys: pa.Array) -> np.ndarray[Any, Any]:
    """MurmurHash3 x86 32 (seed 0, unsigned) of every key, equal to ``mmh3.hash(k, 0, False)``."""
    (starts, lengths), data = _key_buffers(keys)
    c1, c2 = _U32(0xCC9E2D51), _U32(0x1B873593)
    h = np.zeros(len(lengths), dtype=_U32)
    blocks = lengths // 4
    for i in range(int(blocks.max()) if len(blocks) else 0):
        rows = _rows_with(blocks, i)
        k = _rotl(_block(data, starts[rows] + 4 * i) * c1, 15) * c2
        hh = _rotl(h[rows] ^ k, 13)
        h[rows] = hh * _U32(5) + _U32(0xE6546B64)
    tail = lengths & 3
    tail_at = starts + lengths - tail
    k1 = np.zeros(len(lengths), dtype=_U32)
    for t, shift in ((3, 16), (2, 8), (1, 0)):
        rows = np.nonzero(tail >= t)[0]
        k1[rows] ^= data[tail_at[rows] + t - 1].astype(_U32) << _U32(shift)
    rows = np.nonzero(tail > 0)[0]
    h[rows] ^= _rotl(k1[rows] * c1, 15) * c2
    h ^= lengths.astype(_U32)
    h ^= h >> _U32(16)
    h *= _U32(0x85EBCA6B)
    h ^= h >> _U32(13)
    h *= _U32(0xC2B2AE35)
    h ^= h >> _U32(16)
    return h


class Partitioner:
    """Partition choice for one producer: a name from ``PARTITIONERS`` or a callable.

    ``partition`` serves ``send()``; ``partition_array`` serves ``send_batch()``. ``size`` is
    the record's estimated size, which sticky partitioning counts to know when to move on.
    """

    def __init__(self, kind: str | PartitionerFn, *, batch_size: int = 16_384) -> None:
        self._fn: PartitionerFn | None = None if isinstance(kind, str) else kind
        name = kind if isinstance(kind, str) else "callable"
        self.name = name
        self._hash2 = name == "murmur2"
        self._round_robin = name == "round_robin"
        self._batch_size = max(batch_size, 1)
        # Sticky partition and bytes sent to it, per topic; round-robin counters per topic.
        self._sticky: dict[str, list[int]] = {}
        self._next: dict[str, list[int]] = {}

    # -- one record ----------------------------------------------------------------------

    def partition(self, topic: str, key: bytes | None, partition_count: int, size: int = 0) -> int:
        if self._fn is not None:
            return self._call(topic, key, partition_count)
        if key is None:
            # The common case inline: the sticky partition still has room.
            state = self._sticky.get(topic)
            if (
                state is not None
                and state[0] < partition_count
                and state[1] + size <= self._batch_size
                and not self._round_robin
            ):
                state[1] += size
                return state[0]
            return self.keyless(topic, partition_count, size)
        if self._hash2:
            return (murmur2(key) & 0x7FFFFFFF) % partition_count
        return int(mmh3.hash(key, 0, False)) % partition_count

    def keyless(self, topic: str, partition_count: int, size: int) -> int:
        """The partition for a record without a key."""
        if self._round_robin:
            turn = self._next.get(topic)
            if turn is None:
                turn = self._next[topic] = [self._start(topic)]
            turn[0] += 1
            return (turn[0] - 1) % partition_count
        state = self._sticky.get(topic)
        if state is None or state[0] >= partition_count:
            state = self._sticky[topic] = [self._start(topic) % partition_count, 0]
        state[1] += size
        if state[1] > self._batch_size:
            state[0] = (state[0] + 1) % partition_count
            state[1] = size
        return state[0]

    @staticmethod
    def _start(topic: str) -> int:
        # Producers of one topic start at different partitions without a random source that
        # tests would have to control: the hash of the process id and topic spreads them.
        return int(mmh3.hash(f"{os.getpid()}:{topic}", 0, False))

    def _call(self, topic: str, key: bytes | None, partition_count: int) -> int:
        assert self._fn is not None
        partition = self._fn(topic, key, partition_count)
        if not isinstance(partition, int) or not 0 <= partition < partition_count:
            raise ConfigError(
                f"partitioner {self._fn!r} returned {partition!r} for topic {topic!r}; it must "
                f"return an int in 0..{partition_count - 1}",
                key="partitioner",
                value=self._fn,
            )
        return partition

    # -- a whole column ------------------------------------------------------------------

    def keyless_runs(
        self, topic: str, partition_count: int, run_sizes: list[int]
    ) -> list[int] | None:
        """The partition of each run of keyless rows (``run_sizes`` their bytes), for a
        producer that encodes a table's rows in contiguous runs; None when this partitioner
        decides row by row (round robin or a callable) and the runs cannot stay whole.

        Sticky partitioning treats a run like one record of its size: runs stay on the
        partition until it has ``batch.size`` bytes, then move on; a run over ``batch.size``
        fills a partition by itself, so the next one moves on.
        """
        if self._fn is not None or self._round_robin:
            return None
        return [self.keyless(topic, partition_count, size) for size in run_sizes]

    def partition_array(
        self, topic: str, keys: pa.Array | None, partition_count: int, sizes: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """The partition of every row as int32. Keyless rows are spread in contiguous runs of
        about ``batch.size`` bytes (sticky) or row by row (round robin)."""
        n = len(sizes)
        if self._fn is not None:
            key_list = keys.to_pylist() if keys is not None else [None] * n
            return np.fromiter(
                (self._call(topic, k, partition_count) for k in key_list), np.int32, count=n
            )
        out = np.empty(n, dtype=np.int32)
        null_rows: np.ndarray[Any, Any] | None
        if keys is None or keys.null_count == n:
            null_rows = None  # every row is keyless
        else:
            hashed = murmur2_array(keys) & _U32(0x7FFFFFFF) if self._hash2 else murmur3_array(keys)
            out[:] = hashed % _U32(partition_count)
            if not keys.null_count:
                return out
            null_rows = np.nonzero(to_numpy(keys.is_null()))[0]
        rows_sizes = sizes if null_rows is None else sizes[null_rows]
        chosen = self._keyless_array(topic, partition_count, rows_sizes)
        if null_rows is None:
            return chosen
        out[null_rows] = chosen
        return out

    def _keyless_array(
        self, topic: str, partition_count: int, sizes: np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        n = len(sizes)
        if self._round_robin:
            first = self.keyless(topic, partition_count, 0)
            self._next[topic][0] += max(n - 1, 0)
            return ((np.arange(n, dtype=np.int64) + first) % partition_count).astype(np.int32)
        state = self._sticky.get(topic)
        if state is None or state[0] >= partition_count:
            state = self._sticky[topic] = [self._start(topic) % partition_count, 0]
        run = (state[1] + np.cumsum(sizes, dtype=np.int64)) // (self._batch_size + 1)
        chosen = ((run + state[0]) % partition_count).astype(np.int32)
        if n:
            state[0] = int(chosen[-1])
            state[1] = int((state[1] + int(sizes.sum())) % (self._batch_size + 1))
        return chosen


def check_partition(topic: str, partition: int, partition_count: int) -> None:
    """Raise UnknownTopicOrPartitionError for an explicit partition the topic does not have."""
    if not 0 <= partition < partition_count:
        raise UnknownTopicOrPartitionError(
            f"partition {partition} of topic {topic!r} does not exist: the topic has "
            f"{partition_count} partition(s), 0..{partition_count - 1}",
            topic=topic,
            partition=partition,
        )
