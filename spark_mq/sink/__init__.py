"""The Spark sink: ``df.write`` / ``df.writeStream`` ``.format("spark_mq")``, exactly once.

The ``spark_mq`` data source (:mod:`spark_mq.datasource`) creates its writers with
:func:`batch_writer` and :func:`stream_writer`. See ``docs/spark_sink.md``.

Example (a running Spark session and a log directory)::

    (df.selectExpr("CAST(id AS STRING) AS key", "CAST(v AS STRING) AS value")
       .writeStream.format("spark_mq")
       .option("path", "/data/mq").option("topic", "out")
       .option("checkpointLocation", "/data/ckpt/out")
       .start())
"""

from spark_mq.sink.columns import ACCEPTED_COLUMNS, ColumnPlan, check_schema, to_send_tables
from spark_mq.sink.options import SinkOptions, parse_sink_options
from spark_mq.sink.task import SinkCommitMessage, TaskPlan
from spark_mq.sink.writers import MQBatchWriter, MQStreamWriter, batch_writer, stream_writer

__all__ = [
    "ACCEPTED_COLUMNS",
    "ColumnPlan",
    "MQBatchWriter",
    "MQStreamWriter",
    "SinkCommitMessage",
    "SinkOptions",
    "TaskPlan",
    "batch_writer",
    "check_schema",
    "parse_sink_options",
    "stream_writer",
    "to_send_tables",
]
