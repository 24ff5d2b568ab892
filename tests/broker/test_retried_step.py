"""RetriedStep: a coordinator start-up step runs once, is kept when it succeeds, and is run
again by the next waiter after it failed."""

from __future__ import annotations

import asyncio

import pytest

from spark_mq.broker.retried_step import RetriedStep
from spark_mq.errors import CoordinatorNotAvailableError


def test_waiters_share_one_run_and_its_result() -> None:
    runs: list[int] = []

    async def step() -> int:
        runs.append(1)
        await asyncio.sleep(0.01)
        return 7

    async def main() -> None:
        loading = RetriedStep(step, what="loading t", owner="test coordinator")
        assert not loading.succeeded
        assert await asyncio.gather(loading.wait(), loading.wait(), loading.wait()) == [7, 7, 7]
        assert loading.succeeded
        assert await loading.wait() == 7

    asyncio.run(main())
    assert len(runs) == 1


def test_a_failure_is_retriable_and_the_next_wait_runs_the_step_again() -> None:
    outcomes = [OSError("disk gone"), 3]

    async def step() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def main() -> None:
        loading = RetriedStep(step, what="loading t", owner="test coordinator")
        with pytest.raises(CoordinatorNotAvailableError) as caught:
            await loading.wait()
        assert "the test coordinator failed loading t (OSError: disk gone)" in str(caught.value)
        assert caught.value.retriable
        assert not loading.succeeded
        assert await loading.wait() == 3
        assert loading.succeeded

    asyncio.run(main())
    assert outcomes == []


def test_a_cancelled_waiter_does_not_cancel_the_step() -> None:
    async def step() -> str:
        await asyncio.sleep(0.05)
        return "done"

    async def main() -> None:
        loading = RetriedStep(step, what="loading t", owner="test coordinator")
        waiter = asyncio.ensure_future(loading.wait())
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await loading.wait() == "done"

    asyncio.run(main())


def test_a_bug_is_raised_as_it_is_not_as_a_retriable_error() -> None:
    """Only the world's failures become COORDINATOR_NOT_AVAILABLE: a bug in the step would
    otherwise be retried by clients until their timeout, every time."""
    outcomes: list[object] = [TypeError("a bug in the loader"), 3]

    async def step() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        assert isinstance(outcome, int)
        return outcome

    async def main() -> None:
        loading = RetriedStep(step, what="loading t", owner="test coordinator")
        with pytest.raises(TypeError, match="a bug in the loader"):
            await loading.wait()
        assert not loading.succeeded
        assert await loading.wait() == 3  # the next request still runs the step again

    asyncio.run(main())
