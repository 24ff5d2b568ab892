"""Frames: how requests and responses are laid out on a connection.

Every message is one length-prefixed frame. All integers are big-endian (network order)::

    request frame
    +--------+---------+-------------+----------------+-----------+----------+------+---------+
    | size   | api_key | api_version | correlation_id | client_id | body_len | body | records |
    | int32  | int16   | int16       | int32          | int16 len | int32    |      |         |
    |        |         |             |                | + UTF-8   |          |      |         |
    +--------+---------+-------------+----------------+-----------+----------+------+---------+

    response frame
    +--------+----------------+-------------+----------+------+---------+
    | size   | correlation_id | frame_error | body_len | body | records |
    | int32  | int32          | int16       | int32    |      |         |
    +--------+----------------+-------------+----------+------+---------+

``size`` counts the bytes after itself. ``body`` is the MessagePack encoding of the API's
request or response type (one module per API family, registered in
``spark_mq.protocol.api``). ``records`` is everything after the body up to the end of the
frame: the record batch bytes of every partition the body
names, in the body's order, each partition's ``records_size`` bytes long, exactly as stored
in the log. Keeping them out of the MessagePack body lets the broker send a fetch response
straight from its segment files (``sendfile``) and append produced bytes with no copy.

``frame_error`` is 0 for a normal response. When the broker cannot parse a request far
enough to answer it with its own type (an unknown API key or version, an undecodable body),
it sets ``frame_error`` to the error code and the body is a :class:`FrameErrorBody`; for
bytes that are not a frame at all (a size over the limit, a truncated header) it closes
the connection instead.

A ``client_id`` of length -1 is null. Frames over ``max_frame_bytes`` (Kafka's
``socket.request.max.bytes``, 100 MiB by default) are refused before they are read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from spark_mq.errors import CorruptFrameError

#: Kafka's ``socket.request.max.bytes`` default.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024

SIZE = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id len
_RESPONSE_HEAD = struct.Struct(">ihi")  # correlation_id, frame_error, body_len
_BODY_LEN = struct.Struct(">i")

#: Bytes of a response frame before its body, size field included.
RESPONSE_PREFIX_BYTES = SIZE.size + _RESPONSE_HEAD.size


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The fixed part of a request frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A request frame split into its parts; ``body`` and ``records`` are views of the frame."""

    header: RequestHeader
    body: memoryview
    records: memoryview


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """A response frame split into its parts."""

    correlation_id: int
    frame_error: int
    body: memoryview
    records: memoryview


def frame_size(
    prefix: bytes | bytearray | memoryview,
    max_frame_bytes: int,
    setting: str = "socket.request.max.bytes",
) -> int:
    """Decode and check the 4-byte size prefix of a frame against ``max_frame_bytes`` (the
    value of ``setting``, which the error names)."""
    if len(prefix) != SIZE.size:
        raise CorruptFrameError(f"a frame prefix is {SIZE.size} bytes, got {len(prefix)}")
    size: int = SIZE.unpack(prefix)[0]
    if size < 0 or size > max_frame_bytes:
        raise CorruptFrameError(
            f"frame size {size} is outside 0..{max_frame_bytes} ({setting}); "
            "the peer is not speaking the spark_mq protocol or sent a frame too large"
        )
    return size


def encode_request_head(header: RequestHeader, body_len: int, records_len: int) -> bytes:
    """Everything of a request frame before its body: size, header and body length."""
    client = b"" if header.client_id is None else header.client_id.encode("utf-8")
    client_len = -1 if header.client_id is None else len(client)
    size = _REQUEST_HEAD.size + len(client) + _BODY_LEN.size + body_len + records_len
    return b"".join(
        (
            SIZE.pack(size),
            _REQUEST_HEAD.pack(
                header.api_key, header.api_version, header.correlation_id, client_len
            ),
            client,
            _BODY_LEN.pack(body_len),
        )
    )


def decode_request(frame: bytes | bytearray | memoryview) -> RequestFrame:
    """Split a request frame (without its size prefix) into header, body and records."""
    view = memoryview(frame)
    if len(view) < _REQUEST_HEAD.size:
        raise CorruptFrameError(f"request frame of {len(view)} bytes is shorter than a header")
    api_key, api_version, correlation_id, client_len = _REQUEST_HEAD.unpack_from(view)
    pos = _REQUEST_HEAD.size
    client_id: str | None = None
    if client_len >= 0:
        if pos + client_len > len(view):
            raise CorruptFrameError("request frame truncated inside its client_id")
        try:
            client_id = bytes(view[pos : pos + client_len]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptFrameError("request client_id is not valid UTF-8") from exc
        pos += client_len
    elif client_len != -1:
        raise CorruptFrameError(f"request client_id length {client_len} is negative")
    body, records = _split_body(view, pos, "request")
    return RequestFrame(
        RequestHeader(api_key, api_version, correlation_id, client_id), body, records
    )


def encode_response_head(
    correlation_id: int, body_len: int, records_len: int, frame_error: int = 0
) -> bytes:
    """Everything of a response frame before its body."""
    size = _RESPONSE_HEAD.size + body_len + records_len
    return SIZE.pack(size) + _RESPONSE_HEAD.pack(correlation_id, frame_error, body_len)


def decode_response(frame: bytes | bytearray | memoryview) -> ResponseFrame:
    """Split a response frame (without its size prefix) into its parts."""
    view = memoryview(frame)
    if len(view) < _RESPONSE_HEAD.size:
        raise CorruptFrameError(f"response frame of {len(view)} bytes is shorter than a header")
    correlation_id, frame_error, _ = _RESPONSE_HEAD.unpack_from(view)
    body, records = _split_body(view, _RESPONSE_HEAD.size - _BODY_LEN.size, "response")
    return ResponseFrame(correlation_id, frame_error, body, records)


def _split_body(view: memoryview, pos: int, what: str) -> tuple[memoryview, memoryview]:
    if pos + _BODY_LEN.size > len(view):
        raise CorruptFrameError(f"{what} frame truncated before its body length")
    (body_len,) = _BODY_LEN.unpack_from(view, pos)
    pos += _BODY_LEN.size
    if body_len < 0 or pos + body_len > len(view):
        raise CorruptFrameError(
            f"{what} body length {body_len} does not fit the {len(view)}-byte frame"
        )
    return view[pos : pos + body_len], view[pos + body_len :]


def split_records(records: memoryview, sizes: list[int]) -> list[memoryview]:
    """Cut the records section of a frame into one view per partition, in body order.

    The sizes must add up to exactly the section's length; anything else means the frame
    was built wrongly or damaged in flight.
    """
    total = 0
    for size in sizes:
        if size < 0:
            raise CorruptFrameError(f"negative records_size {size} in frame body")
        total += size
    if total != len(records):
        raise CorruptFrameError(
            f"frame body announces {total} bytes of records but {len(records)} follow"
        )
    out = []
    pos = 0
    for size in sizes:
        out.append(records[pos : pos + size])
        pos += size
    return out
