"""Writing a transaction's commit or abort markers to its partitions.

A single broker leads every partition, so the coordinator writes markers straight into the
partition logs (WriteTxnMarkers is how another broker's coordinator would ask for them; its
handler calls the same :meth:`MarkerWriter.write`). A marker is skipped where the partition
already holds this producer's state with no transaction open and at least the marker's
epoch: that is a partition whose marker was written before, so rewriting the markers of a
decision after a restart (or retrying a partition that failed) writes nothing twice. Every
other partition gets its marker, also one the producer never wrote to, or has no open
transaction in: a marker with a bumped (fencing) epoch raises the partition's epoch, so a
batch of the fenced producer still in flight is refused when it lands instead of opening a
transaction nobody would ever close. A partition that no longer exists (its topic was
deleted) needs no marker.

The marker carries the coordinator epoch (the broker epoch, which grows on every takeover of
the directory); the log refuses a marker older than one it has seen.

Writing a marker to a ``__consumer_offsets`` partition also tells the group coordinator
(``on_offsets_marker``), which publishes or drops that producer's pending transactional
offsets.

Threads: the event loop thread (each marker is one small append).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from spark_mq.broker.internal_topics import OFFSETS_TOPIC
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn.state import TopicPartition
from spark_mq.errors import UnknownTopicOrPartitionError
from spark_mq.rate_limited_log import RateLimitedLog
from spark_mq.storage.record_batch import ControlType

logger = logging.getLogger("spark_mq.broker.txn")
_FAILURES = RateLimitedLog(logger)

#: ``(partition, producer_id, committed)``: a marker was written to that partition of
#: ``__consumer_offsets``.
OffsetsMarkerHook = Callable[[int, int, bool], None]


class MarkerWriter:
    """Writes markers into the local partitions."""

    def __init__(
        self,
        replicas: ReplicaManager,
        *,
        coordinator_epoch: int,
        on_offsets_marker: OffsetsMarkerHook | None = None,
    ) -> None:
        self.replicas = replicas
        self.coordinator_epoch = coordinator_epoch
        self.on_offsets_marker = on_offsets_marker

    def write(
        self,
        partitions: Iterable[TopicPartition],
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int | None = None,
    ) -> dict[TopicPartition, Exception]:
        """Write the marker to every partition that needs it; the failures by partition
        (empty: the transaction is complete everywhere)."""
        control = ControlType.COMMIT if commit else ControlType.ABORT
        epoch = self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch
        failed: dict[TopicPartition, Exception] = {}
        touched = []
        for topic, index in sorted(partitions):
            try:
                part = self.replicas.partition(topic, index)
            except UnknownTopicOrPartitionError:
                continue  # deleted: nothing of the transaction is left to mark
            try:
                # One dict lookup and attribute reads (atomic, so safe while a produce
                # appends to the same log on an executor thread).
                entry = part.log.producer_state.entry(producer_id)
                if (
                    entry is None
                    or entry.current_txn_first_offset is not None
                    or entry.producer_epoch < producer_epoch
                ):
                    part.log.append_transaction_marker(
                        control,
                        producer_id=producer_id,
                        producer_epoch=producer_epoch,
                        coordinator_epoch=epoch,
                        leader_epoch=part.leader_epoch,
                    )
                    touched.append(part)
                if topic == OFFSETS_TOPIC and self.on_offsets_marker is not None:
                    self.on_offsets_marker(index, producer_id, commit)
            except Exception as exc:
                # Retried every interval, for every partition, as long as the disk is full:
                # logged once per kind, with a count.
                _FAILURES.failure(
                    exc,
                    "writing the %s marker of producer %d to %s-%d failed (retried): %s",
                    control.name.lower(),
                    producer_id,
                    topic,
                    index,
                    exc,
                )
                failed[(topic, index)] = exc
        self.replicas.notify(touched)
        return failed
