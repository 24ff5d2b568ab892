"""Transactional offset commits on real storage: written as a transactional batch of
``__consumer_offsets``, published or dropped by the transaction's marker, and replayed the
same way when the topic is loaded after a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.coordinator import GroupCoordinator
from spark_mq.broker.group.offsets import OffsetCommit
from spark_mq.broker.group.offsets_topic import OFFSETS_TOPIC, OffsetsTopic, partition_for
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.txn.markers import MarkerWriter
from spark_mq.errors import InvalidProducerEpochError, SparkMQError, UnstableOffsetCommitError
from spark_mq.storage.log_manager import LogManager

NOW = 1_700_000_000_000
CONFIG = GroupConfig(offsets_topic_num_partitions=3)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager(tmp_path / "mq")
    yield ReplicaManager(logs, node_id=0, leader_epoch=1, num_partitions=1, auto_create_topics=True)
    logs.close()


def _coordinator(replicas: ReplicaManager) -> GroupCoordinator:
    topic = OffsetsTopic(replicas, CONFIG)
    topic.ensure()
    coordinator = GroupCoordinator(CONFIG, topic)
    coordinator.load(topic.load(), NOW)
    return coordinator


def _markers(replicas: ReplicaManager, coordinator: GroupCoordinator) -> MarkerWriter:
    def hook(partition: int, producer_id: int, committed: bool) -> None:
        coordinator.offsets.complete_transaction(
            producer_id, committed=committed, partition=partition
        )

    return MarkerWriter(replicas, coordinator_epoch=1, on_offsets_marker=hook)


def _txn_commit(
    coordinator: GroupCoordinator, pid: int, offset: int, epoch: int = 0
) -> list[SparkMQError | None]:
    return coordinator.offsets.commit_transactional(
        "g",
        [OffsetCommit("t", 0, offset)],
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        now_ms=NOW,
    )


def _committed(coordinator: GroupCoordinator) -> int | None:
    fetched = coordinator.fetch_offsets("g", [("t", 0)], require_stable=False)[0]
    return None if fetched.entry is None else fetched.entry.offset


def _offsets_partition() -> tuple[str, int]:
    return (OFFSETS_TOPIC, partition_for("g", 3))


def test_offsets_are_pending_until_the_commit_marker(replicas: ReplicaManager) -> None:
    coordinator = _coordinator(replicas)
    assert coordinator.commit_offsets("g", [OffsetCommit("t", 0, 1)], now_ms=NOW) == [None]
    assert _txn_commit(coordinator, pid=7, offset=9) == [None]
    stable = coordinator.fetch_offsets("g", [("t", 0)], require_stable=True)[0]
    assert isinstance(stable.error, UnstableOffsetCommitError)
    assert _committed(coordinator) == 1
    log = replicas.logs.get_log(*_offsets_partition())
    assert log.last_stable_offset < log.high_watermark  # the open transaction holds it
    failed = _markers(replicas, coordinator).write(
        [_offsets_partition()], producer_id=7, producer_epoch=0, commit=True
    )
    assert failed == {}
    assert _committed(coordinator) == 9
    assert log.last_stable_offset == log.high_watermark
    # The marker, not a new record, made them visible: a restart reads the same.
    assert _committed(_coordinator(replicas)) == 9


def test_a_plain_commit_after_a_pending_one_is_not_overwritten_by_its_marker(
    replicas: ReplicaManager,
) -> None:
    """Kafka's rule: a committed transaction's offset replaces only an offset written before
    it, so memory agrees with what compaction keeps (the newer record of the key)."""
    coordinator = _coordinator(replicas)
    assert _txn_commit(coordinator, pid=7, offset=9) == [None]
    assert coordinator.commit_offsets("g", [OffsetCommit("t", 0, 12)], now_ms=NOW) == [None]
    # Another partition, committed only in the transaction, is published as usual.
    assert coordinator.offsets.commit_transactional(
        "g",
        [OffsetCommit("t", 1, 3)],
        producer_id=7,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        now_ms=NOW,
    ) == [None]
    _markers(replicas, coordinator).write(
        [_offsets_partition()], producer_id=7, producer_epoch=0, commit=True
    )
    for view in (coordinator, _coordinator(replicas)):
        fetched = view.fetch_offsets("g", [("t", 0), ("t", 1)], require_stable=True)
        assert [(f.entry.offset if f.entry else None, f.error) for f in fetched] == [
            (12, None),
            (3, None),
        ]


def test_an_abort_marker_drops_them_now_and_on_reload(replicas: ReplicaManager) -> None:
    coordinator = _coordinator(replicas)
    coordinator.commit_offsets("g", [OffsetCommit("t", 0, 1)], now_ms=NOW)
    _txn_commit(coordinator, pid=5, offset=9)
    _markers(replicas, coordinator).write(
        [_offsets_partition()], producer_id=5, producer_epoch=0, commit=False
    )
    assert _committed(coordinator) == 1
    assert coordinator.fetch_offsets("g", [("t", 0)])[0].error is None
    assert _committed(_coordinator(replicas)) == 1


def test_a_restart_before_the_marker_brings_the_offsets_back_pending(
    replicas: ReplicaManager,
) -> None:
    coordinator = _coordinator(replicas)
    _txn_commit(coordinator, pid=3, offset=4)
    _txn_commit(coordinator, pid=8, offset=6)
    restarted = _coordinator(replicas)
    group = restarted.groups["g"]
    assert {pid: e[("t", 0)].offset for pid, e in group.pending_txn_offsets.items()} == {
        3: 4,
        8: 6,
    }
    markers = _markers(replicas, restarted)
    markers.write([_offsets_partition()], producer_id=8, producer_epoch=0, commit=True)
    assert _committed(restarted) == 6
    assert 3 in group.pending_txn_offsets
    markers.write([_offsets_partition()], producer_id=3, producer_epoch=0, commit=False)
    assert not group.pending_txn_offsets
    # A rewrite of the same markers (recovery after a crash) writes nothing more.
    log = replicas.logs.get_log(*_offsets_partition())
    end = log.log_end_offset
    markers.write([_offsets_partition()], producer_id=8, producer_epoch=0, commit=True)
    assert log.log_end_offset == end
    assert _committed(_coordinator(replicas)) == 6


def test_a_fenced_epoch_is_refused_by_the_partition(replicas: ReplicaManager) -> None:
    coordinator = _coordinator(replicas)
    _txn_commit(coordinator, pid=2, offset=4, epoch=3)
    _markers(replicas, coordinator).write(
        [_offsets_partition()], producer_id=2, producer_epoch=4, commit=False
    )
    errors = _txn_commit(coordinator, pid=2, offset=5, epoch=3)
    assert isinstance(errors[0], InvalidProducerEpochError)
    assert "g" not in coordinator.groups or not coordinator.groups["g"].pending_txn_offsets
