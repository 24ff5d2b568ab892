"""``spark.read.format("spark_mq")``: a fixed range per partition, from ``startingOffsets``
(or a starting timestamp) to ``endingOffsets`` (or an ending timestamp), resolved once on
the driver when Spark plans the read, and cut into pieces by ``minPartitions`` and
``maxRecordsPerPartition``. Subscribed topics must exist: a batch read has nothing to wait
for, so a missing one fails the read naming it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from spark_mq.datasource.broker_view import BrokerView
from spark_mq.datasource.connection import PATH_OPTION
from spark_mq.datasource.executor_endpoint import resolve_executor_endpoint
from spark_mq.datasource.offsets import PartitionRange, ReadSettings, plan_ranges, split_ranges
from spark_mq.datasource.options import SourceOptions
from spark_mq.datasource.partition_reader import read_partition_range
from spark_mq.datasource.worker_gc import freeze_long_lived
from spark_mq.errors import ConfigError


def read_settings(options: SourceOptions) -> ReadSettings:
    """The part of the options every reader task needs. With ``path`` the broker is
    resolved here, on the driver, to the endpoint the executors use (it may be a new broker
    since the last batch: see :mod:`spark_mq.datasource.executor_endpoint`)."""
    props = options.consumer_properties()
    path = props.pop(PATH_OPTION, None)
    endpoint = None
    if path is not None:
        endpoint = resolve_executor_endpoint(
            str(path), options.executor_endpoint, options.executor_endpoint_host, create=False
        )
    return ReadSettings(
        consumer_properties=props,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        executor_endpoint=endpoint,
    )


def planned_ranges(options: SourceOptions, ranges: list[PartitionRange]) -> list[PartitionRange]:
    """``ranges`` cut into the input partitions that minPartitions and
    maxRecordsPerPartition ask for."""
    return split_ranges(
        ranges,
        min_partitions=options.min_partitions,
        max_records_per_partition=options.max_records_per_partition,
    )


class SparkMQBatchReader(DataSourceReader):
    """Batch reads: one input partition per log partition with records in range."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        view = BrokerView(self.options)
        try:
            tps = view.partitions(missing="error")
            start = view.resolve(self.options.starting, tps, starting=True)
            end = view.resolve(self.options.ending, tps, starting=False)
        finally:
            view.close()
        backwards = [f"{tp} ({start[tp]} > {end[tp]})" for tp in tps if start[tp] > end[tp]]
        if backwards:
            raise ConfigError(
                f"the read would end before it starts for {', '.join(backwards)}; check "
                "startingOffsets/endingOffsets (or their timestamp forms)",
                key="endingOffsets",
            )
        return planned_ranges(self.options, plan_ranges(start, end, read_settings(self.options)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PartitionRange):
            # pyspark reads one placeholder partition (None) when planning returned none.
            return iter(())
        freeze_long_lived()
        return read_partition_range(partition)
