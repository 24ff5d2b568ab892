"""The deadline and backoff of a retried client call, on a clock the test drives."""

from __future__ import annotations

import pytest

from spark_mq.client.retry import Retry, remaining_ms


class ManualClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _retry(clock: ManualClock, timeout_ms: int, **kwargs: float) -> Retry:
    return Retry.within_ms(timeout_ms, clock=clock, sleep=clock.sleep, **kwargs)


def test_backoff_doubles_up_to_the_maximum() -> None:
    clock = ManualClock()
    retry = _retry(clock, 10_000, backoff_s=0.1, max_backoff_s=0.5)
    for _ in range(5):
        assert retry.backoff()
    assert clock.sleeps == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_without_a_maximum_the_backoff_is_constant() -> None:
    clock = ManualClock()
    retry = _retry(clock, 10_000, backoff_s=0.25)
    for _ in range(3):
        assert retry.backoff()
    assert clock.sleeps == [0.25, 0.25, 0.25]


def test_no_wait_outlasts_the_deadline_and_then_it_gives_up() -> None:
    clock = ManualClock()
    retry = _retry(clock, 300, backoff_s=0.2, max_backoff_s=1.0)
    assert retry.backoff()
    assert retry.backoff()
    assert clock.sleeps == pytest.approx([0.2, 0.1])
    assert retry.expired()
    assert not retry.backoff()
    assert not retry.backoff()
    assert len(clock.sleeps) == 2, "no sleep once the deadline has passed"


def test_a_zero_timeout_gives_up_without_sleeping() -> None:
    clock = ManualClock()
    retry = _retry(clock, 0, backoff_s=0.1)
    assert not retry.backoff()
    assert clock.sleeps == []


def test_at_least_raises_the_backoff_but_never_lowers_it() -> None:
    clock = ManualClock()
    retry = _retry(clock, 10_000, backoff_s=0.002, max_backoff_s=1.0)
    assert retry.backoff()
    retry.at_least(0.1)
    assert retry.backoff()
    retry.at_least(0.01)
    assert retry.backoff()
    assert clock.sleeps == pytest.approx([0.002, 0.1, 0.2])


def test_remaining_ms_is_at_least_one_so_a_last_request_still_waits() -> None:
    clock = ManualClock()
    retry = _retry(clock, 1_500, backoff_s=0.1)
    assert retry.remaining_ms() == 1_500
    clock.now += 2.0
    assert retry.remaining_ms() == 1
    assert remaining_ms(clock.now + 0.25, clock) == 250
    assert retry.remaining_s() == pytest.approx(-0.5)
