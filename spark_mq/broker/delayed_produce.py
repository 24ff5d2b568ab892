"""The delayed-produce purgatory: ``acks=all`` answers wait here until every in-sync replica
has the batch (Kafka's DelayedProduce and its purgatory, keyed by partition).

A produce handler appends as leader, and if the partition's high watermark is not yet past
the batch (the followers have not fetched it), it waits on the partition's key for the high
watermark to reach the batch's end offset. The leader calls :meth:`ProducePurgatory.advance`
each time a partition's high watermark moves (after a follower fetch, or an ISR shrink), which
completes every wait whose offset it reached; :meth:`ProducePurgatory.abort` ends a
partition's waits with an error (leadership lost: NOT_LEADER_OR_FOLLOWER; the log deleted).
A wait that is not completed within the request's timeout ends with
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
from collections.abc import Hashable

from spark_mq.errors import RequestTimedOutError, SparkMQError


class ProducePurgatory:
    """Waits for high watermarks, per partition key."""

    def __init__(self) -> None:
        # key -> heap of (required offset, sequence, future): the smallest offset first.
        self._waits: dict[Hashable, list[tuple[int, int, asyncio.Future[None]]]] = {}
        self._sequence = itertools.count()

    def waiting(self, key: Hashable | None = None) -> int:
        """How many waits there are (for ``key``, or in all)."""
        if key is not None:
            return sum(1 for *_, f in self._waits.get(key, ()) if not f.done())
        return sum(self.waiting(k) for k in self._waits)

    async def wait(self, key: Hashable, required_offset: int, timeout_s: float) -> None:
        """Return once :meth:`advance` reports a high watermark at or past
        ``required_offset`` for ``key``; raise the error given to :meth:`abort`, or
        RequestTimedOutError after ``timeout_s``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(
            self._waits.setdefault(key, []), (required_offset, next(self._sequence), future)
        )
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            future.cancel()
            raise RequestTimedOutError(
                f"the in-sync replicas did not all have the records up to offset "
                f"{required_offset} within {timeout_s * 1000:.0f} ms (acks=all); the records "
                "are in the leader's log and may still be replicated: an idempotent "
                "producer's retry is recognised as a duplicate"
            ) from None
        finally:
            self._prune(key)

    def advance(self, key: Hashable, high_watermark: int) -> int:
        """The high watermark of ``key`` reached ``high_watermark``: complete the waits it
        satisfies; returns how many."""
        heap = self._waits.get(key)
        done = 0
        while heap and heap[0][0] <= high_watermark:
            _, _, future = heapq.heappop(heap)
            if not future.done():
                future.set_result(None)
                done += 1
        if heap is not None and not heap:
            del self._waits[key]
        return done

    def abort(self, key: Hashable, error: SparkMQError) -> int:
        """End every wait of ``key`` with ``error``; returns how many."""
        heap = self._waits.pop(key, [])
        done = 0
        for _, _, future in heap:
            if not future.done():
                future.set_exception(error)
                done += 1
        return done

    def abort_all(self, error: SparkMQError) -> int:
        """Shutdown: end every wait with ``error``."""
        return sum(self.abort(key, error) for key in list(self._waits))

    def _prune(self, key: Hashable) -> None:
        heap = self._waits.get(key)
        if heap is None:
            return
        live = [entry for entry in heap if not entry[2].done()]
        if not live:
            del self._waits[key]
        elif len(live) != len(heap):
            heapq.heapify(live)
            self._waits[key] = live
