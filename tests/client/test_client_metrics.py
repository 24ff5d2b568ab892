"""The client metrics' windowed stats, with an injected clock."""

from __future__ import annotations

import math

from spark_mq.client.metrics import WINDOW_S, ConsumerMetrics, WindowedStat


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_average_and_max_are_over_the_window_and_totals_forever() -> None:
    clock = Clock()
    stat = WindowedStat(clock)
    assert math.isnan(stat.avg()) and math.isnan(stat.max())
    clock.now += 10
    for value in (4.0, 8.0, 12.0):
        stat.record(value)
    assert stat.avg() == 8.0
    assert stat.max() == 12.0
    # A client 10 s old: the rate is over its 10 s, not the whole window.
    assert stat.rate() == 24.0 / 10
    assert stat.count_rate() == 3 / 10
    clock.now += WINDOW_S + 1
    stat.record(1.0)
    # The earlier values left the window; the totals keep them.
    assert stat.avg() == 1.0 and stat.max() == 1.0
    assert stat.rate() == 1.0 / WINDOW_S
    assert (stat.total_count, stat.total_sum) == (4, 25.0)


def test_a_slot_reused_a_window_later_starts_empty() -> None:
    clock = Clock()
    stat = WindowedStat(clock)
    stat.record(100.0)
    clock.now += WINDOW_S  # the same slot, a window later
    stat.record(1.0)
    assert stat.max() == 1.0


def test_per_partition_lag_is_reported_for_assigned_partitions() -> None:
    metrics = ConsumerMetrics(Clock())
    metrics.record_lag("t", 0, 5)
    metrics.record_lag("t", 1, 9)
    snap = metrics.snapshot({("t", 0)})
    assert snap["consumer-fetch-manager-metrics"]["records-lag-max"] == 9
    assert snap["consumer-fetch-manager-metrics.topic.t.partition.0"] == {"records-lag": 5.0}
    assert "consumer-fetch-manager-metrics.topic.t.partition.1" not in snap
