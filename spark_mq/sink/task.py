"""The executor side of the sink: one write task turns its Arrow batches into produce calls.

With ``exactlyOnce`` (the default) a task writes inside its own transaction, whose
transactional id is ``{sink_id}/{partition}`` for a task's first attempt and
``{sink_id}/{partition}.{attempt}`` for a later one (:func:`transactional_id_of`). Two
attempts that Spark runs at once (speculative execution, or a retry beside a zombie) thus
never fence each other: each prepares its own transaction, the driver commits the one whose
message Spark chose, and the same decision aborts the others (its ``abort_prefix``). The same
micro-batch re-run after a driver restart starts again from attempt 0, and its
``init_transactions()`` fences the earlier run's task and aborts what it left open or
prepared. The task ends by
*preparing* its transaction (the producer flushes, the coordinator moves it to Prepared) and
returns the handle in its commit message; the driver commits every handle of the micro-batch
as one decision (:mod:`spark_mq.sink.commit`). Without ``exactlyOnce`` the task uses an
idempotent producer and flushes: at least once, like Spark's Kafka sink.

A task holds no connection before ``write()`` runs: everything it needs is the plain,
picklable :class:`TaskPlan` that Spark ships inside the writer object.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from spark_mq.client.futures import FutureBatchMetadata
from spark_mq.client.producer import Producer
from spark_mq.datasource.worker_gc import freeze_long_lived
from spark_mq.errors import ConfigError
from spark_mq.sink.columns import ColumnPlan, to_send_tables
from spark_mq.sink.options import SinkOptions

#: TaskContext local property holding the streaming query id. Spark stores the id in the
#: checkpoint's ``metadata`` file, so it is the same for every run of a query that restarts
#: from one checkpoint location, and different for another checkpoint (docs/spark_sink.md).
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskPlan:
    """Everything a write task needs: the parsed options and the column plan.

    ``sink_id`` is fixed on the driver for batch jobs (a fresh id per job) and for streams
    with ``sink.id``; otherwise a streaming task derives it from the query id.
    """

    options: SinkOptions
    columns: ColumnPlan
    sink_id: str | None


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a write task reports to the driver.

    ``transaction`` is the prepared transaction's JSON handle
    (:meth:`~spark_mq.client.transactions.PreparedTransaction.to_json`), None when the task
    wrote nothing or ran without ``exactlyOnce``.
    """

    sink_id: str
    partition_id: int
    attempt_number: int
    rows: int
    transaction: str | None = None


def _task_context() -> Any:
    context = TaskContext.get()
    if context is None:
        raise ConfigError("the spark_mq sink's write() runs only inside a Spark task")
    return context


def stream_sink_id(options: SinkOptions, context: Any) -> str:
    """The sink id of a streaming write task (see docs/spark_sink.md for the derivation)."""
    if options.sink_id is not None:
        return options.sink_id
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    if query_id:
        return f"spark-query-{query_id}"
    if options.checkpoint_location:
        digest = hashlib.sha256(options.checkpoint_location.encode()).hexdigest()[:24]
        return f"spark-checkpoint-{digest}"
    raise ConfigError(
        'the spark_mq sink cannot derive a stable sink id here; set .option("sink.id", NAME)',
        key="sink.id",
    )


def transactional_id_of(sink_id: str, partition_id: int, attempt: int) -> str:
    """The transactional id of one attempt of a write task (see the module docstring).

    Attempt 0 keeps the plain ``{sink_id}/{partition}``; attempt ``k`` adds ``.k``. Every id
    starts with ``{sink_id}/``, the prefix the driver's commit and abort end leftovers by.
    """
    if attempt < 0:
        raise ValueError(f"a Spark task attempt number is never negative, got {attempt}")
    base = f"{sink_id}/{partition_id}"
    return base if attempt == 0 else f"{base}.{attempt}"


def _send_all(
    producer: Producer, batches: Iterable[pa.RecordBatch], columns: ColumnPlan
) -> tuple[int, list[FutureBatchMetadata]]:
    rows = 0
    futures = []
    for batch in batches:
        for topic, table in to_send_tables(batch, columns):
            futures.append(producer.send_batch(topic, table))
            rows += table.num_rows
    return rows, futures


def _check_delivered(futures: list[FutureBatchMetadata]) -> None:
    """Raise the first delivery error (every future is done after a flush or prepare)."""
    for future in futures:
        future.get()


def write_task(plan: TaskPlan, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    """Run one write task: send every batch, then prepare (exactly once) or flush."""
    context = _task_context()
    freeze_long_lived()
    partition_id = int(context.partitionId())
    attempt = int(context.attemptNumber())
    sink_id = plan.sink_id or stream_sink_id(plan.options, context)
    props = plan.options.producer_props()
    if not plan.options.exactly_once:
        with Producer(**props) as producer:  # type: ignore[arg-type]
            rows, futures = _send_all(producer, batches, plan.columns)
            producer.flush()
            _check_delivered(futures)
        return SinkCommitMessage(sink_id, partition_id, attempt, rows)
    transactional_id = transactional_id_of(sink_id, partition_id, attempt)
    producer = Producer(**props, transactional_id=transactional_id)  # type: ignore[arg-type]
    try:
        # Fences this attempt's predecessor of an earlier run (a driver restart re-runs the
        # batch from attempt 0) and aborts what it left open or prepared.
        producer.init_transactions()
        producer.begin_transaction()
        prepared = False
        try:
            rows, futures = _send_all(producer, batches, plan.columns)
            if rows == 0:
                producer.abort_transaction()
                return SinkCommitMessage(sink_id, partition_id, attempt, 0)
            handle = producer.prepare_transaction()
            prepared = True
            _check_delivered(futures)
        except BaseException:
            # End our own transaction at once rather than leave it holding back the last
            # stable offset until a retry fences it; a failure here changes nothing, since
            # the retry (or the driver's abort_prefix) aborts it anyway.
            if not prepared:
                _abort_quietly(producer)
            raise
        return SinkCommitMessage(sink_id, partition_id, attempt, rows, handle.to_json())
    finally:
        # close() keeps a prepared transaction prepared: the driver decides its outcome.
        producer.close()


def _abort_quietly(producer: Producer) -> None:
    try:
        producer.abort_transaction()
    except Exception as exc:  # the task's own error is the one to raise
        _log.warning("aborting the transaction of a failed write task failed too: %r", exc)
