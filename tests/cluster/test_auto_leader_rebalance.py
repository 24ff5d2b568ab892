"""Auto leader rebalance on a real three-broker LocalCluster: with
``auto.leader.rebalance.enable`` and a one-second ``leader.imbalance.check.interval.seconds``,
a broker that was stopped (its leaderships moved away) and started again gets its preferred
leaderships back by itself once it is in the ISR again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from waiting import wait_for

from spark_mq import Admin
from spark_mq.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

TOPIC = "balanced"


@pytest.fixture
def cluster(zk_connect: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(
        tmp_path_factory.mktemp("rebalance") / "c",
        3,
        zookeeper=zk_connect,
        session_timeout_ms=6000,
        broker_properties={
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "100",
            "replica.fetch.backoff.ms": "100",
            "controlled.shutdown.retry.backoff.ms": "300",
            "auto.leader.rebalance.enable": "true",
            "leader.imbalance.check.interval.seconds": "1",
            "leader.imbalance.per.broker.percentage": "10",
        },
    )
    try:
        yield local.start()
    finally:
        local.stop()


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
