"""The memory of the requests a broker reads: Kafka's ``queued.max.request.bytes`` pool, and
the buffers that hold request frames.

:class:`RequestMemoryPool` counts the bytes of every request frame from the moment its size
prefix is read until its handler is done with it: frames being received, frames queued on
their connection, the frame being served. A connection whose next frame does not fit stops
reading its socket until memory is released (back-pressure; the kernel's socket buffer and
then TCP flow control hold the client back); it is never disconnected for it. As Kafka's
broker pool does (it is not "strict"), a frame is admitted while any memory is free, so the
pool can be overshot by at most one frame of ``socket.request.max.bytes``, and a frame larger
than the whole pool still gets in once the pool is (nearly) empty. Waiting frames are
admitted in arrival order, and while any wait, new frames queue behind them, so that a stream
of small requests cannot starve a large one. That the pool is full is logged at INFO, at
most every :data:`FULL_LOG_INTERVAL_S`. Grants are delivered through ``schedule`` (the
event loop's ``call_soon``), never from inside :meth:`RequestMemoryPool.release`, so that a
connection releasing memory never re-enters another connection's code.

:class:`FrameBufferPool` makes the buffers of frames over ``LARGE_FRAME_BYTES`` (see
``connection.py``): anonymous memory maps rather than ``bytearray``\\ s, for two reasons.
A map is not touched when it is made, so its memory grows page by page as the frame's bytes
arrive (a ``bytearray`` of a 100 MiB size prefix is zeroed, 100 MiB resident, before one byte
of the frame came), and a map goes back to the operating system the moment it is dropped
(``bytearray``\\ s of a few hundred KiB come from the C heap, which keeps them after they are
freed). Up to :data:`POOLED_FRAME_BUFFERS` buffers of at most :data:`POOLED_FRAME_MAX_BYTES`
are kept for reuse, since faulting in a fresh 1 MB map per request costs as much as reading
it.

Threads: both are used on the event loop thread only.
"""

from __future__ import annotations

import collections
import logging
import mmap
import sys
import time
from collections.abc import Callable
from typing import Any, Final

logger = logging.getLogger("spark_mq.broker.request_memory")

#: A full pool is logged at most this often.
FULL_LOG_INTERVAL_S: Final = 10.0

#: Buffers of large frames are kept for reuse up to this size, and at most this many.
POOLED_FRAME_MAX_BYTES: Final = 2 * 1024 * 1024
POOLED_FRAME_BUFFERS: Final = 8
#: Pooled buffers are made in whole steps of this size, so that one fits the next frames of
#: about the same size.
POOLED_FRAME_STEP_BYTES: Final = 256 * 1024


class MemoryWaiter:
    """A frame waiting for memory: ``granted`` is scheduled once ``size`` bytes are counted
    for it (its owner must then release them, even if it no longer needs them)."""

    __slots__ = ("granted", "size")

    def __init__(self, size: int, granted: Callable[[int], object]) -> None:
        self.size = size
        self.granted = granted


class RequestMemoryPool:
    """Bytes of request frames in the broker, bounded by ``queued.max.request.bytes``.

    ``capacity_bytes`` None means unbounded (Kafka's -1): every frame is admitted at once.

        >>> calls = []
        >>> pool = RequestMemoryPool(100, schedule=lambda f, *a: calls.append((f, a)))
        >>> pool.try_reserve(150), pool.try_reserve(1)  # admitted while any memory is free
        (True, False)
        >>> waiter = pool.wait(10, print)
        >>> pool.release(150)
        >>> calls == [(print, (10,))], pool.used_bytes
        (True, 10)
    """

    def __init__(
        self,
        capacity_bytes: int | None,
        *,
        schedule: Callable[..., Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        #: Frames that had to wait, since the start.
        self.waited_total = 0
        self._schedule = schedule
        self._clock = clock
        self._logged_at = float("-inf")
        self._waiters: collections.deque[MemoryWaiter] = collections.deque()

    @property
    def exhausted(self) -> bool:
        """Whether a new frame would have to wait."""
        capacity = self.capacity_bytes
        return capacity is not None and (bool(self._waiters) or self.used_bytes >= capacity)

    @property
    def waiting(self) -> int:
        """Frames waiting for memory."""
        return len(self._waiters)

    def try_reserve(self, size: int) -> bool:
        """Count ``size`` bytes if the pool admits a frame now."""
        capacity = self.capacity_bytes
        if capacity is not None and (self._waiters or self.used_bytes >= capacity):
            return False
        self.used_bytes += size
        return True

    def wait(self, size: int, granted: Callable[[int], object]) -> MemoryWaiter:
        """Queue a frame refused by :meth:`try_reserve`; ``granted(size)`` is scheduled once
        its bytes are counted."""
        waiter = MemoryWaiter(size, granted)
        self._waiters.append(waiter)
        self.waited_total += 1
        now = self._clock()
        if now - self._logged_at >= FULL_LOG_INTERVAL_S:
            self._logged_at = now
            logger.info(
                "request memory is full: %d bytes of request frames held "
                "(queued.max.request.bytes %d); connections wait to be read "
                "(%d frames have waited so far; logged at most every %d s)",
                self.used_bytes,
                self.capacity_bytes,
                self.waited_total,
                int(FULL_LOG_INTERVAL_S),
            )
        self._grant()
        return waiter

    def cancel(self, waiter: MemoryWaiter) -> bool:
        """Forget a waiter whose connection closed; False if it was granted already (its
        callback then finds the connection closed and releases the bytes)."""
        try:
            self._waiters.remove(waiter)
        except ValueError:
            return False
        self._grant()  # the waiters behind it may fit now
        return True

    def release(self, size: int) -> None:
        """A frame was served or dropped: its bytes are free again."""
        self.used_bytes -= size
        assert self.used_bytes >= 0, "request memory released twice"
        if self._waiters:
            self._grant()

    def _grant(self) -> None:
        capacity = self.capacity_bytes
        waiters = self._waiters
        while waiters and (capacity is None or self.used_bytes < capacity):
            waiter = waiters.popleft()
            self.used_bytes += waiter.size
            self._schedule(waiter.granted, waiter.size)


def _anonymous_map(size: int) -> mmap.mmap:
    # Private and anonymous: ordinary process memory, untouched until written, unmapped when
    # the object is freed.
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)


class FrameBufferPool:
    """Buffers for large frames, reused across requests and connections (event loop only).

    A buffer goes back to the pool only when nothing but the pool refers to it: a handler
    that kept a view of its frame (against the contract of
    :data:`~spark_mq.broker.context.Handler`) keeps the buffer, which is then never written
    again.
    """

    def __init__(self) -> None:
        self._free: list[mmap.mmap] = []

    @property
    def cached_bytes(self) -> int:
        """Bytes of the buffers kept for reuse."""
        return sum(len(buf) for buf in self._free)

    def take(self, size: int) -> memoryview:
        """A buffer of exactly ``size`` bytes (contents undefined)."""
        free = self._free
        for i, buf in enumerate(free):
            if len(buf) >= size:
                del free[i]
                return memoryview(buf)[:size]
        if size > POOLED_FRAME_MAX_BYTES:
            return memoryview(_anonymous_map(size))
        step = POOLED_FRAME_STEP_BYTES
        return memoryview(_anonymous_map(-(-size // step) * step))[:size]

    def give(self, buf: object) -> None:
        """Return the buffer of a served frame (the caller holds no other reference)."""
        # References: the caller's, and getrefcount's argument; any more means a view of
        # the frame is still alive somewhere.
        if (
            isinstance(buf, mmap.mmap)
            and len(buf) <= POOLED_FRAME_MAX_BYTES
            and len(self._free) < POOLED_FRAME_BUFFERS
            and sys.getrefcount(buf) <= 3
        ):
            self._free.append(buf)
