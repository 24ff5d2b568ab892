"""The exactly-once copier on a replicated cluster: a streaming query reads a topic of a
three-broker LocalCluster (replication factor 3, ``min.insync.replicas`` 2, the internal
topics likewise) through ``bootstrap.servers``, transforms each record and writes it to
another topic with the sink, while a seeded schedule kills (SIGKILL) the leader of an input
partition, the leader of an output partition, the query's transaction coordinator (the
leader of the ``__transaction_state`` partition of its two-phase owner), its source's group
coordinator and the controller, restarting each, and kills the Spark driver twice,
restarting it from its checkpoint. Each fault is injected while a micro-batch is running
(Spark has logged its offsets and not yet its commit), each in a later micro-batch than the
one before, and the test asserts that it was.

At the end the read_committed output equals the transformed input exactly (the same
multiset), no transaction of the query is left open or prepared, and the source's
``group.id`` commits went on after its group coordinator moved.

The seed is printed; set SPARK_MQ_CRASH_SEED to replay a schedule.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sink_helpers import driver_env

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.coordinator_topic import coordinator_partition
from spark_mq.cluster.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DRIVER = Path(__file__).with_name("sink_copier_driver.py")
RECORDS = 1_200
#: Records added when a run finishes before the schedule is done.
MORE_RECORDS = 600
#: Small micro-batches, so that many run while the faults are injected.
MAX_OFFSETS_PER_TRIGGER = 40
GROUP = "cluster-copier-lag"
#: A killed broker's session ends, and its partitions move, this long after the kill.
SESSION_TIMEOUT_MS = 4000
BROKER_FAULTS = (
    "input leader",
    "output leader",
    "transaction coordinator",
    "group coordinator",
    "controller",
)
DRIVER_KILLS = 2
#: Seconds between two faults at least; and each fault hits a later micro-batch than the
#: one before it, so that the query makes progress in between.
FAULT_GAP_S = 1.0
#: A run that takes longer than this is stuck: the test fails rather than hangs.
RUN_LIMIT_S = 300
MAX_RUNS = DRIVER_KILLS + 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(
        tmp_path_factory.mktemp("spark-cluster") / "c",
        3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        broker_properties={
            "min.insync.replicas": "2",
            "replica.lag.time.max.ms": "3000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "200",
        },
    )
    try:
        yield local.start()
    finally:
        local.stop()


def _log_ids(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def _running_batch(checkpoint: Path) -> int | None:
    """The micro-batch Spark is running: its offsets are logged, its commit is not."""
    if not (checkpoint / "offsets").is_dir():
        return None
    started = _log_ids(checkpoint / "offsets")
    done = _log_ids(checkpoint / "commits") if (checkpoint / "commits").is_dir() else []
    if not started or (done and done[-1] >= started[-1]):
        return None
    return started[-1]


def _batch_ends(checkpoint: Path) -> dict[int, dict[int, int]]:
    """Each logged micro-batch's end offsets of the input topic, by partition."""
    ends = {}
    for batch in _log_ids(checkpoint / "offsets"):
        last = (checkpoint / "offsets" / str(batch)).read_text().strip().splitlines()[-1]
        ends[batch] = {int(p): int(o) for p, o in json.loads(last)["in"].items()}
    return ends


def _leader(cluster: LocalCluster, topic: str, partition: int) -> int | None:
    """The partition's leader in ZooKeeper; None before it is online."""
    (view,) = (p for p in cluster.partitions() if (p.topic, p.partition) == (topic, partition))
    return None if view.state is None or view.state.leader < 0 else view.state.leader


def _coordinator(cluster: LocalCluster, topic: str, key: str) -> int | None:
    """The leader of ``key``'s partition of ``topic``; None before the topic exists (its
    first use creates it)."""
    count = sum(1 for p in cluster.partitions() if p.topic == topic)
    return _leader(cluster, topic, coordinator_partition(key, count)) if count else None


def _victim(cluster: LocalCluster, role: str, checkpoint: Path, rng: random.Random) -> int | None:
    """The broker that has ``role`` now; None while no broker has it yet."""
    if role == "input leader":
        return _leader(cluster, "in", rng.randrange(3))
    if role == "output leader":
        return _leader(cluster, "out", rng.randrange(2))
    if role == "transaction coordinator":
        query_id = json.loads((checkpoint / "metadata").read_text())["id"]
        return _coordinator(cluster, "__transaction_state", f"spark-query-{query_id}")
    if role == "group coordinator":
        return _coordinator(cluster, "__consumer_offsets", GROUP)
    controller = cluster.controller_id()
    assert controller is not None, "no controller"
    return controller


def _wait_full_isr(cluster: LocalCluster, timeout_s: float = 60) -> None:
    """Until every partition's ISR holds all its replicas again (a restarted broker caught
    up), so that the next kill never leaves a partition below min.insync.replicas."""
    deadline = time.monotonic() + timeout_s
    while True:
        short = [
            f"{p.topic}-{p.partition}"
            for p in cluster.partitions()
            if p.state is None or sorted(p.state.isr) != sorted(p.replicas)
        ]
        if not short:
            return
        assert time.monotonic() < deadline, f"ISR not full again after {timeout_s} s: {short}"
        time.sleep(0.2)


def _read_output(bootstrap: str) -> list[bytes]:
    parts = [TopicPartition("out", p) for p in range(2)]
    with Consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign(parts)
        ends = consumer.end_offsets(parts)
        got: list[bytes] = []
        for _ in range(10_000):
            if all(consumer.position(tp) >= ends[tp] for tp in parts):
                break
            got.extend(consumer.poll_batch(timeout_ms=200).column("value").to_pylist())
        else:
            raise AssertionError(f"could not read out to its end {ends}")
    return sorted(got)


def test_the_copier_outputs_each_record_once_through_broker_and_driver_kills(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SPARK_MQ_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    schedule = [*BROKER_FAULTS, *["driver"] * DRIVER_KILLS]
    rng.shuffle(schedule)
    print(f"fault schedule (seed {seed}, SPARK_MQ_CRASH_SEED={seed} replays it): {schedule}")
    bootstrap = cluster.bootstrap_servers
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topic("in", partitions=3, replication_factor=3)
        admin.create_topic("out", partitions=2, replication_factor=3)
    inputs: list[str] = []

    def produce(count: int) -> None:
        with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            for _ in range(count):
                value = f"event-{len(inputs)}-{rng.randrange(1000)}"
                producer.send("in", value.encode(), key=str(len(inputs) % 11).encode())
                inputs.append(value)

    produce(RECORDS)
    checkpoint = tmp_path / "checkpoint"
    log = tmp_path / "driver.log"
    started = tmp_path / "started"
    injected: list[tuple[str, int | None, int]] = []
    pending = list(schedule)
    finished = False
    for run in range(MAX_RUNS):
        started.unlink(missing_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(DRIVER),
                    *("--bootstrap-servers", bootstrap, "--checkpoint", str(checkpoint)),
                    *("--input", "in", "--output", "out", "--group-id", GROUP),
                    *("--max-offsets-per-trigger", str(MAX_OFFSETS_PER_TRIGGER)),
                    *("--started-file", str(started)),
                ],
                env=driver_env(),
                start_new_session=True,
                stdout=out,
                stderr=out,
            )
        killed = False
        try:
            deadline = time.monotonic() + RUN_LIMIT_S
            last_fault = time.monotonic()
            while proc.poll() is None:
                assert time.monotonic() < deadline, f"run {run} is stuck (seed {seed}); see {log}"
                # Before its query started, a restarted driver has not taken up the batch
                # its predecessor left unfinished yet.
                batch = _running_batch(checkpoint) if started.exists() else None
                later = batch is not None and (not injected or batch > injected[-1][2])
                if pending and later and time.monotonic() - last_fault > FAULT_GAP_S:
                    role = pending[0]
                    victim = None if role == "driver" else _victim(cluster, role, checkpoint, rng)
                    if role != "driver" and victim is None:
                        # Its topic does not exist yet: the next fault first.
                        pending.append(pending.pop(0))
                        time.sleep(0.1)
                        continue
                    pending.pop(0)
                    if role == "driver":
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                        injected.append((role, None, batch))
                        killed = True
                        break
                    assert victim is not None
                    cluster.kill(victim)
                    injected.append((role, victim, batch))
                    print(f"run {run}: killed broker {victim} ({role}) during batch {batch}")
                    cluster.start_broker(victim)
                    _wait_full_isr(cluster)
                    last_fault = time.monotonic()
                time.sleep(0.1)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if killed:
            print(f"run {run}: killed the driver during batch {injected[-1][2]}")
            continue
        assert proc.returncode == 0, f"driver exit {proc.returncode} (seed {seed}); see {log}"
        if not pending:
            finished = True
            break
        produce(MORE_RECORDS)
    assert finished, f"schedule not done after {MAX_RUNS} runs: {pending} (seed {seed})"
    # Every fault of the schedule happened, each during a running micro-batch.
    assert sorted(role for role, _, _ in injected) == sorted(schedule)
    during = [batch for _, _, batch in injected]
    assert during == sorted(set(during)), f"faults during batches {during} (seed {seed})"
    # The output is the transformed input, each record once.
    expected = sorted(f"copied-{v.upper()}".encode() for v in inputs)
    got = _read_output(bootstrap)
    assert len(got) == len(expected), f"{len(got)} records out for {len(expected)} (seed {seed})"
    assert got == expected, f"output differs from the transformed input (seed {seed})"
    with Admin(bootstrap_servers=bootstrap) as admin:
        hanging = admin.list_transactions(states=["Ongoing", "Prepared"], prefix="spark-query-")
        assert not hanging, f"transactions left open: {hanging} (seed {seed})"
        committed = admin.list_group_offsets(GROUP)
    # The group's commits went on after its coordinator moved: it holds the end of a batch
    # that started after that fault.
    (moved_during,) = (batch for role, _, batch in injected if role == "group coordinator")
    ends = _batch_ends(checkpoint)
    at = {tp.partition: meta.offset for tp, meta in committed.items() if tp.topic == "in"}
    later = [b for b, end in ends.items() if b > moved_during and end == at]
    assert later, f"group {GROUP} holds {at}, no batch end after batch {moved_during} (seed {seed})"
