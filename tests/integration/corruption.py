"""Damaging the segment files a real broker wrote, the way a disk or an operator can.

``write_batches`` fills partition 0 of a topic through a real local broker with one stored
batch per ``batch_records`` records (value ``b"v<offset>"``) and stops the broker cleanly;
``batches_of`` lists ``(base_offset, position, size)`` of each batch of a ``.log`` file by
walking the length fields; the ``flip_*`` and ``damage_*`` helpers change bytes in place.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from spark_mq import Admin, Producer
from spark_mq.broker.local import stop_broker

TOPIC = "t"
REPO = Path(__file__).resolve().parents[2]
_OFFSET_AND_LENGTH = struct.Struct(">qi")


def write_batches(
    directory: Path,
    batches: int = 6,
    batch_records: int = 50,
    topic_config: dict[str, str] | None = None,
) -> None:
    """``batches`` stored batches of ``batch_records`` records each in partition 0 of
    :data:`TOPIC`; the local broker is stopped (a clean shutdown) afterwards."""
    with Admin(path=directory) as admin:
        admin.create_topic(TOPIC, partitions=1, config=topic_config or {})
    # linger.ms long enough that each flush() sends exactly the records sent before it.
    with Producer(path=directory, linger_ms=60_000) as producer:
        offset = 0
        for _ in range(batches):
            for _ in range(batch_records):
                producer.send(TOPIC, value=b"v%d" % offset, partition=0)
                offset += 1
            producer.flush()
    stop_broker(directory, timeout_ms=30_000)


def partition_dir(directory: Path) -> Path:
    return directory / f"{TOPIC}-0"


def segment_files(directory: Path) -> list[Path]:
    return sorted(partition_dir(directory).glob("*.log"))


def batches_of(segment: Path) -> list[tuple[int, int, int]]:
    """``(base_offset, position, size)`` of every batch of ``segment``."""
    data = segment.read_bytes()
    out = []
    pos = 0
    while pos + _OFFSET_AND_LENGTH.size <= len(data):
        base, length = _OFFSET_AND_LENGTH.unpack_from(data, pos)
        out.append((base, pos, length + 12))
        pos += length + 12
    return out


def find_batch(directory: Path, base_offset: int) -> tuple[Path, int, int]:
    """The segment, position and size of the batch starting at ``base_offset``."""
    for segment in segment_files(directory):
        for base, pos, size in batches_of(segment):
            if base == base_offset:
                return segment, pos, size
    raise AssertionError(f"no batch starts at offset {base_offset} in {directory}")


def flip_body_bytes(directory: Path, base_offset: int, count: int = 16) -> int:
    """Invert ``count`` bytes inside the body of the batch at ``base_offset`` (its header and
    length stay intact, so only the CRC and the body tell); returns the batch's position."""
    segment, pos, size = find_batch(directory, base_offset)
    assert size > 100 + count
    with open(segment, "r+b") as f:
        f.seek(pos + 100)
        data = f.read(count)
        f.seek(pos + 100)
        f.write(bytes(b ^ 0xFF for b in data))
    return pos


def damage_length(directory: Path, base_offset: int) -> int:
    """Make the length field of the batch at ``base_offset`` run far past its segment's end;
    returns the batch's position."""
    segment, pos, _ = find_batch(directory, base_offset)
    with open(segment, "r+b") as f:
        f.seek(pos + 8)
        f.write(struct.pack(">i", 0x7FFF0000))
    return pos


def truncate_tail(segment: Path, remove_bytes: int) -> int:
    """Cut ``remove_bytes`` off the end of ``segment`` (a torn last write); returns the new
    size."""
    size = segment.stat().st_size - remove_bytes
    with open(segment, "r+b") as f:
        f.truncate(size)
    return size


def subprocess_env() -> dict[str, str]:
    """The environment for ``python -m spark_mq.cli``: this checkout's spark_mq first."""
    env = dict(os.environ)
    env.pop("SPARK_MQ_PATH", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env
