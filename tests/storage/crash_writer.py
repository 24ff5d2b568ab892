"""A writer process for the crash tests: appends a deterministic sequence of batches forever.

Usage::

    python crash_writer.py DIRECTORY SEED RECOVERY_POINT CONFIG_JSON ACK_FILE

The writer opens the partition log in ``DIRECTORY`` as after an unclean stop (so it runs
recovery from ``RECOVERY_POINT`` itself), then appends until it is killed. The parent process
kills it with SIGKILL at a random moment, which may fall during imports, during recovery or in
the middle of an append.

What offset ``n`` holds is a pure function of ``(seed, n)`` (:func:`expected_batch`), and so
are the batch boundaries: the batch that starts at offset ``b`` holds ``batch_size(seed, b)``
records. Because recovery only ever cuts at a batch boundary, a writer that resumes at the log
end continues the very same sequence, and the parent can check that the recovered log is
exactly a prefix of it, batch by batch.

The acknowledgement file is opened with ``O_APPEND`` and gets one line per event, each written
by a single ``write`` after the event happened:

- ``open <log_end_offset>``: the log was opened (recovery finished) and this is its end.
- ``ack <first_offset> <next_offset>``: an append returned; these records must survive.

SIGKILL does not lose what is in the page cache, so every acknowledged record must be in the
log after recovery. This module is also imported by the tests for :func:`expected_batch`.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Final, NamedTuple

#: Record timestamps are ``BASE_TIMESTAMP_MS + offset``: increasing, so lookups by time have
#: one right answer per offset.
BASE_TIMESTAMP_MS: Final = 1_700_000_000_000
CODECS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
MAX_RECORDS_PER_BATCH: Final = 8
MAX_VALUE_PAD_BYTES: Final = 300


class ExpectedBatch(NamedTuple):
    """The batch the writer appends at ``base_offset``: its codec and its columns."""

    base_offset: int
    codec: str
    keys: list[bytes]
    values: list[bytes]
    timestamps: list[int]

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.values)


def expected_batch(seed: int, base_offset: int) -> ExpectedBatch:
    """The batch of the deterministic sequence that starts at ``base_offset``."""
    rng = random.Random(f"{seed}:{base_offset}")
    count = rng.randint(1, MAX_RECORDS_PER_BATCH)
    codec = rng.choice(CODECS)
    # Half the batches get compressible padding, half random bytes, so both kinds of body
    # go through every codec.
    compressible = rng.random() < 0.5
    keys, values, timestamps = [], [], []
    for i in range(count):
        offset = base_offset + i
        head = f"{seed}:{offset}:{i}:".encode()
        pad_bytes = rng.randint(0, MAX_VALUE_PAD_BYTES)
        pad = head * (pad_bytes // len(head) + 1) if compressible else rng.randbytes(pad_bytes)
        values.append(head + pad[:pad_bytes])
        keys.append(f"k{offset}".encode())
        timestamps.append(BASE_TIMESTAMP_MS + offset)
    return ExpectedBatch(base_offset, codec, keys, values, timestamps)


def expected_batches(seed: int, end_offset: int) -> list[ExpectedBatch]:
    """Every batch of the sequence that starts below ``end_offset``."""
    out: list[ExpectedBatch] = []
    offset = 0
    while offset < end_offset:
        batch = expected_batch(seed, offset)
        out.append(batch)
        offset = batch.next_offset
    return out


def main(argv: list[str]) -> int:
    import pyarrow as pa

    from spark_mq.storage.log import PartitionLog
    from spark_mq.storage.log_config import LogConfig
    from spark_mq.storage.record_batch import encode_batch

    directory, seed_text, recovery_point_text, config_json, ack_path = argv
    seed = int(seed_text)
    config = LogConfig.from_properties(json.loads(config_json))
    # Build one batch before the log is opened: pyarrow imports pandas (when installed, as
    # pyspark needs it) on the first pa.array() of a Python list, which takes longer than the
    # parent's kill window after "open". That belongs to the import phase, not to an append.
    encode_batch(pa.array([b"warm-up"], pa.binary()))
    ack_fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    log = PartitionLog.open(
        directory,
        config,
        topic="t",
        partition=0,
        recovery_point=int(recovery_point_text),
        had_clean_shutdown=False,
    )
    os.write(ack_fd, f"open {log.log_end_offset}\n".encode())
    while True:
        batch = expected_batch(seed, log.log_end_offset)
        data = encode_batch(
            pa.array(batch.values, pa.binary()),
            key=pa.array(batch.keys, pa.binary()),
            timestamp=pa.array(batch.timestamps, pa.int64()),
            codec=batch.codec,
        )
        info = log.append(data)
        if info.first_offset != batch.base_offset or info.last_offset + 1 != batch.next_offset:
            raise AssertionError(
                f"seed={seed}: append of {batch.base_offset}..{batch.next_offset - 1} got "
                f"offsets {info.first_offset}..{info.last_offset}"
            )
        os.write(ack_fd, f"ack {info.first_offset} {info.last_offset + 1}\n".encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
