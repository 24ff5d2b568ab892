"""Tests for spark_mq.storage.codecs: round trips, the registry, and hostile input.

Every codec must give back exactly what it was given, and every way a stored body can be
wrong (garbage, truncated, trailing bytes, too large once decompressed) must surface as
CorruptRecordError, never as a library's own exception.
"""

from __future__ import annotations

import gzip
import random
import threading
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_mq.errors import ConfigError, CorruptRecordError
from spark_mq.storage.codecs import CODEC_NAMES, Codec, codec_for_id, codec_for_name

COMPRESSED = [name for name in CODEC_NAMES if name != "none"]
SEED = 20240611
LIMIT = 64 * 1024 * 1024


def _inputs() -> dict[str, bytes]:
    rng = random.Random(SEED)
    return {
        "empty": b"",
        "one_byte": b"\x00",
        "small": b"hello, spark_mq",
        "random_1k": rng.randbytes(1000),
        "random_100k": rng.randbytes(100_000),
        "repetitive_1m": b"abcdefgh" * 131_072,
        "large_random_4m": rng.randbytes(4 * 1024 * 1024),
    }


INPUTS = _inputs()


def _roundtrip(codec: Codec, data: bytes, max_output_bytes: int = LIMIT) -> bytes:
    return bytes(codec.decompress(codec.compress(data), max_output_bytes=max_output_bytes))


# ---------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("name", CODEC_NAMES)
@pytest.mark.parametrize("label", list(INPUTS))
def test_round_trip(name: str, label: str) -> None:
    data = INPUTS[label]
    assert _roundtrip(codec_for_name(name), data) == data


@pytest.mark.parametrize("name", CODEC_NAMES)
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_round_trip_accepts_every_bytes_like_type(name: str, wrap: type) -> None:
    codec = codec_for_name(name)
    data = INPUTS["random_1k"]
    compressed = codec.compress(wrap(data))
    out = codec.decompress(wrap(bytes(compressed)), max_output_bytes=len(data))
    assert bytes(out) == data


@pytest.mark.parametrize("name", CODEC_NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=5000))
def test_round_trip_property(name: str, data: bytes) -> None:
    assert _roundtrip(codec_for_name(name), data) == data


@pytest.mark.parametrize("name", COMPRESSED)
def test_repetitive_input_actually_compresses(name: str) -> None:
    data = INPUTS["repetitive_1m"]
    assert len(codec_for_name(name).compress(data)) < len(data) // 10


def test_none_stores_the_bytes_as_they_are() -> None:
    assert bytes(codec_for_name("none").compress(b"as is")) == b"as is"


# ---------------------------------------------------------------------------------------------
# The stored framing is the one docs/format.md documents, readable by the reference tools.


def test_gzip_stores_an_rfc1952_member() -> None:
    data = INPUTS["random_1k"]
    stored = bytes(codec_for_name("gzip").compress(data))
    assert stored[:2] == b"\x1f\x8b"
    assert gzip.decompress(stored) == data


def test_snappy_stores_the_raw_block_format() -> None:
    data = INPUTS["random_1k"]
    stored = bytes(codec_for_name("snappy").compress(data))
    assert bytes(cramjam.snappy.decompress_raw(stored)) == data
    assert not stored.startswith(b"\xff\x06\x00\x00sNaPpY")  # no framing-format stream id


def test_lz4_stores_an_lz4_frame() -> None:
    data = INPUTS["random_1k"]
    stored = bytes(codec_for_name("lz4").compress(data))
    assert stored[:4] == b"\x04\x22\x4d\x18"
    assert lz4.frame.decompress(stored) == data


def test_zstd_stores_one_frame_with_its_content_size() -> None:
    data = INPUTS["random_1k"]
    stored = bytes(codec_for_name("zstd").compress(data))
    assert stored[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.get_frame_parameters(stored).content_size == len(data)
    assert zstandard.ZstdDecompressor().decompress(stored) == data


# ---------------------------------------------------------------------------------------------
# Registry


@pytest.mark.parametrize(("codec_id", "name"), list(enumerate(CODEC_NAMES)))
def test_ids_and_names_follow_kafka(codec_id: int, name: str) -> None:
    assert CODEC_NAMES == ("none", "gzip", "snappy", "lz4", "zstd")
    by_id = codec_for_id(codec_id)
    assert by_id.id == codec_id
    assert by_id.name == name
    assert codec_for_name(name) is by_id


def test_uncompressed_is_an_alias_of_none() -> None:
    assert codec_for_name("uncompressed") is codec_for_name("none")
    assert codec_for_name("uncompressed").id == 0


@pytest.mark.parametrize("bad", ["", "GZIP", "brotli", "producer", " zstd", "lz4 "])
def test_unknown_name_raises_config_error_naming_the_choices(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        codec_for_name(bad)
    assert info.value.key == "compression.type"
    assert info.value.value == bad
    message = str(info.value)
    assert "compression.type" in message
    assert repr(bad) in message
    for name in CODEC_NAMES:
        assert name in message


@pytest.mark.parametrize("bad", [-1, 5, 6, 7, 8, 255])
def test_unknown_id_raises_corrupt_record_error(bad: int) -> None:
    with pytest.raises(CorruptRecordError, match=str(bad)):
        codec_for_id(bad)


# ---------------------------------------------------------------------------------------------
# Corrupt, truncated and trailing input


@pytest.mark.parametrize("name", COMPRESSED)
@pytest.mark.parametrize("label", ["empty", "small", "random_1k", "repetitive_1m"])
def test_every_truncation_raises(name: str, label: str) -> None:
    codec = codec_for_name(name)
    stored = bytes(codec.compress(INPUTS[label]))
    # Every cut of a short stream, a sample of cuts of a long one.
    step = max(1, len(stored) // 200)
    for cut in [*range(0, len(stored), step), len(stored) - 1]:
        with pytest.raises(CorruptRecordError):
            codec.decompress(stored[:cut], max_output_bytes=LIMIT)


@pytest.mark.parametrize("name", COMPRESSED)
@pytest.mark.parametrize("tail", [b"\x00", b"garbage", "second_stream"])
def test_bytes_after_the_stream_raise(name: str, tail: bytes | str) -> None:
    codec = codec_for_name(name)
    stored = bytes(codec.compress(INPUTS["small"]))
    extra = stored if tail == "second_stream" else tail
    assert isinstance(extra, bytes)
    with pytest.raises(CorruptRecordError):
        codec.decompress(stored + extra, max_output_bytes=LIMIT)


@pytest.mark.parametrize("name", COMPRESSED)
@settings(max_examples=150, deadline=None)
@given(garbage=st.binary(max_size=300))
def test_garbage_raises_corrupt_record_error(name: str, garbage: bytes) -> None:
    codec = codec_for_name(name)
    try:
        out = codec.decompress(garbage, max_output_bytes=1024 * 1024)
    except CorruptRecordError:
        return
    # Garbage that happens to be a valid stream must still respect the limit.
    assert len(out) <= 1024 * 1024


@pytest.mark.parametrize("name", COMPRESSED)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_flipped_bits_raise_or_stay_in_bounds(name: str, data: st.DataObject) -> None:
    # The batch CRC catches payload corruption; what the codec itself must guarantee is to
    # raise CorruptRecordError or return bounded output, never a library exception.
    codec = codec_for_name(name)
    stored = bytearray(codec.compress(INPUTS["random_1k"] + INPUTS["repetitive_1m"][:4000]))
    bit = data.draw(st.integers(0, len(stored) * 8 - 1), label="bit")
    stored[bit // 8] ^= 1 << (bit % 8)
    try:
        out = codec.decompress(bytes(stored), max_output_bytes=10_000)
    except CorruptRecordError:
        return
    assert len(out) <= 10_000


def test_gzip_with_a_bad_checksum_raises() -> None:
    stored = bytearray(codec_for_name("gzip").compress(b"payload" * 10))
    stored[-8] ^= 0xFF  # CRC-32 of the uncompressed data, in the gzip trailer
    with pytest.raises(CorruptRecordError):
        codec_for_name("gzip").decompress(bytes(stored), max_output_bytes=LIMIT)


def test_zlib_stream_is_not_accepted_as_gzip() -> None:
    with pytest.raises(CorruptRecordError):
        codec_for_name("gzip").decompress(zlib.compress(b"abc"), max_output_bytes=LIMIT)


def test_zstd_frame_without_content_size_is_still_bounded() -> None:
    data = INPUTS["random_1k"]
    stored = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    codec = codec_for_name("zstd")
    assert bytes(codec.decompress(stored, max_output_bytes=len(data))) == data
    for limit in (0, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            codec.decompress(stored, max_output_bytes=limit)


# ---------------------------------------------------------------------------------------------
# Decompression-bomb guard


@pytest.mark.parametrize("name", CODEC_NAMES)
@pytest.mark.parametrize("label", ["one_byte", "random_1k", "repetitive_1m"])
def test_output_over_the_limit_raises(name: str, label: str) -> None:
    codec = codec_for_name(name)
    data = INPUTS[label]
    stored = codec.compress(data)
    for limit in (0, len(data) // 2, len(data) - 1):
        with pytest.raises(CorruptRecordError, match="more than"):
            codec.decompress(stored, max_output_bytes=limit)


@pytest.mark.parametrize("name", CODEC_NAMES)
@pytest.mark.parametrize("label", ["empty", "one_byte", "random_1k", "repetitive_1m"])
def test_output_of_exactly_the_limit_is_accepted(name: str, label: str) -> None:
    data = INPUTS[label]
    assert _roundtrip(codec_for_name(name), data, max_output_bytes=len(data)) == data


@pytest.mark.parametrize("name", COMPRESSED)
def test_bomb_is_refused_without_inflating_it(name: str) -> None:
    # 256 MiB of zeros compress to a few hundred KiB; a 1 MiB limit must stop decompression
    # long before the output exists.
    codec = codec_for_name(name)
    bomb = codec.compress(bytes(256 * 1024 * 1024))
    assert len(bomb) < 16 * 1024 * 1024
    with pytest.raises(CorruptRecordError, match="more than"):
        codec.decompress(bomb, max_output_bytes=1024 * 1024)


def test_snappy_length_header_is_checked_before_allocating() -> None:
    # A raw snappy block starts with its uncompressed length as a varint: claim 2**40 bytes.
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x20]) + b"\x00" * 4
    with pytest.raises(CorruptRecordError):
        codec_for_name("snappy").decompress(claim, max_output_bytes=1024)


def test_zstd_declared_size_is_checked_before_allocating() -> None:
    stored = bytearray(codec_for_name("zstd").compress(b"x" * 1000))
    params = zstandard.get_frame_parameters(bytes(stored))
    assert params.content_size == 1000
    with pytest.raises(CorruptRecordError, match="more than 999"):
        codec_for_name("zstd").decompress(bytes(stored), max_output_bytes=999)


# ---------------------------------------------------------------------------------------------
# Codecs are process-wide singletons used by many broker threads at once.


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_shared_codec_is_thread_safe(name: str) -> None:
    codec = codec_for_name(name)
    rng = random.Random(SEED)
    payloads = [rng.randbytes(rng.randrange(1, 200_000)) * 2 for _ in range(8)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for round_ in range(10):
                data = payloads[(index + round_) % len(payloads)]
                assert _roundtrip(codec, data) == data
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
