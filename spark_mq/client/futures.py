"""Futures of produced records: one shared result per batch, one small object per record.

As in Kafka's ``FutureRecordMetadata``, ``send()`` returns an object holding only the batch's
:class:`ProduceRequestResult` and the record's index in the batch; the sender thread completes
the batch result once, with the batch's base offset (or an error), and every record's
metadata is derived from it on demand. ``send_batch()`` returns a :class:`FutureBatchMetadata`
over the results of the batches it encoded.

Threads: the sender thread calls :meth:`ProduceRequestResult.complete` exactly once; any thread
may wait on or read a future.

>>> result = ProduceRequestResult("t", 0)
>>> future = FutureRecordMetadata(result, 2, 1700000000000)
>>> future.done()
False
>>> result.complete(40)
>>> future.get()
RecordMetadata(topic='t', partition=0, offset=42, timestamp=1700000000000)
"""

from __future__ import annotations

import threading
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

    __slots__ = ("_done", "base_offset", "error", "log_append_time_ms", "partition", "topic")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: SparkMQError | None = None
        self._done = threading.Event()

    def complete(
        self, base_offset: int, log_append_time_ms: int = -1, error: SparkMQError | None = None
    ) -> None:
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.error = error
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float | None) -> None:
        """Block until completed; raise RequestTimedOutError after ``timeout_s``."""
        if not self._done.wait(timeout_s):
            raise RequestTimedOutError(
                f"no acknowledgement for a batch to {self.topic}-{self.partition} within "
                f"{timeout_s} s; the producer keeps trying until delivery.timeout.ms"
            )


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
        return self._result.done()

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait (up to ``timeout`` seconds) and return the metadata, or raise the error."""
        result = self._result
        if not result.done():
            result.wait(timeout)
        if result.error is not None:
            raise result.error
        return self._metadata()

    result = get

    def exception(self, timeout: float | None = None) -> SparkMQError | None:
        """Wait and return the error, or None if the record was acknowledged."""
        if not self._result.done():
            self._result.wait(timeout)
        return self._result.error

    def _metadata(self) -> RecordMetadata:
        result = self._result
        offset = result.base_offset + self._index if result.base_offset >= 0 else -1
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
        raise the first error."""
        for r in self._results:
            if not r.done():
                r.wait(timeout)
        for r in self._results:
            if r.error is not None:
                raise r.error
        return [
            BatchMetadata(r.topic, r.partition, r.base_offset, n)
            for r, n in zip(self._results, self._counts, strict=True)
        ]

    result = get

    @property
    def record_count(self) -> int:
        return sum(self._counts)
