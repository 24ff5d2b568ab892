"""The versioned bytes of subscriptions, assignments and sticky user data."""

from __future__ import annotations

import msgspec
import pytest
from assignor_strategies import FAST
from hypothesis import given
from hypothesis import strategies as st

from spark_mq.client.assignors import (
    METADATA_VERSION,
    Assignment,
    InvalidGroupMetadataError,
    StickyUserData,
    Subscription,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
)
from spark_mq.client.records import TopicPartition
from spark_mq.errors import InconsistentGroupProtocolError

names = st.text(min_size=1, max_size=8)
partition_lists = st.lists(
    st.builds(TopicPartition, names, st.integers(0, 2**31 - 1)), unique=True, max_size=10
)
generations = st.integers(-1, 2**31 - 1)


@FAST
@given(st.lists(names, unique=True), partition_lists, generations, st.binary(max_size=20))
def test_subscription_round_trip(
    topics: list[str], owned: list[TopicPartition], generation: int, user_data: bytes
) -> None:
    sub = Subscription(topics, owned, generation, "static-1", user_data)
    decoded = decode_subscription(encode_subscription(sub), group_instance_id="static-1")
    # Owned partitions travel grouped by topic, so they come back sorted.
    assert decoded == Subscription(topics, sorted(owned), generation, "static-1", user_data)


@FAST
@given(partition_lists, st.binary(max_size=20))
def test_assignment_round_trip(partitions: list[TopicPartition], user_data: bytes) -> None:
    assignment = Assignment(tuple(sorted(partitions)), user_data)
    assert decode_assignment(encode_assignment(assignment)) == assignment


@FAST
@given(partition_lists, generations)
def test_sticky_user_data_round_trip(owned: list[TopicPartition], generation: int) -> None:
    data = StickyUserData(tuple(sorted(owned)), generation)
    assert decode_sticky_user_data(encode_sticky_user_data(data)) == data


def test_layout_is_a_versioned_array() -> None:
    sub = Subscription(["t", "u"], [("u", 1), ("t", 2), ("u", 0)], 5, user_data=b"x")
    assert msgspec.msgpack.decode(encode_subscription(sub)) == [
        METADATA_VERSION,
        ["t", "u"],
        [["t", [2]], ["u", [0, 1]]],
        5,
        b"x",
    ]
    assignment = Assignment((TopicPartition("t", 0),))
    assert msgspec.msgpack.decode(encode_assignment(assignment)) == [0, [["t", [0]]], b""]


def test_a_newer_version_with_more_fields_is_read() -> None:
    newer = msgspec.msgpack.encode([1, ["t"], [["t", [0]]], 3, b"", "rack-a", {"future": 1}])
    assert decode_subscription(newer) == Subscription(["t"], [("t", 0)], 3)


def test_empty_bytes_mean_nothing() -> None:
    assert decode_assignment(b"") == Assignment(())
    assert decode_sticky_user_data(b"") == StickyUserData(())


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # not MessagePack
        msgspec.msgpack.encode([0, ["t"]]),  # too short
        msgspec.msgpack.encode([-1, [], [], 0, b""]),  # negative version
        msgspec.msgpack.encode([0, [], [["t", [-1]]], 0, b""]),  # negative partition
        msgspec.msgpack.encode([0, [], [], -2, b""]),  # generation below -1
        msgspec.msgpack.encode({"topics": []}),  # a map, not an array
        b"\x91\xa1\xff",  # invalid UTF-8 in a string
    ],
)
def test_bad_bytes_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(InvalidGroupMetadataError) as info:
        decode_subscription(data)
    assert info.value.kind == "subscription"
    assert isinstance(info.value, InconsistentGroupProtocolError)
    assert info.value.error_code == 23


def test_bad_assignment_and_user_data_name_their_kind() -> None:
    with pytest.raises(InvalidGroupMetadataError, match="assignment") as info:
        decode_assignment(b"\x01")
    assert info.value.kind == "assignment"
    with pytest.raises(InvalidGroupMetadataError) as info:
        decode_sticky_user_data(b"\x01")
    assert info.value.kind == "sticky user data"
