"""The ``spark_mq`` format: one Spark ``DataSource`` for reading (batch and streaming) and
writing (the sink in :mod:`spark_mq.sink`).

>>> SparkMQDataSource.name()
'spark_mq'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_mq.datasource.batch_reader import SparkMQBatchReader
from spark_mq.datasource.connection import lookup
from spark_mq.datasource.options import parse_source_options
from spark_mq.datasource.schema import source_ddl
from spark_mq.datasource.stream_reader import SparkMQStreamReader
from spark_mq.datasource.worker_gc import freeze_long_lived

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter


class SparkMQDataSource(DataSource):
    """``spark.read`` / ``spark.readStream`` / ``df.write`` / ``df.writeStream`` with
    ``.format("spark_mq")``. Reads need ``path`` or ``bootstrap.servers`` and one of
    ``subscribe``, ``subscribePattern``, ``assign`` (``docs/spark_source.md``)::

        spark.readStream.format("spark_mq").option("path", "/data/mq")
            .option("subscribe", "events").load()
    """

    @classmethod
    def name(cls) -> str:
        return "spark_mq"

    def schema(self) -> str:
        """The source schema (Spark's Kafka source's), with ``headers`` if includeHeaders."""
        include = (lookup(self.options, "includeHeaders") or "false").strip().lower() == "true"
        return source_ddl(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        freeze_long_lived()  # Spark plans reads and writes in reused Python workers too
        return SparkMQBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark API name)
        freeze_long_lived()
        return SparkMQStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_mq.sink import batch_writer  # noqa: PLC0415 (the sink loads only for writes)

        freeze_long_lived()
        return batch_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 (Spark API name)
        from spark_mq.sink import stream_writer  # noqa: PLC0415 (the sink loads only for writes)

        freeze_long_lived()
        return stream_writer(self.options, schema, overwrite)
