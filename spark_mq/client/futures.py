"""Futures of produced records: one shared result per batch, one small object per record.

As in Kafka's ``FutureRecordMetadata``, ``send()`` returns an object holding only the batch's
:class:`ProduceRequestResult` and the record's index in the batch; the sender thread completes
the batch result once, with the batch's base offset (or an error), and every record's
metadata is derived from it on demand. ``send_batch()`` returns a :class:`FutureBatchMetadata`
over the results of the batches it encoded.

A batch the broker refused as too large is split into smaller batches and sent again (see
:meth:`~spark_mq.client.accumulator.ProducerBatch.split`): its result is then never completed
itself but points at its parts' results (:meth:`ProduceRequestResult.split`), and a record's
future finds its part and its index there (:meth:`ProduceRequestResult.resolve`), so a record
keeps one future whatever became of its batch.

Callbacks can be attached to a future in kafka-python's style (``add_callback(fn, *args)``:
``fn(*args, metadata)`` on success; ``add_errback(fn, *args)``: ``fn(*args, exception)`` on
failure) or in :mod:`concurrent.futures`' style (``add_done_callback(fn)``: ``fn(future)``
either way), besides ``send(..., callback=)``. They are kept on the batch's result (hooks) and
run on the producer's sender thread when the batch is acknowledged or fails: so in
acknowledgement order per partition, and within a batch after the ``send()`` callbacks of the
batch, in record order. A callback attached to a future that is already done runs at
once, on the thread that attaches it, as :mod:`concurrent.futures` does. An exception raised
by a callback is logged and never stops the sender or the other callbacks.

Threads: the sender thread calls :meth:`ProduceRequestResult.complete` or
:meth:`ProduceRequestResult.split` exactly once per result; any thread may wait on or read a
future, or attach callbacks (one lock for all results guards the hooks: it is held only to
append to or take a list).

>>> result = ProduceRequestResult("t", 0)
>>> future = FutureRecordMetadata(result, 2, 1700000000000)
>>> future.done()
False
>>> hooks = result.complete(40)
>>> future.get()
RecordMetadata(topic='t', partition=0, offset=42, timestamp=1700000000000)
"""

from __future__ import annotations

import _thread
import bisect
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Self

import msgspec

from spark_mq.client.records import RecordMetadata
from spark_mq.errors import RequestTimedOutError, SparkMQError

log = logging.getLogger(__name__)

#: A callback attached to one record: called with the result that holds the record (its part,
#: if the batch was split) and the record's index there.
RecordHook = Callable[["ProduceRequestResult", int], None]
#: A callback attached to a whole batch (``send_batch()``'s futures): called once every
#: record's outcome is known.
BatchHook = Callable[[], None]
#: Guards every result's hooks and parts against a callback attached while the sender
#: completes or splits the result.
_HOOKS_LOCK = threading.Lock()


def run_callback(callback: Callable[[], object]) -> None:
    """Run one user callback; an exception is logged, not raised (see the module docstring)."""
    try:
        callback()
    except Exception:
        log.exception("a produce callback failed")


class _Countdown:
    """Calls ``hook`` once it was itself called ``count`` times (from any thread)."""

    __slots__ = ("_count", "_hook", "_lock")

    def __init__(self, count: int, hook: BatchHook) -> None:
        self._count = count
        self._hook = hook
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self._count -= 1
            fire = self._count == 0
        if fire:
            self._hook()


class _Completion:
    """A one-shot event: ``set()`` once, ``wait()`` from any thread. The sender makes one
    per batch; a :class:`threading.Event` (a condition over a lock, a waiter list) costs
    several times more to make and to set, on the thread that every record's latency waits
    on. A lock held from the start is released by ``set()``; each waiter takes it and hands
    it on at once, so every waiter wakes."""

    __slots__ = ("_flag", "_lock")

    def __init__(self) -> None:
        self._flag = False
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        """Mark it done (one thread sets, once; a second call does nothing)."""
        if not self._flag:
            self._flag = True
            self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether it was set within ``timeout`` seconds (None: no limit)."""
        if self._flag:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            self._lock.release()
        return self._flag


class BatchMetadata(NamedTuple):
    """Where one batch written by ``send_batch()`` landed: its first offset and size."""

    topic: str
    partition: int
    base_offset: int
    record_count: int


class ProduceRequestResult:
    """The outcome of one batch, shared by the futures of all its records."""

    __slots__ = (
        "_batch_hooks",
        "_done",
        "_record_hooks",
        "_starts",
        "base_offset",
        "error",
        "log_append_time_ms",
        "partition",
        "parts",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: SparkMQError | None = None
        #: The results of the batches this one was split into, once it was (see the module
        #: docstring), with ``_starts`` the index of each part's first record here.
        self.parts: list[ProduceRequestResult] | None = None
        self._starts: list[int] = []
        self._done = _Completion()
        self._record_hooks: list[tuple[int, RecordHook]] | None = None
        self._batch_hooks: list[BatchHook] | None = None

    def complete(
        self, base_offset: int, log_append_time_ms: int = -1, error: SparkMQError | None = None
    ) -> list[Callable[[], None]]:
        """Record the batch's outcome; returns the callbacks attached so far, bound and in
        record order (then the whole-batch ones), for the sender to run with
        :func:`run_callback`."""
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.error = error
        with _HOOKS_LOCK:
            self._done.set()
            record_hooks, self._record_hooks = self._record_hooks, None
            batch_hooks, self._batch_hooks = self._batch_hooks, None
        bound: list[Callable[[], None]] = []
        if record_hooks:
            record_hooks.sort(key=lambda hook: hook[0])
            bound.extend(functools.partial(hook, self, index) for index, hook in record_hooks)
        bound.extend(batch_hooks or ())
        return bound

    def split(self, starts: list[int], parts: list[ProduceRequestResult]) -> None:
        """Hand this batch's outcome over to the batches it was split into: ``parts[i]``
        holds this batch's records from index ``starts[i]`` on (``starts[0]`` is 0). The
        callbacks attached so far move to the parts."""
        assert starts and starts[0] == 0 and len(starts) == len(parts), (starts, parts)
        with _HOOKS_LOCK:
            self._starts = starts
            self.parts = parts
            for index, hook in self._record_hooks or ():
                i = bisect.bisect_right(starts, index) - 1
                part = parts[i]
                if part._record_hooks is None:
                    part._record_hooks = []
                part._record_hooks.append((index - starts[i], hook))
            for batch_hook in self._batch_hooks or ():
                countdown = _Countdown(len(parts), batch_hook)
                for part in parts:
                    if part._batch_hooks is None:
                        part._batch_hooks = []
                    part._batch_hooks.append(countdown)
            self._record_hooks = self._batch_hooks = None
            # Wakes whoever waits on this result; they go on to wait on the parts.
            self._done.set()

    def add_record_hook(self, index: int, hook: RecordHook) -> tuple[ProduceRequestResult, int]:
        """Attach ``hook`` to record ``index``; if its outcome is known already, the hook is
        not kept and the result holding the record is returned with its index, for the
        caller to run it at once; else ``(None, -1)``."""
        with _HOOKS_LOCK:
            result, at = self.resolve(index)
            if result._done.is_set():
                return result, at
            if result._record_hooks is None:
                result._record_hooks = []
            result._record_hooks.append((at, hook))
        return _NOT_DONE

    def add_batch_hook(self, hook: BatchHook) -> bool:
        """Attach ``hook`` to the whole batch; False (the hook not kept) if every record's
        outcome is known already."""
        with _HOOKS_LOCK:
            return self._add_batch_hook_locked(hook)

    def _add_batch_hook_locked(self, hook: BatchHook) -> bool:
        if self.parts is None:
            if self._done.is_set():
                return False
            if self._batch_hooks is None:
                self._batch_hooks = []
            self._batch_hooks.append(hook)
            return True
        # Only the parts still pending are waited for; none of them can complete meanwhile,
        # since completing takes the lock this runs under.
        pending = [part for part in self.parts if not part.done()]
        if not pending:
            return False
        countdown = _Countdown(len(pending), hook)
        for part in pending:
            kept = part._add_batch_hook_locked(countdown)
            assert kept, "a pending part refused a hook"
        return True

    def resolve(self, index: int) -> tuple[ProduceRequestResult, int]:
        """The result that holds this batch's record ``index``, and its index there."""
        result = self
        while result.parts is not None:
            i = bisect.bisect_right(result._starts, index) - 1
            index -= result._starts[i]
            result = result.parts[i]
        return result, index

    def done(self) -> bool:
        if not self._done.is_set():
            return False
        return self.parts is None or all(part.done() for part in self.parts)

    def record_done(self, index: int) -> bool:
        """Whether the outcome of this batch's record ``index`` is known."""
        result, _ = self.resolve(index)
        return result._done.is_set()

    def wait_record(self, index: int, timeout_s: float | None) -> tuple[ProduceRequestResult, int]:
        """Wait until the outcome of this batch's record ``index`` is known (its part's, if
        the batch was split); returns that result and the record's index there."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        result = self
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not result._done.wait(remaining):
                raise result._timed_out(timeout_s)
            if result.parts is None:
                return result, index
            result, index = result.resolve(index)

    def wait(self, timeout_s: float | None) -> None:
        """Block until completed (every part, if split); raise RequestTimedOutError after
        ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not self._done.wait(timeout_s):
            raise self._timed_out(timeout_s)
        for part in self.parts or ():
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            part.wait(remaining)

    def _timed_out(self, timeout_s: float | None) -> RequestTimedOutError:
        return RequestTimedOutError(
            f"no acknowledgement for a batch to {self.topic}-{self.partition} within "
            f"{timeout_s} s; the producer keeps trying until delivery.timeout.ms"
        )

    def leaves(self, record_count: int) -> list[tuple[ProduceRequestResult, int]]:
        """The results that hold this batch's ``record_count`` records, in record order, each
        with its number of records: itself, unless it was split."""
        if self.parts is None:
            return [(self, record_count)]
        ends = [*self._starts[1:], record_count]
        return [
            leaf
            for part, start, end in zip(self.parts, self._starts, ends, strict=True)
            for leaf in part.leaves(end - start)
        ]


#: What :meth:`ProduceRequestResult.add_record_hook` returns when it kept the hook.
_NOT_DONE: tuple[Any, int] = (None, -1)


class FutureRecordMetadata(msgspec.Struct, gc=False):
    """The future :class:`RecordMetadata` of one record given to ``send()``.

    A msgspec struct rather than a plain class because one is made per ``send()``: building
    it costs a third of a ``__slots__`` class's ``__init__``. It references only its batch's
    result, so it can never be part of a reference cycle (hence ``gc=False``).
    """

    _result: ProduceRequestResult
    _index: int
    _timestamp: float

    def done(self) -> bool:
        return self._result.record_done(self._index)

    def add_callback(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> Self:
        """kafka-python's style: ``fn(*args, metadata, **kwargs)`` once the record is
        written (not called if it fails). Runs on the sender thread (see the module
        docstring), or at once if the record is done. Returns the future, for chaining."""
        return self._add(lambda metadata, error: error is None and fn(*args, metadata, **kwargs))

    def add_errback(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> Self:
        """kafka-python's style: ``fn(*args, exception, **kwargs)`` if the record fails."""
        return self._add(lambda metadata, error: error is not None and fn(*args, error, **kwargs))

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], object]) -> Self:
        """:mod:`concurrent.futures`' style: ``fn(future)`` once the record's outcome is
        known, whichever it is."""
        return self._add(lambda metadata, error: fn(self))

    def _add(
        self, callback: Callable[[RecordMetadata | None, SparkMQError | None], object]
    ) -> Self:
        def hook(result: ProduceRequestResult, index: int) -> None:
            error = result.error
            callback(None if error is not None else self._metadata(result, index), error)

        result, index = self._result.add_record_hook(self._index, hook)
        if result is not None:
            run_callback(functools.partial(hook, result, index))
        return self

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait (up to ``timeout`` seconds) and return the metadata, or raise the error."""
        result, index = self._result, self._index
        if result.parts is not None or not result._done.is_set():
            result, index = result.wait_record(index, timeout)
        if result.error is not None:
            raise result.error
        return self._metadata(result, index)

    result = get

    def exception(self, timeout: float | None = None) -> SparkMQError | None:
        """Wait and return the error, or None if the record was acknowledged."""
        result, _ = self._result.wait_record(self._index, timeout)
        return result.error

    def _metadata(self, result: ProduceRequestResult, index: int) -> RecordMetadata:
        offset = result.base_offset + index if result.base_offset >= 0 else -1
        timestamp = (
            result.log_append_time_ms if result.log_append_time_ms >= 0 else int(self._timestamp)
        )
        return RecordMetadata(result.topic, result.partition, offset, timestamp)

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<FutureRecordMetadata {self._result.topic}-{self._result.partition} {state}>"


class FutureBatchMetadata:
    """The future of one ``send_batch()`` call: the metadata of every batch it wrote."""

    __slots__ = ("_counts", "_results")

    def __init__(self, results: list[ProduceRequestResult], counts: list[int]) -> None:
        self._results = results
        self._counts = counts

    def done(self) -> bool:
        return all(r.done() for r in self._results)

    def get(self, timeout: float | None = None) -> list[BatchMetadata]:
        """Wait for every batch; return their metadata in the order they were encoded, or
        raise the first error. A batch the broker refused as too large was split and written
        as several: each of those is one entry."""
        for r in self._results:
            if not r.done():
                r.wait(timeout)
        leaves = [
            leaf for r, n in zip(self._results, self._counts, strict=True) for leaf in r.leaves(n)
        ]
        for r, _ in leaves:
            if r.error is not None:
                raise r.error
        return [BatchMetadata(r.topic, r.partition, r.base_offset, n) for r, n in leaves]

    result = get

    def add_callback(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> Self:
        """``fn(*args, [BatchMetadata, ...], **kwargs)`` once every batch is written (not
        called if one fails); threads as for :class:`FutureRecordMetadata`."""

        def callback() -> None:
            if self._error() is None:
                fn(*args, self.get(0), **kwargs)

        return self._add(callback)

    def add_errback(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> Self:
        """``fn(*args, exception, **kwargs)`` once every batch's outcome is known, if one
        failed (the first error, as :meth:`get` raises)."""

        def callback() -> None:
            error = self._error()
            if error is not None:
                fn(*args, error, **kwargs)

        return self._add(callback)

    def add_done_callback(self, fn: Callable[[FutureBatchMetadata], object]) -> Self:
        """``fn(future)`` once every batch's outcome is known."""
        return self._add(lambda: fn(self))

    def _add(self, callback: Callable[[], object]) -> Self:
        pending = [r for r in self._results if not r.done()]
        countdown = _Countdown(len(pending) + 1, functools.partial(run_callback, callback))
        for r in pending:
            if not r.add_batch_hook(countdown):
                countdown()
        # The one extra count: the callback cannot run before every hook is attached.
        countdown()
        return self

    def _error(self) -> SparkMQError | None:
        for r, n in zip(self._results, self._counts, strict=True):
            for leaf, _ in r.leaves(n):
                if leaf.error is not None:
                    return leaf.error
        return None

    @property
    def record_count(self) -> int:
        return sum(self._counts)
