"""Tests for spark_mq.protocol.framing: frame heads round-trip, and every way a frame can be
malformed raises CorruptFrameError (never struct.error, IndexError or a bare ValueError).

The byte layout itself is checked against docs/protocol.md in test_protocol_doc.py.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import FAST

from spark_mq.errors import CorruptFrameError, ProtocolError
from spark_mq.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    RESPONSE_PREFIX_BYTES,
    SIZE,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request_head,
    encode_response_head,
    frame_size,
    split_records,
)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


def request_frame(
    header: RequestHeader, body: bytes = b"", records: bytes = b""
) -> tuple[int, bytes]:
    """A whole request frame: (the size its prefix announces, the bytes after the prefix)."""
    head = encode_request_head(header, len(body), len(records))
    frame = head + body + records
    return frame_size(frame[: SIZE.size], DEFAULT_MAX_FRAME_BYTES), frame[SIZE.size :]


def response_frame(
    correlation_id: int, body: bytes = b"", records: bytes = b"", frame_error: int = 0
) -> tuple[int, bytes]:
    head = encode_response_head(correlation_id, len(body), len(records), frame_error)
    frame = head + body + records
    return frame_size(frame[: SIZE.size], DEFAULT_MAX_FRAME_BYTES), frame[SIZE.size :]


# ---------------------------------------------------------------------------------------------
# Round trips


@FAST
@given(
    header=st.builds(RequestHeader, INT16, INT16, INT32, st.none() | st.text(max_size=30)),
    body=st.binary(max_size=50),
    records=st.binary(max_size=50),
)
def test_request_round_trip(header: RequestHeader, body: bytes, records: bytes) -> None:
    size, rest = request_frame(header, body, records)
    assert size == len(rest)
    frame = decode_request(rest)
    assert frame.header == header
    assert bytes(frame.body) == body
    assert bytes(frame.records) == records


@FAST
@given(
    correlation_id=INT32,
    frame_error=INT16,
    body=st.binary(max_size=50),
    records=st.binary(max_size=50),
)
def test_response_round_trip(
    correlation_id: int, frame_error: int, body: bytes, records: bytes
) -> None:
    size, rest = response_frame(correlation_id, body, records, frame_error)
    assert size == len(rest)
    frame = decode_response(rest)
    assert (frame.correlation_id, frame.frame_error) == (correlation_id, frame_error)
    assert bytes(frame.body) == body
    assert bytes(frame.records) == records


def test_response_prefix_is_everything_before_the_body() -> None:
    head = encode_response_head(1, body_len=5, records_len=9)
    assert len(head) == RESPONSE_PREFIX_BYTES == 14


def test_null_and_empty_client_id_differ() -> None:
    _, null = request_frame(RequestHeader(3, 0, 1, None))
    _, empty = request_frame(RequestHeader(3, 0, 1, ""))
    assert null[8:10] == b"\xff\xff"
    assert empty[8:10] == b"\x00\x00"
    assert decode_request(null).header.client_id is None
    assert decode_request(empty).header.client_id == ""


def test_smallest_request_frame() -> None:
    size, rest = request_frame(RequestHeader(18, 0, 0, ""))
    assert SIZE.size + size == 18
    frame = decode_request(rest)
    assert len(frame.body) == len(frame.records) == 0


def test_decoders_accept_bytes_bytearray_and_memoryview() -> None:
    _, rest = request_frame(RequestHeader(3, 0, 9, "c"), b"body", b"rec")
    for form in (bytes(rest), bytearray(rest), memoryview(rest)):
        frame = decode_request(form)
        assert (bytes(frame.body), bytes(frame.records)) == (b"body", b"rec")


# ---------------------------------------------------------------------------------------------
# frame_size: the 4-byte prefix


@pytest.mark.parametrize("size", [0, 1, 1000, DEFAULT_MAX_FRAME_BYTES])
def test_frame_size_accepts_sizes_up_to_the_limit(size: int) -> None:
    assert frame_size(SIZE.pack(size), DEFAULT_MAX_FRAME_BYTES) == size


@pytest.mark.parametrize("size", [-1, -(2**31), DEFAULT_MAX_FRAME_BYTES + 1, 2**31 - 1])
def test_frame_size_refuses_negative_and_oversize(size: int) -> None:
    with pytest.raises(CorruptFrameError, match=r"socket\.request\.max\.bytes"):
        frame_size(SIZE.pack(size), DEFAULT_MAX_FRAME_BYTES)


def test_frame_size_uses_the_given_limit() -> None:
    assert frame_size(SIZE.pack(64), 64) == 64
    with pytest.raises(CorruptFrameError):
        frame_size(SIZE.pack(65), 64)


@pytest.mark.parametrize("prefix", [b"", b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x00\x00"])
def test_frame_size_refuses_a_prefix_of_the_wrong_length(prefix: bytes) -> None:
    with pytest.raises(CorruptFrameError):
        frame_size(prefix, DEFAULT_MAX_FRAME_BYTES)


# ---------------------------------------------------------------------------------------------
# Malformed request frames


@pytest.mark.parametrize("length", range(10))
def test_request_shorter_than_its_fixed_header(length: int) -> None:
    _, rest = request_frame(RequestHeader(3, 0, 7, None))
    with pytest.raises(CorruptFrameError, match="shorter than a header"):
        decode_request(rest[:length])


def _raw_request(client_len: int, tail: bytes) -> bytes:
    return struct.pack(">hhih", 3, 0, 7, client_len) + tail


@pytest.mark.parametrize("client_len", [-2, -3, -(2**15)])
def test_request_negative_client_id_length(client_len: int) -> None:
    with pytest.raises(CorruptFrameError, match="negative"):
        decode_request(_raw_request(client_len, b"\x00\x00\x00\x00"))


@pytest.mark.parametrize("client_len", [1, 5, 2**15 - 1])
def test_request_client_id_longer_than_the_frame(client_len: int) -> None:
    with pytest.raises(CorruptFrameError, match="client_id"):
        decode_request(_raw_request(client_len, b""))


def test_request_client_id_not_utf8() -> None:
    with pytest.raises(CorruptFrameError, match="UTF-8") as info:
        decode_request(_raw_request(2, b"\xc3\x28" + b"\x00\x00\x00\x00"))
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


@pytest.mark.parametrize("tail", [b"", b"\x00", b"\x00\x00\x00"])
def test_request_truncated_before_body_length(tail: bytes) -> None:
    with pytest.raises(CorruptFrameError, match="before its body length"):
        decode_request(_raw_request(-1, tail))
    with pytest.raises(CorruptFrameError, match="before its body length"):
        decode_request(_raw_request(3, b"cli" + tail))


@pytest.mark.parametrize(("body_len", "follow"), [(-1, 0), (-(2**31), 10), (1, 0), (11, 10)])
def test_request_body_length_does_not_fit(body_len: int, follow: int) -> None:
    frame = _raw_request(-1, struct.pack(">i", body_len) + b"x" * follow)
    with pytest.raises(CorruptFrameError, match="body length"):
        decode_request(frame)


def test_request_truncated_anywhere_before_its_body_ends() -> None:
    _, rest = request_frame(RequestHeader(0, 0, 7, "client"), b"the body", b"")
    for cut in range(len(rest)):
        with pytest.raises(CorruptFrameError):
            decode_request(rest[:cut])


# ---------------------------------------------------------------------------------------------
# Malformed response frames


@pytest.mark.parametrize("length", range(10))
def test_response_shorter_than_its_header(length: int) -> None:
    _, rest = response_frame(7, b"body")
    with pytest.raises(CorruptFrameError, match="shorter than a header"):
        decode_response(rest[:length])


@pytest.mark.parametrize(("body_len", "follow"), [(-1, 0), (-(2**31), 4), (1, 0), (5, 4)])
def test_response_body_length_does_not_fit(body_len: int, follow: int) -> None:
    frame = struct.pack(">ihi", 7, 0, body_len) + b"x" * follow
    with pytest.raises(CorruptFrameError, match="body length"):
        decode_response(frame)


# ---------------------------------------------------------------------------------------------
# split_records


def test_split_records_cuts_in_order() -> None:
    records = memoryview(b"aaabbbbc")
    parts = split_records(records, [3, 0, 4, 1])
    assert [bytes(p) for p in parts] == [b"aaa", b"", b"bbbb", b"c"]


def test_split_records_nothing() -> None:
    assert split_records(memoryview(b""), []) == []
    assert [bytes(p) for p in split_records(memoryview(b""), [0, 0])] == [b"", b""]


@pytest.mark.parametrize(
    ("records", "sizes"),
    [
        (b"abc", [2]),  # fewer bytes announced than follow
        (b"abc", [2, 2]),  # more announced than follow
        (b"abc", []),  # records with no partition to own them
        (b"", [1]),
        (b"abc", [4, -1]),  # a negative size must not cancel out a too-large one
        (b"", [-1]),
        (b"abc", [-(2**63), 2**63 + 3]),
    ],
)
def test_split_records_refuses_sizes_that_do_not_add_up(records: bytes, sizes: list[int]) -> None:
    with pytest.raises(CorruptFrameError):
        split_records(memoryview(records), sizes)


@FAST
@given(chunks=st.lists(st.binary(max_size=20), max_size=6), data=st.data())
def test_split_records_round_trip_and_any_wrong_total(
    chunks: list[bytes], data: st.DataObject
) -> None:
    records = memoryview(b"".join(chunks))
    sizes = [len(c) for c in chunks]
    assert [bytes(p) for p in split_records(records, sizes)] == chunks
    if sizes:
        i = data.draw(st.integers(0, len(sizes) - 1))
        delta = data.draw(st.integers(-50, 50).filter(lambda d: d != 0))
        wrong = [*sizes[:i], sizes[i] + delta, *sizes[i + 1 :]]
        with pytest.raises(CorruptFrameError):
            split_records(records, wrong)


def test_corrupt_frame_error_is_a_protocol_error_with_code_42() -> None:
    assert issubclass(CorruptFrameError, ProtocolError)
    assert CorruptFrameError.error_code == 42
    assert not CorruptFrameError.retriable
