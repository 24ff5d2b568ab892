"""``poll(timeout_ms)`` returns within its timeout while the group rebalances (Kafka's
consumer does since KIP-266): the commit before a rebalance, the committed-offset lookup of
new partitions and the join itself go on across polls instead of blocking one. Real broker
and consumer processes; the broker is paused (SIGSTOP) or members are killed (SIGKILL)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from spark_mq.broker.local import broker_status, stop_broker
from spark_mq.client import Admin, Consumer, Producer, TopicPartition

TIMEOUT_MS = 500
#: What a poll may take beyond its timeout: one pass of its loop on a busy two-core machine.
SLACK_S = 1.0


@pytest.fixture
def mq(tmp_path: Path) -> Any:
    directory = tmp_path / "mq"
    with Admin(path=directory) as admin:
        admin.create_topic("t", 4)
        admin.create_topic("u", 2)
    with Producer(path=directory) as producer:
        for i in range(4000):
            producer.send("t", b"%d" % i)
    yield directory
    stop_broker(directory)


def _timed_poll(consumer: Consumer) -> tuple[float, int]:
    start = time.monotonic()
    records = consumer.poll(timeout_ms=TIMEOUT_MS)
    return time.monotonic() - start, sum(len(r) for r in records.values())


def test_a_rebalance_against_a_paused_broker_does_not_hold_poll(mq: Path) -> None:
    consumer = Consumer(
        path=mq, group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=60_000
    )
    try:
        consumer.subscribe(["t"])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 1000:
            assert time.monotonic() < deadline
            seen += _timed_poll(consumer)[1]
        status = broker_status(mq)
        assert status is not None
        os.kill(status.pid, signal.SIGSTOP)
        try:
            # A new subscription means a rebalance, and auto-commit commits before it: to a
            # broker that does not answer. Before, this poll waited for the commit (up to
            # default.api.timeout.ms, 60 s).
            consumer.subscribe(["t", "u"])
            durations = [_timed_poll(consumer)[0] for _ in range(4)]
        finally:
            os.kill(status.pid, signal.SIGCONT)
        assert max(durations) <= TIMEOUT_MS / 1000 + SLACK_S, durations
        # Once the broker answers again, the commit and the rebalance complete.
        deadline = time.monotonic() + 60
        while TopicPartition("u", 0) not in consumer.assignment():
            assert time.monotonic() < deadline, "the rebalance never completed"
            _timed_poll(consumer)
        committed = consumer.committed([TopicPartition("t", p) for p in range(4)])
        assert sum(c.offset for c in committed.values() if c is not None) >= 1000
    finally:
        consumer.close()


MEMBER = textwrap.dedent(
    """
    import signal, sys, time
    from spark_mq.client import Consumer
    directory, log_path, timeout_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    log = open(log_path, "a", buffering=1)
    consumer = Consumer(path=directory, group_id="workers", auto_offset_reset="earliest",
                        session_timeout_ms=6000, heartbeat_interval_ms=500)
    consumer.subscribe(["t"])
    while not stop:
        start = time.monotonic()
        records = consumer.poll(timeout_ms=timeout_ms)
        took = time.monotonic() - start
        owned = " ".join(str(tp.partition) for tp in sorted(consumer.assignment()))
        log.write(f"{took:.3f} {sum(len(r) for r in records.values())} [{owned}]\\n")
    consumer.close()
    """
)


ALL_PARTITIONS = {"0", "1", "2", "3"}


def _owned_last(members: dict[str, tuple[Any, Path]], killed: list[str]) -> set[str]:
    """The partitions the live members' latest polls own (from their logs)."""
    owned: set[str] = set()
    for name, (_, log) in members.items():
        if name in killed or not log.exists():
            continue
        lines = [line for line in log.read_text().split("\n") if line.count(" ") >= 2]
        if lines:
            owned.update(lines[-1].split(" ", 2)[2].strip("[]").split())
    return owned


@pytest.mark.slow
def test_members_killed_during_rebalances_leave_the_others_polls_on_time(
    mq: Path, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    seed = int(os.environ.get("SPARK_MQ_CRASH_SEED", random.randrange(1 << 30)))
    print(f"fault schedule seed: {seed} (SPARK_MQ_CRASH_SEED={seed} replays it)")
    rng = random.Random(seed)
    script = tmp_path / "member.py"
    script.write_text(MEMBER)

    def start(name: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        proc = subprocess.Popen(
            [sys.executable, str(script), str(mq), str(log), str(TIMEOUT_MS)], env=subprocess_env
        )
        return proc, log

    members = {f"m{i}": start(f"m{i}") for i in range(3)}
    killed: list[str] = []
    try:
        time.sleep(3)
        for round_ in range(2):
            # A member joins (a rebalance starts) and another is killed while it runs.
            newcomer = f"n{round_}"
            members[newcomer] = start(newcomer)
            time.sleep(rng.uniform(0.3, 1.5))
            victim = rng.choice(sorted(set(members) - set(killed) - {newcomer}))
            members[victim][0].send_signal(signal.SIGKILL)
            members[victim][0].wait(30)
            killed.append(victim)
            print(f"round {round_}: {newcomer} joined, {victim} killed")
            time.sleep(8)  # past the killed member's session: the group settles
        # On a loaded machine the last rebalance may take longer: give the survivors until
        # their latest polls own every partition (the assertions below check the rest).
        deadline = time.monotonic() + 30
        while _owned_last(members, killed) != ALL_PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        for proc, _ in members.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _ in members.values():
            proc.wait(60)
    assert len(killed) == 2
    owned_at_end: set[str] = set()
    for name, (_, log) in members.items():
        if name in killed:
            continue
        lines = log.read_text().split("\n")
        polls = [line.split(" ", 2) for line in lines if line]
        assert polls, f"{name} never polled"
        # The first poll connects, looks the group up and joins: not bounded by the timeout.
        slow = [
            float(took) for took, _, _ in polls[1:] if float(took) > TIMEOUT_MS / 1000 + SLACK_S
        ]
        assert not slow, f"{name}: polls of {slow} s with timeout_ms={TIMEOUT_MS} (seed {seed})"
        owned_at_end.update(polls[-1][2].strip("[]").split())
    # The killed members' partitions moved to the others.
    assert owned_at_end == ALL_PARTITIONS, f"owned at the end: {owned_at_end} (seed {seed})"
