"""TimerQueue: deadlines by key, earliest first, replace and cancel, compared with a dict
reference model."""

from __future__ import annotations

import random

from spark_mq.broker.group.timers import TimerQueue


def test_runs_due_actions_in_deadline_order():
    timers = TimerQueue()
    ran: list[tuple[str, int]] = []
    timers.schedule("b", 20, lambda now: ran.append(("b", now)))
    timers.schedule("a", 10, lambda now: ran.append(("a", now)))
    timers.schedule("c", 30, lambda now: ran.append(("c", now)))
    assert timers.next_deadline_ms() == 10
    assert timers.run_due(19) == 1
    assert timers.run_due(25) == 1
    assert ran == [("a", 19), ("b", 25)]
    assert timers.next_deadline_ms() == 30 and len(timers) == 1


def test_schedule_replaces_and_cancel_forgets():
    timers = TimerQueue()
    ran: list[str] = []
    timers.schedule("k", 10, lambda now: ran.append("first"))
    timers.schedule("k", 50, lambda now: ran.append("second"))
    assert timers.deadline_of("k") == 50
    assert timers.run_due(40) == 0
    timers.schedule("x", 5, lambda now: ran.append("x"))
    timers.cancel("x")
    assert timers.run_due(100) == 1
    assert ran == ["second"] and timers.next_deadline_ms() is None


def test_actions_may_schedule_more_work_that_is_already_due():
    timers = TimerQueue()
    ran: list[int] = []

    def chain(now: int) -> None:
        ran.append(now)
        if len(ran) < 3:
            timers.schedule("chain", now, chain)

    timers.schedule("chain", 1, chain)
    assert timers.run_due(1) == 3


def test_matches_a_reference_model():
    rng = random.Random(7)
    timers = TimerQueue()
    model: dict[int, int] = {}
    fired: list[int] = []
    now = 0
    for _ in range(5000):
        key = rng.randrange(50)
        op = rng.random()
        if op < 0.6:
            deadline = now + rng.randrange(1, 100)
            timers.schedule(key, deadline, lambda t, k=key: fired.append(k))
            model[key] = deadline
        elif op < 0.8:
            timers.cancel(key)
            model.pop(key, None)
        else:
            now += rng.randrange(0, 50)
            due = sorted((d, k) for k, d in model.items() if d <= now)
            fired.clear()
            timers.run_due(now)
            assert sorted(fired) == sorted(k for _, k in due)
            for _, k in due:
                del model[k]
        assert timers.next_deadline_ms() == (min(model.values()) if model else None)
        assert len(timers) == len(model)
