"""The core proof of the exactly-once sink: a streaming copier is killed with SIGKILL many
times (at random moments and at named points before, during and after the sink's commit)
and restarted from its checkpoint, with task failures injected on first attempts; at the
end the read_committed output equals the transformed input exactly (same multiset).

The seed is printed on failure; set SPARK_MQ_CRASH_SEED to replay one schedule.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sink_helpers import create_topic, driver_env, read_topic, values

from spark_mq import Admin, Producer

DRIVER = Path(__file__).with_name("sink_copier_driver.py")
RECORDS = 1_200
#: Records added when a run finishes the copy before every kill of the schedule happened:
#: three micro-batches, so that a hook target (at most 3 batches ahead) comes next time.
MORE_RECORDS = 900
KILLS = 4
#: Upper bound on driver runs, kills included (the last runs complete the copy).
MAX_RUNS = 2 * KILLS + 2
#: A run that takes longer than this is stuck: the test fails rather than hangs.
RUN_LIMIT_S = 240
HOOK_POINTS = tuple(f"sink.commit.{p}_complete" for p in ("before", "during", "after"))


def _last_committed_batch(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids, default=-1)


def _run_driver(
    mq_dir: Path, checkpoint: Path, log: Path, env_extra: dict[str, str], kill_after_s: float | None
) -> int | None:
    """Run the driver once; returns its exit code, or None when it was killed (by us after
    ``kill_after_s`` seconds of running query, or by the sink's test hook)."""
    env = driver_env(env_extra)
    started = checkpoint.with_name("started")
    started.unlink(missing_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                *("--path", str(mq_dir), "--checkpoint", str(checkpoint)),
                *("--input", "in", "--output", "out", "--started-file", str(started)),
            ],
            env=env,
            start_new_session=True,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + RUN_LIMIT_S
        kill_at = None
        while proc.poll() is None:
            now = time.monotonic()
            if kill_at is None and kill_after_s is not None and started.exists():
                kill_at = now + kill_after_s
            if (kill_at is not None and now >= kill_at) or now >= deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if kill_at is None:
                    raise AssertionError(f"the copier driver did not finish; see {log}")
                return None
            time.sleep(0.05)
    finally:
        # A hook kill ends the driver by SIGKILL too; kill any leftover of its group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return None if proc.returncode == -signal.SIGKILL else proc.returncode


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_copier_killed_many_times_outputs_each_record_exactly_once(
    mq_dir: Path, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SPARK_MQ_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"crash schedule seed: {seed} (SPARK_MQ_CRASH_SEED={seed} replays it)")
    create_topic(mq_dir, "in", 3)
    create_topic(mq_dir, "out", 2)
    inputs: list[str] = []

    def produce(count: int) -> None:
        with Producer(path=str(mq_dir)) as producer:
            for _ in range(count):
                value = f"event-{len(inputs)}-{rng.randrange(1000)}"
                producer.send("in", value.encode(), key=str(len(inputs) % 7).encode())
                inputs.append(value)

    produce(RECORDS)
    checkpoint = tmp_path / "checkpoint"
    kills = 0
    finished = False
    untried = rng.sample(HOOK_POINTS, len(HOOK_POINTS))
    for run in range(MAX_RUNS):
        env: dict[str, str] = {}
        kill_after: float | None = None
        plan = "no kill"
        if kills < KILLS:
            if untried or rng.random() < 0.6:
                # Every named point is used before random ones; a point counts as tried once
                # a run has been killed there (the target batch may not come: more input).
                point = untried[0] if untried else rng.choice(HOOK_POINTS)
                target = _last_committed_batch(checkpoint) + 1 + rng.randrange(3)
                env["SPARK_MQ_CRASH_AT"] = plan = f"{point}@{target}"
            else:
                kill_after = rng.uniform(1.0, 12.0)
                plan = f"SIGKILL {kill_after:.1f} s after start"
        code = _run_driver(mq_dir, checkpoint, tmp_path / "driver.log", env, kill_after)
        print(
            f"run {run}: {plan}: {'killed' if code is None else f'exit {code}'}; "
            f"Spark committed up to batch {_last_committed_batch(checkpoint)}"
        )
        if code is None:
            kills += 1
            if plan.split("@")[0] in untried:
                untried.remove(plan.split("@")[0])
            continue
        assert code == 0, f"driver failed with exit code {code} (seed {seed}); see driver.log"
        if kills >= KILLS:
            finished = True
            break
        # The copy finished before the schedule's kills were used up: more input arrives.
        produce(MORE_RECORDS)
    assert finished, f"the copier did not finish after {MAX_RUNS} runs (seed {seed})"
    log = (tmp_path / "driver.log").read_text(errors="replace")
    # Each kind of injected task failure happened at least once.
    assert "injected failure: first attempt of batch" in log
    assert "spark_mq crash point sink.task.after_send" in log
    expected = sorted(f"copied-{v.upper()}".encode() for v in inputs)
    got = values(mq_dir, "out")
    assert len(got) == len(expected), f"{len(got)} records out for {len(expected)} in (seed {seed})"
    assert got == expected, f"output differs from the transformed input (seed {seed})"
    # Re-run and fenced attempts wrote records that were aborted, never shown...
    assert read_topic(mq_dir, "out", "read_uncommitted").num_rows >= len(expected)
    # ...and nothing of the sink is left open to hold back read_committed readers.
    with Admin(path=str(mq_dir)) as admin:
        hanging = admin.list_transactions(states=["Ongoing", "Prepared"], prefix="spark-query-")
    assert not hanging, f"transactions left open: {hanging} (seed {seed})"
