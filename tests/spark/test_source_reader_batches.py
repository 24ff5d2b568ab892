"""How a reader task cuts its records into the Arrow batches it hands to Spark.

Runs ``read_partition_range`` directly (what a Spark task runs), without a Spark session:
stored batches of at least ``MIN_BATCH_ROWS`` rows go to Spark as they are, with their columns
still pointing into the fetched bytes; smaller ones are joined until they reach it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spark_mq import Admin, Producer
from spark_mq.datasource.offsets import PartitionRange, ReadSettings
from spark_mq.datasource.partition_reader import MIN_BATCH_ROWS, read_partition_range
from spark_mq.datasource.schema import arrow_schema

TOPIC = "cuts"


def _send(mq_dir: Path, sizes: list[int]) -> list[bytes]:
    """One stored batch per entry of ``sizes`` (linger.ms 0, one send_batch each, waited for),
    to partition 0; returns every value in order."""
    values: list[bytes] = []
    with Admin(path=mq_dir) as admin:
        admin.create_topic(TOPIC, partitions=1)
    with Producer(path=mq_dir, linger_ms=0) as producer:
        for size in sizes:
            chunk = [b"r%07d" % (len(values) + i) for i in range(size)]
            producer.send_batch(TOPIC, pa.table({"value": pa.array(chunk, pa.binary())})).get()
            values.extend(chunk)
    return values


def _read(mq_dir: Path, start: int, end: int) -> list[pa.RecordBatch]:
    settings = ReadSettings(
        consumer_properties={"path": str(mq_dir)},
        include_headers=False,
        fail_on_data_loss=True,
        poll_timeout_ms=30_000,
    )
    return list(read_partition_range(PartitionRange(TOPIC, 0, start, end, settings)))


def test_large_stored_batches_pass_whole_and_small_ones_are_joined(tmp_path: Path) -> None:
    small = 100
    smalls = MIN_BATCH_ROWS // small - 1  # together just under the minimum
    sizes = [MIN_BATCH_ROWS + 500, *[small] * smalls, 2_000, MIN_BATCH_ROWS]
    values = _send(tmp_path, sizes)

    batches = _read(tmp_path, 0, len(values))

    # The first stored batch alone; the small ones joined with the 2,000 that brought them
    # over the minimum; the last stored batch alone.
    assert [b.num_rows for b in batches] == [
        MIN_BATCH_ROWS + 500,
        smalls * small + 2_000,
        MIN_BATCH_ROWS,
    ]
    for batch in batches:
        assert batch.schema == arrow_schema(False)
    table = pa.Table.from_batches(batches)
    assert table.column("value").to_pylist() == values
    assert table.column("offset").to_pylist() == list(range(len(values)))


def test_small_batches_end_with_a_short_last_batch_and_ranges_cut_inside_batches(
    tmp_path: Path,
) -> None:
    values = _send(tmp_path, [300] * 20)  # 6,000 rows in stored batches of 300

    batches = _read(tmp_path, 450, 5_050)

    rows = [b.num_rows for b in batches]
    assert all(n >= MIN_BATCH_ROWS for n in rows[:-1]), rows
    assert sum(rows) == 4_600
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == list(range(450, 5_050))
    assert table.column("value").to_pylist() == values[450:5_050]
