"""Preparing an append to a partition log: checking the request, assigning offsets.

:meth:`~spark_mq.storage.log.PartitionLog.append` runs in two halves. Outside the log's lock,
:func:`check_append` validates every batch of the request (size, magic, CRC, counts,
``max.message.bytes``, who may write control batches, keys on compacted topics) so that one
bad batch rejects the whole append before anything is written. Under the lock,
:func:`stamp_batches` gives each batch its base offset and the leader epoch by patching the
12 bytes outside the CRC (and, with ``LogAppendTime``, the timestamp and the CRC), and
returns the chunks to write; :class:`LogAppendInfo` is what the append answers.

Everything here is a pure function of its arguments; the log owns every piece of state.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

import crc32c

from spark_mq.errors import InvalidRecordError, RecordTooLargeError
from spark_mq.storage.batch_decoder import decode_body, validate_batch
from spark_mq.storage.codecs import Bytes
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.producer_state import AppendOrigin, BatchMetadata
from spark_mq.storage.record_batch import ATTR_TIMESTAMP_TYPE, CRC_START, BatchHeader
from spark_mq.storage.segment import BatchPosition

__all__ = ["LogAppendInfo", "check_append", "stamp_batches"]

_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: not in the CRC
_PREFIX_SIZE: Final = 16


class LogAppendInfo(NamedTuple):
    """What an append did: offsets assigned, timestamps, sizes.

    A NamedTuple rather than a frozen dataclass: one is built per append, and construction
    cost shows in the append benchmark.
    """

    first_offset: int
    last_offset: int
    max_timestamp_ms: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    log_start_offset: int
    num_batches: int
    num_records: int
    valid_bytes: int
    batches: tuple[BatchHeader, ...]
    #: True when the batch was a retried duplicate: nothing was written and the offsets are
    #: those of the original append.
    is_duplicate: bool = False

    @classmethod
    def of_batches(
        cls,
        batches: Sequence[BatchPosition],
        *,
        log_append_time_ms: int,
        log_start_offset: int,
        valid_bytes: int,
    ) -> LogAppendInfo:
        """The answer to an append that wrote ``batches`` (offsets assigned)."""
        first = batches[0].header
        max_ts, offset_of_max = -1, first.base_offset
        num_records = 0
        for batch in batches:
            header = batch.header
            num_records += header.record_count
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
        return cls(
            first_offset=first.base_offset,
            last_offset=batches[-1].header.last_offset,
            max_timestamp_ms=max_ts,
            offset_of_max_timestamp=offset_of_max,
            log_append_time_ms=log_append_time_ms,
            log_start_offset=log_start_offset,
            num_batches=len(batches),
            num_records=num_records,
            valid_bytes=valid_bytes,
            batches=tuple(b.header for b in batches),
        )

    @classmethod
    def of_duplicate(cls, original: BatchMetadata, log_start_offset: int) -> LogAppendInfo:
        """The answer to a retried batch: the original's offsets, nothing written."""
        return cls(
            first_offset=original.first_offset,
            last_offset=original.last_offset,
            max_timestamp_ms=original.timestamp_ms,
            offset_of_max_timestamp=original.last_offset,
            log_append_time_ms=-1,
            log_start_offset=log_start_offset,
            num_batches=0,
            num_records=0,
            valid_bytes=0,
            batches=(),
            is_duplicate=True,
        )


def check_append(
    view: memoryview,
    config: LogConfig,
    *,
    origin: AppendOrigin,
    assign_offsets: bool,
    topic: str,
    partition: int,
) -> list[tuple[BatchHeader, int]]:
    """Validate every batch of an append request; ``(header, position)`` of each.

    Raises :class:`~spark_mq.errors.CorruptRecordError` for damaged bytes,
    :class:`~spark_mq.errors.RecordTooLargeError` past ``max.message.bytes`` or
    ``segment.bytes``, and :class:`~spark_mq.errors.InvalidRecordError` for a request the log
    refuses (empty, control batches from a client, keyless records on a compacted topic,
    several batches from one idempotent producer).
    """
    headers: list[tuple[BatchHeader, int]] = []
    pos = 0
    while pos < len(view):
        header = validate_batch(view, pos)
        if header.size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes="
                f"{config.max_message_bytes} of {topic}-{partition}; split it or raise the "
                "topic's max.message.bytes",
                size_bytes=header.size,
                max_bytes=config.max_message_bytes,
            )
        if assign_offsets and header.record_count == 0:
            raise InvalidRecordError("a produced batch must hold at least one record")
        if header.is_control and origin is AppendOrigin.CLIENT:
            raise InvalidRecordError(
                "control batches (transaction markers) are written by the transaction "
                "coordinator, not by producers"
            )
        # Compaction keeps the newest record per key, so a record without a key could never
        # be cleaned; Kafka refuses it at produce time too. Only compacted topics pay for
        # decoding the body here.
        if (
            config.compact
            and origin is AppendOrigin.CLIENT
            and not header.is_control
            and decode_body(view, pos, header).column(2).null_count
        ):
            raise InvalidRecordError(
                f"{topic} is a compacted topic (cleanup.policy="
                f"{','.join(config.cleanup_policy)}): every record needs a key"
            )
        headers.append((header, pos))
        pos += header.size
    if not headers:
        raise InvalidRecordError("append of no record batches")
    if (
        origin is AppendOrigin.CLIENT
        and len(headers) > 1
        and any(h.has_producer_id for h, _ in headers)
    ):
        # Kafka's rule: duplicate detection and sequence checks work per batch.
        raise InvalidRecordError(
            "an idempotent or transactional producer must send one batch per partition "
            f"per request; got {len(headers)}"
        )
    if len(view) > config.segment_bytes:
        raise RecordTooLargeError(
            f"append of {len(view)} bytes exceeds segment.bytes={config.segment_bytes} of "
            f"{topic}-{partition}",
            size_bytes=len(view),
            max_bytes=config.segment_bytes,
        )
    return headers


def stamp_batches(
    view: memoryview,
    headers: list[tuple[BatchHeader, int]],
    *,
    next_offset: int,
    assign: bool,
    epoch: int,
    log_append_time_ms: int | None,
    topic_partition: str,
) -> tuple[list[Bytes], list[BatchPosition]]:
    """Give each batch its offset and epoch; return the chunks to write and the batches.

    With ``assign`` the batches get consecutive offsets from ``next_offset`` (the log end) and
    ``epoch``; without (a follower copying its leader) they keep their offsets, which must not
    go below it, and the epochs of the leaders that appended them.
    """
    out: list[BatchPosition] = []
    for header, pos in headers:
        if assign:
            base = next_offset
            new_header = header._replace(base_offset=base, partition_leader_epoch=epoch)
        else:
            base = header.base_offset
            if base < next_offset:
                raise InvalidRecordError(
                    f"batch at offset {base} is below the log end {next_offset} of "
                    f"{topic_partition}"
                )
            new_header = header
        if log_append_time_ms is not None:
            new_header = new_header._replace(
                attributes=header.attributes | ATTR_TIMESTAMP_TYPE,
                max_timestamp=log_append_time_ms,
            )
        out.append(BatchPosition(new_header, pos))
        next_offset = new_header.next_offset
    if len(out) == 1 and log_append_time_ms is None:
        # One batch (the common case): write a patched 16-byte prefix and the rest as is,
        # without copying the body.
        h = out[0].header
        return [
            _PREFIX.pack(h.base_offset, h.batch_length, h.partition_leader_epoch),
            view[_PREFIX_SIZE:],
        ], out
    buf = bytearray(view)
    for batch in out:
        h, pos = batch.header, batch.position
        _PREFIX.pack_into(buf, pos, h.base_offset, h.batch_length, h.partition_leader_epoch)
        if log_append_time_ms is not None:
            # Attributes and maxTimestamp are inside the CRC: rewrite them, then the CRC.
            struct.pack_into(">h", buf, pos + 21, h.attributes)
            struct.pack_into(">q", buf, pos + 35, h.max_timestamp)
            crc = crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + h.size])
            struct.pack_into(">I", buf, pos + 17, crc)
    return [buf], out
