#!/usr/bin/env python
"""Consumer-group benchmark: how long a rebalance takes, and how fast offsets are committed.

Run from the repository root::

    .venv/bin/python benchmarks/bench_groups.py                            # ~6 minutes
    .venv/bin/python benchmarks/bench_groups.py --quick                    # ~40 s smoke run
    .venv/bin/python benchmarks/bench_groups.py --out docs/benchmarks.md   # also the doc

Everything talks to the embedded local broker of a fresh directory (``path=``, a Unix
socket), started with ``group.initial.rebalance.delay.ms=0``: the first rebalance of an empty
group otherwise waits 3 s for more members on purpose, which would measure the setting, not
the protocol. Consumers are threads of this process, each in its own ``Consumer`` calling
``poll(timeout_ms=20)`` in a loop, as an application would.

**Join to stable.** ``--members - 1`` consumers share a topic of ``--partitions`` partitions
and are stable. Then one more consumer (a new ``Consumer``, so a new member id) subscribes;
the clock starts just before its ``subscribe()`` and stops at the latest
``on_partitions_assigned`` of the rebalance that leaves the group *settled*: every member in
the same generation, nothing left to rejoin, the assignments disjoint and covering every
partition. With ``cooperative-sticky`` that is the second of two rebalances (the first only
withholds the partitions that move). Then the new member closes (LeaveGroup) and the group
settles again; that is timed the same way ("leave to stable"). Repeated ``--reps`` times,
each join and leave after a random pause within one heartbeat interval.
The existing members learn of each rebalance from a heartbeat answer, so
``heartbeat.interval.ms`` dominates: each case runs with Kafka's default (3000 ms) and with
100 ms.

**Commits.** One member of a group, stable, commits explicit offsets: ``commit()`` (sync, one
at a time) of 1 partition and of all ``--partitions`` partitions per commit, and
``commit_async()`` of 1 partition (pipelined, at most 64 in flight), ended by one sync
``commit()``, which completes after every async one (the offsets channel is answered in
order). Reported as commits/s (median of ``--runs``) and partition offsets/s.

A benchmark never fails a build: the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

# The report scaffolding is shared by every benchmark next to this file; importing it also
# makes spark_mq importable from the repository when it is not installed.
from bench_report import Run, Section, base_parser, common_facts

from spark_mq import Admin, Consumer, ConsumerRebalanceListener, TopicPartition
from spark_mq.broker import ensure_broker, stop_broker

SECTION = Section(
    name="groups",
    title="Consumer groups: rebalances and offset commits",
    begin="<!-- BEGIN groups (written by benchmarks/bench_groups.py) -->",
    end="<!-- END groups -->",
)
STRATEGIES = ("range", "cooperative-sticky")
#: No initial rebalance delay (see the docstring); small preallocated indexes, because the
#: benchmark creates several topics of 64 partitions (and __consumer_offsets has 50) whose
#: 10 MiB default index files would take gigabytes of disk for nothing.
BROKER_CONFIG = {
    "broker.idle.exit.ms": "-1",
    "group.initial.rebalance.delay.ms": "0",
    "log.index.size.max.bytes": "65536",
}
SETTLE_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Settings:
    quick: bool
    members: int
    partitions: int
    reps_default_heartbeat: int
    reps_fast_heartbeat: int
    commits: int
    runs: int


# ---------------------------------------------------------------------------------------------
# Members


class Member(threading.Thread, ConsumerRebalanceListener):
    """One consumer in its own thread, polling until stopped; records its assignments."""

    def __init__(self, path: str, group: str, topic: str, name: str, **config: Any) -> None:
        threading.Thread.__init__(self, name=name, daemon=True)
        self.path, self.group, self.topic, self.config = path, group, topic, config
        self.stop_requested = threading.Event()
        self.ready = threading.Event()
        self.subscribe_at = 0.0
        # (time, generation, assignment) of the last on_partitions_assigned.
        self.assigned: tuple[float, int, frozenset[TopicPartition]] = (0.0, -1, frozenset())
        #: Completed rebalances (on_partitions_assigned calls).
        self.rounds = 0
        self.consumer: Consumer | None = None
        self.error: BaseException | None = None

    def on_partitions_assigned(self, partitions: Any) -> None:
        c = self.consumer
        assert c is not None
        self.rounds += 1
        self.assigned = (
            time.monotonic(),
            c.group_metadata().generation_id,
            frozenset(c.assignment()),
        )

    def run(self) -> None:
        try:
            c = self.consumer = Consumer(
                path=self.path,
                group_id=self.group,
                client_id=self.name,
                enable_auto_commit=False,
                **self.config,
            )
            self.ready.set()
            self.subscribe_at = time.monotonic()
            c.subscribe([self.topic], listener=self)
            while not self.stop_requested.is_set():
                c.poll(timeout_ms=20)
            c.close()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.ready.set()

    def stable(self) -> bool:
        c = self.consumer
        coordinator = None if c is None else c._coordinator
        return coordinator is not None and coordinator.is_stable()


def settled_at(members: list[Member], partitions: int) -> float | None:
    """When the group settled (the latest assignment of the common generation), or None."""
    for m in members:
        if m.error is not None:
            raise RuntimeError(f"member {m.name} failed") from m.error
    snapshots = [m.assigned for m in members]
    generations = {generation for _, generation, _ in snapshots}
    if len(generations) != 1 or min(generations) < 0:
        return None
    owned = [tp for _, _, assignment in snapshots for tp in assignment]
    if len(owned) != partitions or len(set(owned)) != partitions:
        return None
    if not all(m.stable() for m in members):
        return None
    if [m.assigned for m in members] != snapshots:
        return None  # a rebalance completed while we looked
    return max(at for at, _, _ in snapshots)


def wait_settled(members: list[Member], partitions: int) -> float:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        at = settled_at(members, partitions)
        if at is not None:
            return at
        if time.monotonic() > deadline:
            raise RuntimeError(f"the group did not settle within {SETTLE_TIMEOUT_S} s")
        time.sleep(0.001)


@dataclasses.dataclass
class RebalanceRow:
    strategy: str
    heartbeat_ms: int
    join_ms: list[float]
    leave_ms: list[float]
    #: Rebalances the stayers went through per join (the most of any stayer).
    join_rounds: list[int] = dataclasses.field(default_factory=list)


def rebalance_case(
    path: str, settings: Settings, strategy: str, heartbeat_ms: int, reps: int
) -> RebalanceRow:
    topic = f"rb-{strategy}-{heartbeat_ms}"
    group = f"bench-{strategy}-{heartbeat_ms}"
    with Admin(path=path) as admin:
        admin.create_topic(topic, partitions=settings.partitions)
    config = {
        "partition_assignment_strategy": strategy,
        "heartbeat_interval_ms": heartbeat_ms,
        "auto_offset_reset": "latest",
    }
    stayers = [Member(path, group, topic, f"m{n}", **config) for n in range(settings.members - 1)]
    for m in stayers:
        m.start()
    row = RebalanceRow(strategy, heartbeat_ms, [], [])
    try:
        wait_settled(stayers, settings.partitions)
        rng = random.Random(f"{strategy}-{heartbeat_ms}")
        for rep in range(reps):
            # Members' heartbeat timers restart together when a rebalance completes; start
            # at a random point of the interval, as a real join or leave would.
            time.sleep(rng.uniform(0, heartbeat_ms / 1000))
            rounds_before = [m.rounds for m in stayers]
            joiner = Member(path, group, topic, f"j{rep}", **config)
            joiner.start()
            joiner.ready.wait(30)
            at = wait_settled([*stayers, joiner], settings.partitions)
            row.join_ms.append((at - joiner.subscribe_at) * 1000)
            row.join_rounds.append(
                max(m.rounds - before for m, before in zip(stayers, rounds_before, strict=True))
            )
            time.sleep(rng.uniform(0, heartbeat_ms / 1000))
            leave_started = time.monotonic()
            joiner.stop_requested.set()  # close(): LeaveGroup
            at = wait_settled(stayers, settings.partitions)
            row.leave_ms.append((at - leave_started) * 1000)
            joiner.join(30)
            print(
                f"  {strategy:>18} hb {heartbeat_ms:>4} ms rep {rep + 1:>2}/{reps}: join "
                f"{row.join_ms[-1]:7.0f} ms ({row.join_rounds[-1]} rebalances), leave "
                f"{row.leave_ms[-1]:7.0f} ms",
                flush=True,
            )
    finally:
        for m in stayers:
            m.stop_requested.set()
        for m in stayers:
            m.join(60)
    return row


# ---------------------------------------------------------------------------------------------
# Commits


@dataclasses.dataclass
class CommitRow:
    mode: str
    partitions_per_commit: int
    commits: int
    commits_per_s: list[float]


def commit_cases(path: str, settings: Settings) -> list[CommitRow]:
    topic = "commits"
    with Admin(path=path) as admin:
        admin.create_topic(topic, partitions=settings.partitions)
    tps = [TopicPartition(topic, p) for p in range(settings.partitions)]
    rows = [
        CommitRow("commit() sync", 1, settings.commits, []),
        CommitRow("commit() sync", settings.partitions, settings.commits // 4, []),
        CommitRow("commit_async()", 1, settings.commits * 4, []),
    ]
    with Consumer(path=path, group_id="bench-commits", enable_auto_commit=False) as c:
        c.subscribe([topic])
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while len(c.assignment()) < settings.partitions and time.monotonic() < deadline:
            c.poll(timeout_ms=50)
        offset = 0
        for run in range(settings.runs + 1):  # the first run warms up
            for row in rows:
                start = time.perf_counter()
                for _ in range(row.commits):
                    offset += 1
                    if row.partitions_per_commit == 1:
                        if row.mode.startswith("commit_async"):
                            c.commit_async({tps[0]: offset})
                        else:
                            c.commit({tps[0]: offset})
                    else:
                        c.commit(dict.fromkeys(tps, offset))
                if row.mode.startswith("commit_async"):
                    c.commit({tps[0]: offset})  # completes after every async commit
                elapsed = time.perf_counter() - start
                if run:
                    row.commits_per_s.append(row.commits / elapsed)
            assert c.committed([tps[0]])[tps[0]].offset == offset  # type: ignore[union-attr]
    return rows


# ---------------------------------------------------------------------------------------------
# Report


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def rebalance_table(rows: list[RebalanceRow]) -> str:
    lines = [
        "| assignor | heartbeat.interval.ms | reps | join p50 ms | join p99 ms | join max ms "
        "| rebalances per join (median, max) | leave p50 ms | leave p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.strategy} | {r.heartbeat_ms:,} | {len(r.join_ms)} | "
            f"{pct(r.join_ms, 50):,.0f} | {pct(r.join_ms, 99):,.0f} | {max(r.join_ms):,.0f} | "
            f"{statistics.median(r.join_rounds):g}, {max(r.join_rounds)} | "
            f"{pct(r.leave_ms, 50):,.0f} | {pct(r.leave_ms, 99):,.0f} |"
        )
    return "\n".join(lines)


def commit_table(rows: list[CommitRow]) -> str:
    lines = [
        "| call | partitions per commit | commits per run | commits/s | offsets/s | spread |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        med = statistics.median(r.commits_per_s)
        spread = (max(r.commits_per_s) - min(r.commits_per_s)) / med
        lines.append(
            f"| {r.mode} | {r.partitions_per_commit} | {r.commits:,} | {med:,.0f} | "
            f"{med * r.partitions_per_commit:,.0f} | {spread:.0%} |"
        )
    return "\n".join(lines)


def render_markdown(
    run: Run, *, settings: Settings, rebalances: list[RebalanceRow], commits: list[CommitRow]
) -> str:
    method = [
        "- One embedded local broker (`path=`, Unix socket) with "
        "`group.initial.rebalance.delay.ms=0` (the default 3000 would add 3 s to the first "
        "rebalance of an empty group by design) and `log.index.size.max.bytes=65536` (disk "
        "space only; no record is read by index). Consumers are threads of the benchmark "
        "process, each `poll(timeout_ms=20)` in a loop; the broker is a separate process; "
        "all share the machine's cores.",
        f"- Join to stable: {settings.members - 1} members share a topic of "
        f"{settings.partitions} partitions; a new consumer subscribes (clock starts) and the "
        "clock stops at the last `on_partitions_assigned` of the rebalance after which all "
        f"{settings.members} members are in one generation, stable, and own every partition "
        "exactly once (for cooperative-sticky: the second of its two rebalances). Leave to "
        "stable: the new member's `close()` (LeaveGroup) until the others settle again. "
        "Existing members learn of a rebalance from a heartbeat answer, so the heartbeat "
        "interval dominates: each assignor runs with Kafka's default 3000 ms and with 100 ms. "
        "Every join and leave starts after a random pause within one heartbeat interval "
        "(the members' heartbeat timers restart together at each rebalance, so starting "
        "right after one would always measure a whole interval).",
        "- p50 and p99 over the repetitions (`reps`; with few samples p99 is close to the "
        "max, shown too).",
        "- Commits: one stable member commits explicit offsets through the group coordinator; "
        "sync `commit()` waits for each answer (one OffsetCommit, one append to "
        "`__consumer_offsets`); `commit_async()` pipelines up to 64, and the run ends with one "
        f"sync `commit()` that completes after all of them. Median of {settings.runs} runs "
        "after one warm-up; spread = (max - min) / median.",
    ]
    body = [
        "### Join and leave to stable (ms)",
        "",
        rebalance_table(rebalances),
        "",
        "### Offset commits",
        "",
        commit_table(commits),
    ]
    note = " (**--quick smoke run**)" if settings.quick else ""
    return SECTION.render(run, method=method, body=body, note=note)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    p = base_parser(__doc__, quick_help="~40 s smoke run", dir_help="broker")
    p.add_argument("--members", type=int, default=8, help="members after a join (default 8)")
    p.add_argument("--partitions", type=int, default=64, help="partitions (default 64)")
    p.add_argument("--reps", type=int, help="repetitions with heartbeat 3000 ms (default 15)")
    p.add_argument("--reps-fast", type=int, help="repetitions with heartbeat 100 ms (default 40)")
    p.add_argument("--commits", type=int, help="sync commits per run (default 1000)")
    p.add_argument("--runs", type=int, default=5, help="timed commit runs (default 5)")
    args = p.parse_args(argv)
    q = args.quick
    settings = Settings(
        quick=q,
        members=args.members,
        partitions=args.partitions,
        reps_default_heartbeat=args.reps or (2 if q else 15),
        reps_fast_heartbeat=args.reps_fast or (5 if q else 40),
        commits=args.commits or (200 if q else 1000),
        runs=3 if q else args.runs,
    )
    return args, settings


def main(argv: list[str] | None = None) -> int:
    args, settings = parse_args(argv)
    run = Run.start(common_facts(("pyarrow", "msgspec")))
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_groups_", dir=args.dir))
    path = str(work / "mq")
    ensure_broker(path, config=BROKER_CONFIG)
    try:
        rebalances = []
        for heartbeat_ms, reps in (
            (100, settings.reps_fast_heartbeat),
            (3000, settings.reps_default_heartbeat),
        ):
            for strategy in STRATEGIES:
                rebalances.append(rebalance_case(path, settings, strategy, heartbeat_ms, reps))
        commits = commit_cases(path, settings)
    finally:
        stop_broker(path)
        shutil.rmtree(work, ignore_errors=True)
    run.finish()
    print()
    print(rebalance_table(rebalances))
    print()
    print(commit_table(commits))
    print(run.end_line())
    if args.out is not None:
        section = render_markdown(run, settings=settings, rebalances=rebalances, commits=commits)
        SECTION.write(args.out, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
