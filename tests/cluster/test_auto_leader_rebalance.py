"""Auto leader rebalance on a real three-broker LocalCluster: with
``auto.leader.rebalance.enable`` and a one-second ``leader.imbalance.check.interval.seconds``,
a broker that was stopped (its leaderships moved away) and started again gets its preferred
leaderships back by itself once it is in the ISR again."""

from __future__ import annotations

import time

import pytest
from cluster_fixtures import ClusterFactory, replica_properties
from waiting import wait_for

from spark_mq import Admin
from spark_mq.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

TOPIC = "balanced"


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    return start_cluster(
        3,
        session_timeout_ms=6000,
        broker_properties={
            **replica_properties(fetch_wait_max_ms=100, fetch_backoff_ms=100),
            "controlled.shutdown.retry.backoff.ms": "300",
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "1",
            "leader.imbalance.per.broker.percentage": "10",
        },
    )


def _leaders(cluster: LocalCluster) -> dict[int, tuple[int, int, tuple[int, ...]]]:
    """partition -> (leader, preferred replica, ISR)."""
    return {
        v.partition: (v.state.leader, v.replicas[0], tuple(sorted(v.state.isr)))
        for v in cluster.partitions()
        if v.topic == TOPIC and v.state is not None
    }


def test_leadership_goes_back_to_a_restarted_preferred_replica(cluster: LocalCluster) -> None:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(TOPIC, partitions=3, replication_factor=3)

    def balanced() -> bool:
        found = _leaders(cluster)
        return len(found) == 3 and all(
            leader == preferred and isr == (1, 2, 3) for leader, preferred, isr in found.values()
        )

    wait_for(balanced, timeout_s=30)
    controller = cluster.controller_id()
    broker = next(b for b in cluster.broker_ids if b != controller)
    cluster.stop_broker(broker)
    # Its leaderships moved away and stay away while it is down.
    assert all(leader != broker for leader, _p, _i in _leaders(cluster).values())
    cluster.start_broker(broker)
    started = time.monotonic()
    wait_for(balanced, timeout_s=30)
    took_s = time.monotonic() - started
    print(f"broker {broker} leads its preferred partitions again {took_s:.1f} s after its start")
