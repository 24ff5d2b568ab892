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
CRC; :mod:`~spark_mq.storage.log_append`), applies producer state
(:mod:`~spark_mq.storage.producer_state_append`), stamps the leader epoch, rolls segments
(``segment.bytes``, ``segment.ms``, full indexes, and on compacted topics
``max.compaction.lag.ms``), flushes by ``flush.messages`` / ``flush.ms`` (by default never:
the OS decides, as in Kafka), and applies retention by time, size and log start offset,
deleting whole segments (:mod:`~spark_mq.storage.log_retention`). Its leader epoch cache
(:mod:`~spark_mq.storage.leader_epoch_cache`) learns each epoch an append starts and follows
truncation and the log start; :meth:`PartitionLog.append_as_follower` copies a leader's
batches as they are. The segments themselves,
the log end and the recovery point belong to its
:class:`~spark_mq.storage.local_log.LocalLog`; reads are decoded by
:mod:`~spark_mq.storage.log_read`, which also gives a reader the offset to continue from.

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

import concurrent.futures
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa

from spark_mq.errors import CorruptRecordError, LogClosedError, OffsetOutOfRangeError
from spark_mq.storage.codecs import Bytes
from spark_mq.storage.leader_epoch_cache import (
    EpochEndOffset,
    LeaderEpochFileCache,
    assign_epoch_starts,
    load_leader_epoch_cache,
)
from spark_mq.storage.local_log import LocalLog
from spark_mq.storage.log_append import LogAppendInfo, check_append, stamp_batches
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_loader import load_log
from spark_mq.storage.log_read import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    FetchDataInfo,
    FetchIsolation,
    RecordsRead,
    decode_fetch,
    find_offset_by_timestamp,
    largest_timestamp,
    offset_after,
)
from spark_mq.storage.log_retention import (
    Condemns,
    below_log_start,
    deletable_prefix,
    older_than_retention,
    over_retention_bytes,
)
from spark_mq.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    AppendOrigin,
    LastRecord,
    ProducerStateManager,
)
from spark_mq.storage.producer_state_append import (
    apply_producer_state,
    find_duplicate,
    stage_producer_state,
)
from spark_mq.storage.producer_state_replay import collect_aborted_txns, rebuild_producer_state
from spark_mq.storage.record_batch import (
    NO_PARTITION_LEADER_EPOCH,
    ControlType,
    encode_control_batch,
)
from spark_mq.storage.segment import LogSegment, TimestampAndOffset
from spark_mq.storage.txn_index import AbortedTxn

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "FetchDataInfo",
    "FetchIsolation",
    "LogAppendInfo",
    "PartitionLog",
    "RecordsRead",
]

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
        leader_epoch_cache: LeaderEpochFileCache,
        high_watermark: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.leader_epoch = NO_PARTITION_LEADER_EPOCH
        self._local = LocalLog(
            directory,
            config,
            segments,
            log_end_offset=log_end_offset,
            recovery_point=recovery_point,
            time_ms=time_ms,
            rng=rng or random.Random(),
        )
        self._log_start_offset = log_start_offset
        # A replicated log starts from the high watermark checkpointed for it (Kafka's
        # replication-offset-checkpoint), never above its log end; one that follows its log
        # end starts there.
        self._high_watermark = (
            log_end_offset
            if high_watermark is None or high_watermark_follows_log_end
            else min(max(high_watermark, log_start_offset), log_end_offset)
        )
        self._epoch_cache = leader_epoch_cache
        self._time_ms = time_ms
        self._flush_executor = flush_executor
        self._hw_follows_leo = high_watermark_follows_log_end
        self._producer_state = producer_state
        self._lock = threading.RLock()
        self._closed = False
        self._unflushed_records = 0
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
        high_watermark: int | None = None,
        rng: random.Random | None = None,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> PartitionLog:
        """Open (creating if needed) the log in ``directory``, recovering it if necessary.

        Without ``had_clean_shutdown`` every segment from ``recovery_point`` on is validated,
        which is always safe and only slower. ``flush_executor`` runs the fsync of rolled
        segments off the append path; without one it runs inline. ``high_watermark`` (the
        checkpointed one) is where a log that does not follow its log end starts, clamped to
        ``[log_start_offset, log_end_offset]``; without it, at the log end.
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
        epoch_cache = load_leader_epoch_cache(
            path,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            log_end_offset=loaded.log_end_offset,
            recovered_from=loaded.recovered_from,
            name=f"{topic}-{partition}",
        )
        return cls(
            path,
            config,
            topic=topic,
            partition=partition,
            producer_state=producer_state,
            leader_epoch_cache=epoch_cache,
            high_watermark=high_watermark,
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
        return self._local.config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

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
            return self._local.size_bytes

    @property
    def num_segments(self) -> int:
        return len(self._local.segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        with self._lock:
            return tuple(self._local.segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from the next append (and the next segment's indexes)."""
        with self._lock:
            self._local.config = config

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``."""
        with self._lock:
            end = self._local.log_end_offset
            self._high_watermark = min(max(offset, self._log_start_offset), end)
            return self._high_watermark

    # -----------------------------------------------------------------------------------------
    # Leader epochs (spark_mq.storage.leader_epoch_cache)

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache:
        """The epoch -> start offset entries; change them only through this log's methods."""
        return self._epoch_cache

    @property
    def latest_epoch(self) -> int | None:
        """The newest leader epoch in the log's epoch cache, None if it holds none."""
        with self._lock:
            return self._epoch_cache.latest_epoch

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """OffsetsForLeaderEpoch: the largest epoch <= ``leader_epoch`` this log knows and
        where it ends (the log end for the latest epoch); both -1 when undefined."""
        with self._lock:
            self._check_open()
            return self._epoch_cache.end_offset_for(leader_epoch, self._local.log_end_offset)

    def maybe_assign_epoch_start_offset(self, leader_epoch: int, start_offset: int) -> None:
        """Record that ``leader_epoch`` starts at ``start_offset``: what a replica does when
        it becomes leader (at its log end), before it appends anything in that epoch."""
        with self._lock:
            self._check_open()
            self._epoch_cache.assign(leader_epoch, start_offset)

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
        config = self._local.config
        headers = check_append(
            view,
            config,
            origin=origin,
            assign_offsets=assign_offsets,
            topic=self.topic,
            partition=self.partition,
        )
        with self._lock:
            self._check_open()
            state = self._producer_state
            if origin is AppendOrigin.CLIENT:
                duplicate = find_duplicate(state, headers[0][0])
                if duplicate is not None:
                    return LogAppendInfo.of_duplicate(duplicate, self._log_start_offset)
            now_ms = self._time_ms()
            epoch = self.leader_epoch if leader_epoch is None else leader_epoch
            log_append_time = config.message_timestamp_type == "LogAppendTime"
            chunks, batches = stamp_batches(
                view,
                headers,
                next_offset=self._local.log_end_offset,
                assign=assign_offsets,
                epoch=epoch,
                log_append_time_ms=now_ms if log_append_time else None,
                topic_partition=f"{self.topic}-{self.partition}",
            )
            staged = stage_producer_state(state, view, batches, origin)
            last = batches[-1].header
            local = self._local
            if local.should_roll(len(view), last.last_offset, now_ms):
                self._roll(now_ms)
            segment = local.active_segment
            # Before the batches are written, so the cache never lacks a batch's epoch.
            assign_epoch_starts(
                self._epoch_cache,
                batches,
                epoch if assign_offsets else None,
                f"{self.topic}-{self.partition}",
            )
            local.append(chunks, batches)
            if self._hw_follows_leo:
                self._high_watermark = local.log_end_offset
            if staged.infos:
                apply_producer_state(state, segment, staged, log_end_offset=local.log_end_offset)
            result = LogAppendInfo.of_batches(
                batches,
                log_append_time_ms=now_ms if log_append_time else -1,
                log_start_offset=self._log_start_offset,
                valid_bytes=len(view),
            )
            self._unflushed_records += result.num_records
            self._maybe_flush(now_ms)
            return result

    def append_as_follower(self, records: Bytes) -> LogAppendInfo:
        """Append a leader's batches as they are: a follower's copy (Kafka's
        ``appendAsFollower``).

        The batches keep their offsets (which must start at or after the log end and
        increase), leader epochs, producer ids, sequences and markers; producer state and the
        transaction index are rebuilt from them as for any append, and every epoch they start
        is assigned in the leader epoch cache. Epochs must not go back: a batch older than the
        log's latest epoch raises :class:`~spark_mq.errors.FencedLeaderEpochError` and nothing
        is written.
        """
        return self.append(records, assign_offsets=False, origin=AppendOrigin.REPLICATION)

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
            expired = self._producer_state.remove_expired_producers(self._time_ms())
        if expired:
            log.info(
                "%s-%d: forgot %d producer%s idle for longer than producer.id.expiration.ms=%d",
                self.topic,
                self.partition,
                expired,
                "" if expired == 1 else "s",
                self._producer_state.producer_id_expiration_ms,
            )
        return expired

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            return self._roll(self._time_ms())

    def roll_for_compaction_lag(self, now_ms: int | None = None) -> bool:
        """Roll the active segment of a compacted topic once its first batch is older than
        ``max.compaction.lag.ms``; returns whether it rolled.

        The active segment is never cleaned, so its data could otherwise wait for
        ``segment.ms`` or ``segment.bytes``, past the lag. Appends apply the same rule (as
        Kafka's roll does); the cleaner calls this before each pass so that a log that
        receives no append meets the deadline too. ``now_ms`` overrides the log's clock.
        """
        with self._lock:
            self._check_open()
            config = self._local.config
            now = self._time_ms() if now_ms is None else now_ms
            active = self._local.active_segment
            if not config.compact or not active.compaction_lag_passed(
                now, config.max_compaction_lag_ms
            ):
                return False
            log.info(
                "%s-%d: rolling segment %d, whose data is older than max.compaction.lag.ms=%d",
                self.topic,
                self.partition,
                active.base_offset,
                config.max_compaction_lag_ms,
            )
            self._roll(now)
            return True

    def _roll(self, now_ms: int) -> LogSegment:
        local = self._local
        segment = local.roll(now_ms)
        if segment is None:
            return local.active_segment
        new_base = segment.base_offset
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
        config = self._local.config
        if (
            self._unflushed_records >= config.flush_messages
            or now_ms - self._local.last_flush_ms >= config.flush_ms
        ):
            self._flush_up_to(self._local.log_end_offset)

    def flush_if_due(self) -> None:
        """Apply ``flush.ms`` when no append comes to do it (the broker's scheduler calls this)."""
        with self._lock:
            if not self._closed:
                self._maybe_flush(self._time_ms())

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point to the log end."""
        with self._lock:
            self._check_open()
            self._flush_up_to(self._local.log_end_offset)

    def _flush_quietly(self, offset: int) -> None:
        with self._lock:
            if not self._closed:
                self._flush_up_to(offset)

    def _flush_up_to(self, offset: int) -> None:
        self._local.flush_up_to(offset)
        if offset >= self._local.log_end_offset:
            self._unflushed_records = 0

    # -----------------------------------------------------------------------------------------
    # Read

    def _upper_bound(self, isolation: FetchIsolation) -> int:
        if isolation is FetchIsolation.LOG_END:
            return self._local.log_end_offset
        if isolation is FetchIsolation.TXN_COMMITTED:
            return self.last_stable_offset
        return self._high_watermark

    def _check_range(self, offset: int) -> None:
        end = self._local.log_end_offset
        if offset < self._log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: valid offsets "
                f"are {self._log_start_offset}..{end}; seek to the beginning or the end "
                "(auto.offset.reset)",
                topic=self.topic,
                partition=self.partition,
                offset=offset,
                log_start_offset=self._log_start_offset,
                log_end_offset=end,
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

        The range stops before the first batch that reaches the isolation bound, before the
        first batch that starts at or after ``max_offset`` (a batch straddling it is included:
        the decoding reader cuts its records there), and after at most ``max_bytes`` (the
        first batch is whole even if larger, with ``min_one_message``). The first batch may
        start before ``start_offset``: readers skip its head, as with Kafka. The caller closes
        the range.
        """
        with self._lock:
            return self._read(start_offset, max_bytes, isolation, max_offset, min_one_message)[0]

    def _read(
        self,
        start_offset: int,
        max_bytes: int,
        isolation: FetchIsolation,
        max_offset: int | None,
        min_one_message: bool,
    ) -> tuple[FetchDataInfo, int]:
        """:meth:`read`, and where a reader goes on if the range is empty
        (:meth:`LocalLog.read_range`)."""
        self._check_open()
        self._check_range(start_offset)
        bound = self._upper_bound(isolation)
        try:
            result_range, range_segment, next_if_empty = self._local.read_range(
                start_offset,
                max_bytes,
                bound,
                max_offset=max_offset,
                min_one_message=min_one_message,
            )
        except CorruptRecordError as exc:
            raise self._named(exc) from exc
        if max_offset is not None:
            bound = min(bound, max_offset)
        aborted: tuple[AbortedTxn, ...] | None = None
        if isolation is FetchIsolation.TXN_COMMITTED:
            aborted = ()
            if result_range is not None and range_segment is not None:
                upper = offset_after(range_segment, result_range, start_offset, bound)
                aborted = collect_aborted_txns(self._local.segments, start_offset, upper)
        info = FetchDataInfo(
            fetch_offset=start_offset,
            records=result_range,
            high_watermark=self._high_watermark,
            log_start_offset=self._log_start_offset,
            log_end_offset=self._local.log_end_offset,
            last_stable_offset=self.last_stable_offset,
            aborted_transactions=aborted,
        )
        return info, next_if_empty

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
        checked on the way out; control records are dropped. An empty table does not mean
        the log holds nothing further (compaction leaves gaps, emptied batches and ranges of
        markers): a reader that loops uses :meth:`read_records_with_next`.
        """
        return self.read_records_with_next(
            start_offset, max_bytes, isolation=isolation, max_offset=max_offset
        ).records

    def read_records_with_next(
        self,
        start_offset: int,
        max_bytes: int = 1024 * 1024,
        *,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        max_offset: int | None = None,
    ) -> RecordsRead:
        """:meth:`read_records`, and the offset to read from next (:class:`RecordsRead`).

        The next offset is one past the last batch examined, from batch headers (never the
        last record's offset plus one), so a loop always makes progress across offset gaps,
        batches compaction emptied, markers and aborted data, and stops at the bound::

            position = log.log_start_offset
            while position < log.high_watermark:
                table, position = log.read_records_with_next(position)

        >>> import tempfile, pyarrow as pa
        >>> from spark_mq.storage.record_batch import encode_batch
        >>> log = PartitionLog.open(tempfile.mkdtemp(), topic="t", partition=0)
        >>> _ = log.append(encode_batch(pa.array([b"a", b"b"])))
        >>> table, position = log.read_records_with_next(0)
        >>> table.num_rows, position
        (2, 2)
        >>> log.read_records_with_next(position).next_offset  # at the high watermark
        2
        >>> log.close()
        """
        with self._lock:
            info, next_if_empty = self._read(start_offset, max_bytes, isolation, max_offset, True)
        try:
            return decode_fetch(
                info, isolation=isolation, max_offset=max_offset, next_offset_if_empty=next_if_empty
            )
        except CorruptRecordError as exc:
            raise self._named(exc) from exc

    def _named(self, exc: CorruptRecordError) -> CorruptRecordError:
        """``exc`` with this partition's name in its message and attributes."""
        return CorruptRecordError(
            f"{self.topic}-{self.partition}: {exc}",
            path=exc.path,
            position=exc.position,
            offset=exc.offset,
            topic=self.topic,
            partition=self.partition,
            next_offset=exc.next_offset,
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
            segments = list(self._local.segments)
            start = self._log_start_offset
        if timestamp_ms == MAX_TIMESTAMP:
            # The answer is the record holding the largest timestamp (as in Kafka since
            # KAFKA-16310), not the last offset of its batch: find that timestamp among the
            # records from the log start, then search for it like for any other timestamp.
            largest = largest_timestamp(segments, log_start_offset=start, high_watermark=hw)
            if largest is None:
                return None
            timestamp_ms = largest
        return find_offset_by_timestamp(
            segments, timestamp_ms, log_start_offset=start, high_watermark=hw
        )

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> tuple[AbortedTxn, ...]:
        """The aborted transactions with data in ``[start_offset, upper_bound_offset)``, by
        first offset, from the segments' transaction indexes (Kafka's
        ``collectAbortedTransactions``; the cleaner uses it)."""
        with self._lock:
            self._check_open()
            return collect_aborted_txns(self._local.segments, start_offset, upper_bound_offset)

    def delete_producer_snapshots_through(self, offset: int) -> None:
        """Delete the producer state snapshots at or below ``offset`` (the cleaner's call
        before it removes a transaction marker there: a recovery from such a snapshot would
        find the transaction open and never see it close). A later recovery then replays
        from an older snapshot, or from the log start."""
        with self._lock:
            self._check_open()
            self._producer_state.delete_snapshots_before(offset + 1)

    def producer_last_records(self) -> Mapping[int, LastRecord]:
        """Per producer, what compaction must keep for its state to survive a rebuild."""
        with self._lock:
            self._check_open()
            return self._producer_state.last_records()

    # -----------------------------------------------------------------------------------------
    # Truncation, deletion, retention

    def truncate_to(self, offset: int) -> None:
        """Remove every record at ``offset`` or later (whole batches: a straddling batch goes).

        Replication uses it to drop a divergent tail. The log end may end up below ``offset``
        if a batch straddled it; truncating below the log start empties the log and restarts
        it at ``offset``. The leader epoch cache follows: its entries from the new log end on
        go, even when no record does.
        """
        with self._lock:
            self._check_open()
            local = self._local
            if offset >= local.log_end_offset:
                # Nothing to cut, but the epoch cache may end with an entry at the log end: a
                # replica that became leader (assigning its epoch there) and was replaced
                # before it appended anything. As a follower it must forget that epoch, or
                # the leader's older epochs it copies next would look like going back.
                self._epoch_cache.truncate_from_end(local.log_end_offset)
                return
            if offset < self._log_start_offset:
                local.truncate_fully_and_start_at(offset)
                self._epoch_cache.clear()
                self._log_start_offset = self._high_watermark = offset
                self._producer_state.reset()
                self._producer_state.delete_snapshots_after(-1)
                self._producer_state.update_map_end_offset(offset)
                return
            local.truncate_to(offset)
            end = local.log_end_offset
            self._epoch_cache.truncate_from_end(end)
            self._high_watermark = min(self._high_watermark, end)
            self._log_start_offset = min(self._log_start_offset, end)
            # Producer state past the cut is gone with it: rebuild from a snapshot below it.
            rebuild_producer_state(
                self._producer_state,
                local.segments,
                log_start_offset=self._log_start_offset,
                log_end_offset=end,
                txn_rebuild_from=end,
            )

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
                    log_end_offset=self._local.log_end_offset,
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._epoch_cache.truncate_from_start(offset)
                self._delete_oldest(
                    below_log_start(offset),
                    reason=f"DeleteRecords moved the log start offset to {offset}",
                    allow_active=False,
                )
            return self._log_start_offset

    def apply_retention(self) -> int:
        """Delete whole segments past ``retention.ms`` or ``retention.bytes`` or below the log
        start (rules in :mod:`~spark_mq.storage.log_retention`); returns how many went. Only
        segments wholly below the high watermark go. Each deletion is logged at INFO with the
        partition, the segments and offsets that went, and the rule that condemned them.
        """
        with self._lock:
            if self._closed:
                return 0
            start = self._log_start_offset
            deleted = self._delete_oldest(
                below_log_start(start),
                reason=f"they lie below the log start offset {start}",
                allow_active=False,
            )
            config = self._local.config
            if not config.delete:
                return deleted
            if config.retention_ms >= 0:
                deleted += self._delete_oldest(
                    older_than_retention(config.retention_ms, self._time_ms()),
                    reason="their newest records are older than retention.ms="
                    f"{config.retention_ms}",
                )
            if config.retention_bytes >= 0:
                size = self._local.size_bytes
                deleted += self._delete_oldest(
                    over_retention_bytes(config.retention_bytes, size),
                    reason=f"the partition held {size} bytes, over retention.bytes="
                    f"{config.retention_bytes}",
                )
            return deleted

    def _delete_oldest(self, condemns: Condemns, *, reason: str, allow_active: bool = True) -> int:
        """Delete the longest prefix of segments that ``condemns`` and that may go; log what
        went and ``reason``, why."""
        local = self._local
        doomed = deletable_prefix(
            local.segments,
            condemns,
            log_end_offset=local.log_end_offset,
            high_watermark=self._high_watermark,
            allow_active=allow_active,
        )
        if not doomed:
            return 0
        if len(doomed) == len(local.segments):
            self._roll(self._time_ms())  # Kafka keeps an active segment: roll before deleting all.
        first_offset = doomed[0].base_offset
        size = sum(segment.size_bytes for segment in doomed)
        local.delete_oldest(len(doomed))
        self._log_start_offset = max(self._log_start_offset, local.segments[0].base_offset)
        local.recovery_point = max(local.recovery_point, self._log_start_offset)
        self._epoch_cache.truncate_from_start(self._log_start_offset)
        self._producer_state.truncate_head(self._log_start_offset)
        log.info(
            "%s-%d: deleted %d segment%s holding offsets %d to %d (%d bytes) because %s; the "
            "log start offset is now %d",
            self.topic,
            self.partition,
            len(doomed),
            "" if len(doomed) == 1 else "s",
            first_offset,
            local.segments[0].base_offset - 1,
            size,
            reason,
            self._log_start_offset,
        )
        return len(doomed)

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
            return self._local.replace_segments(new_segments, old_segments)

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    def close(self) -> None:
        """Flush, write the final index entries and close every segment. Idempotent."""
        with self._lock:
            if self._closed:
                return
            end = self._local.log_end_offset
            self._flush_up_to(end)
            # A snapshot at the log end lets a clean reopen skip the producer state replay.
            self._producer_state.update_map_end_offset(end)
            self._producer_state.take_snapshot()
            self._local.close()
            self._closed = True
        for future in self._pending_flushes:
            future.cancel()

    def delete(self) -> None:
        """Close the log and remove its directory and every file in it."""
        with self._lock:
            if not self._closed:
                self._local.close()
                self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, start={self._log_start_offset}, "
            f"hw={self._high_watermark}, end={self._local.log_end_offset}, "
            f"segments={len(self._local.segments)})"
        )
