"""The Spark source of the ``spark_mq`` format (and the DataSource that also routes writes
to :mod:`spark_mq.sink`). Importing this package imports pyspark; ``spark_mq`` itself does
not. See ``docs/spark_source.md``."""

from spark_mq.datasource.source import SparkMQDataSource

__all__ = ["SparkMQDataSource"]
