"""The source's row schema, in Spark and in Arrow, and the column conversion between them.

The schema is the one of Spark's Kafka source (so queries port by changing the format name)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int [, headers array<struct<key: string, value: binary>>]

Every field is nullable, as in Spark's Kafka source. ``read()`` yields Arrow record batches
whose schema must equal the Arrow form of this schema exactly (``timestamp[us, tz=UTC]``,
``int32`` partition and timestampType), so :func:`to_spark_batch` converts the consumer's
table (``CONSUMER_SCHEMA``: int64 milliseconds, int8 timestamp type) column by column, with
no Python per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

#: The source's schema as Spark DDL, without and with ``includeHeaders``.
SOURCE_DDL: Final = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL: Final = ", headers array<struct<key: string, value: binary>>"

_HEADER_STRUCT: Final = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
#: Arrow's default list item name is what pyspark compares against.
HEADERS_TYPE: Final = pa.list_(_HEADER_STRUCT)
_TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
)
ARROW_SCHEMA_WITH_HEADERS: Final = ARROW_SCHEMA.append(pa.field("headers", HEADERS_TYPE))


def source_ddl(include_headers: bool) -> str:
    """The schema as a DDL string (what ``DataSource.schema()`` returns)."""
    return SOURCE_DDL + (HEADERS_DDL if include_headers else "")


def spark_schema(include_headers: bool) -> StructType:
    """The schema as a pyspark ``StructType`` (imports pyspark)."""
    from pyspark.sql.types import (  # noqa: PLC0415 (pyspark only when asked for)
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema ``read()`` yields batches of."""
    return ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA


def to_spark_batches(table: pa.Table, include_headers: bool) -> list[pa.RecordBatch]:
    """Record batches of the source schema from a table of ``CONSUMER_SCHEMA``.

    Only two columns change: ``timestamp`` (int64 ms to ``timestamp[us, UTC]``, a cast that
    reinterprets and scales the buffer) and ``timestamp_type`` (int8 to int32).
    """
    timestamp = pc.multiply(table.column("timestamp"), 1000).cast(_TIMESTAMP_TYPE)
    columns: list[Any] = [
        table.column("key"),
        table.column("value"),
        table.column("topic"),
        table.column("partition"),
        table.column("offset"),
        timestamp,
        table.column("timestamp_type").cast(pa.int32()),
    ]
    if include_headers:
        columns.append(table.column("headers").cast(HEADERS_TYPE))
    out = pa.Table.from_arrays(columns, schema=arrow_schema(include_headers))
    batches: list[pa.RecordBatch] = out.to_batches()
    return batches
