"""The rate and throttle math of client quotas (broker/quotas/rate.py) with an injected
clock: Kafka's Rate over sampled windows and its throttle time."""

from __future__ import annotations

import pytest

from spark_mq.broker.quotas.rate import QuotaWindow, Rate, throttle_time_ms

WINDOW = QuotaWindow(samples=11, window_ms=1000)


def test_a_first_record_is_measured_over_the_minimum_window() -> None:
    rate = Rate(WINDOW)
    rate.record(10_000, now_ms=0)
    # Not 10,000 bytes over 0 ms: at least samples - 1 whole windows (10 s).
    assert rate.window_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(1_000)


def test_steady_traffic_measures_its_rate() -> None:
    rate = Rate(WINDOW)
    for t in range(0, 30_000, 100):
        rate.record(100, now_ms=t)  # 1,000 per second
    assert rate.measure(30_000) == pytest.approx(1_000, rel=0.1)


def test_old_samples_expire_after_the_whole_span() -> None:
    rate = Rate(WINDOW)
    rate.record(1_000_000, now_ms=0)
    assert rate.measure(5_000) > 0
    # 11 windows later the burst is forgotten.
    assert rate.measure(11_000) == 0


def test_unrecording_takes_a_value_back() -> None:
    rate = Rate(WINDOW)
    rate.record(500, now_ms=0)
    rate.record(2_000, now_ms=10)
    rate.record(-2_000, now_ms=20)
    assert rate.measure(20) == pytest.approx(500 / 10.02)


def test_throttle_time_is_kafkas() -> None:
    # Twice the quota over a 10 s window: 10 s at the quota makes up for it.
    assert throttle_time_ms(2_000, 1_000, 10_000, 60_000) == 10_000
    assert throttle_time_ms(1_500, 1_000, 10_000, 60_000) == 5_000
    assert throttle_time_ms(1_000, 1_000, 10_000, 60_000) == 0
    assert throttle_time_ms(999, 1_000, 10_000, 60_000) == 0
    # Bounded: a single huge request does not mute a client for hours.
    assert throttle_time_ms(1e9, 1_000, 10_000, 11_000) == 11_000


def test_the_measured_span_is_padded_to_the_minimum_then_grows() -> None:
    rate = Rate(WINDOW)
    rate.record(30_000, now_ms=0)
    # Within the first windows the span is padded to 10 whole windows (Kafka's windowSize):
    # elapsed time plus the whole windows missing.
    assert rate.window_ms(5_500) == 10_500
    assert rate.window_ms(10_000) == 10_000
    # Past the minimum the span is the time since the oldest sample, and the rate falls.
    assert rate.window_ms(10_900) == 10_900
    assert rate.measure(10_900) < rate.measure(10_000)


def test_a_tiny_quota_throttles_at_most_the_bound() -> None:
    # 5e-324 is a positive quota the APIs accept; the excess over it is an infinite float,
    # which must still come out as the bound rather than raise.
    assert throttle_time_ms(100.0, 5e-324, 10_000, 11_000) == 11_000
