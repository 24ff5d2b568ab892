"""Walking batch headers: how far whole batches reach in a buffer, and where the batch holding
an offset starts, without a loop per batch.

A fetch of one-record batches holds about 13,000 batches per MiB; the broker walks their
headers to find the extent it serves (``FileRecords.extent``) and the consumer walks them to
find where its next fetch starts (``fetcher.end_of_last_batch``). A Python loop costs about
3 us a batch there, which alone would cap reading at a few hundred thousand records/s, so the
walk runs in C (``_varint_scan.walk``) when the extension is built, and in the loop below
otherwise, with the same results. Only the framing is read (``baseOffset``, ``batchLength``,
``lastOffsetDelta``): the batches are trusted here, as they are wherever headers are walked;
the decoding reader and recovery validate them.

:func:`seek_batch` finds the batch that holds an offset: a fetch starts there, from the offset
index's entry at or before the offset, up to ``index.interval.bytes`` (4 KiB) earlier, which
is some twenty batches of ten small records, walked on every fetch.
"""

from __future__ import annotations

import struct
from typing import Any, Final, NamedTuple

from spark_mq.storage.varint_records import c_function

_HEADER_SIZE: Final = 61
_LOG_OVERHEAD: Final = 12
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")


class Walk(NamedTuple):
    """Where the walk stopped, how many batches it passed, and ``lastOffset + 1`` of the last
    of them (None if none)."""

    position: int
    batches: int
    next_offset: int | None


def walk_batches(buf: Any, pos: int, limit_bytes: int, *, use_c: bool = True) -> Walk:
    """Pass the whole batches of ``buf`` from ``pos`` while a 61-byte header is there, the
    batch fits ``buf`` and the batches passed add up to at most ``limit_bytes``.

    >>> import pyarrow as pa
    >>> from spark_mq.storage.record_batch import encode_batch
    >>> one = encode_batch(pa.array([b"v"]), now_ms=1, base_offset=7, body_encoding="varint")
    >>> walk_batches(one + one[:20], 0, 1 << 20)
    Walk(position=69, batches=1, next_offset=8)
    """
    walk = c_function("walk") if use_c else None
    if walk is not None:
        end, count, next_offset = walk(buf, pos, limit_bytes)
        return Walk(end, count, None if count == 0 else next_offset)
    start = pos
    count = 0
    next_offset = None
    size_all = len(buf)
    while size_all - pos >= _HEADER_SIZE:
        base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
        size = length + _LOG_OVERHEAD
        if size < _HEADER_SIZE or size > size_all - pos or pos - start + size > limit_bytes:
            break
        next_offset = base_offset + _LAST_OFFSET_DELTA.unpack_from(buf, pos + 23)[0] + 1
        pos += size
        count += 1
    return Walk(pos, count, next_offset)


#: :func:`seek_batch` statuses.
SEEK_FOUND: Final = 0
SEEK_BUFFER_ENDED: Final = 1
SEEK_BAD_LENGTH: Final = 2


class Seek(NamedTuple):
    """What :func:`seek_batch` found: ``status`` (``SEEK_*``), the position it stopped at,
    and the size of the batch there (0 when no header is there)."""

    status: int
    position: int
    size: int


def seek_batch(buf: Any, pos: int, target_offset: int, *, use_c: bool = True) -> Seek:
    """From ``pos``, pass the batches of ``buf`` whose last offset is below ``target_offset``.

    Stops at the first batch whose last offset is at or past it (``SEEK_FOUND``; the batch
    may reach past ``buf``), at a batch that ``buf`` does not hold whole or where fewer than
    61 bytes remain (``SEEK_BUFFER_ENDED``: read on from ``position``), or at a batch length
    below the header's (``SEEK_BAD_LENGTH``: torn or corrupt framing, where a walk stops).

    >>> import pyarrow as pa
    >>> from spark_mq.storage.record_batch import encode_batch
    >>> one = encode_batch(pa.array([b"v"]), now_ms=1, base_offset=7, body_encoding="varint")
    >>> two = encode_batch(pa.array([b"v"]), now_ms=1, base_offset=8, body_encoding="varint")
    >>> seek_batch(one + two, 0, 8)
    Seek(status=0, position=69, size=69)
    >>> seek_batch(one + two, 0, 9)
    Seek(status=1, position=138, size=0)
    """
    seek = c_function("seek") if use_c else None
    if seek is not None:
        return Seek(*seek(buf, pos, target_offset))
    size_all = len(buf)
    while size_all - pos >= _HEADER_SIZE:
        base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
        size = length + _LOG_OVERHEAD
        if size < _HEADER_SIZE:
            return Seek(SEEK_BAD_LENGTH, pos, size)
        if base_offset + _LAST_OFFSET_DELTA.unpack_from(buf, pos + 23)[0] >= target_offset:
            return Seek(SEEK_FOUND, pos, size)
        if size > size_all - pos:
            return Seek(SEEK_BUFFER_ENDED, pos, size)
        pos += size
    return Seek(SEEK_BUFFER_ENDED, pos, 0)
