"""A leader frozen with SIGSTOP until its ZooKeeper session expires, on a real three-broker
LocalCluster (replication factor 3, ``min.insync.replicas=2``), as in Jepsen's pause nemesis:

1. records are written with acks=all; then the followers are frozen for a moment (long
   enough for their parked fetches to be answered empty), a divergent tail is written to the
   leader with acks=1, and the leader is frozen right after: nobody else has the tail;
2. the followers run again, the leader's session expires and the controller elects one of
   them, which takes acks=all writes of its own at the tail's offsets;
3. acks=all produce requests are written to the frozen leader's connection: they wait in its
   socket and it reads them when resumed (SIGCONT), still believing it leads;
4. it must not acknowledge any of them (it lost its leadership: its followers no longer
   fetch from it), and once it follows the new leader its tail is truncated away: every
   replica ends byte for byte the same, with the new leader's records at those offsets and
   nothing of the tail or of the refused writes.

The test prints its seed and the schedule, and asserts each fault: the process was stopped
(state T) while another broker was elected with a larger leader epoch, and the tail reached
no follower before the election.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pyarrow as pa
import pytest
from cluster_fixtures import ClusterFactory, connect_to, replica_properties
from waiting import wait_for

from spark_mq import Admin, Consumer, TopicPartition
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.broker.zk.partition_states import read_partition_state
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import NetworkError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.produce import (
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
)
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 3000
FETCH_WAIT_MAX_MS = 300
TOPIC = "paused"


@pytest.fixture
def cluster(start_cluster: ClusterFactory) -> LocalCluster:
    return start_cluster(
        3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        broker_properties=replica_properties(
            # Longer than the followers' short freeze: they stay in the ISR through it.
            lag_time_max_ms=6000,
            fetch_wait_max_ms=FETCH_WAIT_MAX_MS,
            socket_timeout_ms=2000,
        ),
    )


def _send_produce(
    conn: BrokerConnection, partition: int, values: list[bytes], *, acks: int
) -> None:
    records = encode_batch(pa.array(values))
    body = ProduceRequest(
        acks, 5000, [ProduceTopic(TOPIC, [ProducePartition(partition, len(records))])]
    )
    conn.send(body, records=[records])


def _answer(conn: BrokerConnection, timeout_s: float = 30) -> tuple[int, int] | None:
    """(error code, base offset) of the next produce answer; None if none came (the
    connection dropped or timed out): not an acknowledgement either."""
    try:
        received = conn.receive(timeout_s)
    except NetworkError:
        return None
    if received is None:
        return None
    response: ProduceResponse = received.result()
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.base_offset


def _produce(
    cluster: LocalCluster, broker_id: int, partition: int, values: list[bytes], *, acks: int
) -> tuple[int, int]:
    conn = connect_to(cluster, broker_id)
    try:
        _send_produce(conn, partition, values, acks=acks)
        answer = _answer(conn)
    finally:
        conn.close()
    assert answer is not None
    return answer


def _log_bytes(cluster: LocalCluster, broker_id: int, partition: int) -> bytes:
    files = sorted((cluster.log_dir(broker_id) / f"{TOPIC}-{partition}").glob("*.log"))
    return b"".join(path.read_bytes() for path in files)


def _process_state(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    return "?"


def test_a_paused_leader_acknowledges_nothing_and_loses_its_divergent_tail(
    cluster: LocalCluster, zk_connect: str
) -> None:
    seed = int(os.environ.get("FAULT_SEED", random.randrange(1 << 32)))
    rng = random.Random(seed)
    print(f"FAULT_SEED={seed}")
    zk = ZkClient(ZkClientConfig(zk_connect))
    zk.start()
    schedule: list[str] = []
    try:
        with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            admin.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})

        def states() -> dict[int, tuple[int, int, list[int]]]:
            out = {}
            for p in range(3):
                found = read_partition_state(zk, TOPIC, p)
                if found is not None:
                    out[p] = (found.value.leader, found.value.leader_epoch, sorted(found.value.isr))
            return out

        wait_for(lambda: len(states()) == 3 and all(s[2] == [1, 2, 3] for s in states().values()))
        # A partition whose leader is not the controller: freezing the controller too would
        # add a controller election to what is tested here.
        controller = cluster.controller_id()
        partition, (leader, epoch, _) = next(
            (p, s) for p, s in sorted(states().items()) if s[0] != controller
        )
        followers = [b for b in cluster.broker_ids if b != leader]
        pid = int(cluster.state["brokers"][str(leader)]["pid"])

        committed = [b"committed-%d" % i for i in range(rng.randint(2, 6))]
        wait_for(lambda: _produce(cluster, leader, partition, committed[:1], acks=-1)[0] == 0)
        code, _ = _produce(cluster, leader, partition, committed[1:], acks=-1)
        assert code == 0
        conn = connect_to(cluster, leader)  # opened now: the frozen leader accepts nothing new

        # 1. The divergent tail: the followers' parked fetches are answered (empty) while they
        # are frozen, so the tail written next reaches no follower before the leader freezes.
        for follower in followers:
            cluster.pause(follower)
        time.sleep(FETCH_WAIT_MAX_MS / 1000 + 1.0)
        tail = [b"tail-%d" % i for i in range(rng.randint(1, 4))]
        _send_produce(conn, partition, tail, acks=1)
        tail_answer = _answer(conn)
        cluster.pause(leader)
        paused_at = time.monotonic()
        for follower in followers:
            cluster.resume(follower)
        assert tail_answer is not None and tail_answer[0] == 0, tail_answer
        tail_offset = tail_answer[1]
        schedule.append(
            f"froze followers {followers}, wrote {len(tail)} acks=1 records to leader {leader} "
            f"(pid {pid}) of partition {partition} at offset {tail_offset}, froze it"
        )

        # 2. Its session expires; a follower is elected in a new leader epoch.
        wait_for(lambda: states()[partition][0] in followers, SESSION_TIMEOUT_MS / 1000 + 30)
        new_leader, new_epoch, isr = states()[partition]
        elected_after = time.monotonic() - paused_at
        assert new_epoch > epoch and leader not in isr
        assert _process_state(pid) == "T", "the leader was not frozen through the election"
        # ZooKeeper counts the timeout from the last ping, up to a third of it before.
        assert elected_after >= SESSION_TIMEOUT_MS / 1000 / 2
        schedule.append(
            f"broker {new_leader} elected after {elected_after:.1f} s, leader epoch "
            f"{epoch} -> {new_epoch}, ISR {isr}"
        )
        for follower in followers:
            assert b"tail-" not in _log_bytes(cluster, follower, partition), (
                f"the tail reached follower {follower}: nothing diverges"
            )
        fresh = [b"new-%d" % i for i in range(len(tail) + 2)]
        wait_for(lambda: _produce(cluster, new_leader, partition, fresh[:1], acks=-1)[0] == 0)
        assert _produce(cluster, new_leader, partition, fresh[1:], acks=-1)[0] == 0

        # 3. acks=all writes wait in the frozen leader's socket.
        stale = [[b"stale-%d" % i] for i in range(rng.randint(2, 4))]
        for values in stale:
            _send_produce(conn, partition, values, acks=-1)
        cluster.resume(leader)
        schedule.append(f"wrote {len(stale)} acks=all requests to frozen {leader}, resumed it")
        answers = [_answer(conn) for _ in stale]
        conn.close()
        schedule.append(f"its answers: {answers}")
        print("schedule: " + "; ".join(schedule))
        # 4. None is an acknowledgement.
        for answer in answers:
            assert answer is None or answer[0] != ErrorCode.NONE, (
                f"broker {leader} acknowledged an acks=all write after losing its leadership "
                f"(leader epoch {epoch} -> {new_epoch}): answers {answers}"
            )

        # The old leader follows, truncates, catches up and rejoins the ISR.
        wait_for(lambda: states()[partition][2] == [1, 2, 3], 60)
        expected = _log_bytes(cluster, new_leader, partition)
        for broker_id in cluster.broker_ids:
            wait_for(lambda b=broker_id: _log_bytes(cluster, b, partition) == expected, 30)
        for broker_id in cluster.broker_ids:
            data = _log_bytes(cluster, broker_id, partition)
            assert b"tail-" not in data and b"stale-" not in data, broker_id
        tp = TopicPartition(TOPIC, partition)
        with Consumer(bootstrap_servers=cluster.bootstrap_servers) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            end = consumer.end_offsets([tp])[tp]
            read: list[bytes | None] = []
            deadline = time.monotonic() + 30
            while consumer.position(tp) < end and time.monotonic() < deadline:
                read += [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
        assert read == committed + fresh
        assert read[tail_offset] == fresh[0]
    finally:
        zk.close()
