"""Partitioners: Kafka-compatible murmur2, murmur3, sticky and round-robin keyless records,
and the column versions used by send_batch()."""

from __future__ import annotations

import itertools

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.client.partitioner import (
    Partitioner,
    check_partition,
    murmur2,
    murmur2_array,
    murmur3_array,
)
from spark_mq.errors import ConfigError, UnknownTopicOrPartitionError

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2).
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# Partitions the Java producer's default partitioner picks with 1000 partitions (as checked
# against Kafka by kafka-python's test_murmur2_java_compatibility).
KAFKA_PARTITIONS_OF_1000 = {
    b"": 681,
    b"a": 524,
    b"ab": 434,
    b"abc": 107,
    b"123456789": 566,
    b"\x00 ": 742,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2.items())
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected"), KAFKA_PARTITIONS_OF_1000.items())
def test_murmur2_partitioner_puts_keys_where_kafka_does(key: bytes, expected: int) -> None:
    assert Partitioner("murmur2").partition("t", key, 1000) == expected
    column = pa.array([key])
    assert Partitioner("murmur2").partition_array("t", column, 1000, np.zeros(1))[0] == expected


def test_murmur3_is_mmh3_unsigned_modulo() -> None:
    p = Partitioner("murmur3")
    for key in (b"", b"a", b"user-1", b"x" * 37):
        assert p.partition("t", key, 7) == mmh3.hash(key, 0, False) % 7


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=60))
def test_column_hashes_equal_scalar_hashes(keys: list[bytes | None]) -> None:
    column = pa.array([b"pad", *keys], pa.binary()).slice(1)  # a non-zero array offset
    h2 = murmur2_array(column)
    h3 = murmur3_array(column)
    for i, key in enumerate(keys):
        data = key or b""
        assert int(h2[i]) == murmur2(data) & 0xFFFFFFFF
        assert int(h3[i]) == mmh3.hash(data, 0, False)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=20)), min_size=1, max_size=40))
def test_column_partitions_equal_record_partitions_for_keyed_rows(
    keys: list[bytes | None],
) -> None:
    for name in ("murmur3", "murmur2"):
        sizes = np.full(len(keys), 10)
        parts = Partitioner(name).partition_array("t", pa.array(keys, pa.binary()), 6, sizes)
        single = Partitioner(name)
        for key, part in zip(keys, parts, strict=True):
            assert 0 <= part < 6
            if key is not None:
                assert part == single.partition("t", key, 6)


def test_sticky_keyless_records_stay_until_batch_size_then_move() -> None:
    p = Partitioner("murmur3", batch_size=100)
    first = p.partition("t", None, 4, 30)
    assert [p.partition("t", None, 4, 30) for _ in range(2)] == [first, first]
    moved = p.partition("t", None, 4, 30)  # 120 bytes > batch.size
    assert moved == (first + 1) % 4
    assert p.partition("t", None, 4, 30) == moved


def test_sticky_column_runs_of_batch_size() -> None:
    p = Partitioner("sticky", batch_size=100)
    parts = p.partition_array("t", None, 3, np.full(12, 25))
    # Four rows of 25 bytes fill a 100-byte run; runs go to consecutive partitions.
    runs = [int(x) for x in parts[::4]]
    assert len(set(runs)) == 3
    assert all((b - a) % 3 == 1 for a, b in itertools.pairwise(runs))
    for start in range(0, 12, 4):
        assert len(set(parts[start : start + 4].tolist())) == 1


def test_sticky_runs_move_on_once_a_partition_has_batch_size_bytes() -> None:
    p = Partitioner("sticky", batch_size=100)
    first = p.partition("t", None, 3, 10)
    runs = p.keyless_runs("t", 3, [30, 30, 200, 10, 40])
    assert runs is not None
    # 10 + 30 + 30 fit in batch.size; the 200-byte run fills the next partition alone, so the
    # run after it moves on again, and the last one still fits beside it.
    assert runs == [first, first, (first + 1) % 3, (first + 2) % 3, (first + 2) % 3]
    assert p.partition("t", None, 3, 40) == (first + 2) % 3  # single records continue the run


def test_row_by_row_partitioners_have_no_runs() -> None:
    assert Partitioner("round_robin").keyless_runs("t", 3, [10]) is None
    assert Partitioner(lambda topic, key, n: 0).keyless_runs("t", 3, [10]) is None


def test_round_robin_cycles_and_columns_continue_the_cycle() -> None:
    p = Partitioner("round_robin")
    first = [p.partition("t", None, 3) for _ in range(3)]
    assert sorted(first) == [0, 1, 2]
    column = p.partition_array("t", None, 3, np.zeros(4))
    assert column.tolist() == [(first[0] + i) % 3 for i in range(3, 7)]
    assert p.partition("t", None, 3) == (first[0] + 7) % 3


def test_keyed_rows_hash_under_keyless_strategies() -> None:
    for name in ("sticky", "round_robin"):
        assert Partitioner(name).partition("t", b"k", 5) == mmh3.hash(b"k", 0, False) % 5


def test_mixed_null_and_keyed_rows() -> None:
    keys = pa.array([b"a", None, b"b", None])
    parts = Partitioner("murmur2").partition_array("t", keys, 10, np.full(4, 10))
    assert parts[0] == (murmur2(b"a") & 0x7FFFFFFF) % 10
    assert parts[2] == (murmur2(b"b") & 0x7FFFFFFF) % 10


def test_callable_partitioner_is_checked() -> None:
    p = Partitioner(lambda topic, key, n: len(key or b"") % n)
    assert p.partition("t", b"abc", 2) == 1
    assert p.partition_array("t", pa.array([b"a", b"bb"]), 2, np.zeros(2)).tolist() == [1, 0]
    bad = Partitioner(lambda topic, key, n: n)
    with pytest.raises(ConfigError, match=r"must return an int in 0\.\.2"):
        bad.partition("t", b"k", 3)


def test_check_partition() -> None:
    check_partition("t", 2, 3)
    with pytest.raises(UnknownTopicOrPartitionError, match="has 3 partition"):
        check_partition("t", 3, 3)
