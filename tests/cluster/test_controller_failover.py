"""A three-broker LocalCluster runs its own controller: a topic with replication factor 3
created through any broker comes online on all three; killing the controller's broker
(SIGKILL) elects another controller (epoch + 1), which moves the dead broker's leaderships
to in-sync replicas with leader epoch + 1 and takes it out of every ISR; when it comes back,
the group's internal topic can be created with the cluster's own replication factor."""

from __future__ import annotations

import pytest
from cluster_fixtures import SHORT_SESSION_MS, ClusterFactory, request_to
from waiting import wait_for

from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.broker.zk.partition_states import read_partition_state, read_topic_assignment
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.admin import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from spark_mq.protocol.groups import FindCoordinatorRequest, FindCoordinatorResponse

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    return start_cluster(3, session_timeout_ms=SHORT_SESSION_MS)


def test_controller_failover_moves_the_dead_brokers_leaderships(
    cluster: LocalCluster, zk_connect: str
) -> None:
    zk = ZkClient(ZkClientConfig(zk_connect))
    zk.start()
    try:
        old_controller = cluster.controller_id()
        old_epoch = cluster.controller_epoch()
        assert old_controller is not None and old_epoch is not None
        other = next(b for b in cluster.broker_ids if b != old_controller)
        created = request_to(cluster, other, CreateTopicsRequest([CreatableTopic("t", 6, 3)]))
        assert isinstance(created, CreateTopicsResponse)
        assert created.topics[0].error_code == 0, created.topics[0].error_message
        before = {p: read_partition_state(zk, "t", p) for p in range(6)}
        assert all(s is not None and sorted(s.value.isr) == [1, 2, 3] for s in before.values())
        led = [p for p, s in before.items() if s is not None and s.value.leader == old_controller]
        assert len(led) == 2  # leaders go round the brokers

        cluster.kill(old_controller)
        wait_for(lambda: cluster.controller_id() not in (None, old_controller), timeout_s=60)
        assert cluster.controller_epoch() == old_epoch + 1

        def moved() -> bool:
            states = [read_partition_state(zk, "t", p) for p in range(6)]
            return all(s is not None and old_controller not in s.value.isr for s in states)

        wait_for(moved, timeout_s=60)
        for p in range(6):
            old, new = before[p], read_partition_state(zk, "t", p)
            assert old is not None and new is not None
            assert new.value.leader != old_controller and new.value.leader in new.value.isr
            assert new.value.leader_epoch == old.value.leader_epoch + 1
            assert new.value.controller_epoch == old_epoch + 1
            if p not in led:
                assert new.value.leader == old.value.leader

        # LocalCluster set offsets.topic.replication.factor to 3: with two brokers live the
        # coordinator is not available, and says what is missing.
        answer = request_to(cluster, other, FindCoordinatorRequest("g"))
        assert isinstance(answer, FindCoordinatorResponse)
        assert answer.error_code == 15 and "1 more broker must be running" in (
            answer.error_message or ""
        )
        cluster.start_broker(old_controller)
        answer = request_to(cluster, other, FindCoordinatorRequest("g"))
        # Created now: COORDINATOR_NOT_AVAILABLE until the controller elected its leaders.
        assert isinstance(answer, FindCoordinatorResponse) and answer.error_code in (0, 15)
        offsets = read_topic_assignment(zk, "__consumer_offsets")
        assert offsets is not None and all(len(r) == 3 for r in offsets.partitions.values())
        # The controller brings its partitions online, and the coordinator is then known.
        wait_for(lambda: zk.get(znodes.partition_state_path("__consumer_offsets", 0)), 60)

        def coordinator_known() -> bool:
            found = request_to(cluster, other, FindCoordinatorRequest("g"))
            return isinstance(found, FindCoordinatorResponse) and found.error_code == 0

        wait_for(coordinator_known, timeout_s=60)
    finally:
        zk.close()
