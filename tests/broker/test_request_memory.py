"""RequestMemoryPool (queued.max.request.bytes) and FrameBufferPool, in isolation; the pool
at work on a real broker is in tests/integration/test_broker_limits.py."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_mq.broker.request_memory import (
    POOLED_FRAME_BUFFERS,
    POOLED_FRAME_MAX_BYTES,
    FrameBufferPool,
    MemoryWaiter,
    RequestMemoryPool,
)


class Scheduled:
    """Stands in for loop.call_soon: grants are collected and run when the test says."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def __call__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.calls.append((fn, args))

    def run(self) -> None:
        calls, self.calls = self.calls, []
        for fn, args in calls:
            fn(*args)


def test_a_frame_is_admitted_while_any_memory_is_free() -> None:
    pool = RequestMemoryPool(100, schedule=Scheduled())
    assert pool.try_reserve(60) and pool.try_reserve(60)  # 120: overshoot by one frame
    assert pool.exhausted and not pool.try_reserve(1)
    pool.release(60)
    assert not pool.exhausted and pool.try_reserve(500)  # larger than the whole pool
    assert pool.used_bytes == 560


def test_waiters_are_granted_in_order_and_new_frames_queue_behind_them() -> None:
    schedule = Scheduled()
    pool = RequestMemoryPool(100, schedule=schedule)
    assert pool.try_reserve(100)
    granted: list[str] = []
    pool.wait(80, lambda size: granted.append(f"big {size}"))
    pool.wait(10, lambda size: granted.append(f"small {size}"))
    pool.release(30)  # 70 used: the big one gets in (non-strict), which fills the pool
    schedule.run()
    assert granted == ["big 80"] and pool.used_bytes == 150
    assert pool.waiting == 1 and not pool.try_reserve(1)  # the small one still waits
    pool.release(70)
    assert pool.used_bytes == 90 and pool.waiting == 0
    schedule.run()
    assert granted == ["big 80", "small 10"]


def test_a_newcomer_waits_while_others_wait_even_with_memory_free() -> None:
    schedule = Scheduled()
    pool = RequestMemoryPool(100, schedule=schedule)
    pool.try_reserve(100)
    pool.wait(50, lambda size: None)
    pool.release(10)  # 90 used: granted at once (scheduled), 140 used
    assert pool.waiting == 0 and pool.used_bytes == 140
    pool.wait(5, lambda size: None)
    pool.release(100)  # 40 used: the 5 is granted
    assert pool.used_bytes == 45
    pool.wait(1000, lambda size: None)
    pool.wait(1, lambda size: None)
    # 1045: full again; a frame arriving now queues behind the 1 that waits.
    assert pool.exhausted and not pool.try_reserve(1)


def test_a_cancelled_waiter_lets_the_next_one_in() -> None:
    schedule = Scheduled()
    pool = RequestMemoryPool(10, schedule=schedule)
    pool.try_reserve(10)
    first = pool.wait(5, lambda size: None)
    pool.wait(3, lambda size: None)
    assert pool.cancel(first)
    assert not pool.cancel(first)
    pool.release(1)
    assert pool.used_bytes == 12 and pool.waiting == 0


def test_an_unbounded_pool_admits_everything() -> None:
    pool = RequestMemoryPool(None, schedule=Scheduled())
    assert all(pool.try_reserve(1 << 30) for _ in range(10))
    assert not pool.exhausted


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 50),
    ops=st.lists(
        st.tuples(st.sampled_from(["frame", "release", "cancel", "run"]), st.integers(0, 60)),
        max_size=80,
    ),
)
def test_the_pool_against_a_model(capacity: int, ops: list[tuple[str, int]]) -> None:
    """Whatever the order of frames, releases and cancellations: the count is the sum of
    what was granted and not released, waiters are granted in arrival order, and only while
    the pool had room."""
    schedule = Scheduled()
    pool = RequestMemoryPool(capacity, schedule=schedule)
    held: list[int] = []  # sizes granted and not released
    waiting: list[MemoryWaiter] = []
    queued = 0  # waiters so far; each one's id is its place in arrival order
    granted: list[int] = []

    def on_grant(waiter_id: int) -> Callable[[int], None]:
        def granted_now(size: int) -> None:
            granted.append(waiter_id)
            held.append(size)

        return granted_now

    for op, n in ops:
        if op == "frame":
            used_before = pool.used_bytes
            if pool.try_reserve(n):
                assert not waiting and used_before < capacity
                held.append(n)
            else:
                assert waiting or used_before >= capacity
                waiting.append(pool.wait(n, on_grant(queued)))
                queued += 1
        elif op == "release" and held:
            pool.release(held.pop(n % len(held)))
        elif op == "cancel" and waiting:
            assert pool.cancel(waiting.pop(n % len(waiting)))
        elif op == "run":
            schedule.run()
        waiting = [w for w in waiting if w in pool._waiters]
        pending = sum(args[0] for _, args in schedule.calls)
        assert pool.used_bytes == sum(held) + pending
    schedule.run()
    assert granted == sorted(granted), "granted out of arrival order"
    assert pool.used_bytes == sum(held)


def test_frame_buffers_are_reused_only_when_nothing_refers_to_them() -> None:
    pool = FrameBufferPool()
    view = pool.take(700_000)
    buf = view.obj
    assert isinstance(buf, mmap.mmap) and len(view) == 700_000
    kept = view[10:20]  # a view of the frame that outlived its request
    view.release()
    pool.give(buf)
    assert pool.take(600_000).obj is not buf  # still referenced: never written again
    del kept
    pool.give(buf)
    again = pool.take(600_000)
    assert again.obj is buf and len(again) == 600_000


def test_only_a_few_buffers_of_moderate_size_are_kept() -> None:
    pool = FrameBufferPool()
    huge = pool.take(POOLED_FRAME_MAX_BYTES + 1)
    buf = huge.obj
    huge.release()
    del huge
    pool.give(buf)
    del buf
    assert pool.cached_bytes == 0  # unmapped when dropped, not cached
    views = [pool.take(300_000) for _ in range(POOLED_FRAME_BUFFERS + 3)]
    buffers = [v.obj for v in views]
    for v in views:
        v.release()
    del views
    while buffers:
        pool.give(buffers.pop())
    # Kept in whole 256 KiB steps: 300,000 bytes take 512 KiB.
    assert pool.cached_bytes == POOLED_FRAME_BUFFERS * 512 * 1024
