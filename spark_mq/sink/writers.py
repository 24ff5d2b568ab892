"""Spark's writer classes for ``df.write`` and ``df.writeStream`` ``.format("spark_mq")``.

The data source (:class:`spark_mq.datasource.SparkMQDataSource`) calls :func:`batch_writer`
and :func:`stream_writer`; both parse and check the options and the DataFrame's schema on
the driver, so that a bad option or column fails the job before any task runs. The writer
objects hold only the plain :class:`~spark_mq.sink.task.TaskPlan`; Spark pickles them to the
executors, where ``write()`` opens its producer.

- :class:`MQBatchWriter`: the whole job is one transaction per task, committed as one
  decision in ``commit(messages)``, owner a fresh id per job (``{sink.id}/{uuid}``, sink id
  ``spark-batch`` by default): the job's output appears all at once, or, if it fails, never.
  Its commit or abort also closes the job's id at the coordinator, so an attempt that
  outlives the job (a task being cancelled, a speculative copy) can prepare nothing.
- :class:`MQStreamWriter`: one decision per micro-batch, tagged ``(sink id, batchId)``.
  A failed micro-batch's abort closes the ids of the query run (``{sink id}/{run id}/``),
  which the next run of the query does not use.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter

from spark_mq.datasource.connection import PATH_OPTION
from spark_mq.datasource.executor_endpoint import resolve_executor_endpoint
from spark_mq.datasource.option_names import MISSPELLING_CUTOFF, closest_name
from spark_mq.datasource.schema import arrow_schema
from spark_mq.datasource.worker_gc import freeze_long_lived
from spark_mq.sink.columns import ACCEPTED_COLUMNS, check_schema
from spark_mq.sink.commit import abort_prepared, commit_prepared
from spark_mq.sink.options import RESERVED_SINK_ID, SinkOptions, parse_sink_options
from spark_mq.sink.task import SinkCommitMessage, TaskPlan, write_task

#: Sink id of batch jobs that set no ``sink.id``; each job appends its own uuid.
BATCH_SINK_ID: Final = RESERVED_SINK_ID

_log = logging.getLogger(__name__)


class MQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("spark_mq")``: atomic, one decision for the whole job."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """Write one task's rows (runs on an executor)."""
        return write_task(self.plan, iterator)

    def commit(self, messages: list[Any]) -> None:
        """Make the whole job's output visible at once (runs on the driver)."""
        freeze_long_lived()
        if self.plan.options.exactly_once:
            commit_prepared(
                self.plan.options.endpoint,
                messages,
                sink_id=self.plan.sink_id,
                sequence=0,
                close_owner=True,
            )

    def abort(self, messages: list[Any]) -> None:
        """End the transactions of the tasks that had finished, and close the job's id so
        that a task still running cannot prepare later: none of the job shows."""
        freeze_long_lived()
        if self.plan.options.exactly_once:
            abort_prepared(
                self.plan.options.endpoint, messages, sink_id=self.plan.sink_id, close_owner=True
            )


class MQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("spark_mq")``: exactly once per micro-batch by default."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """Write one task's rows of a micro-batch (runs on an executor)."""
        return write_task(self.plan, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 (Spark's name)
        """Commit micro-batch ``batchId`` as one decision; idempotent for a replayed id."""
        freeze_long_lived()
        if not self.plan.options.exactly_once:
            rows = sum(m.rows for m in messages if isinstance(m, SinkCommitMessage))
            _log.info("spark_mq sink: batch %d wrote %d rows (at least once)", batchId, rows)
            return
        commit_prepared(
            self.plan.options.endpoint, messages, sink_id=self.plan.sink_id, sequence=batchId
        )

    def abort(self, messages: list[Any], batchId: int) -> None:  # noqa: N803 (Spark's name)
        """Abort micro-batch ``batchId``'s transactions and close its query run's ids (the
        query stops; a restart is a new run with ids of its own)."""
        freeze_long_lived()
        if self.plan.options.exactly_once:
            abort_prepared(self.plan.options.endpoint, messages, sink_id=self.plan.sink_id)


#: Ignored column lists already logged by this process: Spark creates a stream's writer for
#: every micro-batch and every commit, in Python workers it reuses, and one line says it.
_LOGGED_IGNORED: set[tuple[str, ...]] = set()


def log_ignored_columns(ignored: tuple[str, ...]) -> None:
    """Say once per process which columns the sink does not write: at INFO (the mirror
    pattern drops ``offset`` and ``timestampType`` on purpose), at WARNING with a
    suggestion when one looks like a misspelt accepted column (``partiton``)."""
    if not ignored or ignored in _LOGGED_IGNORED:
        return
    _LOGGED_IGNORED.add(ignored)
    source_columns = {name.lower() for name in arrow_schema(True).names}
    typos = {
        name: close
        for name in ignored
        if name.lower() not in source_columns
        and (close := closest_name(name, tuple(ACCEPTED_COLUMNS), MISSPELLING_CUTOFF))
    }
    if typos:
        hints = ", ".join(f"{name!r} (did you mean {close!r}?)" for name, close in typos.items())
        _log.warning(
            "the spark_mq sink ignores the columns %s; %s: only the columns %s are written",
            ", ".join(ignored),
            hints,
            ", ".join(ACCEPTED_COLUMNS),
        )
        return
    _log.info(
        "the spark_mq sink ignores the columns %s (it writes %s)",
        ", ".join(ignored),
        ", ".join(ACCEPTED_COLUMNS),
    )


def _plan(
    parsed: SinkOptions, schema: Any, sink_id: str | None, *, stream: bool = False
) -> TaskPlan:
    columns = check_schema(schema, topic_option=parsed.topic)
    log_ignored_columns(columns.ignored)
    path = parsed.endpoint.get(PATH_OPTION)
    executor_endpoint = None
    if path is not None:
        # Resolved here, on the driver (Spark creates a stream's writer for every
        # micro-batch, so a broker restarted meanwhile is found again); write tasks connect
        # to what it names and never start a broker.
        executor_endpoint = resolve_executor_endpoint(
            str(path), parsed.executor_endpoint, parsed.executor_endpoint_host, create=True
        )
    return TaskPlan(
        options=parsed,
        columns=columns,
        sink_id=sink_id,
        stream=stream,
        executor_endpoint=executor_endpoint,
    )


def batch_writer(options: Mapping[str, str], schema: Any, overwrite: bool) -> MQBatchWriter:
    """The writer of ``df.write.format("spark_mq")`` (``overwrite`` is ignored: a log is
    append-only, as with Spark's Kafka sink)."""
    parsed = parse_sink_options(options)
    job_id = f"{parsed.sink_id or BATCH_SINK_ID}/{uuid.uuid4().hex}"
    return MQBatchWriter(_plan(parsed, schema, job_id))


def stream_writer(options: Mapping[str, str], schema: Any, overwrite: bool) -> MQStreamWriter:
    """The writer of ``df.writeStream.format("spark_mq")``; Spark creates one for every
    micro-batch's tasks and a fresh one for every ``commit``/``abort`` (checked with pyspark
    4.3), so it holds no state: what must last across a query run (the run id) comes from the
    tasks."""
    parsed = parse_sink_options(options)
    return MQStreamWriter(_plan(parsed, schema, parsed.sink_id, stream=True))
