"""Lag in seconds from end-offset samples: interpolation, extrapolation, caught up."""

from __future__ import annotations

import pytest

from spark_mq.monitoring.lag_history import LagHistory


def history(*samples: tuple[int, float]) -> LagHistory:
    h = LagHistory()
    for offset, t in samples:
        h.add(offset, t)
    return h


def test_between_samples_the_time_is_interpolated() -> None:
    h = history((100, 0.0), (200, 10.0), (300, 20.0))
    assert h.time_lag(100, now_s=20.0) == 20.0
    assert h.time_lag(150, now_s=20.0) == 15.0
    assert h.time_lag(250, now_s=25.0) == 10.0


def test_caught_up_or_no_samples_is_no_lag() -> None:
    assert history((100, 0.0), (200, 10.0)).time_lag(200, now_s=50.0) == 0.0
    assert LagHistory().time_lag(5, now_s=50.0) == 0.0


def test_older_than_every_sample_extrapolates_the_oldest_rate() -> None:
    # 10 records a second at first: offset 50 was the end 5 s before the oldest sample.
    h = history((100, 10.0), (200, 20.0))
    assert h.time_lag(50, now_s=20.0) == pytest.approx(15.0)


def test_a_quiet_partition_keeps_when_its_end_got_there() -> None:
    h = history((100, 0.0), (200, 10.0), (200, 20.0), (200, 30.0), (200, 40.0))
    # The end reached 200 at 10 s at the latest; offset 150 was passed at 5 s.
    assert h.time_lag(150, now_s=40.0) == 35.0


def test_a_smaller_end_starts_the_history_again() -> None:
    h = history((500, 0.0), (600, 10.0), (20, 20.0), (40, 30.0))
    assert h.time_lag(30, now_s=30.0) == 5.0
