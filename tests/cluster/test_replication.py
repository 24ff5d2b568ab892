"""Replication between real broker processes (a three-broker LocalCluster): followers copy
the leader's batches byte for byte (same offsets, same leader epochs); a client may not fetch
as a replica; acks=all answers once every in-sync replica has the records, and with
min.insync.replicas=2 goes on with one follower stopped and is refused with two stopped
(while acks=1 works); a restarted follower catches up and rejoins the ISR. ISR changes go
through the controller (AlterPartition, KIP-497): a follower that stops fetching (paused)
leaves the ISR after replica.lag.time.max.ms in the same leader epoch, and rejoins once it
catches up; the controller refuses a proposal at a stale partition or leader epoch.

One cluster is shared by the tests of this module: each uses topics of its own.
"""

from __future__ import annotations

import struct
import urllib.request

import pyarrow as pa
import pytest
from cluster_fixtures import ClusterFactory, connect_to, replica_properties, request_to
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from spark_mq.broker.zk.broker_registration import read_live_brokers
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import read_partition_state
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.protocol.admin import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from spark_mq.protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionState,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from spark_mq.protocol.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
)
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

#: Short enough that a stopped follower leaves the ISR within a test's patience.
LAG_TIME_MAX_MS = 2000
_BATCH_HEAD = struct.Struct(">qii")


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3,
        # Longer than the lag time, so that a paused follower leaves the ISR by its
        # leader's proposal before its ZooKeeper session expires.
        session_timeout_ms=10_000,
        broker_properties=replica_properties(
            lag_time_max_ms=LAG_TIME_MAX_MS, socket_timeout_ms=3000
        ),
    )


def create_topic(cluster: LocalCluster, zk: ZkClient, topic: str, config: dict[str, str]) -> int:
    """Create ``topic`` (1 partition, RF 3) and return its leader once elected."""
    created = request_to(
        cluster,
        cluster.broker_ids[0],
        CreateTopicsRequest([CreatableTopic(topic, 1, 3, configs=config)]),
    )
    assert isinstance(created, CreateTopicsResponse)
    assert created.topics[0].error_code == 0, created.topics[0].error_message
    wait_for(lambda: read_partition_state(zk, topic, 0) is not None, timeout_s=30)
    state = read_partition_state(zk, topic, 0)
    assert state is not None
    return state.value.leader


def produce(
    cluster: LocalCluster,
    broker_id: int,
    topic: str,
    values: list[bytes],
    *,
    acks: int,
    timeout_ms: int = 5000,
) -> tuple[int, int]:
    """Produce one batch; (error code, base offset)."""
    records = encode_batch(pa.array(values))
    body = ProduceRequest(
        acks, timeout_ms, [ProduceTopic(topic, [ProducePartition(0, len(records))])]
    )
    conn = connect_to(cluster, broker_id)
    try:
        conn.send(body, records=[records])
        received = conn.receive(30)
        assert received is not None
        response: ProduceResponse = received.result()
    finally:
        conn.close()
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.base_offset


def segment_bytes(cluster: LocalCluster, broker_id: int, topic: str) -> bytes:
    files = sorted((cluster.log_dir(broker_id) / f"{topic}-0").glob("*.log"))
    return b"".join(path.read_bytes() for path in files)


def batch_heads(data: bytes) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of each batch of a segment file's bytes."""
    out = []
    pos = 0
    while pos + _BATCH_HEAD.size <= len(data):
        base, length, epoch = _BATCH_HEAD.unpack_from(data, pos)
        out.append((base, epoch))
        pos += 12 + length
    return out


def test_followers_copy_the_leaders_batches(cluster: LocalCluster, zk: ZkClient) -> None:
    leader = create_topic(cluster, zk, "copied", {})
    state = read_partition_state(zk, "copied", 0)
    assert state is not None
    for i in range(3):
        code, base = produce(cluster, leader, "copied", [b"a%d" % i, b"b%d" % i], acks=1)
        assert (code, base) == (0, 2 * i)
    expected = segment_bytes(cluster, leader, "copied")
    assert batch_heads(expected) == [
        (0, state.value.leader_epoch),
        (2, state.value.leader_epoch),
        (4, state.value.leader_epoch),
    ]
    followers = [b for b in cluster.broker_ids if b != leader]
    for follower in followers:
        wait_for(lambda f=follower: segment_bytes(cluster, f, "copied") == expected, 30)


def test_a_client_may_not_fetch_as_a_replica(cluster: LocalCluster, zk: ZkClient) -> None:
    leader = create_topic(cluster, zk, "guarded", {})
    follower = next(b for b in cluster.broker_ids if b != leader)
    body = FetchRequest(
        0,
        1,
        1 << 20,
        [FetchTopic("guarded", [FetchPartition(0, 0, 1 << 20)])],
        replica_id=follower,
    )
    response = request_to(cluster, leader, body)
    assert isinstance(response, FetchResponse)
    answer = response.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert f"broker {follower}" in (answer.error_message or "")


def isr(zk: ZkClient, topic: str) -> list[int]:
    state = read_partition_state(zk, topic, 0)
    assert state is not None
    return sorted(state.value.isr)


def test_acks_all_with_min_insync_replicas(cluster: LocalCluster, zk: ZkClient) -> None:
    topic = "durable"
    leader = create_topic(cluster, zk, topic, {"min.insync.replicas": "2"})
    followers = [b for b in cluster.broker_ids if b != leader]
    wait_for(lambda: produce(cluster, leader, topic, [b"first"], acks=-1)[0] == 0, 30)
    # Acknowledged with acks=all: every in-sync replica has the records already.
    expected = segment_bytes(cluster, leader, topic)
    for follower in followers:
        assert segment_bytes(cluster, follower, topic) == expected

    stopped: list[int] = []
    try:
        stopped.append(followers[0])
        cluster.stop_broker(followers[0])
        wait_for(lambda: followers[0] not in isr(zk, topic), 30)
        # Two in sync of min.insync.replicas=2: acks=all goes on (once the leader has
        # heard of the new ISR: until then the wait for the stopped follower times out).
        wait_for(
            lambda: produce(cluster, leader, topic, [b"two"], acks=-1, timeout_ms=1000)[0] == 0,
            30,
        )
        assert segment_bytes(cluster, followers[1], topic) == segment_bytes(cluster, leader, topic)

        stopped.append(followers[1])
        cluster.stop_broker(followers[1])
        wait_for(lambda: isr(zk, topic) == [leader], 30)
        end = len(batch_heads(segment_bytes(cluster, leader, topic)))

        def refused() -> bool:
            code, _ = produce(cluster, leader, topic, [b"refused"], acks=-1, timeout_ms=1000)
            return code == ErrorCode.NOT_ENOUGH_REPLICAS

        wait_for(refused, 30)
        # Refused before the append: nothing was written.
        assert len(batch_heads(segment_bytes(cluster, leader, topic))) == end
        code, _ = produce(cluster, leader, topic, [b"one"], acks=1)
        assert code == 0
        assert len(batch_heads(segment_bytes(cluster, leader, topic))) == end + 1
    finally:
        for broker in stopped:
            cluster.start_broker(broker)
    # The restarted followers truncate as the leader says, catch up and rejoin the ISR.
    expected = segment_bytes(cluster, leader, topic)
    for follower in followers:
        wait_for(lambda f=follower: segment_bytes(cluster, f, topic) == expected, 30)
    wait_for(lambda: isr(zk, topic) == sorted(cluster.broker_ids), 30)
    assert produce(cluster, leader, topic, [b"all again"], acks=-1)[0] == 0


def scrape(cluster: LocalCluster, broker_id: int) -> dict[str, float]:
    """A broker's unlabelled Prometheus samples (by name)."""
    url = cluster.metrics_url(broker_id)
    assert url is not None, f"broker {broker_id} serves no metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def test_every_broker_serves_metrics_and_one_is_controller(cluster: LocalCluster) -> None:
    wait_for(lambda: all(cluster.metrics_url(b) for b in cluster.broker_ids), 30)
    scraped = {b: scrape(cluster, b) for b in cluster.broker_ids}
    assert sum(s["spark_mq_active_controller"] for s in scraped.values()) == 1
    assert scraped[cluster.controller_id()]["spark_mq_active_controller"] == 1
    assert all(s["spark_mq_state_scrape_success"] == 1 for s in scraped.values())


def test_followers_count_what_they_replicate(cluster: LocalCluster, zk: ZkClient) -> None:
    topic = "replicated-bytes"
    leader = create_topic(cluster, zk, topic, {})
    followers = [b for b in cluster.broker_ids if b != leader]
    before = {b: scrape(cluster, b)["spark_mq_replication_bytes_in_total"] for b in followers}
    sent_before = scrape(cluster, leader)["spark_mq_replication_bytes_out_total"]
    assert produce(cluster, leader, topic, [b"r" * 1000] * 10, acks=-1)[0] == 0
    # acks=all: every follower has the batch; each counted its bytes, the leader what it sent.
    after = {b: scrape(cluster, b)["spark_mq_replication_bytes_in_total"] for b in followers}
    assert all(after[b] - before[b] >= 10_000 for b in followers), (before, after)
    sent = scrape(cluster, leader)["spark_mq_replication_bytes_out_total"] - sent_before
    assert sent >= 2 * 10_000


def test_a_lagging_follower_leaves_the_isr_and_rejoins(cluster: LocalCluster, zk: ZkClient) -> None:
    topic = "lagging"
    leader = create_topic(cluster, zk, topic, {})
    before = read_partition_state(zk, topic, 0)
    assert before is not None
    counted = scrape(cluster, leader)
    follower = next(b for b in cluster.broker_ids if b not in (leader, cluster.controller_id()))
    # Every replica has fetched (acks=all answered) before the follower stops fetching.
    wait_for(lambda: produce(cluster, leader, topic, [b"x"], acks=-1)[0] == 0, 30)
    cluster.pause(follower)
    try:
        wait_for(lambda: follower not in isr(zk, topic), LAG_TIME_MAX_MS / 1000 * 4)
    finally:
        cluster.resume(follower)
    shrunk = read_partition_state(zk, topic, 0)
    assert shrunk is not None
    # The leader's proposal, not a leader election: same leader and leader epoch, a new
    # partition epoch.
    assert (shrunk.value.leader, shrunk.value.leader_epoch) == (
        before.value.leader,
        before.value.leader_epoch,
    )
    assert shrunk.version > before.version
    wait_for(lambda: isr(zk, topic) == sorted(cluster.broker_ids), 30)
    # The leader counted the shrink and the expansion (its metrics endpoint).
    after = scrape(cluster, leader)
    assert after["spark_mq_isr_shrinks_total"] >= counted["spark_mq_isr_shrinks_total"] + 1
    assert after["spark_mq_isr_expands_total"] >= counted["spark_mq_isr_expands_total"] + 1


def test_the_controller_refuses_stale_isr_proposals(cluster: LocalCluster, zk: ZkClient) -> None:
    topic = "stale"
    leader = create_topic(cluster, zk, topic, {})
    current = read_partition_state(zk, topic, 0)
    assert current is not None
    controller = cluster.controller_id()
    assert controller is not None
    registration = read_live_brokers(zk)[leader]
    secret = zk.kazoo.get("/spark_mq/inter_broker_secret")[0].decode()
    conn = connect_to(cluster, controller)
    try:
        authenticate_as_broker(conn, broker_id=leader, broker_epoch=registration[1], secret=secret)
        state = current.value

        def propose(leader_epoch: int, partition_epoch: int) -> int:
            proposal = AlterPartitionState(
                topic, 0, leader_epoch, sorted(state.isr), partition_epoch
            )
            body = AlterPartitionRequest(leader, registration[1], [proposal])
            response: AlterPartitionResponse = conn.request(body, timeout_s=30)
            return response.partitions[0].error_code

        assert propose(state.leader_epoch, current.version + 1) == ErrorCode.INVALID_UPDATE_VERSION
        assert propose(state.leader_epoch - 1, current.version) == ErrorCode.FENCED_LEADER_EPOCH
    finally:
        conn.close()
    after = read_partition_state(zk, topic, 0)
    assert after is not None and after.version == current.version
