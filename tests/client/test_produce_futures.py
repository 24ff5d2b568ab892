"""The result a batch's futures share (spark_mq.client.futures): waiting on it from several
threads, with and without a timeout, while the sender completes it."""

from __future__ import annotations

import threading
import time

import pytest

from spark_mq.client.futures import FutureRecordMetadata, ProduceRequestResult
from spark_mq.errors import RequestTimedOutError


def test_every_waiting_thread_wakes_when_the_batch_completes() -> None:
    result = ProduceRequestResult("t", 0)
    futures = [FutureRecordMetadata(result, i, 1_700_000_000_000) for i in range(4)]
    offsets: list[int] = []
    lock = threading.Lock()

    def wait(future: FutureRecordMetadata) -> None:
        offset = future.get(timeout=10).offset
        with lock:
            offsets.append(offset)

    threads = [threading.Thread(target=wait, args=(f,)) for f in futures]
    for thread in threads:
        thread.start()
    time.sleep(0.05)  # the waiters block first
    assert not any(f.done() for f in futures) and offsets == []
    result.complete(100)
    for thread in threads:
        thread.join(10)
    assert sorted(offsets) == [100, 101, 102, 103]
    # Done stays done: later waits return at once, as often as asked.
    assert futures[0].get(timeout=0).offset == 100
    assert all(f.done() for f in futures)


def test_a_wait_times_out_and_a_later_completion_is_still_seen() -> None:
    result = ProduceRequestResult("t", 3)
    future = FutureRecordMetadata(result, 0, 1)
    started = time.monotonic()
    with pytest.raises(RequestTimedOutError, match="t-3"):
        future.get(timeout=0.1)
    assert 0.09 <= time.monotonic() - started < 5
    with pytest.raises(RequestTimedOutError):
        future.get(timeout=0)
    result.complete(7)
    assert future.get(timeout=0).offset == 7


def test_a_completion_racing_the_waiters_wakes_each_of_them() -> None:
    """Completed from another thread at the moment many threads start waiting: none may
    miss it (a wait that begins after the completion must return at once)."""
    for _ in range(50):
        result = ProduceRequestResult("t", 0)
        future = FutureRecordMetadata(result, 0, 1)
        got: list[int] = []

        def wait(future: FutureRecordMetadata = future, got: list[int] = got) -> None:
            got.append(future.get(timeout=10).offset)

        waiters = [threading.Thread(target=wait) for _ in range(3)]
        completer = threading.Thread(target=result.complete, args=(5,))
        for thread in (*waiters, completer):
            thread.start()
        for thread in (*waiters, completer):
            thread.join(10)
        assert got == [5, 5, 5]
