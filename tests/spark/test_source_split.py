"""minPartitions and maxRecordsPerPartition: a partition's offset range read by several tasks.

The log under test has what makes a cut risky: batches that compaction left with gaps (and
one with no record at all), an aborted transaction, a committed one, its markers, and a
transaction still open at the end. Cut anywhere, the pieces read together are exactly the
whole range, with ``read_committed`` and ``read_uncommitted``; the pieces are read with
``read_partition_range``, the function a Spark task runs. Then Spark reads through the same
planning: a batch read and a stream have the asked-for number of input partitions and the
same rows as an unsplit read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from source_testing import Collector, produce, run_available_now, values

from spark_mq import ControlType, LogManager, encode_batch
from spark_mq.datasource.offsets import PartitionRange, ReadSettings, split_ranges
from spark_mq.datasource.partition_reader import read_partition_range

TOPIC = "cut"
#: Offsets holding committed data records; 25 is an open transaction, so 25 is the last
#: stable offset and 27 the high watermark.
COMMITTED = [0, 3, 15, 16, 17, 21, 22, 24]
UNCOMMITTED = [0, 3, 15, 16, 17, 18, 19, 21, 22, 24, 25, 26]
LAST_STABLE_OFFSET = 25
HIGH_WATERMARK = 27


def _txn_batch(payload: list[bytes], producer_id: int) -> bytes:
    return encode_batch(
        pa.array(payload, pa.binary()),
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )


def _write_log(mq_dir: Path) -> None:
    with LogManager(mq_dir) as logs:
        logs.create_topic(TOPIC, partitions=1)
        log = logs.get_log(TOPIC, 0)
        # As compaction leaves them: offsets 0-9 kept 0 and 3, 10-14 kept nothing.
        gappy = encode_batch(pa.array([b"x0", b"x3"]), offset_delta=[0, 3], last_offset_delta=9)
        empty = encode_batch(pa.array([], pa.binary()), base_offset=10, last_offset_delta=4)
        single = encode_batch(pa.array([b"x15"]), base_offset=15)
        log.append(gappy + empty + single, assign_offsets=False)
        log.append(encode_batch(pa.array([b"x16", b"x17"])))
        log.append(_txn_batch([b"x18", b"x19"], 1001))  # aborted at 20
        log.append_transaction_marker(
            ControlType.ABORT, producer_id=1001, producer_epoch=0, coordinator_epoch=0
        )
        log.append(_txn_batch([b"x21", b"x22"], 1002))  # committed at 23
        log.append_transaction_marker(
            ControlType.COMMIT, producer_id=1002, producer_epoch=0, coordinator_epoch=0
        )
        log.append(encode_batch(pa.array([b"x24"])))
        log.append(_txn_batch([b"x25"], 1003))  # still open
        log.append(encode_batch(pa.array([b"x26"])))
        assert log.last_stable_offset == LAST_STABLE_OFFSET
        assert log.high_watermark == HIGH_WATERMARK


def _settings(mq_dir: Path, isolation: str) -> ReadSettings:
    return ReadSettings(
        consumer_properties={"path": str(mq_dir), "isolation.level": isolation},
        include_headers=False,
        fail_on_data_loss=True,
        poll_timeout_ms=30_000,
    )


def _offsets(rng: PartitionRange) -> list[int]:
    rows: list[int] = []
    for batch in read_partition_range(rng):
        offsets = batch.column("offset").to_pylist()
        assert batch.column("value").to_pylist() == [b"x%d" % o for o in offsets]
        rows.extend(offsets)
    return rows


@pytest.mark.parametrize(
    ("isolation", "end", "expected"),
    [
        ("read_committed", LAST_STABLE_OFFSET, COMMITTED),
        ("read_uncommitted", HIGH_WATERMARK, UNCOMMITTED),
    ],
)
def test_pieces_cut_anywhere_read_the_whole_range(
    mq_dir: Path, isolation: str, end: int, expected: list[int]
) -> None:
    _write_log(mq_dir)
    settings = _settings(mq_dir, isolation)
    whole = PartitionRange(TOPIC, 0, 0, end, settings)
    assert _offsets(whole) == expected
    for cut in range(end + 1):
        head = _offsets(PartitionRange(TOPIC, 0, 0, cut, settings))
        tail = _offsets(PartitionRange(TOPIC, 0, cut, end, settings))
        assert head + tail == expected, f"cut at {cut}"
    for count in (3, 7, end):
        pieces = split_ranges([whole], min_partitions=count)
        assert len(pieces) == count
        assert [o for piece in pieces for o in _offsets(piece)] == expected, count


def _read(spark: Any, mq_dir: Path, **options: str) -> Any:
    reader = spark.read.format("spark_mq").option("path", str(mq_dir))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_reads_are_split_into_the_asked_input_partitions(spark: Any, mq_dir: Path) -> None:
    _write_log(mq_dir)
    produce(mq_dir, "two", 2, 1000)

    def offsets(df: Any) -> list[tuple[str, int, int]]:
        rows = df.select("topic", "partition", "offset").collect()
        return sorted((r.topic, r.partition, r.offset) for r in rows)

    whole = _read(spark, mq_dir, subscribe=f"{TOPIC},two")
    assert whole.rdd.getNumPartitions() == 3
    expected = offsets(whole)
    assert [o for t, _, o in expected if t == TOPIC] == COMMITTED
    by_min = _read(spark, mq_dir, subscribe=f"{TOPIC},two", minPartitions="9")
    assert by_min.rdd.getNumPartitions() == 9
    assert offsets(by_min) == expected
    # 500 offsets in each partition of "two" and 25 in TOPIC: 5 + 5 + 1 pieces.
    by_max = _read(spark, mq_dir, subscribe=f"{TOPIC},two", maxRecordsPerPartition="100")
    assert by_max.rdd.getNumPartitions() == 11
    assert offsets(by_max) == expected
    loose = _read(
        spark,
        mq_dir,
        subscribe=TOPIC,
        maxRecordsPerPartition="4",
        **{"isolation.level": "read_uncommitted"},
    )
    assert loose.rdd.getNumPartitions() == 7  # 27 offsets in pieces of at most 4
    assert sorted(r.offset for r in loose.select("offset").collect()) == UNCOMMITTED


class CountsPartitions(Collector):
    """Also keeps each micro-batch's number of input partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.partitions: list[int] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        super().__call__(df, batch_id)
        self.partitions.append(df.rdd.getNumPartitions())


def test_streams_split_every_micro_batch_including_new_topics(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    produce(mq_dir, "sp-a", 1, 40)
    options = {
        "path": str(mq_dir),
        "subscribePattern": "sp-.*",
        "startingOffsets": "earliest",
        "minPartitions": "4",
    }
    first = CountsPartitions()
    run_available_now(spark, options, tmp_path / "ckpt", first)
    assert sorted(first.values) == sorted(values(range(40)))
    assert first.partitions == [4]
    # A topic that appears mid-stream starts at its log start; its range is split too.
    produce(mq_dir, "sp-a", 1, 10, first=40)
    produce(mq_dir, "sp-b", 1, 30, first=100)
    second = CountsPartitions()
    run_available_now(spark, options, tmp_path / "ckpt", second)
    assert sorted(second.values) == sorted(values(range(40, 50)) + values(range(100, 130)))
    assert second.partitions == [4]
