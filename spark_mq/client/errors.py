"""Errors that only the clients raise; they extend the families of :mod:`spark_mq.errors`::

    OffsetOutOfRangeError
    └── NoOffsetForPartitionError   no position and auto.offset.reset=none
    RequestTimedOutError (retriable)
    ├── DeliveryTimeoutError        a record not acknowledged within delivery.timeout.ms
    └── BufferExhaustedError        send() waited max.block.ms for buffer.memory

Everything a broker reports arrives as the class :func:`spark_mq.protocol.error_codes.
error_from_code` maps its code to, so ``except UnknownTopicOrPartitionError`` works the same
for a local log and a broker.
"""

from __future__ import annotations

from spark_mq.errors import OffsetOutOfRangeError, RequestTimedOutError


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """A consumer has no position for a partition and ``auto.offset.reset`` is ``none``:
    call ``seek``, ``seek_to_beginning`` or ``seek_to_end`` first."""

    def __init__(self, message: str, *, topic: str, partition: int) -> None:
        super().__init__(
            message,
            topic=topic,
            partition=partition,
            offset=-1,
            log_start_offset=-1,
            log_end_offset=-1,
        )


class DeliveryTimeoutError(RequestTimedOutError):
    """Records that were not acknowledged within ``delivery.timeout.ms`` of ``send()``;
    ``topic``/``partition`` name where they were going and ``record_count`` how many."""

    def __init__(self, message: str, *, topic: str, partition: int, record_count: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.record_count = record_count


class BufferExhaustedError(RequestTimedOutError):
    """``send()`` waited ``max.block.ms`` for room in ``buffer.memory``: the producer makes
    records faster than the broker takes them. Slow down, or raise either setting."""

    def __init__(self, message: str, *, buffer_memory: int, max_block_ms: int) -> None:
        super().__init__(message)
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
