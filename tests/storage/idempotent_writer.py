"""A writer process for the producer state crash test: one idempotent producer, forever.

Usage::

    python idempotent_writer.py DIRECTORY SEED RECOVERY_POINT CONFIG_JSON ACK_FILE

The writer opens the partition log in ``DIRECTORY`` as after an unclean stop (so it rebuilds
the producer state itself from the snapshots and the log), then appends batches of producer
:data:`PRODUCER_ID` at epoch :data:`PRODUCER_EPOCH` until it is killed with SIGKILL.

Sequences start at :data:`START_SEQUENCE`, close to 2^31-1, so that they wrap during the test.
The batch that starts at sequence ``s`` is a pure function of ``(seed, s)``
(:func:`expected_batch`): its record count and values. The writer continues at the sequence
after the producer's last one in the recovered log, so the producer's batches in the log form
one chain of that sequence, whatever the kills did. Between its own batches it appends plain
(non-idempotent) batches now and then, so that offsets and sequences do not line up.

On start, if the log knows the producer, the writer first retries the producer's last batch,
as a real producer does after losing a response, and exits with status 3 unless the log
answers that it is a duplicate with the offsets it already has.

The acknowledgement file is opened with ``O_APPEND`` and gets one line per event, each
written by a single ``write`` after the event happened:

- ``open <log_end_offset> <next_sequence>``: the log was opened (recovery finished).
- ``ack <first_sequence> <record_count> <first_offset> <last_offset>``: an append of the
  producer's batch returned; it must survive the kill (the page cache does).

This module is also imported by the test for :func:`expected_batch` and the constants.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Final, NamedTuple

PRODUCER_ID: Final = 4242
PRODUCER_EPOCH: Final = 3
#: 200 sequences before the wrap: a long-enough run crosses 2^31-1 -> 0.
START_SEQUENCE: Final = 2**31 - 200
MAX_RECORDS_PER_BATCH: Final = 6
SEQUENCE_MODULUS: Final = 2**31


class ExpectedBatch(NamedTuple):
    """The producer's batch that starts at ``first_seq``."""

    first_seq: int
    values: list[bytes]

    @property
    def last_seq(self) -> int:
        return (self.first_seq + len(self.values) - 1) % SEQUENCE_MODULUS

    @property
    def next_seq(self) -> int:
        return (self.first_seq + len(self.values)) % SEQUENCE_MODULUS


def expected_batch(seed: int, first_seq: int) -> ExpectedBatch:
    rng = random.Random(f"{seed}:{first_seq}")
    count = rng.randint(1, MAX_RECORDS_PER_BATCH)
    values = [
        f"{seed}:{(first_seq + i) % SEQUENCE_MODULUS}:".encode() + rng.randbytes(rng.randint(0, 40))
        for i in range(count)
    ]
    return ExpectedBatch(first_seq, values)


def plain_after(seed: int, first_seq: int) -> list[bytes] | None:
    """The plain batch appended after the producer's batch at ``first_seq``, if any."""
    rng = random.Random(f"plain:{seed}:{first_seq}")
    if rng.random() < 0.6:
        return None
    return [b"plain" * rng.randint(0, 10) for _ in range(rng.randint(1, 4))]


def encode(seed: int, first_seq: int) -> bytes:
    import pyarrow as pa

    from spark_mq.storage.record_batch import encode_batch

    batch = expected_batch(seed, first_seq)
    return encode_batch(
        pa.array(batch.values, pa.binary()),
        producer_id=PRODUCER_ID,
        producer_epoch=PRODUCER_EPOCH,
        base_sequence=first_seq,
    )


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
    entry = log.producer_state.entry(PRODUCER_ID)
    if entry is None or not entry.batches:
        next_seq = START_SEQUENCE
    else:
        last = entry.batches[-1]
        retry = log.append(encode(seed, last.first_seq))
        if not retry.is_duplicate or (retry.first_offset, retry.last_offset) != (
            last.first_offset,
            last.last_offset,
        ):
            print(f"retry of sequence {last.first_seq} was not a duplicate: {retry}")
            return 3
        next_seq = (last.last_seq + 1) % SEQUENCE_MODULUS
    os.write(ack_fd, f"open {log.log_end_offset} {next_seq}\n".encode())
    while True:
        batch = expected_batch(seed, next_seq)
        info = log.append(encode(seed, next_seq))
        if info.is_duplicate or info.num_records != len(batch.values):
            print(f"append of sequence {next_seq} returned {info}")
            return 4
        os.write(
            ack_fd,
            f"ack {next_seq} {len(batch.values)} {info.first_offset} {info.last_offset}\n".encode(),
        )
        values = plain_after(seed, next_seq)
        if values is not None:
            log.append(encode_batch(pa.array(values, pa.binary())))
        next_seq = batch.next_seq


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
