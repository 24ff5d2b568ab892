"""``.option("path", DIR)`` in Spark: a read (batch or streaming) of a path that holds no log
fails with an error naming it and creates nothing; the sink creates it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sink_helpers import values

from spark_mq.broker.local import stop_broker


@pytest.fixture
def new_path(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "new" / "mq"
    yield d
    stop_broker(d)


def test_a_batch_read_of_a_missing_path_fails_naming_it(spark: Any, new_path: Path) -> None:
    df = spark.read.format("spark_mq").option("path", str(new_path)).option("subscribe", "t")
    with pytest.raises(Exception, match="no log directory at") as caught:
        df.load().count()
    assert str(new_path) in str(caught.value)
    assert not new_path.parent.exists()


def test_a_stream_of_an_empty_directory_fails_naming_it(
    spark: Any, tmp_path: Path, mq_dir: Path
) -> None:
    query = (
        spark.readStream.format("spark_mq")
        .option("path", str(mq_dir))
        .option("subscribe", "t")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="holds no spark_mq log"):
        query.awaitTermination(120)
    assert list(mq_dir.iterdir()) == []


def test_the_sink_creates_a_missing_path(spark: Any, new_path: Path, tmp_path: Path) -> None:
    df = spark.range(0, 10, 1, 2).selectExpr("CAST(id AS STRING) AS value")
    df.write.format("spark_mq").mode("append").option("path", str(new_path)).option(
        "topic", "out"
    ).save()
    assert values(new_path, "out") == sorted(str(i).encode() for i in range(10))
