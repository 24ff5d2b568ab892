"""A follower's ReplicaFetcher against a real cluster broker process as leader: it
authenticates with the cluster's secret, truncates a divergent tail by the leader-epoch rules
(OffsetForLeaderEpoch) and then copies the leader's batches byte for byte, offsets and
leader epochs kept, with its high watermark following the leader's.

The topic is assigned to brokers 1 and 2 (written to ZooKeeper as an admin would, since a
one-broker cluster cannot create it with two replicas): the leader serves replica fetches
only to its partition's replicas, and the fetcher here is broker 2."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from cluster_fixtures import BrokerProcesses, listening_port
from kazoo.client import KazooClient
from waiting import wait_for

from spark_mq.broker.replica_fetcher import (
    BrokerIdentity,
    FetchState,
    ReplicaFetcher,
    ReplicaFetcherConfig,
)
from spark_mq.broker.zk import znodes
from spark_mq.client import Admin, Producer
from spark_mq.protocol.address import BrokerAddress
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.record_batch import encode_batch


@pytest.fixture
def leader(spawn_broker: BrokerProcesses, zk_connect: str) -> tuple[BrokerAddress, str, Path]:
    """One cluster broker (id 1): its address, the inter-broker secret, its log directory."""
    _process, log_dir = spawn_broker(1)
    port = listening_port(log_dir)
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    try:
        secret = zk.get("/spark_mq/inter_broker_secret")[0].decode()
        assignment = znodes.TopicAssignment({0: (1, 2)})
        zk.create(znodes.topic_path("r"), assignment.encode(), makepath=True)
        wait_for(lambda: zk.exists(znodes.partition_state_path("r", 0)) is not None)
    finally:
        zk.stop()
        zk.close()
    return BrokerAddress(host="127.0.0.1", port=port), secret, log_dir


def _values(replica: PartitionLog) -> list[tuple[int, bytes]]:
    """(offset, value) of every record below the high watermark."""
    out: list[tuple[int, bytes]] = []
    start = 0
    while start < replica.high_watermark:
        table = replica.read_records(start, 1 << 24)
        assert table.num_rows
        out += zip(
            table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True
        )
        start = out[-1][0] + 1
    return out


def test_a_follower_truncates_its_divergent_tail_and_copies_the_leader(
    tmp_path: Path, leader: tuple[BrokerAddress, str, Path]
) -> None:
    address, secret, _ = leader
    bootstrap = f"{address.host}:{address.port}"
    with Admin(bootstrap_servers=bootstrap) as admin:
        with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0) as producer:
            for i in range(3):
                producer.send("r", f"leader-{i}".encode(), partition=0).get(30)
        # The epoch the follower follows is the one the controller gave the leader.
        leader_epoch = admin.describe_topic("r").partitions[0].leader_epoch

    # The follower holds a tail the leader never had: ten records of an epoch the leader's
    # log does not continue.
    follower = PartitionLog.open(tmp_path / "follower" / "r-0", topic="r", partition=0)
    stale = encode_batch(pa.array([f"stale-{i}".encode() for i in range(10)]))
    follower.append(stale, leader_epoch=max(leader_epoch - 1, 0))
    assert follower.log_end_offset == 10

    fetcher = ReplicaFetcher(
        name="test-fetcher",
        leader_id=1,
        leader=address,
        identity=BrokerIdentity(broker_id=2, broker_epoch=lambda: -1, secret=secret),
        config=ReplicaFetcherConfig(fetch_wait_max_ms=100, fetch_backoff_ms=50),
    )
    fetcher.start()
    try:
        fetcher.add_partitions({("r", 0): (follower, leader_epoch)})
        wait_for(lambda: follower.log_end_offset == 3 and follower.high_watermark == 3)
        state = fetcher.partition_state(("r", 0))
        assert state is not None and state.state is FetchState.FETCHING
        with Producer(bootstrap_servers=bootstrap, acks=1) as producer:
            for i in range(3, 10):
                producer.send("r", f"leader-{i}".encode(), partition=0).get(30)
        wait_for(lambda: follower.log_end_offset == 10 and follower.high_watermark == 10)
    finally:
        fetcher.shutdown()
    try:
        assert _values(follower) == [(i, f"leader-{i}".encode()) for i in range(10)]
        # The leader's epochs came with its batches.
        assert [e.epoch for e in follower.leader_epoch_cache.entries] == [leader_epoch]
    finally:
        follower.close()
