"""Forgetting ended half messages: the order of the tombstones, and their batches.

The outcome of an ended half message (committed, rolled back or discarded) is kept
``transaction.half.op.retention.ms`` after it ended, so that a repeated or late end is
answered with it; then the service forgets it, in the order the messages ended
(:meth:`~spark_mq.broker.half.service.HalfMessageService.expire_outcomes`):

1. tombstones of the half records to ``__half_messages``: again, whatever the end wrote,
   since a discarded message's record is still live and so is one that a crash between an
   end's op and its tombstone left behind;
2. an fsync of that partition;
3. tombstones of the ops to ``__half_ops``; then the outcomes leave memory.

The rebuild takes a record without an op for a pending message, so an op must never be
gone while its record is live: this order ensures it, across a process kill and a power
loss. Compaction keeps it so: a record's tombstone is newer than the record, so the cleaner
removes the record first, and the tombstone ``delete.retention.ms`` after the cleaner
reached it. A crash between steps 1 and 3 leaves an ended op without a record: it loads as
ended (its outcome still answered) and the next pass forgets it. A late end of a forgotten
message is HALF_MESSAGE_NOT_FOUND and writes nothing.

    >>> [len(b) for b in tombstone_batches(["m-%d" % i for i in range(100)], 2048)]
    [35, 35, 30]
"""

from __future__ import annotations

from typing import Final

#: Most outcomes one expiry step forgets (a bound on the work between two awaits).
EXPIRE_STEP_RECORDS: Final = 1_000
#: A batch's size beyond its records' keys, with room to spare (an encoded batch of one
#: tombstone is about 670 bytes plus its key, and each further one adds its key and 24).
TOMBSTONE_BATCH_OVERHEAD_BYTES: Final = 768
TOMBSTONE_RECORD_OVERHEAD_BYTES: Final = 32

#: One tombstone (key, None value) of a message id.
Tombstone = tuple[bytes, None]


def tombstone_batches(message_ids: list[str], segment_bytes: int) -> list[list[Tombstone]]:
    """Tombstones of ``message_ids`` in batches that fit a segment of ``segment_bytes`` (a
    log refuses a batch larger than its segment). One tombstone always fits: it is smaller
    than the half record that SendHalfMessage stored under the same id."""
    limit = segment_bytes - TOMBSTONE_BATCH_OVERHEAD_BYTES
    batches: list[list[Tombstone]] = []
    batch: list[Tombstone] = []
    size = 0
    for message_id in message_ids:
        key = message_id.encode()
        record_bytes = len(key) + TOMBSTONE_RECORD_OVERHEAD_BYTES
        if batch and size + record_bytes > limit:
            batches.append(batch)
            batch, size = [], 0
        batch.append((key, None))
        size += record_bytes
    if batch:
        batches.append(batch)
    return batches
