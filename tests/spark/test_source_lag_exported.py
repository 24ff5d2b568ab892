"""A streaming query's lag on a dashboard: the Spark source commits its progress to
``group.id`` and the lag exporter serves that group's lag in records and in seconds, the
figure Spark's own Kafka source cannot give (docs/operations.md, "Consumer lag").

The exporter runs on an injected clock, so the lag in seconds is exact: the committed
offset is placed in the partition's offset/time history the exporter sampled, by linear
interpolation between the two samples around it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from source_testing import Collector, produce, run_available_now

from spark_mq import Admin, TopicPartition
from spark_mq.monitoring.lag_exporter import LagExporter

GROUP = "dashboard-query"


def test_the_exporter_serves_a_streaming_querys_lag_in_records_and_seconds(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    produce(mq_dir, "clicks", 1, 30)
    options = {
        "path": str(mq_dir),
        "subscribe": "clicks",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "15",
        "group.id": GROUP,
    }
    checkpoint = tmp_path / "ckpt"
    now = [1000.0]
    with Admin(path=mq_dir) as admin:
        exporter = LagExporter(admin, clock=lambda: now[0])
        run_available_now(spark, options, checkpoint, Collector())
        # The end is 30 at t=1000; then 20 records arrive while the query is stopped and
        # the end is 50 at t=1010.
        (first,) = exporter.poll()
        produce(mq_dir, "clicks", 1, 20, first=30)
        now[0] = 1010.0
        (waiting,) = exporter.poll()
        run_available_now(spark, options, checkpoint, Collector())
        now[0] = 1020.0
        (caught_up,) = exporter.poll()
        committed = admin.list_group_offsets(GROUP)[TopicPartition("clicks", 0)].offset
        registry = CollectorRegistry()
        registry.register(exporter)

    # The source's commits are the group's offsets: they lag the query by one micro-batch
    # (Spark calls commit(end) when the next one starts), so some records stay counted.
    assert (first.group, first.end_offset, first.lag) == (GROUP, 30, 30 - first.committed)
    assert 0 < first.lag <= 15
    # Nothing consumed while the query was stopped: the lag grew by the 20 new records.
    assert (waiting.committed, waiting.end_offset) == (first.committed, 50)
    assert waiting.lag == first.lag + 20
    # The second run committed past the end of the first sample (30).
    assert caught_up.committed == committed
    assert 30 < committed < 50
    assert caught_up.lag == 50 - committed
    # The end passed the committed offset between the samples (30, t=1000) and (50, t=1010).
    passed_at = 1000.0 + (committed - 30) / 20 * 10
    assert caught_up.lag_seconds == 1020.0 - passed_at
    labels = {"group": GROUP, "topic": "clicks", "partition": "0"}
    assert registry.get_sample_value("spark_mq_consumergroup_lag", labels) == 50 - committed
    assert registry.get_sample_value("spark_mq_consumergroup_lag_seconds", labels) == (
        1020.0 - passed_at
    )
