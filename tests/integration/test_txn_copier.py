"""Kafka's transactional copier system test, on the local broker of a directory: copier
processes (``txn_copier.py``) in one consumer group move every record of a multi-partition
input topic to an output topic in transactions that also commit the consumed offsets, while
copiers and the broker are killed with SIGKILL at seeded random times and restarted.

At the end, with ``read_committed``: the output holds every input record exactly once (no
duplicates, nothing missing), every transaction is seen whole (each output record carries
its transaction's token and size), and so no record of an aborted transaction was read.
The seed is printed; ``TXN_COPIER_SEED=N`` replays a run's schedule.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq import Admin, Consumer, Producer, SparkMQError, TopicPartition
from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.broker.dir_files import Endpoint

WORKER = Path(__file__).with_name("txn_copier.py")
REPO = Path(__file__).resolve().parents[2]
BROKER_CONFIG = {"broker.idle.exit.ms": "-1", "group.initial.rebalance.delay.ms": "0"}
INPUT_PARTITIONS = 4
OUTPUT_PARTITIONS = 3
RECORDS = 20_000
COPIERS = 3
GROUP = "copiers"


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    return out


class Copiers:
    """The copier processes, by id; each (re)start appends to its own stderr file."""

    def __init__(self, path: Path, logs: Path) -> None:
        self.path = path
        self.logs = logs
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, copier_id: int) -> None:
        with open(self.logs / f"copier-{copier_id}.stderr", "ab") as err:
            self.procs[copier_id] = subprocess.Popen(
                [sys.executable, str(WORKER), str(self.path), str(copier_id), "in", "out", GROUP],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env(),
            )

    def kill(self, copier_id: int) -> None:
        proc = self.procs[copier_id]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


@pytest.fixture
def mq(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "mq"
    ensure_broker(directory, config=BROKER_CONFIG)
    yield directory
    stop_broker(directory)


def kill_broker(path: Path) -> None:
    """SIGKILL the broker of ``path`` and start a new one (which recovers the log); a copier
    may start it first, through its client's ensure_broker."""
    endpoint = Endpoint.read(path)
    if endpoint is not None and endpoint.pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(endpoint.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(endpoint.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
    ensure_broker(path, config=BROKER_CONFIG)


def fill_input(path: Path) -> None:
    with Admin(path=path) as admin:
        admin.create_topic("in", partitions=INPUT_PARTITIONS)
        admin.create_topic("out", partitions=OUTPUT_PARTITIONS)
    with Producer(path=path) as producer:
        values = [str(i).encode() for i in range(RECORDS)]
        producer.send_batch(
            "in",
            pa.table(
                {"value": values, "partition": [i % INPUT_PARTITIONS for i in range(RECORDS)]}
            ),
        ).get(timeout=60)


def copied_everything(admin: Admin) -> bool:
    tps = [TopicPartition("in", p) for p in range(INPUT_PARTITIONS)]
    ends = admin.list_offsets(dict.fromkeys(tps, "latest"))
    committed = admin.list_group_offsets(GROUP)
    return all(tp in committed and committed[tp].offset >= ends[tp].offset for tp in tps)


def read_output(path: Path, level: str) -> list[bytes]:
    """Every value of ``out`` up to its end for ``level`` (the LSO for read_committed)."""
    tps = [TopicPartition("out", p) for p in range(OUTPUT_PARTITIONS)]
    with Admin(path=path) as admin:
        ends = {
            tp: o.offset
            for tp, o in admin.list_offsets(
                dict.fromkeys(tps, "latest"), isolation_level=level
            ).items()
        }
    consumer = Consumer(path=path, auto_offset_reset="earliest", isolation_level=level)
    consumer.assign(tps)
    values: list[bytes] = []
    deadline = time.monotonic() + 120
    try:
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the output could not be read to its end"
            values.extend(consumer.poll_batch(timeout_ms=200).column("value").to_pylist())
    finally:
        consumer.close()
    return values


@pytest.mark.slow
def test_copiers_and_broker_killed_at_random_copy_exactly_once(mq: Path, tmp_path: Path) -> None:
    seed = int(os.environ.get("TXN_COPIER_SEED", random.randrange(1 << 30)))
    print(f"TXN_COPIER_SEED={seed}")
    rng = random.Random(seed)
    fill_input(mq)
    copiers = Copiers(mq, tmp_path)
    for copier_id in range(COPIERS):
        copiers.start(copier_id)
    # The schedule: four copier kills and two broker kills, in a seeded order and rhythm.
    schedule = ["copier"] * 4 + ["broker"] * 2
    rng.shuffle(schedule)
    try:
        with Admin(path=mq) as admin:
            started = time.monotonic()
            for victim in schedule:
                time.sleep(rng.uniform(0.3, 1.5))
                if victim == "broker":
                    kill_broker(mq)
                else:
                    copier_id = rng.randrange(COPIERS)
                    copiers.kill(copier_id)
                    copiers.start(copier_id)
            deadline = time.monotonic() + 90
            while True:
                try:
                    if copied_everything(admin):
                        break
                except SparkMQError as exc:  # the broker may be restarting
                    print(f"progress check failed: {exc}")
                assert time.monotonic() < deadline, f"copying did not finish (seed {seed})"
                time.sleep(0.5)
            print(f"copied in {time.monotonic() - started:.1f} s")
    finally:
        copiers.stop_all()

    committed = read_output(mq, "read_committed")
    uncommitted = read_output(mq, "read_uncommitted")
    print(f"seed {seed}: {len(committed)} committed, {len(uncommitted)} written in all")
    ids: list[int] = []
    seen: dict[str, int] = collections.Counter()
    sizes: dict[str, int] = {}
    for value in committed:
        record, token, size = value.decode().split(",")
        ids.append(int(record))
        seen[token] += 1
        sizes[token] = int(size)
    duplicates = [i for i, n in collections.Counter(ids).items() if n > 1]
    assert not duplicates, (
        f"seed {seed}: {len(duplicates)} records copied twice, e.g. {duplicates[:5]}"
    )
    missing = set(range(RECORDS)) - set(ids)
    assert not missing, f"seed {seed}: {len(missing)} records missing, e.g. {sorted(missing)[:5]}"
    partial = {t: (n, sizes[t]) for t, n in seen.items() if n != sizes[t]}
    assert not partial, f"seed {seed}: transactions seen in part: {list(partial.items())[:5]}"
    assert len(uncommitted) >= len(committed)
