"""Which partitions of a coordinator's topic a controller request moved to or from this
broker, and the listeners the replica manager tells."""

from __future__ import annotations

from pathlib import Path

from spark_mq.broker.coordinator_leadership import LeadershipChange, leadership_change
from spark_mq.broker.partition import LeaderAndIsr, Partition
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.log_manager import LogManager


def _part(tmp_path: Path, topic: str, index: int) -> Partition:
    log = PartitionLog.open(
        tmp_path / f"{topic}-{index}",
        LogConfig(),
        topic=topic,
        partition=index,
        high_watermark_follows_log_end=False,
    )
    return Partition.for_cluster(log, node_id=1)


def test_leaders_are_elected_with_their_epoch_and_the_rest_resign(tmp_path: Path) -> None:
    led, followed, stopped, other = (
        _part(tmp_path, "__consumer_offsets", 3),
        _part(tmp_path, "__consumer_offsets", 1),
        _part(tmp_path, "__consumer_offsets", 7),
        _part(tmp_path, "events", 0),
    )
    led.make_leader(LeaderAndIsr(1, 4, (1, 2), (1, 2), 0))
    followed.make_follower(LeaderAndIsr(2, 9, (2, 1), (2, 1), 0))
    stopped.stop()
    other.make_leader(LeaderAndIsr(1, 0, (1,), (1,), 0))
    change = leadership_change([other, stopped, led, followed], "__consumer_offsets")
    assert change == LeadershipChange(elected=((3, 4),), resigned=(1, 7))
    assert not leadership_change([other], "__consumer_offsets")
    for part in (led, followed, stopped, other):
        part.log.close()


def test_the_replica_manager_tells_each_listener_its_own_topic(tmp_path: Path) -> None:
    logs = LogManager(tmp_path / "logs")
    manager = ReplicaManager(
        logs, node_id=1, leader_epoch=0, num_partitions=1, auto_create_topics=False, cluster=True
    )
    heard: dict[str, list[LeadershipChange]] = {"offsets": [], "txn": []}

    class Listener:
        def __init__(self, name: str) -> None:
            self.name = name

        def on_leadership_change(self, change: LeadershipChange) -> None:
            heard[self.name].append(change)

    manager.add_leadership_listener("__consumer_offsets", Listener("offsets"))
    manager.add_leadership_listener("__transaction_state", Listener("txn"))
    offsets = _part(tmp_path, "__consumer_offsets", 0)
    offsets.make_leader(LeaderAndIsr(1, 2, (1,), (1,), 0))
    manager.announce_leadership([offsets])
    assert heard == {"offsets": [LeadershipChange(((0, 2),), ())], "txn": []}
    offsets.log.close()
    logs.close()
