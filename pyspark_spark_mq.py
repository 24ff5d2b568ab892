"""Makes ``.format("spark_mq")`` resolve with no ``register()`` call: Spark 4 registers the
``DefaultSource`` of every installed top-level module named ``pyspark_*``."""

from spark_mq.datasource import SparkMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
