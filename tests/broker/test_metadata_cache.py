"""The metadata cache (Kafka's ZkMetadataCache): UpdateMetadata replaces a snapshot whole,
only the topics it names change, leader -2 removes a partition (and its topic with the
last one), and a snapshot taken before an update never changes."""

from __future__ import annotations

from spark_mq.broker.metadata_cache import LEADER_DURING_DELETE, MetadataCache
from spark_mq.protocol.controller import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)


def _broker(broker_id: int, rack: str | None = None) -> UpdateMetadataBroker:
    return UpdateMetadataBroker(
        broker_id, [UpdateMetadataEndpoint("127.0.0.1", 9000 + broker_id, "PLAINTEXT")], rack
    )


def _state(
    topic: str, partition: int, leader: int, leader_epoch: int = 0, isr: list[int] | None = None
) -> UpdateMetadataPartitionState:
    return UpdateMetadataPartitionState(
        topic, partition, 1, leader, leader_epoch, isr or [1, 2, 3], 0, [1, 2, 3], []
    )


def _request(
    states: list[UpdateMetadataPartitionState], brokers: tuple[int, ...] = (1, 2, 3)
) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(1, 1, -1, states, [_broker(b) for b in brokers])


def test_an_update_changes_only_the_partitions_it_names_and_replaces_the_brokers() -> None:
    cache = MetadataCache()
    cache.update(_request([_state("a", 0, 1), _state("a", 1, 2), _state("b", 0, 3)]))
    before = cache.snapshot
    cache.update(_request([_state("a", 1, 3, leader_epoch=1, isr=[3, 1])], brokers=(1, 3)))
    after = cache.snapshot
    assert sorted(after.brokers) == [1, 3]
    assert after.partitions("a")[0] == before.partitions("a")[0]
    moved = after.partitions("a")[1]
    assert (moved.leader, moved.leader_epoch, moved.isr) == (3, 1, (3, 1))
    # b was not named: the very same (immutable) partition map is shared.
    assert after.partitions("b") is before.partitions("b")
    # The snapshot taken before is as it was: readers never see half an update.
    assert sorted(before.brokers) == [1, 2, 3]
    assert before.partitions("a")[1].leader == 2
    assert after.controller_id == 1 and after.controller_epoch == 1


def test_leader_during_delete_removes_the_partition_and_then_the_topic() -> None:
    cache = MetadataCache()
    cache.update(_request([_state("gone", 0, 1), _state("gone", 1, 2), _state("kept", 0, 1)]))
    assert cache.update(_request([_state("gone", 0, LEADER_DURING_DELETE)])) == []
    assert list(cache.snapshot.partitions("gone")) == [1]
    assert cache.update(_request([_state("gone", 1, LEADER_DURING_DELETE)])) == ["gone"]
    assert not cache.snapshot.has_topic("gone")
    assert cache.snapshot.topic_names() == ["kept"]
    # Deleting what the cache never knew changes nothing and reports nothing.
    assert cache.update(_request([_state("never", 0, LEADER_DURING_DELETE)])) == []
    assert cache.snapshot.topic_names() == ["kept"]


def test_endpoints_by_listener_and_racks() -> None:
    cache = MetadataCache()
    request = _request([])
    request.live_brokers = [
        UpdateMetadataBroker(
            7,
            [
                UpdateMetadataEndpoint("10.0.0.7", 9093, "REPLICATION"),
                UpdateMetadataEndpoint("h7", 9092, "PLAINTEXT"),
            ],
            "r1",
        )
    ]
    cache.update(request)
    broker = cache.snapshot.brokers[7]
    assert broker.rack == "r1"
    endpoint = broker.endpoint("PLAINTEXT")
    assert endpoint is not None and (endpoint.host, endpoint.port) == ("h7", 9092)
    assert broker.endpoint("SSL") is None
    assert cache.snapshot.is_live(7) and not cache.snapshot.is_live(1)
