"""The log of one partition: an ordered list of segments and the offsets that matter.

Offsets, always ``log_start_offset <= high_watermark <= log_end_offset``:

- ``log_start_offset``: first offset a reader may ask for; moved by retention and
  ``delete_records_before``; kept across restarts by the LogManager's checkpoint.
- ``high_watermark``: readers see records below it. On a single node it follows the log end
  after every append (``high_watermark_follows_log_end``); replication turns that off and
  moves it itself.
- ``log_end_offset``: the offset the next appended record gets.
- ``recovery_point``: everything below it is fsynced; crash recovery starts there.

The log assigns offsets on append (patching each batch's baseOffset, which is outside the
CRC), stamps the leader epoch, rolls segments (``segment.bytes``, ``segment.ms``, full
indexes), flushes by ``flush.messages`` / ``flush.ms`` (by default never: the OS decides, as
in Kafka), and applies retention by time, size and log start offset, deleting whole
segments.

Threads: every public method is thread-safe. One lock serialises appends, rolls,
truncation, retention and the locating phase of reads; the bytes of a read are fetched
outside the lock through a :class:`~spark_mq.storage.file_records.FileRange`, which holds its
own descriptor and so survives a concurrent segment deletion.

    >>> import tempfile, pyarrow as pa
    >>> from spark_mq.storage.record_batch import encode_batch
    >>> log = PartitionLog.open(tempfile.mkdtemp(), LogConfig(), topic="t", partition=0)
    >>> log.append(encode_batch(pa.array([b"a", b"b"]))).last_offset
    1
    >>> log.read_records(0).column("value").to_pylist()
    [b'a', b'b']
    >>> log.close()
"""

from __future__ import annotations

import bisect
import concurrent.futures
import dataclasses
import enum
import logging
import os
import random
import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple

import crc32c
import pyarrow as pa

from spark_mq.errors import (
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from spark_mq.storage.batch_decoder import (
    decode_body,
    decode_records,
    read_control_record,
    validate_batch,
)
from spark_mq.storage.cleaner_swap import swap_in
from spark_mq.storage.codecs import Bytes
from spark_mq.storage.file_records import FileRange
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_loader import load_log
from spark_mq.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from spark_mq.storage.producer_state_replay import collect_aborted_txns, rebuild_producer_state
from spark_mq.storage.record_batch import (
    ATTR_TIMESTAMP_TYPE,
    CRC_START,
    NO_PARTITION_LEADER_EPOCH,
    RECORD_SCHEMA,
    BatchHeader,
    ControlType,
    encode_control_batch,
)
from spark_mq.storage.segment import BatchPosition, LogSegment, TimestampAndOffset
from spark_mq.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: not in the CRC
_PREFIX_SIZE: Final = 16

#: Special timestamps of ListOffsets, as in Kafka.
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
MAX_TIMESTAMP: Final = -3


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _max_timestamp_from(
    segment: LogSegment, header: BatchHeader, position: int, start_offset: int
) -> int | None:
    """Largest CreateTime timestamp of the batch's records at or after ``start_offset``."""
    body = decode_body(segment.records.read(position, header.size), 0, header)
    offsets = body.column(0).to_numpy().astype("int64") + header.base_offset
    stamps = body.column(1).to_numpy()[offsets >= start_offset]
    return int(stamps.max()) if len(stamps) else None


class FetchIsolation(enum.Enum):
    """How far a read may go: Kafka's FetchIsolation."""

    LOG_END = "log_end"  # followers replicating the log
    HIGH_WATERMARK = "high_watermark"  # consumers, read_uncommitted
    TXN_COMMITTED = "txn_committed"  # consumers, read_committed: up to the last stable offset


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


@dataclasses.dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The result of :meth:`PartitionLog.read`: a file range of whole batches (or none)."""

    fetch_offset: int
    records: FileRange | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    #: For TXN_COMMITTED reads: the aborted transactions overlapping the range, whose data
    #: the reader must drop (None for other isolation levels).
    aborted_transactions: tuple[AbortedTxn, ...] | None = None

    @property
    def size_bytes(self) -> int:
        return 0 if self.records is None else self.records.size


class PartitionLog:
    """The log of one topic partition in its own directory (``<topic>-<partition>``)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        topic: str,
        partition: int,
        segments: list[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        time_ms: Callable[[], int],
        flush_executor: concurrent.futures.Executor | None,
        high_watermark_follows_log_end: bool,
        producer_state: ProducerStateManager,
        rng: random.Random | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.leader_epoch = NO_PARTITION_LEADER_EPOCH
        self._config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._high_watermark = log_end_offset
        self._recovery_point = recovery_point
        self._time_ms = time_ms
        self._flush_executor = flush_executor
        self._hw_follows_leo = high_watermark_follows_log_end
        self._rng = rng or random.Random()
        self._producer_state = producer_state
        self._lock = threading.RLock()
        self._closed = False
        self._unflushed_records = 0
        self._last_flush_ms = time_ms()
        self._pending_flushes: list[concurrent.futures.Future[None]] = []

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        topic: str,
        partition: int,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
        had_clean_shutdown: bool = False,
        time_ms: Callable[[], int] = wall_clock_ms,
        flush_executor: concurrent.futures.Executor | None = None,
        high_watermark_follows_log_end: bool = True,
        rng: random.Random | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> PartitionLog:
        """Open (creating if needed) the log in ``directory``, recovering it if necessary.

        Without ``had_clean_shutdown`` every segment from ``recovery_point`` on is validated,
        which is always safe and only slower. ``flush_executor`` runs the fsync of rolled
        segments off the append path; without one it runs inline.
        """
        config = config or LogConfig()
        path = Path(directory)
        loaded = load_log(
            path,
            config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
            now_ms=time_ms(),
        )
        if loaded.recovered_bytes_truncated:
            log.warning(
                "%s-%d: recovery removed %d bytes of invalid or unflushed data; log end is now %d",
                topic,
                partition,
                loaded.recovered_bytes_truncated,
                loaded.log_end_offset,
            )
        producer_state = ProducerStateManager(
            path, producer_id_expiration_ms=producer_id_expiration_ms
        )
        rebuild_producer_state(
            producer_state,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            log_end_offset=loaded.log_end_offset,
            txn_rebuild_from=loaded.txn_rebuild_from,
        )
        return cls(
            path,
            config,
            topic=topic,
            partition=partition,
            producer_state=producer_state,
            segments=loaded.segments,
            log_start_offset=loaded.log_start_offset,
            log_end_offset=loaded.log_end_offset,
            recovery_point=loaded.recovery_point,
            time_ms=time_ms,
            flush_executor=flush_executor,
            high_watermark_follows_log_end=high_watermark_follows_log_end,
            rng=rng,
        )

    # -----------------------------------------------------------------------------------------
    # State

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_stable_offset(self) -> int:
        """Readers of committed data stop here: the first offset of the oldest open
        transaction, capped by the high watermark, and never below the log start (deleting
        records may remove the head of an open transaction; Kafka clamps it the same way)."""
        first_unstable = self._producer_state.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return min(max(first_unstable, self._log_start_offset), self._high_watermark)

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producer_state

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size_bytes for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        with self._lock:
            return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from the next append (and the next segment's indexes)."""
        with self._lock:
            self._config = config

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
            return self._high_watermark

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log of {self.topic}-{self.partition} is closed")

    # -----------------------------------------------------------------------------------------
    # Append

    def append(
        self,
        records: Bytes,
        *,
        leader_epoch: int | None = None,
        assign_offsets: bool = True,
        origin: AppendOrigin | None = None,
    ) -> LogAppendInfo:
        """Validate and append one or more batches; the log assigns their offsets.

        Every batch is checked before anything is written (size, magic, CRC, counts,
        ``max.message.bytes``, and the producer state rules of
        :mod:`~spark_mq.storage.producer_state`), so a bad batch rejects the whole append and
        writes nothing. A retried duplicate of one of a producer's last five batches writes
        nothing and returns the original offsets (``is_duplicate``). With
        ``assign_offsets=False`` (a follower copying its leader) the batches keep their
        offsets, which must start at or after the log end. ``origin`` defaults to a client
        (or replication without offset assignment); only the coordinator writes markers.
        """
        if origin is None:
            origin = AppendOrigin.CLIENT if assign_offsets else AppendOrigin.REPLICATION
        view = memoryview(records).cast("B")
        config = self._config
        headers: list[tuple[BatchHeader, int]] = []
        pos = 0
        while pos < len(view):
            header = validate_batch(view, pos)
            if header.size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size} bytes exceeds max.message.bytes="
                    f"{config.max_message_bytes} of {self.topic}-{self.partition}; split it or "
                    "raise the topic's max.message.bytes",
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
                    f"{self.topic} is a compacted topic (cleanup.policy="
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
                f"{self.topic}-{self.partition}",
                size_bytes=len(view),
                max_bytes=config.segment_bytes,
            )

        with self._lock:
            self._check_open()
            if origin is AppendOrigin.CLIENT:
                duplicate = self._find_duplicate(headers[0][0])
                if duplicate is not None:
                    return duplicate
            now_ms = self._time_ms()
            epoch = self.leader_epoch if leader_epoch is None else leader_epoch
            log_append_time = config.message_timestamp_type == "LogAppendTime"
            chunks, batches = self._assign(
                view, headers, assign_offsets, epoch, now_ms if log_append_time else None
            )
            infos, completed = self._validate_producer_state(view, batches, origin)
            first = batches[0].header
            last = batches[-1].header
            segment = self._maybe_roll(len(view), last.last_offset, now_ms)
            segment.append(chunks, batches)
            self._log_end_offset = last.next_offset
            if self._hw_follows_leo:
                self._high_watermark = self._log_end_offset
            if infos:
                self._apply_producer_state(segment, infos, completed)
            max_ts, offset_of_max = -1, first.base_offset
            num_records = 0
            for b in batches:
                num_records += b.header.record_count
                if b.header.max_timestamp > max_ts:
                    max_ts, offset_of_max = b.header.max_timestamp, b.header.last_offset
            self._unflushed_records += num_records
            self._maybe_flush(now_ms)
            return LogAppendInfo(
                first_offset=first.base_offset,
                last_offset=last.last_offset,
                max_timestamp_ms=max_ts,
                offset_of_max_timestamp=offset_of_max,
                log_append_time_ms=now_ms if log_append_time else -1,
                log_start_offset=self._log_start_offset,
                num_batches=len(batches),
                num_records=num_records,
                valid_bytes=len(view),
                batches=tuple(b.header for b in batches),
            )

    def _find_duplicate(self, header: BatchHeader) -> LogAppendInfo | None:
        if not header.has_producer_id or header.base_sequence < 0:
            return None
        duplicate = self._producer_state.find_duplicate_batch(header)
        if duplicate is None:
            return None
        return LogAppendInfo(
            first_offset=duplicate.first_offset,
            last_offset=duplicate.last_offset,
            max_timestamp_ms=duplicate.timestamp_ms,
            offset_of_max_timestamp=duplicate.last_offset,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            num_batches=0,
            num_records=0,
            valid_bytes=0,
            batches=(),
            is_duplicate=True,
        )

    def _validate_producer_state(
        self, view: memoryview, batches: list[BatchPosition], origin: AppendOrigin
    ) -> tuple[dict[int, ProducerAppendInfo], list[CompletedTxn]]:
        """Stage every batch's effect on its producer's state; raises before any write."""
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in batches:
            header = batch.header
            if not header.has_producer_id:
                continue
            info = infos.get(header.producer_id)
            if info is None:
                info = self._producer_state.prepare_update(header.producer_id, origin)
                infos[header.producer_id] = info
            if header.is_control:
                marker = read_control_record(view, batch.position, header)
                completed.append(
                    info.append_end_txn_marker(
                        marker,
                        producer_epoch=header.producer_epoch,
                        offset=header.base_offset,
                        timestamp_ms=header.max_timestamp,
                    )
                )
            else:
                info.append_data_batch(header)
        return infos, completed

    def _apply_producer_state(
        self,
        segment: LogSegment,
        infos: dict[int, ProducerAppendInfo],
        completed: list[CompletedTxn],
    ) -> None:
        """After the write: apply staged state, index aborted transactions, close them."""
        state = self._producer_state
        for info in infos.values():
            state.update(info)
        for txn in completed:
            if txn.is_aborted:
                segment.txn_index.append(
                    AbortedTxn(
                        txn.producer_id,
                        txn.first_offset,
                        txn.last_offset,
                        state.last_stable_offset(txn),
                    )
                )
            state.complete_txn(txn)
        state.update_map_end_offset(self._log_end_offset)

    def append_transaction_marker(
        self,
        control_type: ControlType,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        leader_epoch: int | None = None,
    ) -> LogAppendInfo:
        """Write a commit or abort marker for ``producer_id`` (the coordinator's call)."""
        marker = encode_control_batch(
            control_type,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=self._time_ms(),
        )
        return self.append(marker, leader_epoch=leader_epoch, origin=AppendOrigin.COORDINATOR)

    def remove_expired_producers(self) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (the broker schedules it)."""
        with self._lock:
            return self._producer_state.remove_expired_producers(self._time_ms())

    def _assign(
        self,
        view: memoryview,
        headers: list[tuple[BatchHeader, int]],
        assign_offsets: bool,
        epoch: int,
        log_append_time_ms: int | None,
    ) -> tuple[list[Bytes], list[BatchPosition]]:
        """Give each batch its offset and epoch; return the chunks to write and the batches."""
        next_offset = self._log_end_offset
        out: list[BatchPosition] = []
        for header, pos in headers:
            if assign_offsets:
                base = next_offset
            else:
                base = header.base_offset
                if base < next_offset:
                    raise InvalidRecordError(
                        f"batch at offset {base} is below the log end {next_offset} of "
                        f"{self.topic}-{self.partition}"
                    )
            new_header = header._replace(base_offset=base, partition_leader_epoch=epoch)
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

    def _maybe_roll(self, append_size_bytes: int, last_offset: int, now_ms: int) -> LogSegment:
        segment = self._segments[-1]
        config = self._config
        if segment.should_roll(
            append_size_bytes=append_size_bytes,
            last_offset=last_offset,
            now_ms=now_ms,
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
        ):
            return self._roll(now_ms)
        return segment

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._time_ms())

    def _roll_jitter_ms(self) -> int:
        """Kafka's segment.jitter.ms: a random part of segment.ms taken off each new segment's
        age limit, so that partitions created together do not all roll at the same moment."""
        jitter = min(self._config.segment_jitter_ms, self._config.segment_ms)
        return self._rng.randrange(jitter) if jitter > 0 else 0

    def _roll(self, now_ms: int) -> LogSegment:
        active = self._segments[-1]
        if active.size_bytes == 0:
            return active
        new_base = self._log_end_offset
        active.on_become_inactive()
        config = self._config
        segment = LogSegment(
            self.directory,
            new_base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size_bytes=config.segment_index_bytes,
            rolling_jitter_ms=self._roll_jitter_ms(),
            created_ms=now_ms,
        )
        self._segments.append(segment)
        self._bases.append(new_base)
        # A producer state snapshot at every roll bounds the replay after a crash to the
        # segments after it (Kafka does the same). With no producers there is nothing to save.
        self._producer_state.update_map_end_offset(new_base)
        if self._producer_state.producers:
            self._producer_state.take_snapshot()
        # Kafka flushes the finished segment asynchronously so appends never wait for it.
        if self._flush_executor is not None:
            self._pending_flushes = [f for f in self._pending_flushes if not f.done()]
            self._pending_flushes.append(self._flush_executor.submit(self._flush_quietly, new_base))
        else:
            self._flush_up_to(new_base)
        return segment

    # -----------------------------------------------------------------------------------------
    # Flush

    def _maybe_flush(self, now_ms: int) -> None:
        config = self._config
        if (
            self._unflushed_records >= config.flush_messages
            or now_ms - self._last_flush_ms >= config.flush_ms
        ):
            self._flush_up_to(self._log_end_offset)

    def flush_if_due(self) -> None:
        """Apply ``flush.ms`` when no append comes to do it (the broker's scheduler calls this)."""
        with self._lock:
            if not self._closed:
                self._maybe_flush(self._time_ms())

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point to the log end."""
        with self._lock:
            self._check_open()
            self._flush_up_to(self._log_end_offset)

    def _flush_quietly(self, offset: int) -> None:
        with self._lock:
            if not self._closed:
                self._flush_up_to(offset)

    def _flush_up_to(self, offset: int) -> None:
        if offset <= self._recovery_point:
            return
        i = max(0, bisect.bisect_right(self._bases, self._recovery_point) - 1)
        for segment in self._segments[i:]:
            if segment.base_offset >= offset:
                break
            segment.flush()
        self._recovery_point = offset
        self._last_flush_ms = self._time_ms()
        if offset >= self._log_end_offset:
            self._unflushed_records = 0

    # -----------------------------------------------------------------------------------------
    # Read

    def _upper_bound(self, isolation: FetchIsolation) -> int:
        if isolation is FetchIsolation.LOG_END:
            return self._log_end_offset
        if isolation is FetchIsolation.TXN_COMMITTED:
            return self.last_stable_offset
        return self._high_watermark

    def _check_range(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: valid offsets "
                f"are {self._log_start_offset}..{self._log_end_offset}; seek to the beginning or "
                "the end (auto.offset.reset)",
                topic=self.topic,
                partition=self.partition,
                offset=offset,
                log_start_offset=self._log_start_offset,
                log_end_offset=self._log_end_offset,
            )

    def read(
        self,
        start_offset: int,
        max_bytes: int = 1024 * 1024,
        *,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``start_offset``, as a file range.

        The range stops before the first batch that reaches the isolation bound (or
        ``max_offset`` if lower) and after at most ``max_bytes`` (the first batch is whole even
        if larger, with ``min_one_message``). The first batch may start before
        ``start_offset``: readers skip its head, as with Kafka. The caller closes the range.
        """
        with self._lock:
            self._check_open()
            self._check_range(start_offset)
            bound = self._upper_bound(isolation)
            if max_offset is not None:
                bound = min(bound, max_offset)
            result_range: FileRange | None = None
            range_segment: LogSegment | None = None
            if start_offset < bound:
                i = bisect.bisect_right(self._bases, start_offset) - 1
                for segment in self._segments[max(i, 0) :]:
                    if segment.base_offset >= bound:
                        break
                    max_position = None
                    if bound < segment.next_offset():
                        boundary = segment.translate_offset(bound)
                        max_position = None if boundary is None else boundary.position
                    result_range = segment.read(
                        start_offset,
                        max_bytes,
                        max_position=max_position,
                        min_one_message=min_one_message,
                    )
                    if result_range is not None:
                        range_segment = segment
                        break
            aborted: tuple[AbortedTxn, ...] | None = None
            if isolation is FetchIsolation.TXN_COMMITTED:
                aborted = ()
                if result_range is not None and range_segment is not None:
                    upper = self._offset_after(range_segment, result_range, start_offset, bound)
                    aborted = collect_aborted_txns(self._segments, start_offset, upper)
            return FetchDataInfo(
                fetch_offset=start_offset,
                records=result_range,
                high_watermark=self._high_watermark,
                log_start_offset=self._log_start_offset,
                log_end_offset=self._log_end_offset,
                last_stable_offset=self.last_stable_offset,
                aborted_transactions=aborted,
            )

    @staticmethod
    def _offset_after(segment: LogSegment, file_range: FileRange, start: int, bound: int) -> int:
        """The offset after the batches of ``file_range``, at most ``bound``.

        It bounds the aborted transactions a fetch collects, as in Kafka: bounded by the LSO
        instead, every fetch would collect every aborted transaction after it, which made a
        read_committed scan of a log quadratic in its aborted transactions.
        """
        upper = min(bound, segment.next_offset())
        end = file_range.position + file_range.size
        if end + _PREFIX_SIZE <= segment.size_bytes:
            next_base = _PREFIX.unpack(segment.records.read(end, _PREFIX_SIZE))[0]
            # A batch follows the range (one the fetch had no room for, or the one at the
            # bound); anything else would be damage, where the wider bound stays correct.
            if start < next_base < upper:
                upper = next_base
        return upper

    def read_records(
        self,
        start_offset: int,
        max_bytes: int = 1024 * 1024,
        *,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        max_offset: int | None = None,
    ) -> pa.Table:
        """The decoding reader: records from ``start_offset`` as an Arrow table.

        Columns as :data:`~spark_mq.storage.record_batch.RECORD_SCHEMA`. Every batch is CRC
        checked on the way out; control records are dropped.
        """
        info = self.read(start_offset, max_bytes, isolation=isolation, max_offset=max_offset)
        if info.records is None:
            return RECORD_SCHEMA.empty_table()
        with info.records as file_range:
            data = file_range.read()
        end = {
            FetchIsolation.HIGH_WATERMARK: info.high_watermark,
            FetchIsolation.TXN_COMMITTED: info.last_stable_offset,
            FetchIsolation.LOG_END: info.log_end_offset,
        }[isolation]
        if max_offset is not None:
            end = min(end, max_offset)
        return decode_records(
            data,
            start_offset=start_offset,
            end_offset=end,
            aborted_transactions=info.aborted_transactions,
        )

    def find_offset_by_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets: earliest offset whose timestamp is >= ``timestamp_ms``.

        ``EARLIEST_TIMESTAMP`` (-2) gives the log start offset, ``LATEST_TIMESTAMP`` (-1) the
        high watermark, ``MAX_TIMESTAMP`` (-3) the record with the largest timestamp. None if
        no record below the high watermark qualifies.
        """
        with self._lock:
            self._check_open()
            hw = self._high_watermark
            if timestamp_ms == EARLIEST_TIMESTAMP:
                return TimestampAndOffset(-1, self._log_start_offset)
            if timestamp_ms == LATEST_TIMESTAMP:
                return TimestampAndOffset(-1, hw)
            segments = list(self._segments)
            start = self._log_start_offset
        if timestamp_ms == MAX_TIMESTAMP:
            # The answer is the record holding the largest timestamp (as in Kafka since
            # KAFKA-16310), not the last offset of its batch: find that timestamp among the
            # records from the log start, then search for it like for any other timestamp.
            largest: int | None = None
            for segment in segments:
                for header, pos in segment.records.headers():
                    if header.last_offset >= hw:
                        break
                    if header.is_control or header.last_offset < start:
                        continue
                    batch_max: int | None = header.max_timestamp
                    if header.base_offset < start and not header.timestamp_type:
                        # The batch holding the log start: its maximum may lie below it.
                        batch_max = _max_timestamp_from(segment, header, pos, start)
                    if batch_max is not None and (largest is None or batch_max > largest):
                        largest = batch_max
            if largest is None:
                return None
            timestamp_ms = largest
        for segment in segments:
            if segment.max_timestamp_so_far < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, start)
            if found is not None:
                return found if found.offset < hw else None
        return None

    # -----------------------------------------------------------------------------------------
    # Truncation, deletion, retention

    def truncate_to(self, offset: int) -> None:
        """Remove every record at ``offset`` or later (whole batches: a straddling batch goes).

        Replication uses it to drop a divergent tail. The log end may end up below ``offset``
        if a batch straddled it; truncating below the log start empties the log and restarts
        it at ``offset``.
        """
        with self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return
            if offset < self._log_start_offset:
                self._truncate_fully_and_start_at(offset)
                return
            # The floor segment of the cut is truncated (possibly to empty, then it stays as the
            # active segment); every later one is deleted whole.
            keep = bisect.bisect_right(self._bases, offset) - 1
            for segment in self._segments[keep + 1 :]:
                self._delete_segment(segment)
            del self._segments[keep + 1 :]
            del self._bases[keep + 1 :]
            self._segments[keep].truncate_to(offset)
            # An older segment that becomes active again had its indexes trimmed when it rolled.
            self._segments[keep].resize_indexes(self._config.segment_index_bytes)
            self._log_end_offset = self._segments[keep].next_offset()
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            # Producer state past the cut is gone with it: rebuild from a snapshot below it.
            rebuild_producer_state(
                self._producer_state,
                self._segments,
                log_start_offset=self._log_start_offset,
                log_end_offset=self._log_end_offset,
                txn_rebuild_from=self._log_end_offset,
            )

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        for segment in self._segments:
            self._delete_segment(segment)
        config = self._config
        segment = LogSegment(
            self.directory,
            offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size_bytes=config.segment_index_bytes,
            rolling_jitter_ms=self._roll_jitter_ms(),
            created_ms=self._time_ms(),
        )
        self._segments = [segment]
        self._bases = [offset]
        self._log_start_offset = self._log_end_offset = self._high_watermark = offset
        self._recovery_point = offset
        self._producer_state.reset()
        self._producer_state.delete_snapshots_after(-1)
        self._producer_state.update_map_end_offset(offset)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start to ``offset`` (at most the high watermark).

        Whole segments below the new start are deleted at once; returns the new log start.
        """
        with self._lock:
            self._check_open()
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset} in {self.topic}-{self.partition}: "
                    f"the high watermark is {self._high_watermark}",
                    topic=self.topic,
                    partition=self.partition,
                    offset=offset,
                    log_start_offset=self._log_start_offset,
                    log_end_offset=self._log_end_offset,
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._delete_segments_below_start()
            return self._log_start_offset

    def apply_retention(self) -> int:
        """Delete whole segments past ``retention.ms`` or ``retention.bytes`` or below the log
        start; returns how many were deleted. Only segments wholly below the high watermark go.
        """
        with self._lock:
            if self._closed:
                return 0
            deleted = self._delete_segments_below_start()
            config = self._config
            if not config.delete:
                return deleted
            now_ms = self._time_ms()
            if config.retention_ms >= 0:
                deleted += self._delete_oldest(
                    lambda seg, _: now_ms - seg.largest_timestamp_ms > config.retention_ms
                )
            if config.retention_bytes >= 0:
                excess = [self.size_bytes - config.retention_bytes]

                def over_size(seg: LogSegment, _: int) -> bool:
                    if excess[0] - seg.size_bytes >= 0:
                        excess[0] -= seg.size_bytes
                        return True
                    return False

                deleted += self._delete_oldest(over_size)
            return deleted

    def _delete_segments_below_start(self) -> int:
        return self._delete_oldest(
            lambda seg, upper: upper <= self._log_start_offset, allow_active=False
        )

    def _delete_oldest(
        self, predicate: Callable[[LogSegment, int], bool], *, allow_active: bool = True
    ) -> int:
        """Delete the longest prefix of segments matching ``predicate(segment, upper_offset)``."""
        doomed: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            is_active = i == len(self._segments) - 1
            upper = self._log_end_offset if is_active else self._bases[i + 1]
            if upper > self._high_watermark or (
                is_active and (not allow_active or segment.size_bytes == 0)
            ):
                break
            if not predicate(segment, upper):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(self._time_ms())  # Kafka keeps an active segment: roll before deleting all.
        for segment in doomed:
            self._delete_segment(segment)
        del self._segments[: len(doomed)]
        del self._bases[: len(doomed)]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self._producer_state.truncate_head(self._log_start_offset)
        return len(doomed)

    def _delete_segment(self, segment: LogSegment) -> None:
        # Rename first: a crash between rename and removal leaves .deleted files, which the
        # loader removes, never a half-deleted segment that would be served. Readers holding a
        # FileRange keep their own descriptor, so removal need not wait for them.
        segment.rename_to_deleted()
        segment.delete()

    # -----------------------------------------------------------------------------------------
    # Compaction: swapping cleaned segments in (for spark_mq.storage.log_cleaner only)

    def replace_segments(
        self, new_segments: list[LogSegment], old_segments: list[LogSegment]
    ) -> bool:
        """Replace ``old_segments`` by the cleaned ``new_segments``; False if they changed.

        ``old_segments`` must still be consecutive inactive segments of this log and
        ``new_segments`` (whose files are flushed ``*.cleaned`` files) must hold their offsets.
        If retention, truncation or a concurrent clean changed those segments since the
        cleaner read them, nothing happens and False is returned. Otherwise, under the lock,
        the renames of :func:`~spark_mq.storage.cleaner_swap.swap_in` commit the swap (its
        docstring tells what a crash at each step leaves and how loading finishes it), the
        segment list changes in one step, so readers see the old or the new segments and
        never a mix, and the old segments' files are deleted. Offsets, the log start, the log
        end and the recovery point do not change.
        """
        with self._lock:
            self._check_open()
            if not old_segments or not new_segments:
                return False
            first = next((i for i, s in enumerate(self._segments) if s is old_segments[0]), -1)
            last = first + len(old_segments)
            if (
                first < 0
                or last >= len(self._segments)  # the active segment is never replaced
                or any(
                    a is not b
                    for a, b in zip(self._segments[first:last], old_segments, strict=True)
                )
            ):
                return False
            swap_in(self.directory, new_segments, old_segments)
            self._segments[first:last] = new_segments
            self._bases[first:last] = [s.base_offset for s in new_segments]
            for segment in old_segments:
                segment.delete()  # already renamed to .deleted by swap_in
            return True

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def close(self) -> None:
        """Flush, write the final index entries and close every segment. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._flush_up_to(self._log_end_offset)
            # A snapshot at the log end lets a clean reopen skip the producer state replay.
            self._producer_state.update_map_end_offset(self._log_end_offset)
            self._producer_state.take_snapshot()
            for segment in self._segments:
                segment.close()
            self._closed = True
        for future in self._pending_flushes:
            future.cancel()

    def delete(self) -> None:
        """Close the log and remove its directory and every file in it."""
        with self._lock:
            if not self._closed:
                for segment in self._segments:
                    segment.close()
                self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self._log_start_offset}, "
            f"hw={self._high_watermark}, end={self._log_end_offset}, "
            f"segments={len(self._segments)})"
        )
