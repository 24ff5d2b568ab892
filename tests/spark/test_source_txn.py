"""read_committed (the default) hides aborted and still-open transactions and stops at the
last stable offset; read_uncommitted reads everything. The transactional batches and markers
are written into the log directory with the storage layer before its broker starts, which
then serves them like any other data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from source_testing import Collector, run_available_now

from spark_mq import ControlType, LogManager, encode_batch


def _txn_batch(values: list[bytes], producer_id: int) -> bytes:
    return encode_batch(
        pa.array(values, pa.binary()),
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def _write_transactions(mq_dir: Path) -> None:
    """Offsets: 0-1 plain, 2-3 aborted (marker 4), 5-6 committed (marker 7), 8 open, 9 plain."""
    with LogManager(mq_dir) as logs:
        logs.create_topic("tx", partitions=1)
        log = logs.get_log("tx", 0)
        log.append(encode_batch(pa.array([b"c0", b"c1"])))
        log.append(_txn_batch([b"a0", b"a1"], 1001))
        log.append_transaction_marker(
            ControlType.ABORT, producer_id=1001, producer_epoch=0, coordinator_epoch=0
        )
        log.append(_txn_batch([b"t0", b"t1"], 1002))
        log.append_transaction_marker(
            ControlType.COMMIT, producer_id=1002, producer_epoch=0, coordinator_epoch=0
        )
        log.append(_txn_batch([b"o0"], 1003))
        log.append(encode_batch(pa.array([b"c2"])))
        assert log.last_stable_offset == 8


def test_read_committed_hides_aborted_and_open_transactions(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    _write_transactions(mq_dir)
    reader = spark.read.format("spark_mq").option("path", str(mq_dir)).option("subscribe", "tx")
    committed = reader.load().select("value", "offset").collect()
    assert [(bytes(r.value), r.offset) for r in committed] == [
        (b"c0", 0),
        (b"c1", 1),
        (b"t0", 5),
        (b"t1", 6),
    ]
    uncommitted = reader.option("isolation.level", "read_uncommitted").load().collect()
    assert sorted(bytes(r.value) for r in uncommitted) == sorted(
        [b"c0", b"c1", b"a0", b"a1", b"t0", b"t1", b"o0", b"c2"]
    )

    # A stream's batches end at the last stable offset, so a re-run reads the same records
    # whatever happens to the open transaction later.
    collector = Collector()
    options = {"path": str(mq_dir), "subscribe": "tx", "startingOffsets": "earliest"}
    run_available_now(spark, options, tmp_path / "ckpt", collector)
    assert sorted(collector.values) == [b"c0", b"c1", b"t0", b"t1"]
    offsets_dir = tmp_path / "ckpt" / "offsets"
    last = max(int(p.name) for p in offsets_dir.iterdir() if p.name.isdigit())
    assert json.loads((offsets_dir / str(last)).read_text().splitlines()[-1]) == {"tx": {"0": 8}}
