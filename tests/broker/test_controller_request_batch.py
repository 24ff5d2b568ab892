"""The requests one controller event sends (RequestBatch), built from a controller context:
which broker gets what, in which order, with which epochs, FULL LeaderAndIsr, leader -2 for
deleted topics, offline replicas and live leaders."""

from __future__ import annotations

import msgspec

from spark_mq.broker.controller.context import ControllerContext
from spark_mq.broker.controller.request_batch import LEADER_DURING_DELETE, RequestBatch
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.controller_election import ControllerEpoch
from spark_mq.protocol.controller import (
    LEADER_AND_ISR_FULL,
    LEADER_AND_ISR_INCREMENTAL,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)


def _registration(broker_id: int, rack: str | None = None) -> znodes.BrokerRegistration:
    endpoint = znodes.EndPoint("PLAINTEXT", f"h{broker_id}", 9000 + broker_id)
    return znodes.BrokerRegistration(broker_id, (endpoint,), rack, 0)


def _context() -> ControllerContext:
    """Brokers 1 and 2 live (epochs 11, 12), broker 3 dead; topic a: 0 -> (1, 2),
    1 -> (2, 3); topic b: 0 -> (3, 1)."""
    ctx = ControllerContext(ControllerEpoch(epoch=5, zk_version=4))
    ctx.live_brokers = {1: _registration(1, "r1"), 2: _registration(2)}
    ctx.broker_epochs = {1: 11, 2: 12}
    ctx.assignments = {"a": {0: (1, 2), 1: (2, 3)}, "b": {0: (3, 1)}}
    ctx.leadership = {
        ("a", 0): znodes.Versioned(znodes.PartitionState(1, 3, (1, 2), 5), 7),
        ("a", 1): znodes.Versioned(znodes.PartitionState(2, 1, (2,), 4), 2),
        ("b", 0): znodes.Versioned(znodes.PartitionState(1, 0, (1,), 5), 0),
    }
    return ctx


def _apis(requests: list[msgspec.Struct]) -> list[str]:
    return [type(r).__name__ for r in requests]


def test_leader_and_isr_goes_to_the_live_replicas_with_metadata_to_every_broker() -> None:
    ctx = _context()
    batch = RequestBatch(ctx, controller_id=2)
    batch.add_leader_and_isr([2, 3], ("a", 1), is_new=True)
    built = batch.build()
    # Broker 3 is dead: nothing is built for it. Broker 1 only learns the metadata.
    assert sorted(built) == [1, 2]
    assert _apis(built[2]) == ["LeaderAndIsrRequest", "UpdateMetadataRequest"]
    assert _apis(built[1]) == ["UpdateMetadataRequest"]
    request = built[2][0]
    assert isinstance(request, LeaderAndIsrRequest)
    assert (request.controller_id, request.controller_epoch, request.broker_epoch) == (2, 5, 12)
    assert request.type == LEADER_AND_ISR_INCREMENTAL
    (state,) = request.partition_states
    assert (state.topic, state.partition, state.leader, state.leader_epoch) == ("a", 1, 2, 1)
    assert (state.isr, state.partition_epoch, state.replicas) == ([2], 2, [2, 3])
    assert state.is_new and state.controller_epoch == 4
    assert [(x.broker_id, x.host, x.port) for x in request.live_leaders] == [(2, "h2", 9002)]
    metadata = built[1][0]
    assert isinstance(metadata, UpdateMetadataRequest)
    assert metadata.broker_epoch == 11
    (part,) = metadata.partition_states
    assert (part.leader, part.offline_replicas) == (2, [3])
    assert [(b.broker_id, b.rack) for b in metadata.live_brokers] == [(1, "r1"), (2, None)]
    assert batch.empty  # build() empties it


def test_a_full_leader_and_isr_lists_every_partition_the_broker_hosts() -> None:
    ctx = _context()
    batch = RequestBatch(ctx, controller_id=2)
    batch.add_full_leader_and_isr(1)
    request = batch.build()[1][0]
    assert isinstance(request, LeaderAndIsrRequest)
    assert request.type == LEADER_AND_ISR_FULL
    assert [(s.topic, s.partition) for s in request.partition_states] == [("a", 0), ("b", 0)]
    # A broker that hosts nothing still gets a FULL request: it drops whatever it holds.
    ctx.assignments = {}
    batch.add_full_leader_and_isr(2)
    empty = batch.build()[2][0]
    assert isinstance(empty, LeaderAndIsrRequest)
    assert (empty.type, empty.partition_states) == (LEADER_AND_ISR_FULL, [])


def test_a_topic_being_deleted_gets_leader_minus_2_and_stop_replica_with_delete() -> None:
    ctx = _context()
    ctx.topics_to_delete = {"a"}
    batch = RequestBatch(ctx, controller_id=2)
    batch.add_update_metadata(ctx.live_ids, ctx.partitions_of("a"))
    batch.add_stop_replica([1, 2], ("a", 0), delete_partition=True)
    batch.add_stop_replica([3], ("a", 0), delete_partition=True)
    built = batch.build()
    assert sorted(built) == [1, 2]
    assert _apis(built[1]) == ["UpdateMetadataRequest", "StopReplicaRequest"]
    metadata = built[1][0]
    assert isinstance(metadata, UpdateMetadataRequest)
    assert {p.leader for p in metadata.partition_states} == {LEADER_DURING_DELETE}
    stop = built[1][1]
    assert isinstance(stop, StopReplicaRequest)
    (state,) = stop.partition_states
    assert (state.topic, state.partition, state.delete_partition, state.leader_epoch) == (
        "a",
        0,
        True,
        -2,
    )


def test_the_sender_gets_each_brokers_requests_in_kafkas_order() -> None:
    ctx = _context()
    sent: list[tuple[int, str]] = []
    batch = RequestBatch(
        ctx, 2, lambda broker, request: sent.append((broker, type(request).__name__))
    )
    batch.add_stop_replica([1], ("b", 0), delete_partition=False)
    batch.add_update_metadata([1])
    batch.add_leader_and_isr([1], ("a", 0))
    batch.send()
    mine = [api for broker, api in sent if broker == 1]
    assert mine == ["LeaderAndIsrRequest", "UpdateMetadataRequest", "StopReplicaRequest"]
    stop = RequestBatch(ctx, 2)
    stop.add_stop_replica([1], ("b", 0), delete_partition=False)
    (request,) = stop.build()[1]
    assert isinstance(request, StopReplicaRequest)
    # Not a deletion: the partition's leader epoch fences older requests.
    assert request.partition_states[0].leader_epoch == 0


def test_a_broker_without_a_known_epoch_gets_minus_1() -> None:
    ctx = _context()
    del ctx.broker_epochs[2]
    batch = RequestBatch(ctx, 1)
    batch.add_update_metadata([2])
    (request,) = batch.build()[2]
    assert isinstance(request, UpdateMetadataRequest) and request.broker_epoch == -1
