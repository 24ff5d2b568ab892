"""Deadlines of the group coordinator, driven by whoever owns the clock.

The coordinator's logic is synchronous and never reads a clock: every entry point takes
``now_ms``, and whatever must happen later (a member's session expires, a join round times
out, the first rebalance's delay ends) is a deadline in a :class:`TimerQueue` keyed by what it
is about, so scheduling it again moves it and cancelling it forgets it. Whoever owns time
calls :meth:`TimerQueue.run_due` with the current time: the broker from an asyncio timer armed
at :meth:`TimerQueue.next_deadline_ms` (``service.GroupService``), tests with whatever time
they like, so no test sleeps.

Not thread-safe: the coordinator and its timers live on the broker's event loop thread.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Final

#: An action run when its deadline passes; it gets the time ``run_due`` was called with.
Action = Callable[[int], None]

#: At most this many actions per ``run_due`` call, so that actions which keep scheduling
#: overdue deadlines cannot spin forever; the rest run at the next call.
MAX_ACTIONS_PER_RUN: Final = 100_000


class TimerQueue:
    """Deadlines by key: a min-heap with lazy deletion and the live entry per key."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int, Action]] = {}
        self._sequence = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def schedule(self, key: Hashable, deadline_ms: int, action: Action) -> None:
        """Run ``action`` once ``deadline_ms`` has passed, replacing any deadline of ``key``."""
        sequence = next(self._sequence)
        self._live[key] = (deadline_ms, sequence, action)
        heapq.heappush(self._heap, (deadline_ms, sequence, key))
        # Replaced and cancelled entries stay in the heap until they surface; compact when
        # they dominate, so a member heartbeating for days does not grow the heap.
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._live):
            self._heap = [(d, s, k) for k, (d, s, _) in self._live.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def cancel_matching(self, matches: Callable[[Hashable], bool]) -> int:
        """Cancel every deadline whose key ``matches``; how many (a group unloaded)."""
        keys = [key for key in self._live if matches(key)]
        for key in keys:
            del self._live[key]
        return len(keys)

    def deadline_of(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def next_deadline_ms(self) -> int | None:
        """The earliest live deadline, None if there is none."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def run_due(self, now_ms: int) -> int:
        """Run every action whose deadline is at or before ``now_ms``, earliest first (ties in
        scheduling order); returns how many ran. Actions may schedule and cancel freely."""
        ran = 0
        while ran < MAX_ACTIONS_PER_RUN:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                break
            _, _, key = heapq.heappop(self._heap)
            _, _, action = self._live.pop(key)
            action(now_ms)
            ran += 1
        return ran

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, sequence, key = heap[0]
            live = self._live.get(key)
            if live is not None and live[0] == deadline and live[1] == sequence:
                return
            heapq.heappop(heap)
