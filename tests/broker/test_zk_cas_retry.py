"""Compare-and-set retries back off at random, within a bound that doubles per attempt."""

from __future__ import annotations

from spark_mq.broker.zk.cas_retry import (
    FIRST_BACKOFF_S,
    MAX_BACKOFF_S,
    MAX_WRITE_ATTEMPTS,
    write_attempts,
)


def test_every_attempt_after_the_first_waits_up_to_a_doubling_bound() -> None:
    slept: list[float] = []
    attempts = list(write_attempts(sleep=slept.append, rng=lambda: 1.0))
    assert attempts == list(range(MAX_WRITE_ATTEMPTS))
    assert len(slept) == MAX_WRITE_ATTEMPTS - 1
    assert slept[0] == FIRST_BACKOFF_S
    assert slept[1] == 2 * FIRST_BACKOFF_S
    assert max(slept) == MAX_BACKOFF_S
    assert slept == sorted(slept)


def test_a_write_that_wins_at_once_never_waits() -> None:
    slept: list[float] = []
    for _attempt in write_attempts(sleep=slept.append):
        break
    assert slept == []


def test_the_wait_is_random_within_the_bound() -> None:
    slept: list[float] = []
    list(write_attempts(3, sleep=slept.append, rng=lambda: 0.25))
    assert slept == [0.25 * FIRST_BACKOFF_S, 0.25 * 2 * FIRST_BACKOFF_S]
