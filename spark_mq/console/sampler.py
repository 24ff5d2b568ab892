"""The console's sampler: every group's lag and every partition's end offset, every few
seconds, on a background thread, with a bounded history.

Each sample is one :meth:`~spark_mq.monitoring.lag_exporter.LagExporter.poll` (the lag
exporter's work: every group's committed offsets against the partitions' last stable
offsets, and the lag in seconds from its
:class:`~spark_mq.monitoring.lag_history.LagHistory`), plus the end offset of every
partition of every topic (for throughput: how far the end moved between two samples).

Threads: :meth:`ConsoleSampler.sample` runs on the sampler's thread (or a test's) with the
sampler's own :class:`~spark_mq.Admin`; the pages read the history under a lock.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from spark_mq.client.admin import Admin
from spark_mq.client.records import LATEST, TopicPartition
from spark_mq.errors import SparkMQError, UnknownTopicOrPartitionError
from spark_mq.monitoring.lag_exporter import LagExporter, PartitionLagFigures

log = logging.getLogger(__name__)

#: End-offset samples kept per partition for throughput: the rate is over this window.
THROUGHPUT_SAMPLES = 6
#: Topics whose end offsets one sample reads at most (a bound on the work per sample).
MAX_SAMPLED_TOPICS = 500


@dataclasses.dataclass(frozen=True, slots=True)
class LagPoint:
    """One sample of a group: lag in records per partition (``topic-partition``), the total,
    and the worst partition's lag in seconds."""

    time_s: float
    lag_by_partition: dict[str, int]
    total_lag: int
    max_lag_seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class SamplerStatus:
    """When the last sample was taken and, if the last one failed, why."""

    samples: int
    last_sample_s: float | None
    last_error: str | None


class ConsoleSampler:
    """Samples lag and end offsets; keeps ``history_samples`` lag points per group."""

    def __init__(
        self,
        admin: Admin,
        *,
        history_samples: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._admin = admin
        self._exporter = LagExporter(admin, clock=clock)
        self._clock = clock
        self._history_samples = history_samples
        self._lock = threading.Lock()
        self._lag: dict[str, collections.deque[LagPoint]] = {}
        self._ends: dict[TopicPartition, collections.deque[tuple[float, int]]] = {}
        self._status = SamplerStatus(0, None, None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- sampling -------------------------------------------------------------------------

    def sample(self) -> None:
        """Take one sample (raises the client's error when the cluster cannot be read; the
        history keeps what it had)."""
        try:
            figures = self._exporter.poll()
            ends = self._end_offsets()
        except SparkMQError as exc:
            with self._lock:
                self._status = dataclasses.replace(self._status, last_error=str(exc))
            raise
        now = self._clock()
        with self._lock:
            self._add_lag(figures, now)
            self._add_ends(ends, now)
            self._status = SamplerStatus(self._status.samples + 1, now, None)

    def _end_offsets(self) -> dict[TopicPartition, int]:
        tps: list[TopicPartition] = []
        for topic in self._admin.list_topics()[:MAX_SAMPLED_TOPICS]:
            try:
                count = self._admin.describe_topic(topic).partition_count
            except UnknownTopicOrPartitionError:
                continue  # deleted since it was listed
            tps.extend(TopicPartition(topic, p) for p in range(count))
        if not tps:
            return {}
        answers = self._admin.list_offsets(dict.fromkeys(tps, LATEST))
        return {tp: answer.offset for tp, answer in answers.items() if answer.offset >= 0}

    def _add_lag(self, figures: list[PartitionLagFigures], now: float) -> None:
        by_group: dict[str, list[PartitionLagFigures]] = {}
        for figure in figures:
            by_group.setdefault(figure.group, []).append(figure)
        for gone in set(self._lag) - set(by_group):
            del self._lag[gone]
        for group, rows in by_group.items():
            point = LagPoint(
                now,
                {f"{f.topic}-{f.partition}": f.lag for f in rows},
                sum(f.lag for f in rows),
                max(f.lag_seconds for f in rows),
            )
            history = self._lag.setdefault(group, collections.deque(maxlen=self._history_samples))
            history.append(point)

    def _add_ends(self, ends: dict[TopicPartition, int], now: float) -> None:
        for gone in set(self._ends) - set(ends):
            del self._ends[gone]
        for tp, end in ends.items():
            history = self._ends.setdefault(tp, collections.deque(maxlen=THROUGHPUT_SAMPLES))
            if history and end < history[-1][1]:
                history.clear()  # the topic was deleted and created again
            history.append((now, end))

    # -- what the pages read --------------------------------------------------------------

    def lag_history(self, group: str) -> list[LagPoint]:
        """The group's lag samples, oldest first (empty before its first commit)."""
        with self._lock:
            return list(self._lag.get(group, ()))

    def throughput(self, tp: TopicPartition) -> float | None:
        """Records per second appended to ``tp`` over the sampled window (None before two
        samples)."""
        with self._lock:
            history = self._ends.get(tp)
            if history is None or len(history) < 2:
                return None
            (t0, e0), (t1, e1) = history[0], history[-1]
        return (e1 - e0) / (t1 - t0) if t1 > t0 else None

    def status(self) -> SamplerStatus:
        with self._lock:
            return self._status

    # -- the thread -----------------------------------------------------------------------

    def start(self, interval_s: float) -> None:
        """Sample every ``interval_s`` on a daemon thread until :meth:`stop`."""
        self._thread = threading.Thread(
            target=self._run, args=(interval_s,), name="console-sampler", daemon=True
        )
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except SparkMQError as exc:
                # The pages show the error (status()); the next interval tries again.
                log.warning("console sample failed: %s", exc)
            self._stop.wait(interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
