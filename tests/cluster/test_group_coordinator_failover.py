"""The group coordinator moves with its ``__consumer_offsets`` partition, on a real
three-broker LocalCluster (issue 31, "Coordinators move with their partitions").

Every broker names the same coordinator for a group: the leader of the group's partition of
``__consumer_offsets`` (replication factor 3, three partitions). Two consumers of one group
process numbered records and commit after each batch; the coordinator's broker is killed
with SIGKILL; the controller moves the partition's leadership, and the new leader loads the
group: the committed offsets it serves are exactly the last commits acknowledged before the
kill. The consumers find it and go on; when one leaves, the group rebalances there and the
other finishes the work, and what is committed at the end is what was acknowledged.
"""

from __future__ import annotations

import time

import pytest
from cluster_fixtures import ClusterFactory, replica_properties, request_to
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.coordinator_topic import coordinator_partition
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import CommitFailedError, UnknownTopicOrPartitionError
from spark_mq.protocol.groups import FindCoordinatorRequest, FindCoordinatorResponse

pytestmark = pytest.mark.slow

#: A killed broker's session ends, and its partitions move, this long after the kill.
SESSION_TIMEOUT_MS = 4000
OFFSETS_PARTITIONS = 3
GROUP = "failover-group"
TOPIC = "work"
PARTITIONS = 4
RECORDS = 80


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    return start_cluster(
        3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        broker_properties={
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
            **replica_properties(fetch_wait_max_ms=100),
        },
    )


def _find_coordinator(cluster: LocalCluster, broker_id: int) -> FindCoordinatorResponse:
    answer: FindCoordinatorResponse = request_to(
        cluster, broker_id, FindCoordinatorRequest(GROUP), timeout_s=10
    )
    return answer


def _consumer(cluster: LocalCluster, client_id: str) -> Consumer:
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        config={
            "group.id": GROUP,
            "client.id": client_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 300,
            "max.poll.records": 3,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 300,
            "request.timeout.ms": 5000,
            "default.api.timeout.ms": 30000,
        },
    )
    consumer.subscribe([TOPIC])
    return consumer


class Work:
    """Two consumers processing and committing, and what was acknowledged."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = consumers
        self.seen: set[tuple[int, int]] = set()
        #: The last commit acknowledged for each partition, in the order they were made.
        self.acked: dict[TopicPartition, int] = {}
        self.refused = 0

    def step(self) -> None:
        for consumer in self.consumers:
            batch = consumer.poll(timeout_ms=100)
            if not batch:
                continue
            offsets = {tp: records[-1].offset + 1 for tp, records in batch.items()}
            for tp, records in batch.items():
                self.seen.update((tp.partition, r.offset) for r in records)
            try:
                consumer.commit(offsets)
            except CommitFailedError:
                # The group rebalanced under this member: not acknowledged, and the
                # partitions' new owner processes those records again.
                self.refused += 1
                continue
            self.acked.update(offsets)

    def run_until(self, done: object, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():  # type: ignore[operator]
            assert time.monotonic() < deadline, (
                f"not done within {timeout_s} s: seen {len(self.seen)} of {RECORDS}, "
                f"acknowledged {self.acked}"
            )
            self.step()


def test_the_group_follows_its_coordinator_off_a_killed_broker(cluster: LocalCluster) -> None:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)

        def full_isr() -> bool:
            try:
                parts = admin.describe_topic(TOPIC).partitions
            except UnknownTopicOrPartitionError:
                return False  # the broker asked has not had the controller's news yet
            return all(sorted(p.isr) == [1, 2, 3] for p in parts)

        wait_for(full_isr, timeout_s=30)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, config={"acks": "all"}) as p:
        for i in range(RECORDS):
            p.send(TOPIC, str(i).encode(), partition=i % PARTITIONS)
        p.flush(30)

    consumers = [_consumer(cluster, "c1"), _consumer(cluster, "c2")]
    work = Work(consumers)
    try:
        # Both members hold partitions and about a third of the work is committed.
        work.run_until(
            lambda: all(c.assignment() for c in consumers) and len(work.seen) >= RECORDS // 3,
            timeout_s=40,
        )
        # Every broker names one coordinator: the leader of the group's partition.
        answers = {b: _find_coordinator(cluster, b) for b in cluster.broker_ids}
        assert {a.error_code for a in answers.values()} == {0}, answers
        coordinators = {a.node_id for a in answers.values()}
        assert len(coordinators) == 1, answers
        victim = coordinators.pop()
        offsets_partition = coordinator_partition(GROUP, OFFSETS_PARTITIONS)
        with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            leaders = {
                p.partition: p.leader for p in admin.describe_topic("__consumer_offsets").partitions
            }
            before = admin.describe_group(GROUP)
        assert leaders[offsets_partition] == victim
        assert before.coordinator_id == victim and before.state == "Stable"
        acked_before_kill = dict(work.acked)
        assert acked_before_kill

        cluster.kill(victim)
        survivors = [b for b in cluster.broker_ids if b != victim]
        with Admin(bootstrap_servers=cluster.broker_server(survivors[0])) as admin:
            # Retried while the partition has no leader, then while the new one loads.
            moved = admin.list_group_offsets(GROUP)
        # Every acknowledged commit survived the coordinator's death.
        assert {tp: om.offset for tp, om in moved.items()} == acked_before_kill

        # Both members find the new coordinator (their heartbeats and commits are answered
        # NOT_COORDINATOR, or their connection died) and go on in the same generation: the
        # new coordinator loaded the group, members and assignment included.
        work.run_until(lambda: len(work.seen) >= 2 * RECORDS // 3, timeout_s=40)
        with Admin(bootstrap_servers=cluster.broker_server(survivors[0])) as admin:
            moved_group = admin.describe_group(GROUP)
        assert moved_group.coordinator_id in survivors
        assert {m.client_id for m in moved_group.members} == {"c1", "c2"}

        # A member leaves: the group rebalances on the new coordinator and the one left
        # finishes the work from the committed offsets.
        consumers[1].close()
        work.consumers = consumers[:1]
        ends = {TopicPartition(TOPIC, i): RECORDS // PARTITIONS for i in range(PARTITIONS)}
        work.run_until(lambda: len(work.seen) == RECORDS and work.acked == ends, timeout_s=40)
        with Admin(bootstrap_servers=cluster.broker_server(survivors[0])) as admin:
            after = admin.describe_group(GROUP)
            committed = admin.list_group_offsets(GROUP)
        assert after.coordinator_id == moved_group.coordinator_id
        assert after.generation_id > before.generation_id
        assert {m.client_id for m in after.members} == {"c1"}
        assert {tp: om.offset for tp, om in committed.items()} == work.acked
    finally:
        for consumer in consumers:
            consumer.close()
