"""``spark.readStream.format("spark_mq")``: micro-batch offsets, rate limits, AvailableNow.

The reader lives on the driver (in Spark's long-lived Python planner process) and keeps
only look-up state: the AvailableNow target, the time of the last non-empty trigger (for
``maxTriggerDelay``) and a :class:`BrokerView`. Reader tasks get everything they need in
their :class:`PartitionRange`.

Each ``latestOffset(start, limit)`` call:

1. lists the subscription's partitions and their log start and latest offsets (the last
   stable offset with ``read_committed``); with AvailableNow, latest is capped at the
   target recorded by ``prepareForTriggerAvailableNow`` and newer partitions are left out;
2. checks ``start`` for data loss: a partition gone, a log that now ends before ``start``
   (topic recreated) or starts after it (records deleted unread). ``failOnDataLoss=true``
   raises :class:`~spark_mq.errors.DataLossError`; ``false`` logs and goes on from the log
   start (or drops the partition);
3. applies the limits: with ``ReadAllAvailable`` none; otherwise every limit the options
   set (Spark passes only one ``ReadLimit``, so the options are the source of truth):
   ``maxOffsetsPerTrigger`` shared by backlog and never exceeded, ``maxBytesPerTrigger``
   measured on stored batches, and ``minOffsetsPerTrigger``, which returns ``start``
   unchanged (no batch) until that many offsets wait or ``maxTriggerDelay`` passed since
   the last batch.

Partitions not in ``start`` (new partitions, topics newly matching ``subscribePattern``)
start at their log start; ``plan_ranges`` marks them with the EARLIEST sentinel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from spark_mq.client.records import TopicPartition
from spark_mq.datasource.batch_reader import planned_ranges, read_settings
from spark_mq.datasource.broker_view import BrokerView, monotonic_ms
from spark_mq.datasource.offsets import (
    PartitionOffsets,
    PartitionRange,
    from_json,
    plan_ranges,
    split_by_backlog,
    to_json,
)
from spark_mq.datasource.options import EARLIEST, SourceOptions
from spark_mq.datasource.partition_reader import read_partition_range
from spark_mq.datasource.worker_gc import freeze_long_lived
from spark_mq.errors import DataLossError, UnknownTopicOrPartitionError

log = logging.getLogger(__name__)


class SparkMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads (see the module docstring). ``clock_ms`` is injectable for tests."""

    def __init__(
        self, options: SourceOptions, *, clock_ms: Callable[[], int] = monotonic_ms
    ) -> None:
        self.options = options
        self._clock_ms = clock_ms
        self._view: BrokerView | None = None
        self._target: PartitionOffsets | None = None
        self._last_batch_ms = clock_ms()

    @property
    def view(self) -> BrokerView:
        if self._view is None:
            self._view = BrokerView(self.options)
        return self._view

    # -- offsets --------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, dict[str, int]]:  # noqa: N802 (Spark API name)
        tps = self.view.partitions()
        return to_json(self.view.resolve(self.options.starting, tps, starting=True))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark API name)
        opts = self.options
        if opts.min_offsets_per_trigger is not None:
            return ReadMinRows(opts.min_offsets_per_trigger)
        if opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(opts.max_offsets_per_trigger)
        if opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark API name)
        self._target = self.view.latest(self.view.partitions())

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:  # noqa: N802 (Spark API name)
        return to_json(self.view.latest(self.view.partitions()))

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, object]:  # noqa: N802 (Spark API name)
        view = self.view
        started = from_json(start)
        tps = view.partitions()
        if self._target is not None:
            tps = [tp for tp in tps if tp in self._target]
        latest = view.latest(tps)
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items()}
        begin = self._checked_begin(started, tps, view.earliest(tps), latest)
        end = self._limited_end(begin, latest, limit)
        if end is None:
            return dict(start)
        if any(end[tp] != started.get(tp) for tp in end):
            self._last_batch_ms = self._clock_ms()
        return dict(to_json(end))

    def _checked_begin(
        self,
        started: PartitionOffsets,
        tps: list[TopicPartition],
        earliest: PartitionOffsets,
        latest: PartitionOffsets,
    ) -> PartitionOffsets:
        begin: PartitionOffsets = {}
        present = set(tps)
        for tp, offset in sorted(started.items()):
            if tp not in present:
                self._lost(tp, offset, -1, "the topic or partition no longer exists")
                continue
            if latest[tp] < offset:
                self._lost(tp, offset, -1, f"the log now ends at {latest[tp]} (recreated?)")
                begin[tp] = earliest[tp]
            elif earliest[tp] > offset:
                self._lost(tp, offset, earliest[tp], f"the log now starts at {earliest[tp]}")
                begin[tp] = earliest[tp]
            else:
                begin[tp] = offset
        for tp in tps:
            if tp not in begin and tp not in started:
                begin[tp] = earliest[tp]  # new partition or topic: from its log start
        return begin

    def _lost(self, tp: TopicPartition, start: int, end: int, why: str) -> None:
        where = f"{tp.topic}-{tp.partition} from offset {start}" + (
            f" to {end}" if end >= 0 else ""
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"records of {where} are gone before being read: {why}. Set "
                "failOnDataLoss=false to skip them and go on, or start the query again from "
                "a new checkpoint",
                topic=tp.topic,
                partition=tp.partition,
                start_offset=start,
                end_offset=end,
            )
        log.warning("data loss in %s: %s (failOnDataLoss=false, skipping)", where, why)

    def _limited_end(
        self, begin: PartitionOffsets, latest: PartitionOffsets, limit: ReadLimit
    ) -> PartitionOffsets | None:
        """End offsets under the limits, or None when minOffsetsPerTrigger says wait."""
        upper = {tp: max(latest[tp], off) for tp, off in begin.items()}
        if isinstance(limit, ReadAllAvailable):
            return upper
        opts = self.options
        backlog = {tp: upper[tp] - off for tp, off in begin.items()}
        waiting = sum(backlog.values())
        min_rows = opts.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if (
            min_rows is not None
            and self._target is None
            and waiting < min_rows
            and self._clock_ms() - self._last_batch_ms < opts.max_trigger_delay_ms
        ):
            return None
        max_rows = opts.max_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        end = dict(upper)
        if max_rows is not None:
            shares = split_by_backlog(backlog, max_rows)
            end = {tp: begin[tp] + shares[tp] for tp in begin}
        max_bytes = opts.max_bytes_per_trigger
        if isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        if max_bytes is not None:
            end = self.view.byte_limited_ends(begin, end, max_bytes)
        return end

    # -- planning and reading -------------------------------------------------------------

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[InputPartition]:
        ranges = plan_ranges(from_json(start), from_json(end), read_settings(self.options))
        opts = self.options
        if opts.min_partitions is None and opts.max_records_per_partition is None:
            return ranges
        return planned_ranges(opts, self._from_log_start(ranges))

    def _from_log_start(self, ranges: list[PartitionRange]) -> list[PartitionRange]:
        """Ranges with the EARLIEST sentinel (partitions new in this micro-batch) given the
        partition's log start, so that they can be split too, as Spark's Kafka source
        resolves them when it plans. A re-run of the micro-batch resolves them again: the
        same offsets unless retention removed records meanwhile, which the tasks then
        report as data loss. A partition gone meanwhile keeps the sentinel (its task reports
        it)."""
        new = [r.tp for r in ranges if r.start == EARLIEST]
        if not new:
            return ranges
        try:
            starts = self.view.earliest(new)
        except UnknownTopicOrPartitionError:
            return ranges
        return [
            replace(r, start=min(starts[r.tp], r.end)) if r.start == EARLIEST else r for r in ranges
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PartitionRange):
            # pyspark reads one placeholder partition (None) when planning returned none.
            return iter(())
        freeze_long_lived()
        return read_partition_range(partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Spark finished every batch up to ``end``: with ``group.id``, commit it to the
        consumer group so its lag is visible (Spark's own progress is in the checkpoint)."""
        if self.options.group_id:
            self.view.commit_group_offsets(self.options.group_id, from_json(end))

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
