"""Partition reassignment (KIP-455) on a real three-broker LocalCluster, whose own controller
moves the replicas:

- a partition of replication factor 2 moves from [a, b] to [b, c] while a producer writes
  with acks=all (min.insync.replicas=2): every acknowledged record is read afterwards from
  each new replica (the second after the first is stopped), the leaving broker's log is
  deleted, and every ISR seen in ZooKeeper during the move has at least two members;
- a move to a broker that is down stays pending (``--verify`` says so; the ISR keeps its two
  replicas), survives a controller failover (the new controller reads it from ZooKeeper)
  and finishes once the broker is back; the broker that left sets its replica aside;
- a cancelled move goes back to the replicas before it; bad plans are refused with typed
  errors.

One cluster is shared by the tests of this module: each uses topics of its own.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from cluster_fixtures import SHORT_SESSION_MS, ClusterFactory, replica_properties
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import read_partition_state, read_topic_assignment
from spark_mq.cli import main
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3,
        session_timeout_ms=SHORT_SESSION_MS,
        broker_properties=replica_properties(lag_time_max_ms=5000),
    )


def _admin(cluster: LocalCluster) -> Admin:
    live = [b for b in cluster.broker_ids if cluster.broker_running(b)]
    servers = ",".join(cluster.broker_server(b) for b in live)
    return Admin(bootstrap_servers=servers, config={"default.api.timeout.ms": 30000})


def _create(cluster: LocalCluster, zk: ZkClient, topic: str, partitions: int) -> None:
    """``topic`` with replication factor 2 and min.insync.replicas 2, every ISR full."""
    with _admin(cluster) as admin:
        admin.create_topic(topic, partitions, 2, {"min.insync.replicas": "2"})

    def full() -> bool:
        states = [read_partition_state(zk, topic, p) for p in range(partitions)]
        return all(s is not None and len(s.value.isr) == 2 for s in states)

    wait_for(full, timeout_s=30)


def _replicas(zk: ZkClient, topic: str, partition: int) -> tuple[int, ...]:
    assignment = read_topic_assignment(zk, topic)
    assert assignment is not None
    return assignment.partitions[partition]


def _read_all(cluster: LocalCluster, broker: int, tp: TopicPartition, count: int) -> list[bytes]:
    with Consumer(bootstrap_servers=cluster.broker_server(broker)) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(timeout_ms=500).get(tp, [])]
    return got


def _log_dirs(cluster: LocalCluster, broker: int, topic: str, partition: int) -> list[str]:
    return sorted(p.name for p in Path(cluster.log_dir(broker)).glob(f"{topic}-{partition}*"))


class _IsrSampler:
    """Reads the partition's state in ZooKeeper every 10 ms on a thread of its own."""

    def __init__(self, zk: ZkClient, topic: str, partition: int) -> None:
        self.samples: list[tuple[int, tuple[int, ...]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(zk, topic, partition), daemon=True)
        self._thread.start()

    def _run(self, zk: ZkClient, topic: str, partition: int) -> None:
        while not self._stop.wait(0.01):
            state = read_partition_state(zk, topic, partition)
            if state is not None:
                self.samples.append((state.value.leader, state.value.isr))

    def stop(self) -> list[tuple[int, tuple[int, ...]]]:
        self._stop.set()
        self._thread.join(5)
        return self.samples


def test_a_move_under_acks_all_load_keeps_every_record_and_two_in_sync_replicas(
    cluster: LocalCluster, zk: ZkClient
) -> None:
    topic = "moved"
    _create(cluster, zk, topic, 1)
    tp = TopicPartition(topic, 0)
    a, b = _replicas(zk, topic, 0)
    (c,) = set(cluster.broker_ids) - {a, b}
    assert _log_dirs(cluster, a, topic, 0) == [f"{topic}-0"]
    acked: list[bytes] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def produce() -> None:
        config = {"acks": "all", "delivery.timeout.ms": 60000, "retry.backoff.max.ms": 200}
        try:
            with Producer(bootstrap_servers=cluster.bootstrap_servers, config=config) as producer:
                n = 0
                while not stop.is_set():
                    values = [f"r{n + i}".encode() for i in range(20)]
                    futures = [(v, producer.send(topic, v, partition=0)) for v in values]
                    for value, future in futures:
                        future.get(timeout=60)
                        acked.append(value)
                    n += len(values)
        except BaseException as exc:
            failures.append(exc)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    wait_for(lambda: len(acked) >= 100 or failures, timeout_s=30)
    sampler = _IsrSampler(zk, topic, 0)
    with _admin(cluster) as admin:
        admin.alter_partition_reassignments({tp: [b, c]})
        wait_for(lambda: not admin.list_partition_reassignments(), timeout_s=45)
    at_move_end = len(acked)
    wait_for(lambda: len(acked) >= at_move_end + 100 or failures, timeout_s=30)
    samples = sampler.stop()
    stop.set()
    writer.join(60)
    assert not failures, failures
    assert _replicas(zk, topic, 0) == (b, c)
    assignment = read_topic_assignment(zk, topic)
    assert assignment is not None and not assignment.adding and not assignment.removing
    # Data never below the replication factor: every state seen had two in-sync replicas,
    # and the sampler saw the move (the ISR with the new replica, then without the old).
    assert samples and min(len(isr) for _leader, isr in samples) >= 2, samples
    assert any(c in isr for _leader, isr in samples)
    final = read_partition_state(zk, topic, 0)
    assert final is not None and set(final.value.isr) == {b, c} and final.value.leader in (b, c)
    wait_for(lambda: not _log_dirs(cluster, a, topic, 0), timeout_s=30)
    # Every acknowledged record from the new leader, then from the other new replica alone.
    leader = final.value.leader
    other = c if leader == b else b
    got = _read_all(cluster, leader, tp, len(acked))
    assert got[: len(acked)] == acked
    cluster.stop_broker(leader)
    try:
        wait_for(
            lambda: (
                (s := read_partition_state(zk, topic, 0)) is not None and s.value.leader == other
            ),
            timeout_s=30,
        )
        assert _read_all(cluster, other, tp, len(acked))[: len(acked)] == acked
    finally:
        cluster.start_broker(leader)


def test_a_move_to_a_stopped_broker_waits_for_it_across_a_controller_failover(
    cluster: LocalCluster, zk: ZkClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "parked"
    _create(cluster, zk, topic, 3)
    controller = cluster.controller_id()
    assert controller is not None
    down = next(x for x in cluster.broker_ids if x != controller)
    # The one partition without ``down``: its replicas are the controller and one other.
    partition = next(p for p in range(3) if down not in _replicas(zk, topic, p))
    (stay,) = set(_replicas(zk, topic, partition)) - {controller}
    tp = TopicPartition(topic, partition)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, config={"acks": "all"}) as p:
        for i in range(50):
            p.send(topic, f"v{i}".encode(), partition=partition)
        p.flush()
    cluster.stop_broker(down)
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [{"topic": topic, "partition": partition, "replicas": [stay, down]}],
            }
        )
    )
    servers = ",".join(cluster.broker_server(b) for b in (controller, stay))
    base = ["cluster", "reassign-partitions", "--bootstrap-server", servers]
    assert main([*base, "--reassignment-json-file", str(plan), "--execute"]) == 0
    out = capsys.readouterr().out
    assert "Successfully started partition reassignments for" in out
    assert f'"partition":{partition},"replicas":[{controller},{stay}]' in out or (
        f'"partition":{partition},"replicas":[{stay},{controller}]' in out
    )  # the rollback plan: the replicas before the move
    with _admin(cluster) as admin:
        ongoing = admin.list_partition_reassignments()
    assert ongoing[tp].replicas == (stay, down, controller)
    assert ongoing[tp].adding_replicas == (down,)
    assert ongoing[tp].removing_replicas == (controller,)
    assert main([*base, "--reassignment-json-file", str(plan), "--verify"]) == 0
    assert f"Reassignment of partition {topic}-{partition} is still in progress." in (
        capsys.readouterr().out
    )
    assert main(["topics", "describe", topic, "--bootstrap-server", servers]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if f"Partition: {partition}\t" in x)
    assert f"Adding Replicas: {down}\tRemoving Replicas: {controller}" in line
    state = read_partition_state(zk, topic, partition)
    assert state is not None and len(state.value.isr) == 2  # nobody left yet
    # The controller goes; the next one reads the move from ZooKeeper and carries it on.
    cluster.stop_broker(controller)
    try:
        wait_for(lambda: cluster.controller_id() == stay, timeout_s=30)
        with _admin(cluster) as admin:
            wait_for(lambda: tp in admin.list_partition_reassignments(), timeout_s=30)
            cluster.start_broker(down)
            wait_for(lambda: not admin.list_partition_reassignments(), timeout_s=45)
    finally:
        cluster.start_broker(controller)
    assert _replicas(zk, topic, partition) == (stay, down)
    state = read_partition_state(zk, topic, partition)
    assert state is not None and set(state.value.isr) == {stay, down}
    assert _read_all(cluster, stay, tp, 50) == [f"v{i}".encode() for i in range(50)]
    # The broker that was down when its replica left sets it aside when it comes back.
    wait_for(
        lambda: (
            (names := _log_dirs(cluster, controller, topic, partition))
            and all(n.endswith(".stray") for n in names)
        ),
        timeout_s=30,
    )
    verify = [*base[:3], cluster.broker_server(stay), "--reassignment-json-file", str(plan)]
    assert main([*verify, "--verify"]) == 0
    assert f"Reassignment of partition {topic}-{partition} is completed." in capsys.readouterr().out


def test_verify_wait_shows_the_bytes_copied_then_the_result(
    cluster: LocalCluster, zk: ZkClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--verify --wait`` waits for a move to a paused broker until it runs again and has
    copied the replica, its progress bar (asked for: stderr is no terminal here) ending at
    all the bytes; without --progress it waits and verifies quietly."""
    topic = "waited"
    _create(cluster, zk, topic, 1)
    before = _replicas(zk, topic, 0)
    (newcomer,) = set(cluster.broker_ids) - set(before)
    stay = next(b for b in before if b != newcomer)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, config={"acks": "all"}) as p:
        for _ in range(100):
            p.send(topic, b"w" * 1000, partition=0)
        p.flush()
    plan = tmp_path / "plan.json"
    moves = [{"topic": topic, "partition": 0, "replicas": [stay, newcomer]}]
    plan.write_text(json.dumps({"version": 1, "partitions": moves}))
    servers = ",".join(cluster.broker_server(b) for b in before)
    base = ["cluster", "reassign-partitions", "--bootstrap-server", servers]
    base += ["--reassignment-json-file", str(plan)]
    # Paused (still registered, so a valid target) until the wait has begun.
    cluster.pause(newcomer)
    back = threading.Timer(1.0, cluster.resume, [newcomer])
    try:
        assert main([*base, "--execute"]) == 0
        capsys.readouterr()
        # A bounded wait gives up while the newcomer is paused, naming what still moves.
        assert main([*base, "--verify", "--wait", "--timeout-ms", "300"]) != 0
        _, err = capsys.readouterr()
        assert f"still moving: {topic}-0 (adding replicas on brokers [{newcomer}])" in err, err
        back.start()
        assert main([*base, "--verify", "--wait", "--progress"]) == 0
    finally:
        back.cancel()
        cluster.resume(newcomer)
    out, err = capsys.readouterr()
    assert f"Reassignment of partition {topic}-0 is completed." in out
    assert "100%" in err and "B/s" in err, err
    assert _replicas(zk, topic, 0) == (stay, newcomer)
    assert main([*base, "--verify", "--wait"]) == 0
    out, err = capsys.readouterr()
    assert "is completed." in out and err == ""


def test_cancelling_goes_back_and_bad_plans_are_refused(
    cluster: LocalCluster, zk: ZkClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "cancelled"
    # Three partitions of two replicas: every broker holds some, so a stopped one is still a
    # broker of the cluster a plan may name.
    _create(cluster, zk, topic, 3)
    tp = TopicPartition(topic, 0)
    before = _replicas(zk, topic, 0)
    (free,) = set(cluster.broker_ids) - set(before)
    with _admin(cluster) as admin:
        with pytest.raises(NoReassignmentInProgressError, match="nothing to cancel"):
            admin.alter_partition_reassignments({tp: None})
        with pytest.raises(InvalidReplicaAssignmentError, match="more than once"):
            admin.alter_partition_reassignments({tp: [free, free]})
        with pytest.raises(InvalidReplicaAssignmentError, match=r"brokers \[99\]"):
            admin.alter_partition_reassignments({tp: [free, 99]})
        with pytest.raises(UnknownTopicOrPartitionError, match="cancelled-7 does not exist"):
            admin.alter_partition_reassignments({(topic, 7): [free]})
        assert _replicas(zk, topic, 0) == before
        # A move that cannot finish (the free broker is stopped) is cancelled: back to before.
        cluster.stop_broker(free)
        try:
            admin.alter_partition_reassignments({tp: [before[0], free]})
            assert admin.list_partition_reassignments()[tp].adding_replicas == (free,)
            plan = tmp_path / "plan.json"
            entry = {"topic": topic, "partition": 0, "replicas": [before[0], free]}
            plan.write_text(json.dumps({"version": 1, "partitions": [entry]}))
            servers = ",".join(cluster.broker_server(b) for b in before)
            cancel = ["--bootstrap-server", servers, "--reassignment-json-file", str(plan)]
            assert main(["cluster", "reassign-partitions", *cancel, "--cancel"]) == 0
            assert f"cancelled partition reassignments for: {topic}-0" in capsys.readouterr().out
            assert admin.list_partition_reassignments() == {}
        finally:
            cluster.start_broker(free)
    assert _replicas(zk, topic, 0) == before
    assignment = read_topic_assignment(zk, topic)
    assert assignment is not None and not assignment.adding and not assignment.removing


def test_generate_proposes_a_plan_over_the_given_brokers(
    cluster: LocalCluster, zk: ZkClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "generated"
    _create(cluster, zk, topic, 3)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    code = main(
        [
            "cluster",
            "reassign-partitions",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--generate",
            "--topics-to-move-json-file",
            str(topics),
            "--broker-list",
            "1,2",
            "--json",
        ]
    )
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    current = {p["partition"]: p["replicas"] for p in document["current"]["partitions"]}
    assert current == {p: list(_replicas(zk, topic, p)) for p in range(3)}
    proposed = document["proposed"]["partitions"]
    assert sorted(p["partition"] for p in proposed) == [0, 1, 2]
    assert all(sorted(p["replicas"]) == [1, 2] for p in proposed)
