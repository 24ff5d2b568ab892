"""Controlled shutdown and preferred leader election on a real three-broker LocalCluster.

- A broker stopped with SIGTERM hands its leaderships over *before* its ZooKeeper session
  ends: ZooKeeper's watch events show the partition's state change before the broker's
  registration goes, while an idempotent acks=all producer keeps sending to that partition
  and loses nothing (every send acknowledged, every acknowledged record read back once).
- Once the broker is back in the ISR, ``spark-mq cluster elect-leaders`` and
  ``Admin.elect_leaders`` move leadership back to the preferred replicas.
- The controller refuses a ControlledShutdown with a stale broker epoch, changing nothing.
- An UNCLEAN election gives an offline partition its one live, out-of-sync replica as leader
  (a PREFERRED one cannot: its preferred replica is dead).

Auto rebalance is off here (``auto.leader.rebalance.enable=false``) so that only the
elections the tests ask for move leadership; test_auto_leader_rebalance covers it.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import pytest
from cluster_fixtures import ClusterFactory, broker_address, replica_properties
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.zk import znodes
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import read_partition_state
from spark_mq.cli import main
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import ElectionNotNeededError
from spark_mq.protocol.controller import ControlledShutdownRequest
from spark_mq.protocol.error_codes import ErrorCode

pytestmark = pytest.mark.slow

TOPIC = "moves"


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    local = start_module_cluster(
        3,
        session_timeout_ms=6000,
        broker_properties={
            **replica_properties(fetch_wait_max_ms=100, fetch_backoff_ms=100),
            "controlled.shutdown.retry.backoff.ms": "300",
            "auto.leader.rebalance.enable": "false",
        },
    )
    with Admin(bootstrap_servers=local.bootstrap_servers) as admin:
        admin.create_topic(
            TOPIC, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"}
        )
    return local


def _states(zk: ZkClient) -> dict[int, znodes.PartitionState]:
    out = {}
    for partition in range(3):
        found = read_partition_state(zk, TOPIC, partition)
        if found is not None:
            out[partition] = found.value
    return out


def _full_isr(zk: ZkClient) -> bool:
    states = _states(zk)
    return len(states) == 3 and all(sorted(s.isr) == [1, 2, 3] for s in states.values())


def _preferred(cluster: LocalCluster) -> dict[int, int]:
    return {v.partition: v.replicas[0] for v in cluster.partitions() if v.topic == TOPIC}


class _NumberedProducer:
    """Sends "0", "1", ... to one partition with acks=all until stopped; keeps each send's
    future and the time of each acknowledgement."""

    def __init__(self, cluster: LocalCluster, partition: int) -> None:
        self._producer = Producer(
            bootstrap_servers=cluster.bootstrap_servers,
            config={
                "acks": "all",
                "enable.idempotence": "true",
                "delivery.timeout.ms": 60_000,
                "retry.backoff.ms": 20,
                "retry.backoff.max.ms": 100,
                "linger.ms": 0,
            },
        )
        self._partition = partition
        self._stop = threading.Event()
        self.acked_at: dict[int, float] = {}
        self.futures: list[object] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            future = self._producer.send(TOPIC, str(n).encode(), partition=self._partition)
            future.add_callback(self._acked, n)
            self.futures.append(future)
            n += 1
            time.sleep(0.01)

    def _acked(self, n: int, _metadata: object) -> None:
        self.acked_at[n] = time.monotonic()

    def __enter__(self) -> _NumberedProducer:
        self._thread.start()
        return self

    def stop(self) -> list[int]:
        """Stop sending and wait for every answer; the numbers sent (each must be acked)."""
        self._stop.set()
        self._thread.join()
        self._producer.flush(60)
        for future in self.futures:
            future.get(60)  # type: ignore[attr-defined]
        self._producer.close()
        return list(range(len(self.futures)))

    def __exit__(self, *exc: object) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._producer.close()


def _read_all(cluster: LocalCluster, partition: int, count: int) -> list[int]:
    tp = TopicPartition(TOPIC, partition)
    got: list[int] = []
    with Consumer(bootstrap_servers=cluster.bootstrap_servers) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got += [int(r.value or b"-1") for r in consumer.poll(timeout_ms=500).get(tp, [])]
    return got


def test_a_sigterm_moves_the_leaderships_before_the_broker_leaves(
    cluster: LocalCluster, zk: ZkClient
) -> None:
    wait_for(lambda: _full_isr(zk), timeout_s=30)
    controller = cluster.controller_id()
    states = _states(zk)
    # A broker that leads a partition and is not the controller (stopping the controller
    # would add a controller election to what is measured).
    partition, before = next((p, s) for p, s in states.items() if s.leader != controller)
    victim = before.leader
    order: list[str] = []
    with _NumberedProducer(cluster, partition) as producer:
        wait_for(lambda: len(producer.acked_at) >= 20, timeout_s=30)
        before = _states(zk)[partition]
        assert before.leader == victim and sorted(before.isr) == [1, 2, 3]
        # ZooKeeper delivers one client's watch events in the order of the changes.
        path = znodes.partition_state_path(TOPIC, partition)
        zk.kazoo.get(path, watch=lambda _e: order.append("state"))
        zk.kazoo.exists(znodes.broker_path(victim), watch=lambda _e: order.append("registration"))
        stopped_at = time.monotonic()
        cluster.stop_broker(victim)
        exited_at = time.monotonic()
        wait_for(lambda: len(order) == 2, timeout_s=30)
        time.sleep(1.0)
        sent = producer.stop()
    acked = sorted(producer.acked_at)
    assert acked == sent  # every send acknowledged: no error but retriable ones, retried
    assert order == ["state", "registration"]  # leadership moved while it was registered
    after = _states(zk)[partition]
    assert after.leader != victim and after.leader in before.isr
    assert victim not in after.isr
    assert after.leader_epoch == before.leader_epoch + 1
    times = sorted(producer.acked_at.values())
    gaps = [b - a for a, b in itertools.pairwise(times) if b >= stopped_at - 1]
    print(
        f"controlled shutdown of broker {victim}: the process took {exited_at - stopped_at:.2f} s "
        f"to exit; longest wait between two acks={max(gaps):.3f} s ({len(sent)} records)"
    )
    assert sorted(_read_all(cluster, partition, len(sent))) == sent
    cluster.start_broker(victim)


def test_elect_leaders_moves_leadership_back_to_preferred_replicas(
    cluster: LocalCluster, zk: ZkClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preferred = _preferred(cluster)
    for broker_id in cluster.broker_ids:
        cluster.start_broker(broker_id)
    wait_for(lambda: _full_isr(zk), timeout_s=30)
    # Stopping each partition's preferred leader in turn leaves it led elsewhere.
    moved = next(b for b in preferred.values() if b != cluster.controller_id())
    cluster.stop_broker(moved)
    cluster.start_broker(moved)
    wait_for(lambda: _full_isr(zk), timeout_s=30)
    away = [p for p, s in _states(zk).items() if s.leader != preferred[p]]
    assert away  # what the elections below must undo
    first, rest = away[0], away[1:]

    assert (
        main(
            [
                "cluster",
                "elect-leaders",
                "--dir",
                str(cluster.directory),
                "--election-type",
                "preferred",
                "--topic",
                TOPIC,
                "--partition",
                str(first),
            ]
        )
        == 0
    )
    assert f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-{first}" in (
        capsys.readouterr().out
    )
    assert _states(zk)[first].leader == preferred[first]

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": first}]}))
    assert (
        main(
            [
                "cluster",
                "elect-leaders",
                "--dir",
                str(cluster.directory),
                "--election-type",
                "preferred",
                "--path-to-json-file",
                str(plan),
            ]
        )
        == 0
    )
    assert "Valid replica already elected for partitions" in capsys.readouterr().out

    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        results = admin.elect_leaders("preferred", None)
    for p in rest:
        assert results[TopicPartition(TOPIC, p)] is None
    assert isinstance(results[TopicPartition(TOPIC, first)], ElectionNotNeededError)
    assert {p: s.leader for p, s in _states(zk).items()} == preferred


def test_a_controlled_shutdown_with_a_stale_broker_epoch_is_refused(
    cluster: LocalCluster, zk: ZkClient
) -> None:
    controller = cluster.controller_id()
    assert controller is not None
    other = next(b for b in cluster.broker_ids if b != controller)
    found = zk.get(znodes.broker_path(other))
    assert found is not None
    epoch = found[1].czxid
    secret = zk.get(znodes.INTER_BROKER_SECRET)
    assert secret is not None
    before = _states(zk)
    conn = BrokerConnection(broker_address(cluster, controller))
    try:
        authenticate_as_broker(
            conn, broker_id=other, broker_epoch=epoch, secret=secret[0].decode(), timeout_s=10
        )
        answer = conn.request(ControlledShutdownRequest(other, epoch - 1), timeout_s=10)
    finally:
        conn.close()
    assert answer.error_code == ErrorCode.STALE_BROKER_EPOCH
    # Refused whole: nothing moved off the broker.
    assert _states(zk) == before


def test_unclean_election_gives_an_offline_partition_an_out_of_sync_leader(
    cluster: LocalCluster, zk: ZkClient, capsys: pytest.CaptureFixture[str]
) -> None:
    for broker_id in cluster.broker_ids:
        cluster.start_broker(broker_id)
    topic = "unclean"
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=2)

    def state() -> znodes.PartitionState | None:
        found = read_partition_state(zk, topic, 0)
        return None if found is None else found.value

    wait_for(lambda: (s := state()) is not None and len(s.isr) == 2, timeout_s=30)
    replicas = next(v.replicas for v in cluster.partitions() if v.topic == topic)
    first, second = replicas
    # The second replica stops and leaves the ISR; the first, its last member, stops too:
    # the partition is offline, and its one live replica, back, is out of sync.
    cluster.stop_broker(second)
    wait_for(lambda: (s := state()) is not None and s.isr == (first,), timeout_s=30)
    cluster.stop_broker(first)
    cluster.start_broker(second)
    wait_for(lambda: (s := state()) is not None and s.leader == znodes.NO_LEADER, timeout_s=30)
    try:
        args = ["cluster", "elect-leaders", "--dir", str(cluster.directory)]
        preferred = [*args, "--election-type", "preferred", "--topic", topic, "--partition", "0"]
        assert main(preferred) == 1  # the preferred replica is dead
        assert f"preferred replica {first} cannot lead" in capsys.readouterr().out
        unclean = [*args, "--election-type", "unclean", "--topic", topic, "--partition", "0"]
        assert main(unclean) == 0
        assert "Successfully completed leader election (UNCLEAN)" in capsys.readouterr().out
        after = state()
        assert after is not None and after.leader == second and after.isr == (second,)
        assert main(unclean) == 0
        assert "Valid replica already elected" in capsys.readouterr().out
    finally:
        cluster.start_broker(first)
