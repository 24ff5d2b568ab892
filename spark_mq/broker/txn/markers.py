"""Writing a transaction's commit or abort markers to its partitions.

A single broker leads every partition, so the coordinator writes markers straight into the
partition logs. In a cluster it does so for the partitions it leads, and hands the others to
the :class:`~spark_mq.broker.txn.marker_channel.TransactionMarkerChannel`, which sends them to
their leaders in WriteTxnMarkers requests and retries until each is written; the leader's
handler calls :meth:`MarkerWriter.write_local`, which writes only to partitions this broker
leads (a follower never writes a marker: its log is a copy of the leader's).

A marker is skipped where the partition already holds this producer's state with no
transaction open and at least the marker's epoch: that is a partition whose marker was
written before, so rewriting the markers of a decision after a restart (or retrying a
partition that failed, or a WriteTxnMarkers whose answer was lost) writes nothing twice.
Every other partition gets its marker, also one the producer never wrote to, or has no open
transaction in: a marker with a bumped (fencing) epoch raises the partition's epoch, so a
batch of the fenced producer still in flight is refused when it lands instead of opening a
transaction nobody would ever close. A partition that no longer exists (its topic was
deleted) needs no marker.

In a cluster a marker this leader writes for its own coordinator is reported pending
(:class:`MarkerPendingError`) until the partition's high watermark passes it, as Kafka
appends markers with acks=all: the coordinator completes a transaction only when every marker
would survive the loss of the leader that wrote it.

The marker carries the coordinator epoch; the log refuses a marker older than one it has
seen (TRANSACTION_COORDINATOR_FENCED: a newer coordinator took over).

Writing a marker to a ``__consumer_offsets`` partition also tells the group coordinator
(``on_offsets_marker``), which publishes or drops that producer's pending transactional
offsets.

Threads: the event loop thread (each marker is one small append).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from spark_mq.broker.internal_topics import OFFSETS_TOPIC
from spark_mq.broker.partition import ReplicaState
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn.state import TopicPartition
from spark_mq.errors import (
    NotLeaderOrFollowerError,
    RetriableError,
    SparkMQError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from spark_mq.rate_limited_log import RateLimitedLog
from spark_mq.storage.record_batch import ControlType

if TYPE_CHECKING:
    # Only a cluster broker makes one (it uses the client's connections).
    from spark_mq.broker.txn.marker_channel import TransactionMarkerChannel

logger = logging.getLogger("spark_mq.broker.txn")
_FAILURES = RateLimitedLog(logger)

#: ``(partition, producer_id, committed)``: a marker was written to that partition of
#: ``__consumer_offsets``.
OffsetsMarkerHook = Callable[[int, int, bool], None]


class MarkerPendingError(RetriableError):
    """A marker is not acknowledged yet: its partition's leader has not answered, or this
    leader's in-sync replicas do not have it yet (never raised to a client: the coordinator
    keeps the transaction decided meanwhile)."""


#: ``(producer_id, producer_epoch, commit, coordinator_epoch)``: one transaction's decision.
MarkerKey = tuple[int, int, bool, int]

#: How long one wait for a led partition's in-sync replicas lasts before the coordinator's
#: periodic retry looks again.
REPLICATION_WAIT_S: Final = 30.0

#: Failures of a local write that mean the partition is (now) another broker's to mark.
_ELSEWHERE: Final = (NotLeaderOrFollowerError, UnknownTopicOrPartitionError)


class MarkerWriter:
    """Writes markers into the partitions this broker leads, and hands the others to the
    cluster's marker channel (module docstring)."""

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
        #: A cluster broker's channel to the other leaders (None: one node, which leads
        #: every partition).
        self.channel: TransactionMarkerChannel | None = None
        # Markers this leader wrote whose in-sync replicas may not have them yet (a cluster
        # only): the high watermark each waits for.
        self._replicating: dict[tuple[MarkerKey, TopicPartition], int] = {}
        self._watching: set[tuple[TopicPartition, int]] = set()

    def attach_channel(self, channel: TransactionMarkerChannel | None) -> None:
        """Send the markers of partitions led elsewhere through ``channel`` from now on."""
        self.channel = channel

    def write(
        self,
        partitions: Iterable[TopicPartition],
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int | None = None,
    ) -> dict[TopicPartition, Exception]:
        """The coordinator's call: write the marker to every partition that needs it, here
        or (in a cluster) through the channel; the partitions not written yet, with why
        (empty: the transaction is complete everywhere)."""
        epoch = self.coordinator_epoch if coordinator_epoch is None else coordinator_epoch
        channel = self.channel
        if channel is None:
            return self._write_here(
                partitions,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=commit,
                coordinator_epoch=epoch,
                missing_ok=True,
            )
        here: list[TopicPartition] = []
        elsewhere: list[TopicPartition] = []
        for tp in partitions:
            part = self.replicas.cached(*tp)
            (here if part is not None and part.state is ReplicaState.LEADER else elsewhere).append(
                tp
            )
        key: MarkerKey = (producer_id, producer_epoch, commit, epoch)
        appended: dict[TopicPartition, int] = {}
        failed = self._write_here(
            here,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            commit=commit,
            coordinator_epoch=epoch,
            missing_ok=False,
            appended=appended,
        )
        for tp, end in appended.items():
            self._replicating[(key, tp)] = end
        for tp in here:
            if tp not in failed:
                waiting = self._awaiting_replicas(key, tp, channel)
                if waiting is not None:
                    failed[tp] = waiting
        # A partition that stopped being led here meanwhile (or whose topic is gone here)
        # is its leader's to mark: the channel finds it, or learns that the topic is gone.
        moved = [tp for tp, exc in failed.items() if isinstance(exc, _ELSEWHERE)]
        for tp in moved:
            del failed[tp]
        for tp in [*elsewhere, *moved]:
            self._replicating.pop((key, tp), None)
        failed.update(
            channel.submit(
                [*elsewhere, *moved],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=commit,
                coordinator_epoch=epoch,
            )
        )
        return failed

    def _awaiting_replicas(
        self, key: MarkerKey, tp: TopicPartition, channel: TransactionMarkerChannel
    ) -> MarkerPendingError | None:
        """Why the marker this leader wrote to ``tp`` is not acknowledged yet (its in-sync
        replicas lack it), or None. As Kafka appends markers with acks=all, the transaction
        completes only once its markers would survive this leader's loss; the wait that
        starts here tells the coordinator (through the channel) when to look again."""
        required = self._replicating.get((key, tp))
        part = self.replicas.cached(*tp)
        if required is None or part is None or part.high_watermark >= required:
            self._replicating.pop((key, tp), None)
            return None
        if (tp, required) not in self._watching:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None  # called off the loop: the periodic retry looks again
            if loop is not None:
                self._watching.add((tp, required))
                loop.create_task(self._watch(tp, required, channel))
        return MarkerPendingError(
            f"the marker of producer {key[0]} in {tp[0]}-{tp[1]} waits for the partition's "
            f"in-sync replicas (high watermark {part.high_watermark}, marker ends at {required})"
        )

    async def _watch(
        self, tp: TopicPartition, required: int, channel: TransactionMarkerChannel
    ) -> None:
        try:
            # Ends when the high watermark passes the marker, the leadership moves away or
            # the wait times out: in each case the coordinator looks again.
            with contextlib.suppress(SparkMQError):
                await self.replicas.purgatory.wait(tp, required, REPLICATION_WAIT_S)
        finally:
            self._watching.discard((tp, required))
        channel.acknowledged_soon()

    def write_local(
        self,
        partitions: Iterable[TopicPartition],
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[TopicPartition, Exception]:
        """WriteTxnMarkers' call: write the markers of partitions this broker leads; every
        other partition fails (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION), for the
        sender to retry with the partition's leader."""
        return self._write_here(
            partitions,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            commit=commit,
            coordinator_epoch=coordinator_epoch,
            missing_ok=False,
        )

    def _write_here(
        self,
        partitions: Iterable[TopicPartition],
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        missing_ok: bool,
        appended: dict[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, Exception]:
        control = ControlType.COMMIT if commit else ControlType.ABORT
        failed: dict[TopicPartition, Exception] = {}
        touched = []
        for topic, index in sorted(partitions):
            try:
                part = self.replicas.partition(topic, index)
            except UnknownTopicOrPartitionError as exc:
                if not missing_ok:
                    failed[(topic, index)] = exc
                continue  # deleted: nothing of the transaction is left to mark
            try:
                # A follower must never write a marker: its log is the leader's copy.
                part.require_leader()
                # One dict lookup and attribute reads (atomic, so safe while a produce
                # appends to the same log on an executor thread).
                entry = part.log.producer_state.entry(producer_id)
                if (
                    entry is None
                    or entry.current_txn_first_offset is not None
                    or entry.producer_epoch < producer_epoch
                ):
                    info = part.log.append_transaction_marker(
                        control,
                        producer_id=producer_id,
                        producer_epoch=producer_epoch,
                        coordinator_epoch=coordinator_epoch,
                        leader_epoch=part.leader_epoch,
                    )
                    # A leader without followers in its ISR passes the marker at once; with
                    # followers, their next fetch moves the high watermark past it.
                    part.maybe_advance_high_watermark()
                    touched.append(part)
                    if appended is not None:
                        appended[(topic, index)] = info.last_offset + 1
                if topic == OFFSETS_TOPIC and self.on_offsets_marker is not None:
                    self.on_offsets_marker(index, producer_id, commit)
            except NotLeaderOrFollowerError as exc:
                failed[(topic, index)] = exc
            except TransactionCoordinatorFencedError as exc:
                # Not retried: a newer coordinator owns the producer (the sender stops).
                logger.warning("refused a stale marker for %s-%d: %s", topic, index, exc)
                failed[(topic, index)] = exc
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
