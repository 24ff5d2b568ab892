"""The acks=all purgatory on a real event loop: waits complete in offset order as the high
watermark advances, per partition; a leadership loss aborts them with its error; an
unanswered wait times out with RequestTimedOutError and leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from spark_mq.broker.delayed_produce import ProducePurgatory
from spark_mq.errors import NotLeaderOrFollowerError, RequestTimedOutError


def test_waits_complete_as_the_high_watermark_reaches_their_offsets() -> None:
    async def scenario() -> list[str]:
        purgatory = ProducePurgatory()
        done: list[str] = []

        async def waiter(name: str, key: str, offset: int) -> None:
            await purgatory.wait(key, offset, timeout_s=5)
            done.append(name)

        tasks = [
            asyncio.create_task(waiter("a10", "a", 10)),
            asyncio.create_task(waiter("a20", "a", 20)),
            asyncio.create_task(waiter("b5", "b", 5)),
        ]
        await asyncio.sleep(0)
        assert purgatory.waiting() == 3
        assert purgatory.advance("a", 9) == 0
        assert purgatory.advance("a", 15) == 1
        await asyncio.sleep(0.05)  # the waiter's task runs on
        assert done == ["a10"]
        assert purgatory.advance("b", 5) == 1
        assert purgatory.advance("a", 30) == 1
        await asyncio.gather(*tasks)
        assert purgatory.waiting() == 0
        return done

    assert sorted(asyncio.run(scenario())) == ["a10", "a20", "b5"]


def test_a_lost_leadership_aborts_the_waits_of_its_partition_only() -> None:
    async def scenario() -> None:
        purgatory = ProducePurgatory()
        lost = asyncio.create_task(purgatory.wait("a", 10, timeout_s=5))
        other = asyncio.create_task(purgatory.wait("b", 10, timeout_s=5))
        await asyncio.sleep(0)
        assert purgatory.abort("a", NotLeaderOrFollowerError("leadership moved")) == 1
        with pytest.raises(NotLeaderOrFollowerError, match="leadership moved"):
            await lost
        assert purgatory.waiting("b") == 1
        purgatory.advance("b", 10)
        await other

    asyncio.run(scenario())


def test_an_unanswered_wait_times_out_and_leaves_nothing_behind() -> None:
    async def scenario() -> None:
        purgatory = ProducePurgatory()
        with pytest.raises(RequestTimedOutError, match="acks=all"):
            await purgatory.wait("a", 10, timeout_s=0.05)
        assert purgatory.waiting() == 0
        # A late advance finds nothing to complete.
        assert purgatory.advance("a", 100) == 0

    asyncio.run(scenario())


def test_one_request_waits_for_all_its_partitions_and_gets_an_error_per_partition() -> None:
    """A request's delayed produce completes when no partition is pending: one replicated,
    one aborted (leadership lost), one timed out, each with its own outcome."""

    async def scenario() -> None:
        purgatory = ProducePurgatory()
        waiting = asyncio.create_task(
            purgatory.wait_all({"a": 10, "b": 10, "c": 10}, timeout_s=0.3)
        )
        await asyncio.sleep(0)
        assert purgatory.waiting() == 3
        assert purgatory.advance("a", 10) == 1
        assert purgatory.abort("b", NotLeaderOrFollowerError("leadership moved")) == 1
        await asyncio.sleep(0.05)
        assert not waiting.done()  # "c" is still pending
        errors = await waiting
        assert set(errors) == {"b", "c"}
        assert isinstance(errors["b"], NotLeaderOrFollowerError)
        assert isinstance(errors["c"], RequestTimedOutError)
        assert purgatory.waiting() == 0
        assert purgatory.advance("c", 100) == 0

    asyncio.run(scenario())


def test_a_cancelled_request_leaves_no_wait_behind() -> None:
    async def scenario() -> None:
        purgatory = ProducePurgatory()
        waiting = asyncio.create_task(purgatory.wait_all({"a": 10, "b": 5}, timeout_s=5))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert purgatory.waiting() == 0
        assert purgatory.advance("a", 100) == 0

    asyncio.run(scenario())
