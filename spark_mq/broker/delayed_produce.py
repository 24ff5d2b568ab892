"""The delayed-produce purgatory: ``acks=all`` answers wait here until every in-sync replica
has the batch (Kafka's DelayedProduce and its purgatory, keyed by partition).

A produce handler appends as leader, and for the partitions whose high watermark is not yet
past the batch (the followers have not fetched it) it makes one delayed produce for the whole
request (:meth:`ProducePurgatory.wait_all`): it watches each such partition's key for the high
watermark to reach that batch's end offset, and completes when no partition is pending any
more, with an error for each partition that failed. One future and one timer per request,
whatever its partitions, as Kafka's one DelayedProduce per request watched under every
partition's key. The leader calls :meth:`ProducePurgatory.advance`
each time a partition's high watermark moves (after a follower fetch, or an ISR shrink), which
completes every wait whose offset it reached; :meth:`ProducePurgatory.abort` ends a
partition's waits with an error (leadership lost: NOT_LEADER_OR_FOLLOWER; the log deleted).
A partition still pending when the request's timeout passes ends with
:class:`~spark_mq.errors.RequestTimedOutError`, as Kafka's; the records stay in the log (a
retry by an idempotent producer is recognised as a duplicate).

Whether the ISR was still large enough (``min.insync.replicas``) when the wait completed is
the caller's check: Kafka answers NOT_ENOUGH_REPLICAS_AFTER_APPEND then.

Threads: every method runs on the broker's event loop thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Hashable, Mapping

from spark_mq.errors import RequestTimedOutError, SparkMQError


class DelayedProduce:
    """One acks=all request's wait: the partition keys still pending, and the error of
    each partition that failed. Done when nothing is pending."""

    __slots__ = ("errors", "future", "pending")

    def __init__(self, future: asyncio.Future[None], keys: Mapping[Hashable, int]) -> None:
        self.future = future
        self.pending = set(keys)
        self.errors: dict[Hashable, SparkMQError] = {}

    def settle(self, key: Hashable, error: SparkMQError | None = None) -> bool:
        """``key`` is replicated far enough (or failed with ``error``); whether it was
        still pending."""
        if key not in self.pending:
            return False
        self.pending.discard(key)
        if error is not None:
            self.errors[key] = error
        if not self.pending and not self.future.done():
            self.future.set_result(None)
        return True


def _timed_out(required_offset: int, timeout_s: float) -> RequestTimedOutError:
    return RequestTimedOutError(
        f"the in-sync replicas did not all have the records up to offset {required_offset} "
        f"within {timeout_s * 1000:.0f} ms (acks=all); the records are in the leader's log "
        "and may still be replicated: an idempotent producer's retry is recognised as a "
        "duplicate"
    )


class ProducePurgatory:
    """Waits for high watermarks, per partition key."""

    def __init__(self) -> None:
        # key -> heap of (required offset, sequence, delayed produce): the smallest offset
        # first. An entry whose key its delayed produce no longer has pending is dead.
        self._waits: dict[Hashable, list[tuple[int, int, DelayedProduce]]] = {}
        self._sequence = itertools.count()

    def waiting(self, key: Hashable | None = None) -> int:
        """How many waits there are (for ``key``, or in all)."""
        if key is not None:
            return sum(1 for _, _, op in self._waits.get(key, ()) if key in op.pending)
        return sum(self.waiting(k) for k in self._waits)

    async def wait_all(
        self, required: Mapping[Hashable, int], timeout_s: float
    ) -> dict[Hashable, SparkMQError]:
        """Return once :meth:`advance` reported, for every key of ``required``, a high
        watermark at or past its offset, or :meth:`abort` ended the key; the errors of the
        keys that failed (the abort's error, or RequestTimedOutError for a key still pending
        after ``timeout_s``), empty when every key was replicated."""
        if not required:
            return {}
        loop = asyncio.get_running_loop()
        op = DelayedProduce(loop.create_future(), required)
        for key, offset in required.items():
            heapq.heappush(self._waits.setdefault(key, []), (offset, next(self._sequence), op))
        timer = loop.call_later(timeout_s, self._expire, op, required, timeout_s)
        try:
            await op.future
        finally:
            timer.cancel()
            if op.pending:  # cancelled: the answer is never sent; leave nothing behind
                op.pending.clear()
            for key in required:
                self._prune(key)
        return op.errors

    async def wait(self, key: Hashable, required_offset: int, timeout_s: float) -> None:
        """:meth:`wait_all` for one key: raise its error, if any."""
        errors = await self.wait_all({key: required_offset}, timeout_s)
        if key in errors:
            raise errors[key]

    def _expire(
        self, op: DelayedProduce, required: Mapping[Hashable, int], timeout_s: float
    ) -> None:
        for key in list(op.pending):
            op.settle(key, _timed_out(required[key], timeout_s))

    def advance(self, key: Hashable, high_watermark: int) -> int:
        """The high watermark of ``key`` reached ``high_watermark``: settle the waits it
        satisfies; returns how many."""
        heap = self._waits.get(key)
        if heap is None:
            return 0
        done = 0
        while heap and heap[0][0] <= high_watermark:
            if heapq.heappop(heap)[2].settle(key):
                done += 1
        if not heap:
            del self._waits[key]
        return done

    def abort(self, key: Hashable, error: SparkMQError) -> int:
        """End every wait of ``key`` with ``error``; returns how many."""
        return sum(op.settle(key, error) for _, _, op in self._waits.pop(key, []))

    def abort_all(self, error: SparkMQError) -> int:
        """Shutdown: end every wait with ``error``."""
        return sum(self.abort(key, error) for key in list(self._waits))

    def _prune(self, key: Hashable) -> None:
        heap = self._waits.get(key)
        if heap is None:
            return
        live = [entry for entry in heap if key in entry[2].pending]
        if not live:
            del self._waits[key]
        elif len(live) != len(heap):
            heapq.heapify(live)
            self._waits[key] = live
