#!/usr/bin/env python
"""Replication benchmark: produce throughput with RF 3 and acks=all against the same run's
RF 1 and acks=1 ceiling, follower lag under that load, the latency acks=all adds, and the CPU
time per MB of each broker role, on a real 3-broker LocalCluster.

Run from the repository root::

    .venv/bin/python benchmarks/bench_replication.py                            # ~3-4 minutes
    .venv/bin/python benchmarks/bench_replication.py --quick                    # ~1 minute
    .venv/bin/python benchmarks/bench_replication.py --out docs/benchmarks.md   # also write the doc

The cluster: ZooKeeper and three broker processes (``spark_mq.cluster.LocalCluster``, default
broker settings) in a fresh directory. Two topics of the same layout, written to ZooKeeper
with a manual replica assignment (as Kafka's ``kafka-topics --replica-assignment``), so that
broker 1 leads every partition and the roles are separable by process:

- ``rep-rf3``: ``--partitions`` partitions, replicas [1, 2, 3] each (broker 1 leads, 2 and 3
  follow), ``min.insync.replicas=2``;
- ``rep-rf1``: the same partitions, replica [1] each.

Cases (one Producer per case in this process, 100-byte values, no key, codec none,
``enable.idempotence=false`` so that only ``acks`` differs; Arrow tables of
``--batch-records`` rows through ``Producer.send_batch`` for as long as ``--run-seconds``,
then ``flush()``, the clock covering both):

- **ceiling**: ``rep-rf1`` with acks=1 (the leader stores each record once);
- **rf3 acks=all**: ``rep-rf3`` with acks=all (each record is received and stored three
  times, and answered only once both followers have it);
- **rf3 acks=1**: ``rep-rf3`` with acks=1 (the followers copy at their own pace).

The cases are interleaved, ``--runs`` times each; the rows show the median. During each run
``/proc/<pid>/stat`` (utime + stime) of every broker is read before and after: CPU seconds
(as ms) per MB of values produced, for the leader (broker 1) and each follower (brokers 2 and 3).
During the RF 3 runs a sampler thread reads, every ``--sample-ms``, how far each
partition's log reaches on each broker (walking the batch headers of the active segment file
from where it stopped last time, so the samples do not depend on any broker's answer): the
follower lag in records (leader's log end minus the follower's, summed over the partitions;
the followers are read first, so it errs high) and in ms (the age of the oldest record a
follower lacks: now minus the last sample at which the leader's log did not have it yet, so
it errs high by up to one sampling period).

Latency: two more producers (``linger.ms=0``), acks=1 and acks=all, take turns on ``rep-rf3``
sending one table of ``--latency-records`` rows (one produce request) and waiting for it
(``flush()``); p50 and p99 of each, and the difference: the latency acks=all adds.

A benchmark never fails a build: the goal (RF 3 acks=all at least 0.4 of the ceiling) is
printed as a PASS/MISS line and the exit status is 0 either way.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa

# The report scaffolding is shared by every benchmark next to this file; importing it also
# makes spark_mq importable from the repository when it is not installed.
from bench_report import (
    Run,
    Section,
    base_parser,
    common_facts,
    fmt_int,
    goals_block,
    markdown_table,
    text_table,
)

from spark_mq import Producer
from spark_mq.broker.zk import partition_states, znodes
from spark_mq.broker.zk.client import ZkClient, ZkClientConfig
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.storage.batch_walk import walk_batches
from spark_mq.storage.topic_names import partition_dir_name

RECORD_BYTES = 100
LEADER = 1
FOLLOWERS = (2, 3)
RF3_TOPIC = "rep-rf3"
RF1_TOPIC = "rep-rf1"
GOAL_RATIO = 0.4
_READ_CHUNK = 8 << 20

SECTION = Section(
    name="replication",
    title="Replication: RF 3 acks=all on a 3-broker cluster",
    begin="<!-- BEGIN replication (written by benchmarks/bench_replication.py) -->",
    end="<!-- END replication -->",
)


@dataclasses.dataclass(frozen=True)
class Settings:
    partitions: int
    runs: int
    run_seconds: float
    batch_records: int
    latency_records: int
    latency_requests: int
    sample_ms: int


QUICK = Settings(
    partitions=4,
    runs=1,
    run_seconds=5,
    batch_records=5_000,
    latency_records=100,
    latency_requests=200,
    sample_ms=25,
)
FULL = dataclasses.replace(QUICK, runs=3, run_seconds=12, latency_requests=1_500)


# ---------------------------------------------------------------------------------------------
# Process CPU and log ends, read from /proc and from the brokers' files


def process_cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` (every thread), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may hold spaces: the fields after it start past the last ')'.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LogEnd:
    """How far one partition's log reaches on one broker: ``lastOffset + 1`` of the last
    whole batch of its active segment, read incrementally from the file."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._segment: Path | None = None
        self._position = 0
        self.end = 0

    def read(self) -> int:
        segments = sorted(self.directory.glob("*.log"))
        if not segments:
            return self.end
        if segments[-1] != self._segment:  # a new segment: start at its beginning
            self._segment, self._position = segments[-1], 0
        with open(self._segment, "rb") as f:
            while True:
                f.seek(self._position)
                buf = f.read(_READ_CHUNK)
                walk = walk_batches(buf, 0, len(buf))
                if walk.batches == 0 or walk.next_offset is None:
                    break
                self._position += walk.position
                self.end = walk.next_offset
                if len(buf) < _READ_CHUNK:
                    break
        return self.end


@dataclasses.dataclass
class LagSamples:
    """Per sample: each follower's lag in records (summed over partitions) and in ms (the
    oldest missing record's age, the largest over partitions)."""

    records: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    ms: dict[int, list[float]] = dataclasses.field(default_factory=dict)


class LagSampler:
    """Samples the followers' lag behind the leader every ``period_ms`` on its own thread."""

    def __init__(self, cluster: LocalCluster, topic: str, partitions: int, period_ms: int) -> None:
        def ends(broker: int) -> list[LogEnd]:
            root = cluster.log_dir(broker)
            return [LogEnd(root / partition_dir_name(topic, p)) for p in range(partitions)]

        self.period_s = period_ms / 1000
        self._leader = ends(LEADER)
        self._followers = {b: ends(b) for b in FOLLOWERS}
        # Per partition: the time of every leader sample and the log end it saw (never
        # decreasing, so a follower's end is found by bisection).
        self._times: list[list[float]] = [[] for _ in range(partitions)]
        self._ends: list[list[int]] = [[] for _ in range(partitions)]
        self.samples = LagSamples({b: [] for b in FOLLOWERS}, {b: [] for b in FOLLOWERS})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-sampler", daemon=True)

    def __enter__(self) -> LagSampler:
        for e in (*self._leader, *(e for f in self._followers.values() for e in f)):
            e.read()  # skip what was written before this run
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            # Followers first, then the leader: the lag errs high, never low.
            follower_ends = {b: [e.read() for e in ends] for b, ends in self._followers.items()}
            now = time.perf_counter()
            leader_ends = [e.read() for e in self._leader]
            for p, end in enumerate(leader_ends):
                self._times[p].append(now)
                self._ends[p].append(end)
            for b, ends in follower_ends.items():
                behind = [max(0, lead - own) for lead, own in zip(leader_ends, ends, strict=True)]
                self.samples.records[b].append(sum(behind))
                ages = [0.0]
                for p, own in enumerate(ends):
                    if behind[p]:
                        # The follower's next record came to the leader after the last sample
                        # at which the leader's log ended at or before it: its age is at most
                        # the time since that sample (errs high by up to one period).
                        i = bisect.bisect_right(self._ends[p], own)
                        ages.append((now - self._times[p][max(i - 1, 0)]) * 1e3)
                self.samples.ms[b].append(max(ages))


# ---------------------------------------------------------------------------------------------
# The cluster and its topics


def create_topic(zk: ZkClient, topic: str, partitions: int, replicas: tuple[int, ...]) -> None:
    """Write the topic with a manual replica assignment (the controller elects the first
    replica, broker 1, leader of every partition)."""
    assignment = znodes.TopicAssignment({p: replicas for p in range(partitions)})
    partition_states.create_topic(zk, topic, assignment, {"min.insync.replicas": "2"})


def wait_ready(cluster: LocalCluster, topics: dict[str, int], timeout_s: float = 60) -> None:
    """Until every partition of ``topics`` (name -> replication factor) is led by broker 1
    with its full ISR."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        views = [v for v in cluster.partitions() if v.topic in topics]
        if views and all(
            v.state is not None and v.state.leader == LEADER and len(v.state.isr) == topics[v.topic]
            for v in views
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the topics {sorted(topics)} did not get broker 1 as leader in time")


def broker_pids(cluster: LocalCluster) -> dict[int, int]:
    return {b: int(cluster.state["brokers"][str(b)]["pid"]) for b in cluster.broker_ids}


# ---------------------------------------------------------------------------------------------
# Cases


@dataclasses.dataclass
class CaseResult:
    name: str
    rps: list[float] = dataclasses.field(default_factory=list)
    #: CPU seconds per MB of values, per broker, one entry per run.
    cpu_per_mb: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    lag: LagSamples | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    topic: str
    acks: str

    def producer(self, bootstrap: str, **extra: object) -> Producer:
        return Producer(
            bootstrap_servers=bootstrap,
            config={"acks": self.acks, "enable.idempotence": "false", **extra},
        )


CASES = (
    Case("ceiling: RF 1, acks=1", RF1_TOPIC, "1"),
    Case("RF 3, acks=all", RF3_TOPIC, "all"),
    Case("RF 3, acks=1", RF3_TOPIC, "1"),
)


def tables(settings: Settings, rows: int) -> list[pa.Table]:
    """A few different tables of 100-byte values (rotated), built outside the clock."""
    out = []
    for j in range(4):
        values = [(b"%08d" % (j * rows + i)).ljust(RECORD_BYTES, b"v") for i in range(rows)]
        out.append(pa.table({"value": pa.array(values, pa.binary())}))
    return out


def timed_send(producer: Producer, topic: str, batch: list[pa.Table], seconds: float) -> int:
    """send_batch for ``seconds``, then flush; the records sent."""
    sent = 0
    deadline = time.perf_counter() + seconds
    c = 0
    while time.perf_counter() < deadline:
        table = batch[c % len(batch)]
        producer.send_batch(topic, table)
        sent += table.num_rows
        c += 1
    producer.flush()
    return sent


def run_case(
    case: Case,
    cluster: LocalCluster,
    settings: Settings,
    batch: list[pa.Table],
    result: CaseResult,
) -> None:
    pids = broker_pids(cluster)
    with case.producer(cluster.bootstrap_servers) as producer:
        producer.partitions_for(case.topic)
        timed_send(producer, case.topic, batch, 0.5)  # warm-up, untimed
        sampler = (
            LagSampler(cluster, case.topic, settings.partitions, settings.sample_ms)
            if case.topic == RF3_TOPIC
            else None
        )
        with sampler if sampler is not None else contextlib.nullcontext():
            cpu0 = {b: process_cpu_s(pid) for b, pid in pids.items()}
            t0 = time.perf_counter()
            sent = timed_send(producer, case.topic, batch, settings.run_seconds)
            elapsed = time.perf_counter() - t0
            cpu1 = {b: process_cpu_s(pid) for b, pid in pids.items()}
    mb = sent * RECORD_BYTES / 1e6
    result.rps.append(sent / elapsed)
    for b in pids:
        result.cpu_per_mb.setdefault(b, []).append((cpu1[b] - cpu0[b]) / mb)
    if sampler is not None:
        if result.lag is None:
            result.lag = LagSamples({b: [] for b in FOLLOWERS}, {b: [] for b in FOLLOWERS})
        for b in FOLLOWERS:
            result.lag.records[b].extend(sampler.samples.records[b])
            result.lag.ms[b].extend(sampler.samples.ms[b])
    print(
        f"  {case.name}: {sent:,} records in {elapsed:.1f} s = {sent / elapsed:,.0f} records/s",
        flush=True,
    )


def latency(
    cluster: LocalCluster, settings: Settings, small: list[pa.Table]
) -> dict[str, list[float]]:
    """Per-request latency (ms) of acks=1 and acks=all on ``rep-rf3``, taking turns."""
    out: dict[str, list[float]] = {"acks=1": [], "acks=all": []}
    ones = Case("", RF3_TOPIC, "1").producer(cluster.bootstrap_servers, **{"linger.ms": "0"})
    alls = Case("", RF3_TOPIC, "all").producer(cluster.bootstrap_servers, **{"linger.ms": "0"})
    with ones, alls:
        for producer in (ones, alls):
            producer.partitions_for(RF3_TOPIC)
            for i in range(20):  # warm-up
                producer.send_batch(RF3_TOPIC, small[i % len(small)])
                producer.flush()
        for i in range(settings.latency_requests):
            for name, producer in (("acks=1", ones), ("acks=all", alls)):
                t0 = time.perf_counter()
                producer.send_batch(RF3_TOPIC, small[i % len(small)])
                producer.flush()
                out[name].append((time.perf_counter() - t0) * 1e3)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------------------------------------
# Report


def report(
    results: dict[str, CaseResult],
    lat: dict[str, list[float]],
    settings: Settings,
) -> tuple[list[str], list[str]]:
    """(console lines, Markdown body lines)."""
    ceiling = statistics.median(results[CASES[0].name].rps)
    headers = (
        "case",
        "records/s",
        "MB/s",
        "of ceiling",
        "CPU ms/MB leader (1)",
        "CPU ms/MB follower (2)",
        "CPU ms/MB follower (3)",
    )
    rows: list[tuple[str, ...]] = []
    for case in CASES:
        r = results[case.name]
        rps = statistics.median(r.rps)
        cpu = {b: statistics.median(v) for b, v in r.cpu_per_mb.items()}
        rows.append(
            (
                case.name,
                fmt_int(rps),
                f"{rps * RECORD_BYTES / 1e6:.1f}",
                f"{rps / ceiling:.2f}",
                *(f"{cpu[b] * 1e3:.1f}" for b in (LEADER, *FOLLOWERS)),
            )
        )
    lag_headers = ("case", "follower", "records p50", "p99", "max", "ms p50", "p99", "max")
    lag_rows: list[tuple[str, ...]] = []
    for case in CASES[1:]:
        lag = results[case.name].lag
        if lag is None:
            continue
        for b in FOLLOWERS:
            rec, ms = [float(x) for x in lag.records[b]], lag.ms[b]
            if not rec:
                continue
            lag_rows.append(
                (
                    case.name,
                    str(b),
                    fmt_int(pct(rec, 0.5)),
                    fmt_int(pct(rec, 0.99)),
                    fmt_int(max(rec)),
                    f"{pct(ms, 0.5):.0f}",
                    f"{pct(ms, 0.99):.0f}",
                    f"{max(ms):.0f}",
                )
            )
    lat_headers = ("acks (RF 3)", "p50 ms", "p99 ms", "requests")
    lat_rows: list[tuple[str, ...]] = [
        (name, f"{pct(v, 0.5):.2f}", f"{pct(v, 0.99):.2f}", fmt_int(len(v)))
        for name, v in lat.items()
    ]
    added50 = pct(lat["acks=all"], 0.5) - pct(lat["acks=1"], 0.5)
    added99 = pct(lat["acks=all"], 0.99) - pct(lat["acks=1"], 0.99)
    lat_rows.append(("added by acks=all", f"{added50:+.2f}", f"{added99:+.2f}", ""))
    ratio = statistics.median(results[CASES[1].name].rps) / ceiling
    goals = [
        f"{'PASS' if ratio >= GOAL_RATIO else 'MISS'} RF 3 acks=all at {ratio:.2f} of the RF 1 "
        f"acks=1 ceiling (goal >= {GOAL_RATIO})"
    ]
    console = [
        "",
        text_table(headers, rows, 1),
        "",
        f"follower lag under load (sampled every {settings.sample_ms} ms)",
        text_table(lag_headers, lag_rows, 2),
        "",
        f"per-request latency ({settings.latency_records} records of {RECORD_BYTES} B a request)",
        text_table(lat_headers, lat_rows, 1),
        "",
        *goals,
    ]
    body = [
        "### Throughput and CPU per role",
        "",
        markdown_table(headers, rows, 1),
        "",
        f"### Follower lag under load (sampled every {settings.sample_ms} ms)",
        "",
        markdown_table(lag_headers, lag_rows, 2),
        "",
        f"### Latency added by acks=all ({settings.latency_records} records a request)",
        "",
        markdown_table(lat_headers, lat_rows, 1),
        "",
        *goals_block(goals),
    ]
    return console, body


def method_lines(settings: Settings) -> list[str]:
    return [
        "- A real 3-broker LocalCluster (ZooKeeper and three broker processes, default broker "
        "settings) in a fresh directory. Topics written to ZooKeeper with a manual replica "
        f"assignment: `{RF3_TOPIC}` ({settings.partitions} partitions, replicas [1, 2, 3], "
        f"min.insync.replicas=2) and `{RF1_TOPIC}` (the same partitions, replica [1]); broker "
        "1 leads every partition, so broker 1's process is the leader role and brokers 2 and "
        "3 the follower role.",
        f"- Produce: one Producer per case, {RECORD_BYTES}-byte values, no key, codec none, "
        "enable.idempotence=false (only acks differs), send_batch of "
        f"{settings.batch_records:,}-row Arrow tables for {settings.run_seconds:g} s then "
        f"flush; {settings.runs} interleaved run(s) per case after a 0.5 s warm-up; median "
        "shown. The producer runs in the benchmark's process on the same cores.",
        "- CPU ms/MB: utime + stime of each broker process (/proc/<pid>/stat, every thread) "
        "over a run, per MB of values produced (1 MB = 10,000 records).",
        "- Follower lag: each partition's log end read from each broker's active segment file "
        f"every {settings.sample_ms} ms (followers first); records summed over partitions; ms "
        "is the age of the oldest record a follower lacks, an upper bound (it errs high by up to "
        "one sampling period).",
        f"- Latency: an acks=1 and an acks=all producer (linger.ms=0) on `{RF3_TOPIC}` take "
        f"turns sending one {settings.latency_records}-row table and flushing it, "
        f"{settings.latency_requests:,} requests each, on an otherwise idle cluster.",
    ]


# ---------------------------------------------------------------------------------------------
# Main


def parse_args() -> argparse.Namespace:
    p = base_parser(
        __doc__, quick_help="a ~1 minute run (1 run of 5 s per case)", dir_help="cluster"
    )
    p.add_argument("--partitions", type=int, help="partitions of each topic")
    p.add_argument("--runs", type=int, help="timed runs per case")
    p.add_argument("--run-seconds", type=float, help="length of each timed run")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    settings = QUICK if args.quick else FULL
    overrides = {
        k: v
        for k, v in {
            "partitions": args.partitions,
            "runs": args.runs,
            "run_seconds": args.run_seconds,
        }.items()
        if v is not None
    }
    settings = dataclasses.replace(settings, **overrides)
    run = Run.start(common_facts(("pyarrow", "kazoo")))
    work = Path(tempfile.mkdtemp(prefix="bench-replication-", dir=args.dir))
    results = {case.name: CaseResult(case.name) for case in CASES}
    try:
        with LocalCluster(work / "cluster", brokers=3) as cluster:
            zk = ZkClient(ZkClientConfig(cluster.zookeeper_connect, session_timeout_ms=10_000))
            zk.start()
            try:
                create_topic(zk, RF3_TOPIC, settings.partitions, (LEADER, *FOLLOWERS))
                create_topic(zk, RF1_TOPIC, settings.partitions, (LEADER,))
            finally:
                zk.close()
            wait_ready(cluster, {RF3_TOPIC: 3, RF1_TOPIC: 1})
            batch = tables(settings, settings.batch_records)
            for n in range(settings.runs):
                print(f"run {n + 1} of {settings.runs}", flush=True)
                for case in CASES:
                    run_case(case, cluster, settings, batch, results[case.name])
            print("latency", flush=True)
            lat = latency(cluster, settings, tables(settings, settings.latency_records))
            # Every partition still led by broker 1 with its ISR whole: the roles held.
            wait_ready(cluster, {RF3_TOPIC: 3, RF1_TOPIC: 1}, timeout_s=5)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    run.finish()
    console, body = report(results, lat, settings)
    print("\n".join(console))
    print(run.end_line())
    if args.out is not None:
        note = " (`--quick`: one short run per case)" if args.quick else ""
        SECTION.write(
            args.out, SECTION.render(run, method=method_lines(settings), body=body, note=note)
        )


if __name__ == "__main__":
    main()
