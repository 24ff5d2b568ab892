"""``spark-mq log verify`` on directories a real broker wrote, intact and damaged.

Issue 27, point 4: an offline check of a log directory, Kafka's ``kafka-dump-log
--deep-iteration`` per segment, that never takes the directory over: it works on a read-only
directory and beside a running broker, reports every bad batch with its byte position and
offset and where intact data resumes, and exits 1 when anything is bad.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corruption import (
    TOPIC,
    batches_of,
    damage_length,
    find_batch,
    flip_body_bytes,
    segment_files,
    truncate_tail,
    write_batches,
)

from spark_mq import Consumer, TopicPartition
from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.cli import main
from spark_mq.storage.log_verify import verify_log_dir

BAD = 150


def verify(capsys: Any, *args: str) -> tuple[int, str, str]:
    code = main(["log", "verify", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``directory``: size, mtime and content."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """Six batches of 50 records in one segment of t-0, broker stopped."""
    directory = tmp_path / "mq"
    write_batches(directory)
    return directory


def test_an_intact_directory_passes_with_its_indexes(tmp_path: Path, capsys: Any) -> None:
    directory = tmp_path / "mq"
    # Several segments, and an index entry every batch.
    write_batches(
        directory,
        batches=8,
        # Two batches of 50 small records (about 550 bytes each) per segment.
        topic_config={"segment.bytes": "1400", "index.interval.bytes": "100"},
    )
    assert len(segment_files(directory)) == 4

    code, out, _ = verify(capsys, "--dir", str(directory), "--verify-index")

    assert code == 0, out
    assert "Checked 1 partition, 4 segments, 8 batches, 400 records: all intact." in out
    [report] = verify_log_dir(directory, verify_index=True)
    assert [(s.first_offset, s.last_offset) for s in report.segments] == [
        (0, 99),
        (100, 199),
        (200, 299),
        (300, 399),
    ]
    assert all(s.ok for s in report.segments)


def test_a_corrupt_batch_is_reported_with_where_intact_data_resumes(
    log_dir: Path, capsys: Any
) -> None:
    position = flip_body_bytes(log_dir, BAD)
    _, after_position, _ = find_batch(log_dir, 200)

    code, out, _ = verify(capsys, "--dir", str(log_dir))

    assert code == 1
    assert f"position {position}, offset {BAD} (per its header): batch CRC mismatch" in out, out
    assert f"intact batches resume at position {after_position}, offset 200" in out
    assert f"seek(TopicPartition('{TOPIC}', 0), 200)" in out
    assert (
        "Checked 1 partition, 1 segment, 5 batches, 250 records: 1 bad batch in 1 segment." in out
    )

    code, out, _ = verify(capsys, "--dir", str(log_dir), "--json")
    document = json.loads(out)
    assert code == 1 and document["ok"] is False
    [segment] = document["partitions"][0]["segments"]
    assert segment["bad_batches"] == [
        {
            "position": position,
            "offset": BAD,
            "reason": segment["bad_batches"][0]["reason"],
            "resume_position": after_position,
            "resume_offset": 200,
        }
    ]
    assert "CRC mismatch" in segment["bad_batches"][0]["reason"]


def test_a_damaged_length_is_stepped_over_by_finding_the_next_intact_batch(
    log_dir: Path,
) -> None:
    _, after_position, _ = find_batch(log_dir, 200)
    position = damage_length(log_dir, BAD)

    [report] = verify_log_dir(log_dir)

    [segment] = report.segments
    [bad] = segment.bad_batches
    assert (bad.position, bad.offset) == (position, BAD)
    assert "truncated batch" in bad.reason and "damaged length" in bad.reason
    assert (bad.resume_position, bad.resume_offset) == (after_position, 200)
    assert (segment.batches, segment.records) == (5, 250)


def test_a_truncated_tail_is_reported(log_dir: Path, capsys: Any) -> None:
    [segment] = segment_files(log_dir)
    last_base, last_position, _ = batches_of(segment)[-1]
    truncate_tail(segment, 100)

    code, out, _ = verify(capsys, "--dir", str(log_dir))

    assert code == 1
    assert f"position {last_position}, offset {last_base} (per its header): truncated batch" in out
    assert "no intact batch follows in this segment" in out


def test_a_tail_too_short_for_a_header_is_reported(log_dir: Path) -> None:
    [segment] = segment_files(log_dir)
    with open(segment, "ab") as f:
        f.write(b"\0" * 20)
    [report] = verify_log_dir(log_dir)
    [bad] = report.segments[0].bad_batches
    assert bad.offset is None and "torn tail: the last 20 bytes" in bad.reason


def test_a_read_only_directory_is_verified_without_a_change(
    log_dir: Path, tmp_path: Path, capsys: Any
) -> None:
    flip_body_bytes(log_dir, BAD)
    for path in [log_dir, *log_dir.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    before = snapshot(log_dir)

    code, out, _ = verify(capsys, "--dir", str(log_dir), "--verify-index")

    assert code == 1 and f"offset {BAD} (per its header)" in out
    # Nothing written, created or removed: no lock file, no rebuilt index, no recovery.
    assert snapshot(log_dir) == before


@pytest.fixture
def read_only_mount(log_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """``log_dir`` bind-mounted read-only: writes fail even for root (skipped where the test
    cannot mount, which needs root)."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "--bind", str(log_dir), str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode().strip()}")
    try:
        remount = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(mount)], capture_output=True, check=False
        )
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
        with pytest.raises(OSError):
            (mount / "probe").write_bytes(b"x")
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_read_only_mount_is_verified(read_only_mount: Path, capsys: Any) -> None:
    code, out, err = verify(capsys, "--dir", str(read_only_mount), "--verify-index")
    assert code == 0, out + err
    assert "all intact" in out


def test_verify_runs_beside_a_running_broker(log_dir: Path, capsys: Any) -> None:
    ensure_broker(log_dir, config={"broker.idle.exit.ms": "-1"})
    try:
        code, out, _ = verify(capsys, "--dir", str(log_dir), "--topic", TOPIC, "--partition", "0")
        assert code == 0 and "all intact" in out
        # The broker still owns the directory and serves it.
        with Consumer(path=log_dir, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(TOPIC, 0)])
            assert consumer.end_offsets([TopicPartition(TOPIC, 0)]) == {
                TopicPartition(TOPIC, 0): 300
            }
    finally:
        stop_broker(log_dir)


def test_one_partition_directory_and_filters(log_dir: Path, capsys: Any) -> None:
    code, out, _ = verify(capsys, "--dir", str(log_dir / f"{TOPIC}-0"))
    assert code == 0 and f"{TOPIC}-0" in out

    code, _, err = verify(capsys, "--dir", str(log_dir), "--topic", "nope")
    assert code == 1 and "holds no partition directory of topic 'nope'" in err

    code, _, err = verify(capsys, "--dir", str(log_dir), "--partition", "0")
    assert code == 2 and "--partition needs --topic" in err

    code, _, err = verify(capsys, "--dir", str(log_dir / "missing"))
    assert code == 1 and "is not a directory" in err


def test_a_copy_with_several_damaged_segments(log_dir: Path, tmp_path: Path) -> None:
    """Every damaged batch of every segment is listed, not only the first."""
    copy = tmp_path / "copy"
    shutil.copytree(log_dir, copy)
    flip_body_bytes(copy, 50)
    flip_body_bytes(copy, 200)
    [report] = verify_log_dir(copy)
    bad = report.segments[0].bad_batches
    assert [(b.offset, b.resume_offset) for b in bad] == [(50, 100), (200, 250)]
