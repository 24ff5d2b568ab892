"""The small value types the clients hand to and receive from users.

>>> tp = TopicPartition("events", 0)
>>> tp.topic, tp.partition, {tp: 1}[TopicPartition("events", 0)]
('events', 0, 1)
>>> RecordMetadata("events", 0, 41, 1700000000000).offset
41
>>> record = ConsumerRecord("events", 0, 41, 1700000000000, 0, b"k", b"v", (("h", b"1"),))
>>> record.value, dict(record.headers)
(b'v', {'h': b'1'})
>>> OffsetAndTimestamp(41, 1700000000000).offset
41
"""

from __future__ import annotations

from typing import Final, NamedTuple

import pyarrow as pa

from spark_mq.storage.record_batch import HEADER_TYPE

#: ``list_offsets`` / ``offsets_for_times`` specs, Kafka's ListOffsets sentinels.
LATEST: Final = "latest"
EARLIEST: Final = "earliest"

#: What :meth:`~spark_mq.Consumer.poll_batch` returns: one row per record. ``timestamp`` is
#: milliseconds since the epoch; ``timestamp_type`` 0 is CreateTime, 1 LogAppendTime.
CONSUMER_SCHEMA: Final = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
    ]
)


class TopicPartition(NamedTuple):
    """A partition of a topic; hashable, usable as a dict key."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed.

    ``offset`` is -1 when the producer runs with ``acks=0`` (the broker does not answer).
    ``timestamp`` is the record's CreateTime, or the broker's append time when the topic uses
    LogAppendTime.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    """One record returned by :meth:`~spark_mq.Consumer.poll`.

    ``key`` and ``value`` are bytes or None; ``headers`` is a tuple of ``(str, bytes)``
    pairs, empty when the record has none; ``timestamp_type`` is 0 (CreateTime) or 1
    (LogAppendTime).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class OffsetAndTimestamp(NamedTuple):
    """The answer of ``offsets_for_times``: the first offset whose record timestamp is at or
    after the time asked for, and that record's timestamp."""

    offset: int
    timestamp: int
