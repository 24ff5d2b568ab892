"""Client metrics: what ``Producer.metrics()`` and ``Consumer.metrics()`` return.

Kafka's clients keep sensors whose stats are computed over a sliding time window (two
samples of 30 s by default, ``metrics.sample.window.ms`` and ``metrics.num.samples``): a rate
is the sum of what was recorded in the window divided by the window's elapsed time, an
average and a maximum are over the window, a total counts forever. :class:`WindowedStat` does
the same with one-second slots over a 30 s window, so recording costs one slot update
whatever the throughput.

The returned shape is kafka-python's: ``{group: {metric name: value}}`` with Kafka's group
and metric names, e.g. ``metrics()["producer-metrics"]["record-send-rate"]``. An average or
maximum with nothing recorded in the window is NaN, as Kafka reports it.

Threads: a producer's stats are recorded by its sender thread and read by the caller's; a
consumer's by the thread that polls. Each stat has its own lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection
from typing import Final

#: The window's length in seconds (Kafka: 2 samples x 30 s; here 30 slots of 1 s).
WINDOW_S: Final = 30


class WindowedStat:
    """Count, sum and maximum of the values recorded in the last :data:`WINDOW_S` seconds,
    and the totals since the client started."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._second = [-1] * WINDOW_S
        self._count = [0] * WINDOW_S
        self._sum = [0.0] * WINDOW_S
        self._max = [-math.inf] * WINDOW_S
        self.total_count = 0
        self.total_sum = 0.0

    def record(self, value: float = 1.0) -> None:
        now = int(self._clock())
        slot = now % WINDOW_S
        with self._lock:
            if self._second[slot] != now:
                self._second[slot] = now
                self._count[slot] = 0
                self._sum[slot] = 0.0
                self._max[slot] = -math.inf
            self._count[slot] += 1
            self._sum[slot] += value
            self._max[slot] = max(self._max[slot], value)
            self.total_count += 1
            self.total_sum += value

    def _live(self) -> tuple[int, float, float, float]:
        """(count, sum, max, elapsed seconds) over the window."""
        now = self._clock()
        oldest = int(now) - WINDOW_S
        count, total, top = 0, 0.0, -math.inf
        with self._lock:
            for i in range(WINDOW_S):
                if self._second[i] > oldest:
                    count += self._count[i]
                    total += self._sum[i]
                    top = max(top, self._max[i])
        # A young client's rate is over its lifetime (at least a second), as Kafka's.
        elapsed = max(1.0, min(float(WINDOW_S), now - self._started))
        return count, total, top, elapsed

    def rate(self) -> float:
        """Sum of the values recorded in the window, per second."""
        _, total, _, elapsed = self._live()
        return total / elapsed

    def count_rate(self) -> float:
        """Recordings in the window, per second."""
        count, _, _, elapsed = self._live()
        return count / elapsed

    def avg(self) -> float:
        count, total, _, _ = self._live()
        return total / count if count else math.nan

    def max(self) -> float:
        count, _, top, _ = self._live()
        return top if count else math.nan


class ProducerMetrics:
    """The producer's sensors (recorded by its sender thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: Records acknowledged, per completed batch (value: its record count).
        self.sent = WindowedStat(clock)
        #: Records that failed for good (value: the batch's record count).
        self.errors = WindowedStat(clock)
        #: Records sent again after a retriable error (value: the batch's record count).
        self.retries = WindowedStat(clock)
        #: Encoded batch sizes in bytes, one per batch sent.
        self.batch_size = WindowedStat(clock)
        #: Records per produce request.
        self.records_per_request = WindowedStat(clock)
        #: Milliseconds from a produce request's send to its response.
        self.request_latency = WindowedStat(clock)
        #: The throttle_time_ms of each produce response (a client quota's; 0 within it).
        self.throttle_time = WindowedStat(clock)

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {
            "producer-metrics": {
                "record-send-rate": self.sent.rate(),
                "record-send-total": self.sent.total_sum,
                "record-error-rate": self.errors.rate(),
                "record-error-total": self.errors.total_sum,
                "record-retry-rate": self.retries.rate(),
                "record-retry-total": self.retries.total_sum,
                "batch-size-avg": self.batch_size.avg(),
                "batch-size-max": self.batch_size.max(),
                "records-per-request-avg": self.records_per_request.avg(),
                "request-rate": self.request_latency.count_rate(),
                "request-total": float(self.request_latency.total_count),
                "request-latency-avg": self.request_latency.avg(),
                "request-latency-max": self.request_latency.max(),
                "outgoing-byte-rate": self.batch_size.rate(),
                "outgoing-byte-total": self.batch_size.total_sum,
                "produce-throttle-time-avg": self.throttle_time.avg(),
                "produce-throttle-time-max": self.throttle_time.max(),
            }
        }


class ConsumerMetrics:
    """The consumer's sensors (recorded by the thread that polls)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        #: Milliseconds from a fetch request's send to its response.
        self.fetch_latency = WindowedStat(clock)
        #: Bytes of records per fetch response.
        self.fetch_size = WindowedStat(clock)
        #: Records returned by poll(), per partition table.
        self.records = WindowedStat(clock)
        #: Records between a partition's fetch position and its high watermark (the last
        #: stable offset with read_committed), one value per partition per fetch response.
        self.lag = WindowedStat(clock)
        #: The throttle_time_ms of each fetch response (a client quota's; 0 within it).
        self.throttle_time = WindowedStat(clock)
        self._partition_lag: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def record_lag(self, topic: str, partition: int, lag: int) -> None:
        self.lag.record(lag)
        with self._lock:
            self._partition_lag[(topic, partition)] = lag

    def snapshot(
        self, assigned: Collection[tuple[str, int]] | None = None
    ) -> dict[str, dict[str, float]]:
        """The metrics; per-partition lags only of ``assigned`` partitions (None: all)."""
        out = {
            "consumer-fetch-manager-metrics": {
                "fetch-rate": self.fetch_latency.count_rate(),
                "fetch-total": float(self.fetch_latency.total_count),
                "fetch-latency-avg": self.fetch_latency.avg(),
                "fetch-latency-max": self.fetch_latency.max(),
                "fetch-size-avg": self.fetch_size.avg(),
                "fetch-size-max": self.fetch_size.max(),
                "bytes-consumed-rate": self.fetch_size.rate(),
                "bytes-consumed-total": self.fetch_size.total_sum,
                "records-consumed-rate": self.records.rate(),
                "records-consumed-total": self.records.total_sum,
                "records-lag-max": self.lag.max(),
                "fetch-throttle-time-avg": self.throttle_time.avg(),
                "fetch-throttle-time-max": self.throttle_time.max(),
            }
        }
        with self._lock:
            lags = dict(self._partition_lag)
        for (topic, partition), lag in sorted(lags.items()):
            if assigned is not None and (topic, partition) not in assigned:
                continue
            group = f"consumer-fetch-manager-metrics.topic.{topic}.partition.{partition}"
            out[group] = {"records-lag": float(lag)}
        return out
