"""The deadline and backoff of a retried client call, on a clock the test drives."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest

from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ClientConfig
from spark_mq.client.group.coordinator_lookup import find_coordinator
from spark_mq.client.retry import Again, Retry, remaining_ms, sent
from spark_mq.errors import (
    NetworkError,
    RequestTimedOutError,
    SparkMQError,
    UsageError,
)


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


def test_until_retries_again_until_the_attempt_answers() -> None:
    clock = ManualClock()
    retry = _retry(clock, 10_000, backoff_s=0.1, max_backoff_s=1.0)
    answers: list[int | Again] = [Again(NetworkError("down")), Again(NetworkError("down")), 7]
    assert retry.until(lambda: answers.pop(0), RequestTimedOutError) == 7
    assert clock.sleeps == pytest.approx([0.1, 0.2])


def test_until_raises_the_timeout_error_chained_to_the_last_error() -> None:
    clock = ManualClock()
    retry = _retry(clock, 250, backoff_s=0.1)
    errors = iter(NetworkError(f"attempt {n}") for n in range(10))

    def timeout(error: SparkMQError) -> SparkMQError:
        return RequestTimedOutError(f"gave up (last error: {error})")

    with pytest.raises(RequestTimedOutError, match=r"last error: attempt 3\)") as caught:
        retry.until(lambda: Again(next(errors)), timeout)
    assert str(caught.value.__cause__) == "attempt 3"
    assert sum(clock.sleeps) == pytest.approx(0.25)


def test_an_error_the_attempt_raises_ends_the_call_at_once() -> None:
    clock = ManualClock()
    retry = _retry(clock, 10_000, backoff_s=0.1)

    def attempt() -> Again:
        raise NetworkError("raised, not returned")

    with pytest.raises(NetworkError):
        retry.until(attempt, RequestTimedOutError)
    assert clock.sleeps == []


def test_sent_turns_only_retriable_errors_into_again() -> None:
    def fail(error: SparkMQError) -> Callable[[], int]:
        def send() -> int:
            raise error

        return send

    assert sent(lambda: 3) == 3
    again = sent(fail(NetworkError("lost")))
    assert isinstance(again, Again) and isinstance(again.error, NetworkError)
    with pytest.raises(UsageError):
        sent(fail(UsageError("not retriable")))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_coordinator_lookup_waits_on_the_clusters_clock_not_the_wall_clock() -> None:
    """find_coordinator against an address where nothing listens: every attempt fails at once
    (connection refused, retriable), and the lookup backs off 100, 200, 400, 800, 1000 ms ...
    on the cluster's injected clock until its 3 s pass, then names the last error."""
    clock = ManualClock()
    config = ClientConfig.from_properties(bootstrap_servers=f"127.0.0.1:{_closed_port()}")
    cluster = Cluster(config, clock=clock, sleep=clock.sleep)
    started = time.monotonic()
    with pytest.raises(RequestTimedOutError, match="no coordinator found for group 'g'"):
        find_coordinator(cluster, "g", timeout_ms=3_000)
    assert time.monotonic() - started < 2.0, "the lookup slept on the wall clock"
    assert clock.sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 0.5])
