"""An idempotent producer's state survives its leader's death (three real brokers, RF 3).

The followers rebuild producer state from the batches they copy (producer id, epoch and
sequences kept as the leader wrote them). So once the leader is killed (SIGKILL: nothing
handed over) the new leader recognises a retry of the last acknowledged batches, same
producer id, epoch and sequence, as a duplicate: acknowledged with the original offset and
not appended again, as Kafka answers a duplicate of one of a producer's last five batches.
The next sequence is accepted right after the original batches, and a sequence gap is
refused (OUT_OF_ORDER_SEQUENCE_NUMBER): the new leader knows where the producer is, it does
not merely accept whatever comes.

The batches are sent raw (Produce requests built here) so that the retries are the very same
batches, which a client's own retry cannot be made to send on demand.
"""

from __future__ import annotations

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
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
)
from spark_mq.protocol.producer_id import InitProducerIdRequest, InitProducerIdResponse
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

TOPIC = "idempotent"


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    # A short session: the killed leader is noticed soon.
    return start_cluster(
        3,
        session_timeout_ms=SHORT_SESSION_MS,
        broker_properties=replica_properties(socket_timeout_ms=3000),
    )


def produce(cluster: LocalCluster, broker_id: int, batch: bytes) -> ProducePartitionResponse:
    """Send ``batch`` to partition 0 with acks=all; the partition's answer."""
    body = ProduceRequest(-1, 5000, [ProduceTopic(TOPIC, [ProducePartition(0, len(batch))])])
    conn = connect_to(cluster, broker_id)
    try:
        conn.send(body, records=[batch])
        received = conn.receive(30)
        assert received is not None
        response: ProduceResponse = received.result()
    finally:
        conn.close()
    return response.topics[0].partitions[0]


def test_a_new_leader_deduplicates_a_retry_and_takes_the_next_sequence(
    cluster: LocalCluster, zk: ZkClient
) -> None:
    created = request_to(
        cluster,
        cluster.broker_ids[0],
        CreateTopicsRequest([CreatableTopic(TOPIC, 1, 3, configs={"min.insync.replicas": "2"})]),
    )
    assert isinstance(created, CreateTopicsResponse)
    assert created.topics[0].error_code == 0, created.topics[0].error_message
    wait_for(lambda: read_partition_state(zk, TOPIC, 0) is not None, timeout_s=30)
    first = read_partition_state(zk, TOPIC, 0)
    assert first is not None
    leader = first.value.leader
    ids = request_to(cluster, leader, InitProducerIdRequest())
    assert isinstance(ids, InitProducerIdResponse)
    assert ids.error_code == 0, ids.error_message

    def batch(sequence: int, count: int = 2) -> bytes:
        return encode_batch(
            pa.array([b"seq %d" % (sequence + i) for i in range(count)], pa.binary()),
            producer_id=ids.producer_id,
            producer_epoch=ids.producer_epoch,
            base_sequence=sequence,
        )

    sent = [batch(0), batch(2), batch(4)]
    offsets: list[int] = []
    for data in sent:
        wait_for(lambda d=data: produce(cluster, leader, d).error_code == ErrorCode.NONE, 30)
        # Acknowledged with acks=all: every ISR member (all three) has it. A retry of an
        # acknowledged batch is a duplicate, so this reads the offset it was given.
        answer = produce(cluster, leader, data)
        assert answer.error_code == ErrorCode.NONE
        offsets.append(answer.base_offset)
    assert offsets == [0, 2, 4]

    cluster.kill(leader)
    wait_for(
        lambda: (
            (s := read_partition_state(zk, TOPIC, 0)) is not None
            and s.value.leader not in (leader, -1)
            and s.value.leader_epoch > first.value.leader_epoch
        ),
        30,
    )
    after = read_partition_state(zk, TOPIC, 0)
    assert after is not None
    new_leader = after.value.leader

    def retried() -> ProducePartitionResponse:
        answer = produce(cluster, new_leader, sent[-1])
        # Until the new leader has applied its LeaderAndIsr it answers NOT_LEADER; until its
        # followers have fetched from it, an acks=all answer may time out.
        assert answer.error_code in (
            ErrorCode.NONE,
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.REQUEST_TIMED_OUT,
        ), answer
        return answer

    wait_for(lambda: retried().error_code == ErrorCode.NONE, 30)
    # The retry of the last batch, and of the one before it: the original offsets.
    again = retried()
    assert (again.error_code, again.base_offset) == (ErrorCode.NONE, offsets[-1])
    earlier = produce(cluster, new_leader, sent[-2])
    assert (earlier.error_code, earlier.base_offset) == (ErrorCode.NONE, offsets[-2])
    # A gap in the sequence is refused: the new leader knows the producer's last sequence.
    gap = produce(cluster, new_leader, batch(9))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, gap
    # The next sequence goes right after the original batches: nothing was appended twice.
    following = produce(cluster, new_leader, batch(6))
    assert following.error_code == ErrorCode.NONE, following
    assert following.base_offset == offsets[-1] + 2
