"""The records of __consumer_offsets: byte layouts as docs/groups.md draws them, round trips,
and what a reader does with keys it does not know or cannot decode."""

from __future__ import annotations

import struct

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.broker.coordinator_topic import java_string_hashcode, kafka_abs
from spark_mq.broker.group.offsets_topic import (
    LoadedGroups,
    partition_for,
)
from spark_mq.broker.group.records import (
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetEntry,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_offset_value,
    group_key,
    offset_key,
)
from spark_mq.errors import CorruptRecordError

FAST = settings(max_examples=200, deadline=None, derandomize=True, database=None)


def test_offset_key_layout():
    assert offset_key("g1", "events", 7) == (
        b"\x00\x01" + b"\x00\x02g1" + b"\x00\x06events" + struct.pack(">i", 7)
    )
    assert group_key("g1") == b"\x00\x02" + b"\x00\x02g1"


def test_values_are_versioned_msgpack_arrays():
    entry = OffsetEntry(42, 3, "meta", 1700)
    assert msgspec.msgpack.decode(encode_offset_value(entry)) == [0, 42, 3, "meta", 1700]
    record = GroupRecord(
        "consumer", 5, "range", "m-1", 99, [MemberRecord("m-1", "i", "c", "/h", 1, 2, b"s", b"a")]
    )
    assert msgspec.msgpack.decode(encode_group_value(record)) == [
        0,
        "consumer",
        5,
        "range",
        "m-1",
        99,
        [["m-1", "i", "c", "/h", 1, 2, b"s", b"a"]],
    ]


@FAST
@given(
    group=st.text(min_size=1, max_size=20),
    topic=st.text(min_size=1, max_size=20),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(-1, 2**62),
    metadata=st.none() | st.text(max_size=10),
)
def test_round_trips(group, topic, partition, offset, metadata):
    assert decode_key(offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)
    assert decode_key(group_key(group)) == GroupKey(group)
    entry = OffsetEntry(offset, -1, metadata, 12)
    assert decode_offset_value(encode_offset_value(entry)) == entry


def test_newer_values_with_more_fields_still_decode():
    newer = msgspec.msgpack.encode([1, 42, -1, None, 5, "a field from the future"])
    assert decode_offset_value(newer) == OffsetEntry(42, -1, None, 5)


def test_unknown_key_versions_are_skipped_and_garbage_is_corrupt():
    assert decode_key(b"\x00\x07whatever") is None
    for bad in (b"", b"\x00", b"\x00\x02\x00\x09ab", b"\x00\x01\x00\x01g\x00\x01t\x00"):
        with pytest.raises(CorruptRecordError):
            decode_key(bad)
    with pytest.raises(CorruptRecordError):
        decode_offset_value(b"\xc1")
    with pytest.raises(CorruptRecordError):
        decode_group_value(msgspec.msgpack.encode([0, "consumer"]))


def test_loading_applies_records_in_order_and_skips_bad_ones():
    loaded = LoadedGroups()
    loaded.apply(offset_key("g", "t", 0), encode_offset_value(OffsetEntry(1)))
    loaded.apply(offset_key("g", "t", 0), encode_offset_value(OffsetEntry(2)))
    loaded.apply(offset_key("g", "t", 1), encode_offset_value(OffsetEntry(5)))
    loaded.apply(offset_key("g", "t", 1), None)
    loaded.apply(group_key("g"), encode_group_value(GroupRecord("consumer", 1, None, None, 0, [])))
    loaded.apply(b"\x00\x09future", b"")
    loaded.apply(offset_key("g", "t", 2), b"\xc1")
    assert loaded.offsets == {"g": {("t", 0): OffsetEntry(2)}}
    assert set(loaded.groups) == {"g"}
    assert (loaded.records, loaded.skipped) == (7, 2)


# ---------------------------------------------------------------------------------------------
# Which partition coordinates a group


def test_java_string_hashcode():
    # Values Java's String.hashCode() returns.
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("a") == 97
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert java_string_hashcode("\U0001f600") == 0xD83D * 31 + 0xDE00  # a surrogate pair


def test_partition_for_uses_kafkas_abs():
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-5) == 5
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert all(0 <= partition_for(f"group-{i}", 50) < 50 for i in range(200))


def _layout(text: str) -> list[str]:
    """The key and value layouts in ``text``, whitespace normalized."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "offset key (version 1)" in line)
    keys = lines[start : start + 7]
    start = next(i for i, line in enumerate(lines) if "offset value v0" in line)
    end = next(i for i, line in enumerate(lines) if "assignment (bin)]" in line)
    return [" ".join(line.split()) for line in keys + lines[start : end + 1]]


def test_docs_draw_the_layout_the_module_documents():
    from pathlib import Path

    from spark_mq.broker.group import records

    doc = (Path(__file__).parents[2] / "docs" / "groups.md").read_text()
    assert records.__doc__ is not None
    assert _layout(doc) == _layout(records.__doc__)
    assert len(_layout(doc)) == 13
