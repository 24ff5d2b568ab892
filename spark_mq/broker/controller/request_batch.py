"""The requests one controller event sends, gathered per broker (Kafka's
ControllerBrokerRequestBatch).

An event adds what each broker must learn (a partition's new leadership, a replica to stop,
metadata to refresh) and then sends the batch: one LeaderAndIsr, one UpdateMetadata and one
StopReplica per broker at most, in that order (Kafka's), each built from the controller
context as it is at send time. Every request carries the controller's id and epoch and the
receiving broker's epoch as the context knows it (-1 if it does not).

- A LeaderAndIsr for a partition also queues UpdateMetadata of that partition to every live
  broker, as Kafka's ``addLeaderAndIsrRequestForBrokers`` does: whoever serves clients must
  know the new leader.
- A broker marked *full* gets a LeaderAndIsr of type FULL listing every partition it hosts
  (after it registers, or when a controller takes over), so it can drop partitions it holds
  that are no longer its own (KIP-516).
- UpdateMetadata of a partition of a topic being deleted carries leader -2 (Kafka's
  ``LeaderDuringDelete``): brokers drop it from their caches.

Pure: building the requests reads only the context; :meth:`RequestBatch.send` hands them to a
sender function (the channel manager's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from spark_mq.protocol.controller import (
    LEADER_AND_ISR_FULL,
    LEADER_AND_ISR_INCREMENTAL,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LiveLeader,
    StopReplicaPartitionState,
    StopReplicaRequest,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)

from .context import ControllerContext, TopicPartition

#: Kafka's LeaderAndIsr.LeaderDuringDelete: the partition's topic is being deleted.
LEADER_DURING_DELETE = -2
#: Kafka's LeaderAndIsr.EpochDuringDelete: a StopReplica of deletion skips the epoch check.
EPOCH_DURING_DELETE = -2
#: The broker epoch of a request to a broker whose registration the controller has not read.
UNKNOWN_BROKER_EPOCH = -1


class RequestBatch:
    """Requests of one controller event, per broker (see the module docstring)."""

    def __init__(
        self,
        context: ControllerContext,
        controller_id: int,
        sender: Callable[[int, msgspec.Struct], object] | None = None,
    ) -> None:
        self._context = context
        self._controller_id = controller_id
        self._sender = sender
        self._clear()

    def _clear(self) -> None:
        self._leader_and_isr: dict[int, dict[TopicPartition, bool]] = {}
        self._full: set[int] = set()
        self._stop_replica: dict[int, dict[TopicPartition, bool]] = {}
        self._update_metadata_brokers: set[int] = set()
        self._update_metadata_partitions: set[TopicPartition] = set()

    @property
    def empty(self) -> bool:
        return not (self._leader_and_isr or self._stop_replica or self._update_metadata_brokers)

    def add_leader_and_isr(
        self, brokers: Iterable[int], tp: TopicPartition, *, is_new: bool = False
    ) -> None:
        """Tell ``brokers`` (replicas of ``tp``) its current leadership."""
        if tp not in self._context.leadership:
            return
        for broker in brokers:
            parts = self._leader_and_isr.setdefault(broker, {})
            parts[tp] = parts.get(tp, False) or is_new
        self.add_update_metadata(self._context.live_ids, [tp])

    def add_full_leader_and_isr(self, broker: int) -> None:
        """A FULL LeaderAndIsr to ``broker``: every partition with a replica on it."""
        self._full.add(broker)
        self._leader_and_isr.setdefault(broker, {})
        for tp in self._context.partitions_on([broker]):
            if not self._context.is_being_deleted(tp):
                self.add_leader_and_isr([broker], tp)

    def add_stop_replica(
        self, brokers: Iterable[int], tp: TopicPartition, *, delete_partition: bool
    ) -> None:
        for broker in brokers:
            parts = self._stop_replica.setdefault(broker, {})
            parts[tp] = parts.get(tp, False) or delete_partition

    def add_update_metadata(
        self, brokers: Iterable[int], partitions: Iterable[TopicPartition] = ()
    ) -> None:
        """Refresh ``brokers``' metadata: the live brokers always, and ``partitions``."""
        self._update_metadata_brokers.update(brokers)
        self._update_metadata_partitions.update(partitions)

    # -----------------------------------------------------------------------------------------
    # Building

    def _broker_epoch(self, broker: int) -> int:
        return self._context.broker_epochs.get(broker, UNKNOWN_BROKER_EPOCH)

    def _leader_and_isr_request(self, broker: int) -> LeaderAndIsrRequest:
        ctx = self._context
        states = []
        leaders: set[int] = set()
        for tp, is_new in sorted(self._leader_and_isr[broker].items()):
            current = ctx.leadership[tp]
            state = current.value
            states.append(
                LeaderAndIsrPartitionState(
                    topic=tp[0],
                    partition=tp[1],
                    controller_epoch=state.controller_epoch,
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    isr=list(state.isr),
                    partition_epoch=current.version,
                    replicas=list(ctx.replicas(tp)),
                    is_new=is_new,
                )
            )
            leaders.add(state.leader)
        live_leaders = []
        for leader in sorted(leaders & ctx.live_ids):
            endpoint = ctx.live_brokers[leader].endpoint()
            live_leaders.append(LiveLeader(leader, endpoint.host, endpoint.port))
        return LeaderAndIsrRequest(
            controller_id=self._controller_id,
            controller_epoch=ctx.epoch.epoch,
            broker_epoch=self._broker_epoch(broker),
            partition_states=states,
            live_leaders=live_leaders,
            type=LEADER_AND_ISR_FULL if broker in self._full else LEADER_AND_ISR_INCREMENTAL,
        )

    def _update_metadata_partition(self, tp: TopicPartition) -> UpdateMetadataPartitionState:
        ctx = self._context
        replicas = ctx.replicas(tp)
        current = ctx.leadership.get(tp)
        if current is None:
            leader, leader_epoch, isr, version, controller_epoch = -1, 0, [], -1, ctx.epoch.epoch
        else:
            state = current.value
            leader, leader_epoch, isr = state.leader, state.leader_epoch, list(state.isr)
            version, controller_epoch = current.version, state.controller_epoch
        if ctx.is_being_deleted(tp):
            leader = LEADER_DURING_DELETE
        return UpdateMetadataPartitionState(
            topic=tp[0],
            partition=tp[1],
            controller_epoch=controller_epoch,
            leader=leader,
            leader_epoch=leader_epoch,
            isr=isr,
            partition_epoch=version,
            replicas=list(replicas),
            offline_replicas=[b for b in replicas if b not in ctx.live_brokers],
        )

    def _live_brokers(self) -> list[UpdateMetadataBroker]:
        out = []
        for broker_id, registration in sorted(self._context.live_brokers.items()):
            endpoints = [
                UpdateMetadataEndpoint(e.host, e.port, e.listener_name, e.security_protocol)
                for e in registration.endpoints
            ]
            out.append(UpdateMetadataBroker(broker_id, endpoints, registration.rack))
        return out

    def _update_metadata_request(
        self, broker: int, partitions: list[UpdateMetadataPartitionState]
    ) -> UpdateMetadataRequest:
        return UpdateMetadataRequest(
            controller_id=self._controller_id,
            controller_epoch=self._context.epoch.epoch,
            broker_epoch=self._broker_epoch(broker),
            partition_states=partitions,
            live_brokers=self._live_brokers(),
        )

    def _stop_replica_request(self, broker: int) -> StopReplicaRequest:
        ctx = self._context
        states = []
        for tp, delete in sorted(self._stop_replica[broker].items()):
            current = ctx.leadership.get(tp)
            epoch = EPOCH_DURING_DELETE if delete or current is None else current.value.leader_epoch
            states.append(StopReplicaPartitionState(tp[0], tp[1], epoch, delete))
        return StopReplicaRequest(
            controller_id=self._controller_id,
            controller_epoch=ctx.epoch.epoch,
            broker_epoch=self._broker_epoch(broker),
            partition_states=states,
        )

    def build(self) -> dict[int, list[msgspec.Struct]]:
        """Broker id -> its requests in sending order; the batch is emptied."""
        out: dict[int, list[msgspec.Struct]] = {}
        for broker in sorted(self._leader_and_isr):
            if broker in self._context.live_brokers:
                out.setdefault(broker, []).append(self._leader_and_isr_request(broker))
        if self._update_metadata_brokers:
            partitions = [
                self._update_metadata_partition(tp)
                for tp in sorted(self._update_metadata_partitions)
            ]
            for broker in sorted(self._update_metadata_brokers & self._context.live_ids):
                out.setdefault(broker, []).append(self._update_metadata_request(broker, partitions))
        for broker in sorted(self._stop_replica):
            if broker in self._context.live_brokers:
                out.setdefault(broker, []).append(self._stop_replica_request(broker))
        self._clear()
        return out

    def send(self, sender: Callable[[int, msgspec.Struct], object] | None = None) -> None:
        """Build and hand every request to ``sender(broker_id, request)`` (by default the
        one given at construction), in order; the batch is emptied."""
        sender = sender or self._sender
        assert sender is not None, "a batch needs a sender"
        for broker, requests in self.build().items():
            for request in requests:
                sender(broker, request)
