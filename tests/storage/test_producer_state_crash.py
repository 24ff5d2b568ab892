"""Producer state across SIGKILL: retries sent before a crash are still recognised after it.

A writer process (``idempotent_writer.py``) appends the batches of one idempotent producer,
acknowledging each append in a file, and is killed with SIGKILL at a random moment, many
times over. After every kill the parent opens the log as after an unclean stop (at a random
recovery point, in place or on a copy of the directory, sometimes with the producer state
snapshots deleted or damaged) and checks:

- the producer's batches in the log form exactly one chain of its sequences (wrapping past
  2^31-1), each batch once, each holding the records the writer encoded: no kill, recovery or
  retry ever wrote a batch twice or lost an acknowledged one;
- the rebuilt producer state holds the producer's last five batches, as in the log;
- re-appending the last five acknowledged batches answers each with its original offsets
  (``is_duplicate``), except those pushed out of the five-batch window by a batch the writer
  appended but had no time to acknowledge, which are refused as out of order;
- the next sequence is accepted, and a gap after it is refused.

Each restarted writer first retries the producer's last batch itself and must get a duplicate
answer. The seed (``SPARK_MQ_CRASH_SEED``, default 1) fixes the schedule: delays, recovery
points, where the check runs, the snapshot damage; where exactly each kill lands is up to the
OS. Every assertion message carries the seed and the round.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

from spark_mq.config import LONG_MAX
from spark_mq.errors import OutOfOrderSequenceError
from spark_mq.storage.log import PartitionLog
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.producer_state import MAX_BATCHES_PER_PRODUCER, SNAPSHOT_SUFFIX
from spark_mq.storage.record_batch import encode_batch

WRITER_PATH = Path(__file__).with_name("idempotent_writer.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
CRASH_SEED = int(os.environ.get("SPARK_MQ_CRASH_SEED", "1"))
KILLS = 14


def _load_writer_module() -> ModuleType:
    # Loaded by path so that the test does not depend on pytest's import mode.
    spec = importlib.util.spec_from_file_location("idempotent_writer", WRITER_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("idempotent_writer", module)
    spec.loader.exec_module(module)
    return module


iw = _load_writer_module()


def _events(acks: Path, start: int) -> Iterator[list[str]]:
    """Whole lines of the ack file from byte ``start``, split into words."""
    text = acks.read_bytes()[start:].decode()
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            return  # A line the kill cut short: it acknowledges nothing.
        yield line.split()


def _wait_for_open(process: subprocess.Popen[bytes], acks: Path, start: int, ctx: str) -> None:
    # A bound on a wait, not a timing assertion: a writer that never opens its log is stuck.
    deadline = time.monotonic() + 120
    while not any(words[0] == "open" for words in _events(acks, start)):
        if process.poll() is not None:
            return  # It died on its own; the caller reports how.
        assert time.monotonic() < deadline, f"{ctx}: the writer did not open its log"
        time.sleep(0.005)


def _producer_batches(log: PartitionLog) -> list[tuple[int, int, int, int, int]]:
    """``(first_seq, last_seq, first_offset, last_offset, record_count)`` of every batch of
    the writer's producer, in log order; every other batch must be plain."""
    out = []
    for segment in log.segments:
        for header, _ in segment.records.headers():
            if header.producer_id == iw.PRODUCER_ID:
                assert header.producer_epoch == iw.PRODUCER_EPOCH
                out.append(
                    (
                        header.base_sequence,
                        header.last_sequence,
                        header.base_offset,
                        header.last_offset,
                        header.record_count,
                    )
                )
            else:
                assert not header.has_producer_id, header
    return out


def _damage_snapshots(directory: Path, rng: random.Random) -> str:
    # Both draws are made whatever the directory holds, so that the rest of the seeded
    # schedule does not depend on how far the writers got.
    snapshots = sorted(directory.glob(f"*{SNAPSHOT_SUFFIX}"))
    choice, where = rng.random(), rng.random()
    if choice < 0.2:
        for path in snapshots:
            path.unlink()
        return "snapshots deleted"
    if choice < 0.35 and snapshots:
        data = bytearray(snapshots[-1].read_bytes())
        data[int(where * len(data))] ^= 0xFF
        snapshots[-1].write_bytes(bytes(data))
        return "newest snapshot corrupt"
    return "snapshots kept"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [CRASH_SEED])
def test_duplicates_sent_before_a_sigkill_are_recognised_after_it(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(f"producer-state-sigkill:{seed}")
    config = LogConfig(
        segment_bytes=rng.choice([4, 16, 64]) * 1024,
        segment_ms=LONG_MAX,
        retention_ms=-1,
        flush_messages=rng.choice([LONG_MAX, LONG_MAX, 20]),
    )
    directory = tmp_path / "t-0"
    copy = tmp_path / "copy"
    acks = tmp_path / "acks"
    acks.touch()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    # Every acknowledged batch: first sequence -> (record count, first offset, last offset), in
    # acknowledgement order (a dict keeps it). The chain wraps once, so first sequences are
    # unique within a run.
    acked: dict[int, tuple[int, int, int]] = {}
    dir_end = 0  # The log end of the writer's directory as the parent last found it.
    chain_next = iw.START_SEQUENCE  # The sequence after the producer's last batch in the log.
    wrapped = False
    for round_no in range(KILLS):
        ctx = f"seed={seed} round={round_no}"
        ack_start = acks.stat().st_size
        stderr_path = tmp_path / f"writer-{round_no}.err"
        # Recovery from 0 is sometimes chosen: it replays everything, snapshots or not.
        recovery_point = rng.choice([0, dir_end, dir_end, int(rng.random() * (dir_end + 1))])
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(WRITER_PATH),
                    str(directory),
                    str(seed),
                    str(recovery_point),
                    json.dumps(config.to_properties()),
                    str(acks),
                ],
                env=env,
                stdout=stderr,
                stderr=stderr,
            )
        try:
            if rng.random() < 0.15:
                time.sleep(rng.uniform(0, 0.5))  # Maybe while importing or recovering.
            else:
                _wait_for_open(process, acks, ack_start, ctx)
                time.sleep(rng.uniform(0, 0.25))
            process.send_signal(signal.SIGKILL)
        finally:
            process.kill()
            returncode = process.wait()
        assert returncode == -signal.SIGKILL, (
            f"{ctx}: the writer exited with {returncode} before it was killed:\n"
            f"{stderr_path.read_text()}"
        )

        for words in _events(acks, ack_start):
            if words[0] == "open":
                assert (int(words[1]), int(words[2])) == (dir_end, chain_next), (
                    f"{ctx}: the writer recovered log end {words[1]} and next sequence "
                    f"{words[2]}; the parent found {dir_end} and {chain_next}"
                )
            else:
                first_seq, count, first_offset, last_offset = map(int, words[1:])
                assert first_seq not in acked, f"{ctx}: sequence {first_seq} acknowledged twice"
                acked[first_seq] = (count, first_offset, last_offset)

        target = directory
        damage = "in place"
        if rng.random() < 0.5 and directory.exists():
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(directory, copy)
            target = copy
            damage = _damage_snapshots(copy, rng)
        if not target.exists():
            continue  # Killed before the log directory was even created.
        ctx += f" ({damage})"
        log = PartitionLog.open(
            target,
            config,
            topic="t",
            partition=0,
            recovery_point=rng.choice([0, dir_end, int(rng.random() * (dir_end + 1))]),
        )
        try:
            chain_next, unacked = _check_recovered_log(log, seed, acked, ctx)
            wrapped = wrapped or any(s < iw.START_SEQUENCE for s in acked)
            reappend_end = log.log_end_offset
            _reappend_recent(
                log,
                seed,
                acked,
                unacked=unacked,
                rng=random.Random(f"{seed}:{round_no}"),
                ctx=ctx,
            )
            # The next sequence is accepted; a gap after it is refused.
            info = log.append(iw.encode(seed, chain_next))
            assert (info.is_duplicate, info.first_offset) == (False, reappend_end), ctx
            gap = iw.expected_batch(seed, chain_next).next_seq + 1
            with pytest.raises(OutOfOrderSequenceError):
                log.append(iw.encode(seed, gap))
            if target == directory:
                # The parent's append is part of the chain the next writer continues.
                count = len(iw.expected_batch(seed, chain_next).values)
                acked[chain_next] = (count, info.first_offset, info.last_offset)
                chain_next = iw.expected_batch(seed, chain_next).next_seq
                dir_end = log.log_end_offset
            else:
                dir_end = reappend_end
        finally:
            log.close()
    assert len(acked) > MAX_BATCHES_PER_PRODUCER, f"seed={seed}: the writers appended too little"
    print(f"seed={seed}: {len(acked)} batches acknowledged; sequences wrapped: {wrapped}")


def _check_recovered_log(
    log: PartitionLog, seed: int, acked: dict[int, tuple[int, int, int]], ctx: str
) -> tuple[int, int]:
    """Check the producer's chain and state; return the next sequence and how many of the
    producer's last five batches in the log were never acknowledged."""
    batches = _producer_batches(log)
    expected_seq = iw.START_SEQUENCE
    positions: dict[int, tuple[int, int, int]] = {}
    for first_seq, last_seq, first_offset, last_offset, count in batches:
        assert first_seq == expected_seq, (
            f"{ctx}: batch at offset {first_offset} starts at sequence {first_seq}, the chain "
            f"continues at {expected_seq}: a batch was written twice or lost"
        )
        expected = iw.expected_batch(seed, first_seq)
        assert (count, last_seq) == (len(expected.values), expected.last_seq), ctx
        positions[first_seq] = (count, first_offset, last_offset)
        expected_seq = expected.next_seq
    for first_seq, position in acked.items():
        assert positions.get(first_seq) == position, (
            f"{ctx}: acknowledged batch at sequence {first_seq} {position} is "
            f"{positions.get(first_seq)} in the recovered log"
        )
    acked_in_log = [i for i, b in enumerate(batches) if b[0] in acked]
    unacked_at_end = len(batches) - (acked_in_log[-1] + 1 if acked_in_log else 0)
    assert unacked_at_end <= 1, (
        f"{ctx}: {unacked_at_end} unacknowledged batches at the end of the log"
    )
    # A batch the writer appended but was killed before acknowledging stays in the log, and
    # stays in the window once later batches follow it (the parent's in-place append, or the
    # next writer's): the restarted writer retries only the producer's last batch. Each such
    # batch among the last five pushes one acknowledged batch out of the window.
    unacked = sum(b[0] not in acked for b in batches[-MAX_BATCHES_PER_PRODUCER:])

    # The records of the last few batches are the ones the writer encoded.
    for first_seq, _, first_offset, last_offset, _ in batches[-3:]:
        table = log.read_records(first_offset, max_offset=last_offset + 1)
        assert table.column("value").to_pylist() == iw.expected_batch(seed, first_seq).values, ctx

    entry = log.producer_state.entry(iw.PRODUCER_ID)
    if not batches:
        assert entry is None, ctx
        return iw.START_SEQUENCE, 0
    assert entry is not None, f"{ctx}: the producer state lost the producer"
    assert entry.producer_epoch == iw.PRODUCER_EPOCH, ctx
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        b[:4] for b in batches[-MAX_BATCHES_PER_PRODUCER:]
    ], f"{ctx}: the rebuilt producer state does not hold the last five batches"
    return expected_seq, unacked


def _reappend_recent(
    log: PartitionLog,
    seed: int,
    acked: dict[int, tuple[int, int, int]],
    *,
    unacked: int,
    rng: random.Random,
    ctx: str,
) -> None:
    """Re-append the last five acknowledged batches, in a random order."""
    end, size = log.log_end_offset, log.size_bytes
    entry = log.producer_state.entry(iw.PRODUCER_ID)
    window = {b.first_seq for b in entry.batches} if entry is not None else set()
    recent = list(acked.items())[-MAX_BATCHES_PER_PRODUCER:]
    rng.shuffle(recent)
    refused = 0
    for first_seq, (_, first_offset, last_offset) in recent:
        if first_seq in window:
            info = log.append(iw.encode(seed, first_seq))
            assert info.is_duplicate, f"{ctx}: retry of sequence {first_seq} was appended again"
            assert (info.first_offset, info.last_offset) == (first_offset, last_offset), ctx
        else:
            # Pushed out of the window by a batch appended after it but never acknowledged.
            with pytest.raises(OutOfOrderSequenceError):
                log.append(iw.encode(seed, first_seq))
            refused += 1
        assert (log.log_end_offset, log.size_bytes) == (end, size), ctx
    assert refused <= unacked, (
        f"{ctx}: {refused} acknowledged retries were refused as out of order, but only "
        f"{unacked} unacknowledged batches can have pushed them out of the five-batch window"
    )


def test_a_batch_never_acknowledged_keeps_its_window_slot_after_later_appends(
    tmp_path: Path,
) -> None:
    """The schedule that made seed 1 flake at round 5, replayed deterministically in-process.

    A writer is killed after its batch reached the log but before its acknowledgement; the
    parent then appends the next batch in place; the next writer is killed before it appends
    anything. The unacknowledged batch now sits inside the producer's five-batch window
    without being the last batch, and still pushes one acknowledged batch out of it.
    """
    seed = 1
    config = LogConfig(segment_bytes=4 * 1024, segment_ms=LONG_MAX, retention_ms=-1)
    writer_dir = tmp_path / "writer"
    directory = tmp_path / "t-0"
    acked: dict[int, tuple[int, int, int]] = {}
    writer = PartitionLog.open(writer_dir, config, topic="t", partition=0)
    next_seq = iw.START_SEQUENCE
    for _ in range(40):  # Enough to roll segments, so that snapshots at rolls are used.
        info = writer.append(iw.encode(seed, next_seq))
        acked[next_seq] = (info.num_records, info.first_offset, info.last_offset)
        values = iw.plain_after(seed, next_seq)
        if values is not None:
            writer.append(encode_batch(pa.array(values, pa.binary())))
        next_seq = iw.expected_batch(seed, next_seq).next_seq
    writer.append(iw.encode(seed, next_seq))  # The kill lands before the acknowledgement.
    assert writer.num_segments > 2 and list(writer_dir.glob(f"*{SNAPSHOT_SUFFIX}"))
    shutil.copytree(writer_dir, directory)  # The crash image: what SIGKILL leaves on disk.
    writer.close()

    for round_no in range(2):  # The second writer dies before it appends anything.
        ctx = f"seed={seed} round={round_no} (in place)"
        log = PartitionLog.open(directory, config, topic="t", partition=0, recovery_point=0)
        try:
            chain_next, unacked = _check_recovered_log(log, seed, acked, ctx)
            # At the end of the log in round 0, followed by the parent's batch in round 1.
            assert unacked == 1, ctx
            _reappend_recent(
                log, seed, acked, unacked=unacked, rng=random.Random(round_no), ctx=ctx
            )
            info = log.append(iw.encode(seed, chain_next))
            assert not info.is_duplicate, ctx
            acked[chain_next] = (info.num_records, info.first_offset, info.last_offset)
        finally:
            log.close()
