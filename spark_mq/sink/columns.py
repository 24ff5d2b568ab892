"""Input columns of the sink, as in Spark's Kafka sink, and their columnar conversion.

A DataFrame written with ``format("spark_mq")`` has a ``value`` column (string or binary,
required) and optionally ``key`` (string or binary), ``topic`` (string), ``partition``
(int), ``headers`` (``array<struct<key: string, value: binary>>``) and ``timestamp``
(timestamp). Names are matched without regard to case, as Spark's analyzer does by default
(``Value`` is the ``value`` column), and other columns are ignored, as by Spark's Kafka sink,
so a DataFrame read from the source (which has ``offset``, ``timestampType``, ...) can be
written back as it is. :func:`check_schema` validates the Spark schema on the driver, when
the writer is created, and returns a :class:`ColumnPlan`; on the executors
:func:`to_send_tables` turns each Arrow record batch into the tables
:meth:`~spark_mq.Producer.send_batch` takes, one per target topic, with Arrow compute kernels
only (no Python code per row).

>>> from pyspark.sql.types import StructType, StructField, StringType, LongType
>>> schema = StructType([StructField("Value", StringType()), StructField("n", LongType())])
>>> plan = check_schema(schema, topic_option="t")
>>> plan.columns, plan.positions, plan.ignored
(('value',), (0,), ('n',))
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from spark_mq.errors import InvalidRecordError, SinkSchemaError
from spark_mq.storage.arrow_arrays import from_numpy, to_numpy_filled

#: Accepted columns and the Spark SQL types each may have (simpleString form).
ACCEPTED_COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "value": ("string", "binary"),
    "key": ("string", "binary"),
    "topic": ("string",),
    "partition": ("int",),
    "headers": ("array<struct<key:string,value:binary>>",),
    "timestamp": ("timestamp",),
}


def _accepted_text() -> str:
    return "; ".join(f"{name} ({' or '.join(types)})" for name, types in ACCEPTED_COLUMNS.items())


def _schema_error(message: str, column: str) -> SinkSchemaError:
    return SinkSchemaError(
        f"{message}. The spark_mq sink accepts the columns: {_accepted_text()}", column=column
    )


@dataclass(frozen=True)
class ColumnPlan:
    """The accepted columns present in the written DataFrame (lower-case names, in Spark's
    order), where each is in the Arrow batches Spark hands to ``write()`` (``positions``,
    by default the first columns in order), the columns ignored, and where the topic of each
    row comes from (``topic`` option, else the ``topic`` column)."""

    columns: tuple[str, ...]
    topic_option: str | None
    positions: tuple[int, ...] = ()
    ignored: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.positions:
            object.__setattr__(self, "positions", tuple(range(len(self.columns))))
        assert len(self.positions) == len(self.columns), "one position per column"

    @property
    def topic_from_column(self) -> bool:
        """Whether rows are routed by their ``topic`` column."""
        return self.topic_option is None

    @property
    def width(self) -> int:
        """How many columns the written batches have."""
        return len(self.positions) + len(self.ignored)


def check_schema(schema: Any, *, topic_option: str | None) -> ColumnPlan:
    """Validate a Spark ``StructType`` against the accepted columns (raises SinkSchemaError
    for a missing ``value``, a mistyped accepted column, or two columns that differ only in
    case); other columns are recorded as ignored."""
    names: list[str] = []
    positions: list[int] = []
    ignored: list[str] = []
    spelled: dict[str, str] = {}
    for position, field in enumerate(schema.fields):
        name = field.name
        lowered = name.lower()
        if lowered not in ACCEPTED_COLUMNS:
            ignored.append(name)
            continue
        if lowered in spelled:
            raise _schema_error(
                f"columns {spelled[lowered]!r} and {name!r} are the same column to the sink "
                "(names are matched without regard to case, as Spark does); drop or rename one",
                name,
            )
        spelled[lowered] = name
        spark_type = field.dataType.simpleString()
        if spark_type not in ACCEPTED_COLUMNS[lowered]:
            raise _schema_error(
                f"column {name!r} has type {spark_type}, expected "
                f"{' or '.join(ACCEPTED_COLUMNS[lowered])}",
                name,
            )
        names.append(lowered)
        positions.append(position)
    if "value" not in names:
        raise _schema_error("the required column 'value' is missing", "value")
    if topic_option is None and "topic" not in names:
        raise _schema_error('no topic: give .option("topic", NAME) or a topic column', "topic")
    return ColumnPlan(
        columns=tuple(names),
        topic_option=topic_option,
        positions=tuple(positions),
        ignored=tuple(ignored),
    )


def _send_columns(batch: pa.RecordBatch, plan: ColumnPlan) -> dict[str, pa.Array]:
    """The columns of ``batch`` that send_batch takes, with nulls in ``timestamp`` set to
    now (Kafka's producer does the same for a record without a timestamp)."""
    used = zip(plan.positions, plan.columns, strict=True)
    columns = {name: batch.column(i) for i, name in used if name != "topic"}
    stamps = columns.get("timestamp")
    if stamps is not None and stamps.null_count:
        now = int(time.time() * 1000) * 1000
        micros = stamps.cast(pa.timestamp("us")).view(pa.int64())
        columns["timestamp"] = from_numpy(to_numpy_filled(micros, now), pa.timestamp("us"))
    return columns


def to_send_tables(batch: pa.RecordBatch, plan: ColumnPlan) -> list[tuple[str, pa.Table]]:
    """Split one Arrow record batch into ``(topic, table)`` pairs for ``send_batch``.

    With the ``topic`` option every row goes to it; otherwise rows are grouped by their
    ``topic`` column (each group keeps the rows' order). A null topic raises
    InvalidRecordError, as Spark's Kafka sink does.
    """
    if batch.num_rows == 0:
        return []
    if batch.num_columns != plan.width:
        raise InvalidRecordError(
            f"the sink expected {plan.width} columns (using {list(plan.columns)}) but a batch "
            f"has {batch.schema.names}"
        )
    table = pa.Table.from_pydict(_send_columns(batch, plan))
    if plan.topic_option is not None:
        return [(plan.topic_option, table)]
    topics = batch.column(plan.positions[plan.columns.index("topic")])
    if topics.null_count:
        raise InvalidRecordError(
            "a row has a null topic; give every row a topic or set .option('topic', NAME)"
        )
    first, last = pc.min_max(topics).values()
    if first.as_py() == last.as_py():
        return [(str(first.as_py()), table)]
    out: list[tuple[str, pa.Table]] = []
    for topic in pc.unique(topics).to_pylist():
        out.append((str(topic), table.filter(pc.equal(topics, topic))))
    return out
