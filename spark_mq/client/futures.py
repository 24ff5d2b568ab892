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

Threads: the sender thread calls :meth:`ProduceRequestResult.complete` or
:meth:`ProduceRequestResult.split` exactly once per result; any thread may wait on or read a
future.

>>> result = ProduceRequestResult("t", 0)
>>> future = FutureRecordMetadata(result, 2, 1700000000000)
>>> future.done()
False
>>> result.complete(40)
>>> future.get()
RecordMetadata(topic='t', partition=0, offset=42, timestamp=1700000000000)
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import NamedTuple

import msgspec

from spark_mq.client.records import RecordMetadata
from spark_mq.errors import RequestTimedOutError, SparkMQError


class BatchMetadata(NamedTuple):
    """Where one batch written by ``send_batch()`` landed: its first offset and size."""

    topic: str
    partition: int
    base_offset: int
    record_count: int


class ProduceRequestResult:
    """The outcome of one batch, shared by the futures of all its records."""

    __slots__ = (
        "_done",
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
        self._done = threading.Event()

    def complete(
        self, base_offset: int, log_append_time_ms: int = -1, error: SparkMQError | None = None
    ) -> None:
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.error = error
        self._done.set()

    def split(self, starts: list[int], parts: list[ProduceRequestResult]) -> None:
        """Hand this batch's outcome over to the batches it was split into: ``parts[i]``
        holds this batch's records from index ``starts[i]`` on (``starts[0]`` is 0)."""
        assert starts and starts[0] == 0 and len(starts) == len(parts), (starts, parts)
        self._starts = starts
        self.parts = parts
        # Wakes whoever waits on this result; they go on to wait on the parts.
        self._done.set()

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

    @property
    def record_count(self) -> int:
        return sum(self._counts)
