"""Errors only the clients raise (they were ``spark_mq.client.errors``, which re-exports
them): a consumer without a position, a delivery or buffer timeout, a refused commit, a
reassignment that cannot be made. The tree: :mod:`spark_mq.errors`.
"""

from __future__ import annotations

from spark_mq.errors.protocol import ProtocolError, RequestTimedOutError
from spark_mq.errors.storage import OffsetOutOfRangeError


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


class CommitFailedError(ProtocolError):
    """The group coordinator refused an offset commit because the committing member is no
    longer part of the generation that owns the partitions: it was removed (a session or
    poll timeout), or the group rebalanced and the partitions may now belong to another
    member. Nothing was committed. The records since the last successful commit will be
    delivered again, to this member or another; call ``poll()`` to rejoin.

    ``group_id``, ``generation_id`` and ``member_id`` are what the commit was sent with
    (``generation_id`` -1 when the member had already lost its generation); ``reason`` is
    the broker's error name (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``,
    ``REBALANCE_IN_PROGRESS``, ``FENCED_INSTANCE_ID``) or ``NOT_IN_GROUP``.
    """

    def __init__(
        self, message: str, *, group_id: str, generation_id: int, member_id: str, reason: str
    ) -> None:
        super().__init__(message)
        self.group_id = group_id
        self.generation_id = generation_id
        self.member_id = member_id
        self.reason = reason


class InvalidReplicaAssignmentError(ProtocolError):
    """A replica assignment that cannot be made: brokers with and without ``broker.rack``
    mixed, duplicate replicas, or an unknown broker."""

    error_code = 39


class NoReassignmentInProgressError(ProtocolError):
    """A partition reassignment cancelled (its target replicas null) while none is in
    progress for that partition: nothing to revert."""

    error_code = 85
