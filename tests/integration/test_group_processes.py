"""Consumers of one group in separate processes; one is killed with SIGKILL. Its partitions
move to the others after the session timeout, and with commit-after-processing every record
is processed at least once, duplicates coming only from ranges never committed."""

from __future__ import annotations

import collections
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from group_testing import GROUP_BROKER, create_topic, produce, servers

from spark_mq import Admin

WORKER = Path(__file__).with_name("group_worker.py")
PARTITIONS = 6
PER_PARTITION = 400


def read_log(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [line.split() for line in lines if line.endswith(tuple("0123456789"))]


def wait_until(condition: Any, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_killed_member_s_partitions_move_and_every_record_is_processed(
    start_broker: Any, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    broker = start_broker(overrides=GROUP_BROKER)
    create_topic(broker, "jobs", PARTITIONS)
    produce(broker, "jobs", PER_PARTITION, PARTITIONS)
    logs = [tmp_path / f"worker-{n}.log" for n in range(3)]
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), servers(broker), "jobs", str(log)],
            env=subprocess_env,
            stderr=open(tmp_path / f"worker-{n}.stderr", "wb"),  # noqa: SIM115
        )
        for n, log in enumerate(logs)
    ]
    admin = Admin(bootstrap_servers=servers(broker))
    try:

        def group_of(size: int) -> bool:
            d = admin.describe_group("workers")
            owned = [tp for m in d.members for tp in m.assignment]
            return d.state == "Stable" and len(d.members) == size and len(owned) == PARTITIONS

        wait_until(lambda: group_of(3), "three members sharing the partitions")
        victim_log = logs[0]
        # Kill the first worker once it has processed part of its share, but not all.
        wait_until(
            lambda: sum(1 for f in read_log(victim_log) if f[0] == "P") >= 60,
            "the victim to process some records",
        )
        workers[0].kill()
        workers[0].wait(30)
        processed_by_victim = {(int(f[1]), int(f[2])) for f in read_log(victim_log) if f[0] == "P"}
        assert len(processed_by_victim) < PER_PARTITION * 2, "the victim had finished"

        def everything_processed() -> bool:
            seen = {(int(f[1]), int(f[2])) for log in logs for f in read_log(log) if f[0] == "P"}
            return len(seen) == PARTITIONS * PER_PARTITION

        wait_until(everything_processed, "every record to be processed")
        # The victim's partitions moved (after its session timed out) to the two others.
        wait_until(lambda: group_of(2), "two members sharing the partitions")
        described = admin.describe_group("workers")
        assert {tp.partition for m in described.members for tp in m.assignment} == set(
            range(PARTITIONS)
        )
    finally:
        for w in workers[1:]:
            w.terminate()
        for w in workers:
            w.wait(60)
        admin.close()

    processors: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
    committed: dict[tuple[int, int], int] = collections.defaultdict(int)  # (worker, p) -> max
    for n, log in enumerate(logs):
        for fields in read_log(log):
            if fields[0] == "P":
                processors[(int(fields[1]), int(fields[2]))].append(n)
            elif fields[0] == "C":
                key = (n, int(fields[1]))
                committed[key] = max(committed[key], int(fields[2]))
    assert set(processors) == {
        (p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)
    }  # at least once
    for (partition, offset), who in processors.items():
        if len(who) > 1:
            # A duplicate: some worker processed it and never committed past it.
            assert any(committed[(n, partition)] <= offset for n in who), (partition, offset)
