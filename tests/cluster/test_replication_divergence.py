"""KIP-279's double-failover divergence with real broker processes (two brokers, RF 2).

The topic allows unclean leader election, so that leadership can go back and forth between
two brokers while each writes offsets the other never saw:

1. Broker A leads and both replicas hold offset 0.
2. B is killed: it leaves the ISR (by A's proposal or by the controller) and A writes
   offset 1.
3. A is killed, B starts: B is elected uncleanly, in an epoch A never learns, and writes
   offsets 1 and 2 in it.
4. B is killed, A starts: A is elected uncleanly, in a newer epoch starting at its log end 2.
5. B starts as A's follower. B's latest epoch is one A never had, and A's answer for it (the
   end of A's largest epoch below it: offset 2) lies *past* the point where the logs differ
   (offset 1): truncating there, as before KIP-279, keeps B's offset 1 forever. The KIP-279
   rule looks up the leader's epoch in B's own cache too and truncates to where B's copy of
   it ends: offset 1.

The test reads both logs (copies of the log directories, opened with the storage API) while
the brokers are down to show that they did diverge at offset 1, and at the end, with both
stopped, that B's log is A's batch for batch (offsets, leader epochs, values).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from cluster_fixtures import (
    SHORT_SESSION_MS,
    ClusterFactory,
    connect_to,
    replica_properties,
    request_to,
)
from waiting import wait_for

from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import read_partition_state
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.admin import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
)
from spark_mq.storage.log import FetchIsolation
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

TOPIC = "diverging"
Batch = tuple[int, int, int, tuple[bytes, ...]]  # base offset, next offset, epoch, values


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    # A short session: a killed broker is noticed soon.
    return start_cluster(
        2,
        session_timeout_ms=SHORT_SESSION_MS,
        broker_properties=replica_properties(socket_timeout_ms=3000),
    )


def produce(cluster: LocalCluster, broker_id: int, values: list[bytes], *, acks: int) -> int:
    """Produce one batch to partition 0; the error code."""
    records = encode_batch(pa.array(values, pa.binary()))
    body = ProduceRequest(acks, 5000, [ProduceTopic(TOPIC, [ProducePartition(0, len(records))])])
    conn = connect_to(cluster, broker_id)
    try:
        conn.send(body, records=[records])
        received = conn.receive(30)
        assert received is not None
        response: ProduceResponse = received.result()
    finally:
        conn.close()
    return response.topics[0].partitions[0].error_code


def leader_and_epoch(zk: ZkClient) -> tuple[int, int]:
    state = read_partition_state(zk, TOPIC, 0)
    assert state is not None
    return state.value.leader, state.value.leader_epoch


def isr(zk: ZkClient) -> list[int]:
    state = read_partition_state(zk, TOPIC, 0)
    assert state is not None
    return sorted(state.value.isr)


def wait_leader(zk: ZkClient, broker_id: int, newer_than: int) -> int:
    """Wait until ``broker_id`` leads in an epoch after ``newer_than``; that epoch."""
    wait_for(
        lambda: (s := leader_and_epoch(zk))[0] == broker_id and s[1] > newer_than,
        timeout_s=30,
    )
    return leader_and_epoch(zk)[1]


def produce_to(cluster: LocalCluster, broker_id: int, values: list[bytes], *, acks: int) -> None:
    """Produce once ``broker_id`` has taken the leadership it was given."""
    wait_for(lambda: produce(cluster, broker_id, values, acks=acks) == ErrorCode.NONE, 30)


def log_batches(cluster: LocalCluster, broker_id: int) -> list[Batch]:
    """The batches of the broker's replica, read with the storage API from a copy of its
    log directory (so that recovery on opening changes nothing the broker will see)."""
    with tempfile.TemporaryDirectory(prefix="divergence-") as tmp:
        copy = Path(tmp) / "logs"
        shutil.copytree(cluster.log_dir(broker_id), copy)
        manager = LogManager(copy)
        try:
            replica = manager.get_log(TOPIC, 0)
            out: list[Batch] = []
            for segment in replica.segments:
                for header, _ in segment.records.headers():
                    table = replica.read_records(
                        header.base_offset,
                        isolation=FetchIsolation.LOG_END,
                        max_offset=header.next_offset,
                    )
                    out.append(
                        (
                            header.base_offset,
                            header.next_offset,
                            header.partition_leader_epoch,
                            tuple(table.column("value").to_pylist()),
                        )
                    )
            return out
        finally:
            manager.close()


def test_double_failover_divergence_is_truncated_away(cluster: LocalCluster, zk: ZkClient) -> None:
    created = request_to(
        cluster,
        cluster.broker_ids[0],
        CreateTopicsRequest(
            [
                CreatableTopic(
                    TOPIC,
                    1,
                    2,
                    configs={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
                )
            ]
        ),
    )
    assert isinstance(created, CreateTopicsResponse)
    assert created.topics[0].error_code == 0, created.topics[0].error_message
    wait_for(lambda: read_partition_state(zk, TOPIC, 0) is not None, timeout_s=30)
    a, epoch = leader_and_epoch(zk)
    b = next(x for x in cluster.broker_ids if x != a)

    # 1. Both replicas hold offset 0 (acks=all with both in the ISR).
    produce_to(cluster, a, [b"both"], acks=-1)
    # 2. B fails; A leads on without it and writes offset 1.
    cluster.kill(b)
    wait_for(lambda: isr(zk) == [a])
    epoch = max(epoch, leader_and_epoch(zk)[1])
    produce_to(cluster, a, [b"only on A"], acks=1)
    # 3. A fails, B comes back and is elected uncleanly (an epoch A never learns); it
    # writes offsets 1 and 2.
    cluster.kill(a)
    cluster.start_broker(b)
    epoch = wait_leader(zk, b, epoch)
    produce_to(cluster, b, [b"only on B"], acks=1)
    produce_to(cluster, b, [b"only on B, too"], acks=1)
    # 4. B fails, A comes back and is elected uncleanly.
    cluster.kill(b)
    on_a, on_b = log_batches(cluster, a), log_batches(cluster, b)
    # The divergence: offset 1 is a different batch, of a different epoch, on each replica,
    # and B's log runs past A's (so A's answer for the epoch below B's lies past offset 1).
    assert on_a[0] == on_b[0]
    assert on_a[1][0] == on_b[1][0] == 1
    assert on_a[1][3] == (b"only on A",) and on_b[1][3] == (b"only on B",)
    assert on_a[1][2] < on_b[1][2]
    assert [x[0] for x in on_b] == [0, 1, 2] and [x[0] for x in on_a] == [0, 1]
    cluster.start_broker(a)
    epoch = wait_leader(zk, a, epoch)
    produce_to(cluster, a, [b"A again"], acks=1)
    # 5. B follows A: it must drop offsets 1 and 2 and copy A's.
    cluster.start_broker(b)
    wait_for(lambda: isr(zk) == sorted([a, b]))
    produce_to(cluster, a, [b"both again"], acks=-1)
    cluster.stop_broker(b)
    cluster.stop_broker(a)
    final_a, final_b = log_batches(cluster, a), log_batches(cluster, b)
    assert final_b == final_a
    assert [x[3] for x in final_a] == [
        (b"both",),
        (b"only on A",),
        (b"A again",),
        (b"both again",),
    ]
