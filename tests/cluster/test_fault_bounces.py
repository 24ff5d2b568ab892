"""Kafka's replication system test with Jepsen's queue checks, on a real three-broker
LocalCluster: a topic with replication factor 3 and ``min.insync.replicas=2``, an idempotent
acks=all producer sending numbered records and a consumer reading them, while a broker is
bounced five times in a row:

- hard bounce: the current leader of a partition is killed (SIGKILL) and started again;
- clean bounce: the same with SIGTERM (``LocalCluster.stop_broker``: a clean stop);
- controller bounce: the controller's broker is killed and started again.

At the end every acknowledged record is read at the offset it was acknowledged at, no
record is read twice, no offset holds two records (``queue_workload.check``), both by the
consumer that read during the faults and by a fresh one reading everything after them; and
every replica's log is the same, byte for byte.

Each test prints its seed and the faults it injected, and asserts each happened: the
victim's process is gone, the partition's leader epoch (or the controller epoch) moved, the
broker came back into every ISR, and the producer was acknowledged again after each.
``FAULT_SEED=<n>`` replays a schedule (which partition and broker, how long between faults).

One cluster is shared by the tests of this module; each has a topic of its own and leaves
every broker running with a full ISR.
"""

from __future__ import annotations

import dataclasses
import random
import time

import pytest
from cluster_fixtures import ClusterFactory
from queue_workload import (
    FAULT_BROKER_PROPERTIES,
    SESSION_TIMEOUT_MS,
    NumberedProducer,
    QueueReader,
    check,
    read_all,
)
from waiting import wait_for

from spark_mq import Admin
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import read_partition_state
from spark_mq.cluster.local_cluster import LocalCluster, process_is

pytestmark = pytest.mark.slow

PARTITIONS = 2
BOUNCES = 5


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3, session_timeout_ms=SESSION_TIMEOUT_MS, broker_properties=FAULT_BROKER_PROPERTIES
    )


@dataclasses.dataclass
class Fault:
    """One injected fault, as printed and checked."""

    kind: str
    broker: int
    pid: int
    partition: int
    leader_epoch_before: int
    leader_epoch_after: int = -1
    controller_epoch_before: int = -1
    controller_epoch_after: int = -1
    new_leader: int = -1
    down_s: float = 0.0
    acked_before: int = 0
    acked_after: int = 0


def _state(zk: ZkClient, topic: str, partition: int) -> tuple[int, int, list[int]]:
    found = read_partition_state(zk, topic, partition)
    assert found is not None
    return found.value.leader, found.value.leader_epoch, sorted(found.value.isr)


def _full_isr(cluster: LocalCluster, zk: ZkClient, topic: str) -> bool:
    return all(
        _state(zk, topic, p)[2] == sorted(cluster.broker_ids) and _state(zk, topic, p)[0] > 0
        for p in range(PARTITIONS)
    )


def _create(cluster: LocalCluster, zk: ZkClient, topic: str) -> None:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_for(
        lambda: (
            all(read_partition_state(zk, topic, p) for p in range(PARTITIONS))
            and _full_isr(cluster, zk, topic)
        ),
        30,
    )


def _bounce(
    cluster: LocalCluster,
    zk: ZkClient,
    topic: str,
    producer: NumberedProducer,
    rng: random.Random,
    *,
    kind: str,
) -> Fault:
    """One fault of ``kind`` ("hard", "clean" or "controller"), then the broker back and
    in every ISR again; the fault as it happened."""
    time.sleep(rng.uniform(0.3, 1.5))  # records flowing before the fault
    partition = rng.randrange(PARTITIONS)
    leader, epoch, _ = _state(zk, topic, partition)
    controller, controller_epoch = cluster.controller_id(), cluster.controller_epoch()
    assert controller is not None and controller_epoch is not None
    victim = controller if kind == "controller" else leader
    pid = int(cluster.state["brokers"][str(victim)]["pid"])
    fault = Fault(kind, victim, pid, partition, epoch, controller_epoch_before=controller_epoch)
    fault.acked_before = producer.acked_count()
    started = time.monotonic()
    if kind == "clean":
        cluster.stop_broker(victim)
    else:
        cluster.kill(victim)
    assert not process_is(pid, str(cluster.properties_path(victim)))
    assert cluster.state["brokers"][str(victim)]["pid"] is None
    # Every partition the victim led has moved (with a new leader epoch), and it has left
    # every ISR (the controller does that with a new leader epoch too).
    wait_for(
        lambda: all(
            _state(zk, topic, p)[0] not in (victim, -1) and victim not in _state(zk, topic, p)[2]
            for p in range(PARTITIONS)
        ),
        SESSION_TIMEOUT_MS / 1000 + 30,
    )
    fault.new_leader, fault.leader_epoch_after, _ = _state(zk, topic, partition)
    assert fault.leader_epoch_after > epoch
    if kind == "controller":
        wait_for(lambda: cluster.controller_id() not in (None, victim), 30)
        fault.controller_epoch_after = cluster.controller_epoch() or -1
        assert fault.controller_epoch_after > controller_epoch
    time.sleep(rng.uniform(0.0, 1.0))  # the broker stays down a while
    cluster.start_broker(victim)
    fault.down_s = round(time.monotonic() - started, 2)
    wait_for(lambda: _full_isr(cluster, zk, topic), 60)
    # The producer gets acknowledgements again once the partitions have leaders.
    wait_for(lambda: producer.acked_count() > fault.acked_before + 10, 60)
    fault.acked_after = producer.acked_count()
    print(f"fault: {fault}")
    return fault


def _run_bounces(cluster: LocalCluster, zk: ZkClient, rng: random.Random, kind: str) -> None:
    topic = f"bounce-{kind}"
    _create(cluster, zk, topic)
    producer = NumberedProducer(cluster.bootstrap_servers, topic, PARTITIONS).start()
    reader = QueueReader(cluster.bootstrap_servers, topic, PARTITIONS).start()
    faults = []
    try:
        for _ in range(BOUNCES):
            faults.append(_bounce(cluster, zk, topic, producer, rng, kind=kind))
        time.sleep(rng.uniform(0.3, 1.0))
    finally:
        producer.stop()
    print(
        f"schedule ({kind}): "
        + "; ".join(
            f"{f.kind} broker {f.broker} (pid {f.pid}, p{f.partition} epoch "
            f"{f.leader_epoch_before}->{f.leader_epoch_after}, down {f.down_s} s)"
            for f in faults
        )
    )
    assert len(faults) == BOUNCES
    acked_numbers = {n for _, _, n in producer.acknowledged}
    print(
        f"sent {producer.sent}, acknowledged {len(producer.acknowledged)}, "
        f"failed {len(producer.failed)} {producer.failed[:5]}"
    )
    # The idempotent producer rides over every fault within delivery.timeout.ms.
    assert not producer.failed
    try:
        assert reader.read_up_to(acked_numbers, 60), check(producer.acknowledged, reader.snapshot())
    finally:
        reader.stop()
    reads = reader.snapshot()
    live = check(producer.acknowledged, reads)
    print(f"consumer errors (retried): {len(reader.errors)} {reader.errors[:3]}")
    print(f"live consumer: {live}")
    assert live.ok, str(live)
    # One consumer that follows leaders delivers each offset once: its position never goes
    # back over a failover.
    assert len({(p, o) for p, o, _ in reads}) == len(reads)
    final = check(producer.acknowledged, read_all(cluster.bootstrap_servers, topic, PARTITIONS, 60))
    print(f"fresh consumer: {final}")
    assert final.ok, str(final)
    # Nothing beyond what was sent, and no record the producer did not see answered.
    assert final.read == len(producer.acknowledged)
    # Every replica holds the same batches, byte for byte.
    for p in range(PARTITIONS):
        wait_for(
            lambda p=p: len({_log_bytes(cluster, b, topic, p) for b in cluster.broker_ids}) == 1
        )


def _log_bytes(cluster: LocalCluster, broker_id: int, topic: str, partition: int) -> bytes:
    files = sorted((cluster.log_dir(broker_id) / f"{topic}-{partition}").glob("*.log"))
    return b"".join(path.read_bytes() for path in files)


def test_hard_bounce_of_the_leader(cluster: LocalCluster, zk: ZkClient, rng: random.Random) -> None:
    _run_bounces(cluster, zk, rng, "hard")


def test_clean_bounce_of_the_leader(
    cluster: LocalCluster, zk: ZkClient, rng: random.Random
) -> None:
    _run_bounces(cluster, zk, rng, "clean")


def test_hard_bounce_of_the_controller(
    cluster: LocalCluster, zk: ZkClient, rng: random.Random
) -> None:
    _run_bounces(cluster, zk, rng, "controller")
