"""Tests for spark_mq.protocol.api: the registry, and a round trip of every API's request and
response through whole frames (records sections included), plus the compatibility rule of
docs/protocol.md and a fuzz test: whatever bytes a decoder is given, it returns a message or
raises CorruptFrameError, never anything else.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import FAST, MANY, PER_API, announced_sizes, message, with_records

from spark_mq.errors import CorruptFrameError, UnsupportedVersionError
from spark_mq.protocol import api_versions, fetch, metadata, produce
from spark_mq.protocol.api import (
    APIS,
    ApiKey,
    ApiSpec,
    FrameErrorBody,
    decode_frame_error,
    decode_request_body,
    encode_frame_error,
    encode_request,
    encode_response,
    spec_for,
    spec_for_request,
)
from spark_mq.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    SIZE,
    ResponseFrame,
    decode_request,
    decode_response,
    frame_size,
    split_records,
)

SPECS = list(APIS.values())
SPEC_IDS = [spec.key.name for spec in SPECS]


def unframe(frame: bytes) -> bytes:
    """The frame after its size prefix, checking that the prefix announces exactly that."""
    size = frame_size(frame[: SIZE.size], DEFAULT_MAX_FRAME_BYTES)
    assert size == len(frame) - SIZE.size
    return frame[SIZE.size :]


# ---------------------------------------------------------------------------------------------
# Registry


def test_every_api_key_is_registered_once() -> None:
    assert set(APIS) == set(ApiKey)
    for key, spec in APIS.items():
        assert spec.key is key
        assert 0 <= spec.min_version <= spec.max_version
    request_types = [spec.request_type for spec in SPECS]
    response_types = [spec.response_type for spec in SPECS]
    assert len(set(request_types)) == len(request_types)
    assert len(set(response_types)) == len(response_types)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_message_types_are_array_like(spec: ApiSpec[Any, Any]) -> None:
    for cls in (spec.request_type, spec.response_type):
        assert cls.__struct_config__.array_like, cls
    # A request never silently drops a field it does not understand (docs: compatibility).
    assert spec.request_type.__struct_config__.forbid_unknown_fields


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_spec_for_finds_every_version(spec: ApiSpec[Any, Any]) -> None:
    for version in range(spec.min_version, spec.max_version + 1):
        assert spec_for(spec.key, version) is spec
        assert spec_for(int(spec.key), version) is spec


@pytest.mark.parametrize("api_key", [-1, 38, 47, 999, 2**15 - 1])
def test_spec_for_unknown_key(api_key: int) -> None:
    with pytest.raises(UnsupportedVersionError, match=f"unknown API key {api_key}") as info:
        spec_for(api_key, 0)
    assert info.value.error_code == 35


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_spec_for_unknown_version(spec: ApiSpec[Any, Any]) -> None:
    for version in (spec.min_version - 1, spec.max_version + 1, 2**15 - 1):
        with pytest.raises(UnsupportedVersionError, match=spec.key.name):
            spec_for(spec.key, version)


def test_spec_for_request_refuses_non_requests() -> None:
    with pytest.raises(TypeError, match="MetadataResponse"):
        spec_for_request(metadata.MetadataResponse([], "c", 0, []))
    with pytest.raises(TypeError):
        spec_for_request(FrameErrorBody("x"))


def test_decode_request_body_unknown_version() -> None:
    head, body = encode_request(metadata.MetadataRequest(), correlation_id=1, api_version=5)
    frame = decode_request(unframe(head + body))
    assert frame.header.api_version == 5
    with pytest.raises(UnsupportedVersionError):
        decode_request_body(frame)


# ---------------------------------------------------------------------------------------------
# Round trips of every API, through whole frames


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@PER_API
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_request_round_trip(
    spec: ApiSpec[Any, Any], data: st.DataObject, correlation_id: int
) -> None:
    request, chunks = data.draw(with_records(spec.request_type))
    client_id = data.draw(st.none() | st.text(max_size=8))
    records = b"".join(chunks)
    head, body = encode_request(
        request, correlation_id=correlation_id, client_id=client_id, records_len=len(records)
    )
    frame = decode_request(unframe(head + body + records))
    assert frame.header.api_key == spec.key
    assert frame.header.api_version == spec.max_version
    assert frame.header.correlation_id == correlation_id
    assert frame.header.client_id == client_id
    decoded, section = decode_request_body(frame)
    assert type(decoded) is spec.request_type
    assert decoded == request
    parts = split_records(section, announced_sizes(decoded))
    assert [bytes(p) for p in parts] == chunks


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@PER_API
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_response_round_trip(
    spec: ApiSpec[Any, Any], data: st.DataObject, correlation_id: int
) -> None:
    response, chunks = data.draw(with_records(spec.response_type))
    records = b"".join(chunks)
    head, body = encode_response(response, correlation_id=correlation_id, records_len=len(records))
    frame = decode_response(unframe(head + body + records))
    assert (frame.correlation_id, frame.frame_error) == (correlation_id, 0)
    decoded = spec.decode_response(frame.body)
    assert type(decoded) is spec.response_type
    assert decoded == response
    parts = split_records(frame.records, announced_sizes(decoded))
    assert [bytes(p) for p in parts] == chunks


def test_produce_request_with_records_by_hand() -> None:
    batches = [b"batch-of-t0", b"", b"batch-of-u3"]
    request = produce.ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topics=[
            produce.ProduceTopic(
                "t",
                [
                    produce.ProducePartition(0, len(batches[0])),
                    produce.ProducePartition(1, len(batches[1])),
                ],
            ),
            produce.ProduceTopic("u", [produce.ProducePartition(3, len(batches[2]))]),
        ],
    )
    records = b"".join(batches)
    head, body = encode_request(
        request, correlation_id=42, client_id="producer-1", records_len=len(records)
    )
    frame = decode_request(unframe(head + body + records))
    decoded, section = decode_request_body(frame)
    assert decoded == request
    assert [bytes(p) for p in split_records(section, announced_sizes(decoded))] == batches


def test_fetch_response_records_that_do_not_add_up() -> None:
    response = fetch.FetchResponse(
        error_code=0,
        topics=[
            fetch.FetchTopicResponse(
                "t", [fetch.FetchPartitionResponse(0, 0, 10, 10, 0, records_size=8)]
            )
        ],
    )
    head, body = encode_response(response, correlation_id=1, records_len=7)
    frame = decode_response(unframe(head + body + b"1234567"))
    decoded = APIS[ApiKey.FETCH].decode_response(frame.body)
    with pytest.raises(CorruptFrameError, match="announces 8 bytes of records but 7 follow"):
        split_records(frame.records, announced_sizes(decoded))


def test_encode_request_explicit_version_and_null_client_id() -> None:
    head, body = encode_request(api_versions.ApiVersionsRequest(), correlation_id=3, api_version=0)
    frame = decode_request(unframe(head + body))
    assert frame.header.client_id is None
    assert frame.header.api_key == ApiKey.API_VERSIONS
    assert decode_request_body(frame)[0] == api_versions.ApiVersionsRequest()


# ---------------------------------------------------------------------------------------------
# The compatibility rule


def test_omitted_trailing_fields_take_their_defaults() -> None:
    spec = APIS[ApiKey.FETCH]
    old = msgspec.msgpack.encode([500, 1, 1024, []])  # no isolation_level, no replica_id
    assert spec.decode_request(old) == fetch.FetchRequest(500, 1, 1024, [])
    assert spec.decode_request(old).isolation_level == fetch.READ_COMMITTED
    empty = msgspec.msgpack.encode([])
    assert APIS[ApiKey.METADATA].decode_request(empty) == metadata.MetadataRequest()


def test_a_missing_required_field_is_corrupt() -> None:
    with pytest.raises(CorruptFrameError, match="FETCH request body"):
        APIS[ApiKey.FETCH].decode_request(msgspec.msgpack.encode([500, 1, 1024]))


def test_requests_refuse_extra_trailing_fields() -> None:
    extra = msgspec.msgpack.encode([["t"], False, "a field from the future"])
    with pytest.raises(CorruptFrameError, match="METADATA request body"):
        APIS[ApiKey.METADATA].decode_request(extra)


def test_responses_ignore_extra_trailing_fields() -> None:
    newer = msgspec.msgpack.encode([[], "cluster", 1, [], 0, "a field from the future"])
    decoded = APIS[ApiKey.METADATA].decode_response(newer)
    assert decoded == metadata.MetadataResponse([], "cluster", 1, [], 0)


def test_field_types_are_checked() -> None:
    spec = APIS[ApiKey.PRODUCE]
    for bad in ([True, 100, []], [1.0, 100, []], ["1", 100, []], [1, 100, {}], [1, 100, None]):
        with pytest.raises(CorruptFrameError, match="PRODUCE request body"):
            spec.decode_request(msgspec.msgpack.encode(bad))


def test_invalid_utf8_in_a_body_is_corrupt() -> None:
    # msgspec up to 0.22 raises UnicodeDecodeError for a string that is not UTF-8, 0.23 raises
    # DecodeError: either way the caller sees a CorruptFrameError caused by the decoder.
    spec = APIS[ApiKey.METADATA]
    request = b"\x92\x91\xa1\xff\xc2"  # MetadataRequest([<0xff>], False)
    response = b"\x94\x90\xa1\xff\x01\x90"  # MetadataResponse([], <0xff>, 1, [])
    for decode, body in ((spec.decode_request, request), (spec.decode_response, response)):
        with pytest.raises(CorruptFrameError) as info:
            decode(body)
        assert isinstance(info.value.__cause__, (msgspec.DecodeError, UnicodeDecodeError))
        assert "UTF-8" in str(info.value)
    frame = ResponseFrame(1, 35, memoryview(b"\x91\xa1\xff"), memoryview(b""))
    with pytest.raises(CorruptFrameError) as info:
        decode_frame_error(frame)
    assert isinstance(info.value.__cause__, (msgspec.DecodeError, UnicodeDecodeError))


# ---------------------------------------------------------------------------------------------
# Frame errors


@FAST
@given(
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    code=st.integers(-(2**15), 2**15 - 1),
    message_text=st.text(max_size=40),
)
def test_frame_error_round_trip(correlation_id: int, code: int, message_text: str) -> None:
    frame = decode_response(unframe(encode_frame_error(correlation_id, code, message_text)))
    assert (frame.correlation_id, frame.frame_error) == (correlation_id, code)
    assert len(frame.records) == 0
    assert decode_frame_error(frame) == FrameErrorBody(message_text)


@pytest.mark.parametrize("body", [b"", b"\xc1", b"\x90", b"\x91\x01", b"\x91\xc0"])
def test_decode_frame_error_refuses_garbage(body: bytes) -> None:
    frame = ResponseFrame(1, 35, memoryview(body), memoryview(b""))
    with pytest.raises(CorruptFrameError, match="frame error body"):
        decode_frame_error(frame)


# ---------------------------------------------------------------------------------------------
# Fuzzing: every decoder raises CorruptFrameError and nothing else


def _decoders() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for spec in SPECS:
        out.append((f"{spec.key.name} request", spec.decode_request))
        out.append((f"{spec.key.name} response", spec.decode_response))
    out.append(
        (
            "frame error",
            lambda b: decode_frame_error(ResponseFrame(0, 42, memoryview(b), memoryview(b""))),
        )
    )
    out.append(("request frame", decode_request))
    out.append(("response frame", decode_response))
    return out


DECODERS = _decoders()


def _only_corrupt_frame_errors(data: bytes) -> None:
    for name, decode in DECODERS:
        try:
            decode(data)
        except CorruptFrameError:
            pass
        except Exception as exc:  # the property under test: nothing else escapes
            raise AssertionError(f"{name} decoder raised {type(exc).__name__}: {exc}") from exc


@MANY
@given(data=st.binary(max_size=64))
def test_random_bytes_only_raise_corrupt_frame_error(data: bytes) -> None:
    _only_corrupt_frame_errors(data)


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with a few bytes replaced, inserted or deleted, or cut short."""
    out = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["replace", "insert", "delete", "truncate", "flip"]))
        pos = draw(st.integers(0, max(len(out) - 1, 0)))
        if kind == "replace" and out:
            out[pos] = draw(st.integers(0, 255))
        elif kind == "flip" and out:
            out[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and out:
            del out[pos]
        elif kind == "truncate":
            del out[pos:]
    return bytes(out)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@PER_API
@given(data=st.data())
def test_mutated_bodies_only_raise_corrupt_frame_error(
    spec: ApiSpec[Any, Any], data: st.DataObject
) -> None:
    cls = data.draw(st.sampled_from([spec.request_type, spec.response_type]))
    valid = msgspec.msgpack.encode(data.draw(message(cls)))
    _only_corrupt_frame_errors(data.draw(mutated(valid)))


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@PER_API
@given(data=st.data())
def test_mutated_request_frames_fail_as_protocol_errors(
    spec: ApiSpec[Any, Any], data: st.DataObject
) -> None:
    """The broker's whole read path on a damaged frame: split, look up the API, decode the
    body, cut the records. Only CorruptFrameError, or UnsupportedVersionError when the damage
    hit the API key or version, may come out."""
    request, chunks = data.draw(with_records(spec.request_type))
    records = b"".join(chunks)
    head, body = encode_request(request, correlation_id=1, client_id="c", records_len=len(records))
    damaged = data.draw(mutated(unframe(head + body + records)))
    try:
        frame = decode_request(damaged)
        decoded, section = decode_request_body(frame)
        split_records(section, announced_sizes(decoded))
    except (CorruptFrameError, UnsupportedVersionError):
        pass
