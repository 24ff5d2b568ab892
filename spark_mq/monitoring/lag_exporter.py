"""The consumer lag exporter: every group's lag per partition, in records and in seconds, as
Prometheus metrics (``spark-mq groups lag-exporter``; kafka-lag-exporter's job).

Every ``interval`` a poll lists the groups (:meth:`~spark_mq.Admin.list_groups`, all states:
a Spark query's ``group.id`` only commits, it never joins, so its group stays Empty) and asks
each for its lag (:meth:`~spark_mq.Admin.group_lag`: committed offsets against the last
stable offsets, which is where a ``read_committed`` reader ends). Each partition's end offset
goes into its :class:`~spark_mq.monitoring.lag_history.LagHistory`, which turns a committed
offset into seconds of lag.

Metrics (the labels are the operator's groups, topics and partitions):

- ``spark_mq_consumergroup_lag{group, topic, partition}``: records;
- ``spark_mq_consumergroup_lag_seconds{group, topic, partition}``: estimated seconds;
- ``spark_mq_consumergroup_max_lag{group}`` / ``..._max_lag_seconds{group}``: the worst
  partition, what an alert watches;
- ``spark_mq_consumergroup_committed_offset`` and ``spark_mq_partition_end_offset``;
- ``spark_mq_lag_exporter_poll_success`` (0 when the last poll failed: the figures are the
  previous poll's), ``spark_mq_lag_exporter_last_poll_timestamp_seconds``.

A group deleted, or a partition no longer committed, leaves the figures with the next poll.

Threads: :meth:`LagExporter.poll` runs on the exporter's thread (or a test's); Prometheus
scrapes read the last poll's figures under a lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spark_mq.client.admin import Admin
from spark_mq.client.records import TopicPartition
from spark_mq.errors import SparkMQError
from spark_mq.monitoring.lag_history import LagHistory

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionLagFigures:
    group: str
    topic: str
    partition: int
    committed: int
    end_offset: int
    lag: int
    lag_seconds: float


class LagExporter(Collector):
    """Polls an Admin for every group's lag and serves it as Prometheus gauges."""

    def __init__(self, admin: Admin, *, clock: Callable[[], float] = time.time) -> None:
        self._admin = admin
        self._clock = clock
        self._lock = threading.Lock()
        self._histories: dict[TopicPartition, LagHistory] = {}
        self._figures: list[PartitionLagFigures] = []
        self._success = False
        self._last_poll = 0.0
        self._stop = threading.Event()

    def poll(self) -> list[PartitionLagFigures]:
        """Read every group's lag now; returns (and keeps, for scrapes) the figures."""
        try:
            figures = self._read()
        except SparkMQError as exc:
            log.warning("lag poll failed (the last figures stay): %s", exc)
            with self._lock:
                self._success = False
            raise
        with self._lock:
            self._figures, self._success, self._last_poll = figures, True, self._clock()
        return figures

    def _read(self) -> list[PartitionLagFigures]:
        now = self._clock()
        lags = {g.group_id: self._admin.group_lag(g.group_id) for g in self._admin.list_groups()}
        # One end-offset sample per partition per poll, whichever groups read it.
        ends = {
            tp: lag.end_offset
            for per_group in lags.values()
            for tp, lag in per_group.items()
            if lag.end_offset >= 0
        }
        for tp, end_offset in ends.items():
            self._histories.setdefault(tp, LagHistory()).add(end_offset, now)
        for gone in set(self._histories) - set(ends):
            del self._histories[gone]
        figures: list[PartitionLagFigures] = []
        for group, per_group in sorted(lags.items()):
            for tp, lag in sorted(per_group.items()):
                if lag.committed is None or lag.end_offset < 0 or lag.lag is None:
                    continue
                seconds = self._histories[tp].time_lag(lag.committed, now)
                figures.append(
                    PartitionLagFigures(
                        group,
                        tp.topic,
                        tp.partition,
                        lag.committed,
                        lag.end_offset,
                        lag.lag,
                        seconds,
                    )
                )
        return figures

    def run(self, interval_s: float) -> None:
        """Poll every ``interval_s`` until :meth:`stop` (a failed poll is logged and retried
        at the next interval)."""
        while not self._stop.is_set():
            # A failure is logged by poll(), and the scrape shows poll_success 0.
            with contextlib.suppress(SparkMQError):
                self.poll()
            self._stop.wait(interval_s)

    def stop(self) -> None:
        self._stop.set()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            figures, success, last_poll = list(self._figures), self._success, self._last_poll
        labels = ["group", "topic", "partition"]
        lag = GaugeMetricFamily(
            "spark_mq_consumergroup_lag", "Records between committed and end offset.", labels=labels
        )
        lag_s = GaugeMetricFamily(
            "spark_mq_consumergroup_lag_seconds",
            "Estimated seconds since the partition's end passed the committed offset.",
            labels=labels,
        )
        committed = GaugeMetricFamily(
            "spark_mq_consumergroup_committed_offset",
            "The group's committed offset.",
            labels=labels,
        )
        end = GaugeMetricFamily(
            "spark_mq_partition_end_offset",
            "The partition's last stable offset (a read_committed reader's end).",
            labels=["topic", "partition"],
        )
        max_lag = GaugeMetricFamily(
            "spark_mq_consumergroup_max_lag",
            "The group's largest partition lag, records.",
            labels=["group"],
        )
        max_lag_s = GaugeMetricFamily(
            "spark_mq_consumergroup_max_lag_seconds",
            "The group's largest partition lag, seconds.",
            labels=["group"],
        )
        worst: dict[str, tuple[int, float]] = {}
        ends: dict[tuple[str, int], int] = {}
        for f in figures:
            key = [f.group, f.topic, str(f.partition)]
            lag.add_metric(key, f.lag)
            lag_s.add_metric(key, f.lag_seconds)
            committed.add_metric(key, f.committed)
            ends[(f.topic, f.partition)] = f.end_offset
            records, seconds = worst.get(f.group, (0, 0.0))
            worst[f.group] = (max(records, f.lag), max(seconds, f.lag_seconds))
        for (topic, partition), offset in sorted(ends.items()):
            end.add_metric([topic, str(partition)], offset)
        for group, (records, seconds) in sorted(worst.items()):
            max_lag.add_metric([group], records)
            max_lag_s.add_metric([group], seconds)
        yield from (lag, lag_s, committed, end, max_lag, max_lag_s)
        yield GaugeMetricFamily(
            "spark_mq_lag_exporter_poll_success",
            "1 when the last poll read every group's lag.",
            value=1 if success else 0,
        )
        yield GaugeMetricFamily(
            "spark_mq_lag_exporter_last_poll_timestamp_seconds",
            "Wall time of the last successful poll.",
            value=last_poll,
        )
