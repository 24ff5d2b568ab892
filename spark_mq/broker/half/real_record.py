"""The real record of a half message: the batch a COMMIT appends to the message's topic, or
a discard to ``__half_discarded`` with :data:`DISCARD_HEADERS` naming where it came from.
Written with the message's own producer id, epoch 0 and sequence 0, so that the log's
idempotence answers a repeated append (a retried COMMIT after a crash) with the first
offset instead of storing the record twice (docs/half_messages.md).
"""

from __future__ import annotations

from typing import Final

from spark_mq.broker.half.records import HalfRecord
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.record_batch import encode_batch

#: Headers the service adds to a discarded record, so whoever handles it knows its origin.
DISCARD_HEADERS: Final = ("half.message.id", "half.topic", "half.partition", "half.group")


def real_batch(record: HalfRecord, topic: str | None, now_ms: int) -> tuple[str, int, bytes]:
    """Where the message's real record goes, and its batch: the message's own producer
    id, epoch 0, sequence 0, so that a repeat is recognised as a duplicate."""
    headers = [(h.key, h.value) for h in record.headers]
    target, partition = record.topic, record.partition
    if topic is not None:
        target, partition = topic, 0
        headers += [
            (name, str(value).encode())
            for name, value in zip(
                DISCARD_HEADERS,
                (record.message_id, record.topic, record.partition, record.producer_group),
                strict=True,
            )
        ]
    batch = encode_batch(
        binary_array([record.value]),
        key=binary_array([record.key]),
        headers=[headers or None],
        producer_id=record.producer_id,
        producer_epoch=0,
        base_sequence=0,
        now_ms=now_ms,
    )
    return target, partition, bytes(batch)
