"""``spark-mq topics describe`` against a real cluster broker whose metadata the test sets as
a controller would: kafka-topics.sh's layout with the replicas and ISR of three brokers, and
the two filters: an ISR smaller than the replicas is under-replicated; a partition without a
leader, or whose leader is not live, is unavailable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from acting_controller import cluster_brokers, partition_state

from spark_mq import Producer
from spark_mq.broker.zk import znodes
from spark_mq.cli import main
from spark_mq.cluster.zookeeper_server import free_loopback_port
from spark_mq.protocol.address import BrokerAddress


def _describe(capsys: pytest.CaptureFixture[str], bootstrap: str, *args: str) -> tuple[int, str]:
    code = main(["topics", "describe", "t", "--bootstrap-server", bootstrap, *args])
    return code, capsys.readouterr().out


def test_describe_and_its_filters_on_a_cluster(
    tmp_path: Path, zk_connect: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with cluster_brokers(tmp_path, zk_connect, (1,), "num.partitions=4") as (controller, brokers):
        b1 = brokers[1]
        epoch = b1.local_epoch()
        down = BrokerAddress("127.0.0.1", free_loopback_port())
        healthy = partition_state("t", 0, 1, epoch, [1, 2, 3])
        shrunk = partition_state("t", 1, 1, epoch, [1, 2, 3])
        shrunk.isr = [1]
        leaderless = partition_state("t", 2, -1, epoch, [2, 3, 1])
        leaderless.isr = []
        dead_leader = partition_state("t", 3, 3, epoch, [3, 1, 2])
        # The topic as an admin writes it (a cluster broker describes its configs from
        # ZooKeeper, and a controller only publishes topics that are there).
        assignment = {s.partition: tuple(s.replicas) for s in (healthy, leaderless, dead_leader)}
        assignment[1] = tuple(shrunk.replicas)
        controller.zk.create(
            znodes.topic_path("t"), znodes.TopicAssignment(assignment).encode(), makepath=True
        )
        # Brokers 1 and 2 are live, 3 is not (a controller would have moved partition 3 on;
        # the filter must not trust that it did).
        controller.publish(
            [healthy, shrunk, leaderless, dead_leader],
            {1: b1.address, 2: down},
        )
        bootstrap = f"{b1.address.host}:{b1.address.port}"
        with Producer(bootstrap_servers=bootstrap) as producer:
            for partition in (0, 1):
                producer.send("t", b"x", partition=partition).get(timeout=30)

        code, out = _describe(capsys, bootstrap)
        assert code == 0
        lines = out.splitlines()
        assert lines[0].startswith("Topic: t\tTopicId: ")
        assert lines[0].endswith("\tPartitionCount: 4\tReplicationFactor: 3\tConfigs: ")
        assert lines[1].startswith(
            "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tLeaderEpoch: "
        )
        assert lines[1].endswith("\tLogStartOffset: 0\tHighWatermark: 1\tLastStableOffset: 1")
        assert lines[3].startswith(
            "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 2,3,1\tIsr: \t"
        )

        code, out = _describe(capsys, bootstrap, "--under-replicated-partitions")
        assert code == 0
        # Partition 3's ISR still lists all three (the controller has not shrunk it).
        assert [line.split("\t")[2] for line in out.splitlines()] == [
            "Partition: 1",
            "Partition: 2",
        ]
        code, out = _describe(capsys, bootstrap, "--unavailable-partitions", "--json")
        (document,) = json.loads(out)
        assert [p["partition"] for p in document["partitions"]] == [2, 3]
        # Broker 3 is not live: Metadata answers its partition without a leader.
        assert {p["leader"] for p in document["partitions"]} == {-1}
