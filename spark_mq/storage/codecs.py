"""Compression codecs for record batch bodies, behind a small registry.

The codec id is stored in bits 0-2 of a batch's attributes (Kafka's numbering). The producer
compresses the whole Arrow IPC body once; the broker stores and serves those bytes untouched;
only readers decompress. Formats on disk:

=====  ======  ===========================================================================
id     name    stored bytes
=====  ======  ===========================================================================
0      none    the Arrow IPC message as is
1      gzip    RFC 1952 gzip member (zlib, level 6 by default)
2      snappy  raw snappy block format (no xerial framing: the batch header already frames it)
3      lz4     LZ4 frame format (what Kafka uses since 0.10)
4      zstd    one Zstandard frame with the content size recorded (level 3 by default)
=====  ======  ===========================================================================

Every ``decompress`` refuses to produce more than ``max_output_bytes`` so that a hostile or
corrupt body cannot exhaust memory; a decoding failure, a truncated stream, or bytes after the
one gzip member / LZ4 frame / Zstandard frame raise ``CorruptRecordError``. Codec objects are
shared singletons and safe to use from several threads at once.

    >>> codec = codec_for_name("zstd")
    >>> bytes(codec.decompress(codec.compress(b"abc" * 100), max_output_bytes=1000)) == b"abc" * 100
    True
"""

from __future__ import annotations

import threading
import zlib
from typing import Final, Literal, Protocol, get_args

import cramjam
import lz4.frame
import zstandard

from spark_mq.errors import ConfigError, CorruptRecordError

CodecName = Literal["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_NAMES: Final[tuple[str, ...]] = get_args(CodecName)

#: Bytes-like input accepted by every codec (bytes, bytearray, memoryview, pyarrow.Buffer).
Bytes = bytes | bytearray | memoryview


class Codec(Protocol):
    """A compression codec: ``id`` is the attribute value, ``name`` Kafka's name for it."""

    id: int
    name: str

    def compress(self, data: Bytes) -> Bytes: ...

    def decompress(self, data: Bytes, *, max_output_bytes: int) -> Bytes: ...


def _too_large(name: str, max_output_bytes: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{name} body decompresses to more than {max_output_bytes} bytes; the batch is corrupt "
        "or was written with a larger max.message.bytes than this reader allows"
    )


class NoCodec:
    id = 0
    name = "none"

    def compress(self, data: Bytes) -> Bytes:
        return data

    def decompress(self, data: Bytes, *, max_output_bytes: int) -> Bytes:
        if len(data) > max_output_bytes:
            raise _too_large(self.name, max_output_bytes)
        return data


class GzipCodec:
    id = 1
    name = "gzip"

    def __init__(self, level: int = 6) -> None:
        self.level = level

    def compress(self, data: Bytes) -> Bytes:
        compressor = zlib.compressobj(self.level, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()

    def decompress(self, data: Bytes, *, max_output_bytes: int) -> Bytes:
        decompressor = zlib.decompressobj(31)
        try:
            # Ask for one byte more than allowed: zlib reads a max_length of 0 as "unlimited",
            # and an output of exactly max_output_bytes must not be mistaken for an overflow.
            out = decompressor.decompress(data, max_output_bytes + 1)
        except zlib.error as exc:
            raise CorruptRecordError(f"gzip body does not decompress: {exc}") from exc
        if len(out) > max_output_bytes:
            raise _too_large(self.name, max_output_bytes)
        if not decompressor.eof:
            raise CorruptRecordError("gzip body is truncated")
        if decompressor.unused_data:
            raise CorruptRecordError(
                f"gzip body has {len(decompressor.unused_data)} bytes after its gzip member"
            )
        return out


class SnappyCodec:
    id = 2
    name = "snappy"

    def compress(self, data: Bytes) -> Bytes:
        return memoryview(cramjam.snappy.compress_raw(data))

    def decompress(self, data: Bytes, *, max_output_bytes: int) -> Bytes:
        try:
            if cramjam.snappy.decompress_raw_len(data) > max_output_bytes:
                raise _too_large(self.name, max_output_bytes)
            out = memoryview(cramjam.snappy.decompress_raw(data))
        except cramjam.DecompressionError as exc:
            raise CorruptRecordError(f"snappy body does not decompress: {exc}") from exc
        if len(out) > max_output_bytes:
            raise _too_large(self.name, max_output_bytes)
        return out


class Lz4Codec:
    id = 3
    name = "lz4"

    def compress(self, data: Bytes) -> Bytes:
        return lz4.frame.compress(data, store_size=True)  # type: ignore[no-any-return]

    def decompress(self, data: Bytes, *, max_output_bytes: int) -> Bytes:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        try:
            # The frame records its content size (compress() stores it): size the output
            # buffer from it instead of allocating max_output_bytes for every batch.
            content_size = lz4.frame.get_frame_info(data)["content_size"]
            if content_size > max_output_bytes:
                raise _too_large(self.name, max_output_bytes)
            out = decompressor.decompress(data, max_length=content_size or max_output_bytes)
        except RuntimeError as exc:
            raise CorruptRecordError(f"lz4 body does not decompress: {exc}") from exc
        if not decompressor.eof:
            if decompressor.needs_input:
                raise CorruptRecordError("lz4 body is truncated")
            raise _too_large(self.name, max_output_bytes)
        if decompressor.unused_data:
            raise CorruptRecordError(
                f"lz4 body has {len(decompressor.unused_data)} bytes after its LZ4 frame"
            )
        return out  # type: ignore[no-any-return]


class ZstdCodec:
    id = 4
    name = "zstd"

    def __init__(self, level: int = 3) -> None:
        self.level = level
        # zstandard's compressor and decompressor objects must not be used by two threads at
        # once, and this codec is a process-wide singleton: keep one pair per thread.
        self._local = threading.local()

    def _contexts(self) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
        contexts: tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor] | None = getattr(
            self._local, "contexts", None
        )
        if contexts is None:
            contexts = (
                zstandard.ZstdCompressor(level=self.level, write_content_size=True),
                zstandard.ZstdDecompressor(),
            )
            self._local.contexts = contexts
        return contexts

    def compress(self, data: Bytes) -> Bytes:
        return self._contexts()[0].compress(data)

    def decompress(self, data: Bytes, *, max_output_bytes: int) -> Bytes:
        decompressor = self._contexts()[1]
        try:
            params = zstandard.get_frame_parameters(data)
            if params.content_size == 0:
                # The one-shot API answers b"" for a frame that declares no content without
                # reading the rest of it, so a truncated frame would pass: decode it for real.
                stream = decompressor.decompressobj()
                out = stream.decompress(data)
                if out or not stream.eof or stream.unused_data:
                    raise CorruptRecordError("zstd body declares no content but is malformed")
                return b""
            if (
                params.content_size != zstandard.CONTENTSIZE_UNKNOWN
                and params.content_size > max_output_bytes
            ):
                raise _too_large(self.name, max_output_bytes)
            # A frame without a recorded size (not written by this codec) is bounded by
            # max_output_size instead, which zstandard reads as "unlimited" when 0: hence the
            # extra byte, which also tells an exact fit from an overflow.
            out = decompressor.decompress(
                data, max_output_size=max_output_bytes + 1, allow_extra_data=False
            )
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"zstd body does not decompress: {exc}") from exc
        if len(out) > max_output_bytes:
            raise _too_large(self.name, max_output_bytes)
        return out


_BY_ID: Final[dict[int, Codec]] = {
    c.id: c for c in (NoCodec(), GzipCodec(), SnappyCodec(), Lz4Codec(), ZstdCodec())
}
_BY_NAME: Final[dict[str, Codec]] = {c.name: c for c in _BY_ID.values()}
# Kafka's producer says "uncompressed" for topics and "none" for producers; accept both.
_ALIASES: Final[dict[str, str]] = {"uncompressed": "none"}


def codec_for_id(codec_id: int) -> Codec:
    """The codec stored in a batch's attributes; an unknown id means a corrupt batch."""
    codec = _BY_ID.get(codec_id)
    if codec is None:
        raise CorruptRecordError(f"unknown compression codec id {codec_id} in batch attributes")
    return codec


def codec_for_name(name: str) -> Codec:
    """The codec for a ``compression.type`` value; raises ``ConfigError`` naming the choices."""
    key = _ALIASES.get(name, name)
    codec = _BY_NAME.get(key)
    if codec is None:
        raise ConfigError(
            f"compression.type must be one of {', '.join(CODEC_NAMES)}; got {name!r}",
            key="compression.type",
            value=name,
        )
    return codec
