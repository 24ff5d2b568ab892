"""A corrupt batch in a real broker's log: what consumers, the CLI and the Spark reader see.

Issue 27, point 4: bytes flipped inside one batch of a stopped broker's segment must not hide
the intact batches before it. The broker serves the stored bytes; the consumer returns the
records before the corrupt batch, then raises CorruptRecordError naming the topic, the
partition, the batch's offset and where to seek to skip it, on every poll until the
application seeks; a seek past it reads on. A damaged length field, which the broker cannot
walk over, is reported the same way instead of sending the read into the next segment.

The log holds six batches of 50 records (offsets 0-299); the batch at 150 is damaged.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from corruption import TOPIC, damage_length, flip_body_bytes, subprocess_env, write_batches

from spark_mq import Consumer, TopicPartition
from spark_mq.errors import CorruptRecordError

TP = TopicPartition(TOPIC, 0)
BAD = 150  # base offset of the damaged batch
AFTER = 200  # base offset of the batch after it


def _poll_until_error(consumer: Consumer, *, batch: bool) -> tuple[list[int], CorruptRecordError]:
    """Offsets polled until the consumer raises CorruptRecordError (fails after 30 s)."""
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if batch:
                offsets.extend(consumer.poll_batch(timeout_ms=500).column("offset").to_pylist())
            else:
                for records in consumer.poll(timeout_ms=500).values():
                    offsets.extend(r.offset for r in records)
        except CorruptRecordError as exc:
            return offsets, exc
    raise AssertionError(f"no CorruptRecordError within 30 s; polled {len(offsets)} records")


def _poll_offsets(consumer: Consumer, count: int) -> list[int]:
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while len(offsets) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            offsets.extend(r.offset for r in records)
    return offsets


@pytest.fixture
def damaged_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "mq"
    write_batches(directory)
    flip_body_bytes(directory, BAD)
    return directory


@pytest.mark.parametrize("batch", [False, True], ids=["poll", "poll_batch"])
def test_records_before_a_corrupt_batch_are_returned_then_it_is_reported(
    damaged_dir: Path, batch: bool
) -> None:
    with Consumer(path=damaged_dir) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 100)

        offsets, error = _poll_until_error(consumer, batch=batch)

        assert offsets == list(range(100, BAD))
        assert (error.topic, error.partition, error.offset, error.next_offset) == (
            TOPIC,
            0,
            BAD,
            AFTER,
        )
        message = str(error)
        assert f"{TOPIC}-0" in message and f"offset {BAD}" in message
        assert "CRC mismatch" in message
        assert f"consumer.seek(TopicPartition('{TOPIC}', 0), {AFTER})" in message
        # The position stays at the corrupt batch, and every poll says so again.
        assert consumer.position(TP) == BAD
        for _ in range(2):
            with pytest.raises(CorruptRecordError, match=f"offset {BAD}"):
                if batch:
                    consumer.poll_batch(timeout_ms=10_000)
                else:
                    consumer.poll(timeout_ms=10_000)
        assert consumer.position(TP) == BAD

        # Kafka's way past it: seek to where the error says intact data resumes.
        consumer.seek(TP, error.next_offset)
        assert _poll_offsets(consumer, 100) == list(range(AFTER, 300))


def test_a_fetch_starting_inside_the_corrupt_batch_reports_it_at_once(damaged_dir: Path) -> None:
    with Consumer(path=damaged_dir) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, BAD + 10)
        offsets, error = _poll_until_error(consumer, batch=False)
    assert offsets == []
    assert (error.offset, error.next_offset) == (BAD, AFTER)
    assert f"losing offsets {BAD + 10} to {AFTER - 1}" in str(error)


def test_a_seek_back_after_the_error_reads_the_intact_records_again(damaged_dir: Path) -> None:
    with Consumer(path=damaged_dir) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, BAD)
        _poll_until_error(consumer, batch=True)
        consumer.seek(TP, 0)
        assert _poll_offsets(consumer, BAD) == list(range(BAD))


def test_cli_consume_prints_the_intact_records_then_names_the_corrupt_batch(
    damaged_dir: Path,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_mq.cli",
            "consume",
            "--path",
            str(damaged_dir),
            TOPIC,
            "--partition",
            "0",
            "--offset",
            "100",
        ],
        capture_output=True,
        env=subprocess_env(),
        timeout=120,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert done.stdout.decode().splitlines() == [f"v{i}" for i in range(100, BAD)]
    assert f"Consumed {BAD - 100} records." in err
    assert f"record batch of {TOPIC}-0 at offset {BAD} is corrupt" in err
    assert f"{AFTER})" in err


def test_a_damaged_length_field_is_reported_not_skipped(tmp_path: Path) -> None:
    """Before: the broker could not walk over the batch, went on in the next segment and the
    consumer silently skipped offsets 150-199. Now the fetch fails for the partition, naming
    the file and position, and a seek past the damage reads on."""
    directory = tmp_path / "mq"
    # Two batches of 50 small records (varint bodies, about 550 bytes each) per segment: the
    # damaged batch ends segment 100-199.
    write_batches(directory, topic_config={"segment.bytes": "1400"})
    damage_length(directory, BAD)
    with Consumer(path=directory) as consumer:
        consumer.assign([TP])
        consumer.seek(TP, 100)
        offsets, error = _poll_until_error(consumer, batch=False)
        assert offsets == list(range(100, BAD))
        assert (error.topic, error.partition, error.offset) == (TOPIC, 0, BAD)
        assert "00000000000000000100.log" in str(error)
        assert f"Seek to {AFTER}" in str(error)
        consumer.seek(TP, AFTER)
        assert _poll_offsets(consumer, 100) == list(range(AFTER, 300))


def test_spark_reader_names_the_batch_and_skips_it_only_when_told(damaged_dir: Path) -> None:
    pytest.importorskip("pyspark")
    from spark_mq.datasource.offsets import PartitionRange, ReadSettings
    from spark_mq.datasource.partition_reader import read_partition_range

    def read(fail_on_data_loss: bool) -> Any:
        settings = ReadSettings(
            consumer_properties={"path": str(damaged_dir)},
            include_headers=False,
            fail_on_data_loss=fail_on_data_loss,
            poll_timeout_ms=30_000,
        )
        rows: list[int] = []
        try:
            for batch in read_partition_range(PartitionRange(TOPIC, 0, 100, 300, settings)):
                rows.extend(batch.column("offset").to_pylist())
        except CorruptRecordError as exc:
            return rows, exc
        return rows, None

    rows, error = read(fail_on_data_loss=True)
    assert error is not None
    assert (error.topic, error.partition, error.offset, error.next_offset) == (TOPIC, 0, BAD, AFTER)
    assert f"{TOPIC}-0: the record batch at offset {BAD} is corrupt" in str(error)
    assert "failOnDataLoss=false" in str(error)
    # The records before the batch were read but not handed on: they would have joined the
    # next batch for Spark, and the task fails (Spark runs it again, or the query stops).
    assert rows == []

    rows, error = read(fail_on_data_loss=False)
    assert error is None
    assert rows == list(range(100, BAD)) + list(range(AFTER, 300))
