"""The executor side of the sink: one write task turns its Arrow batches into produce calls.

With ``exactlyOnce`` (the default) a task writes inside its own transaction. Its
transactional id is ``{scope}/{partition}`` for the task's first attempt and
``{scope}/{partition}.{attempt}`` for a later one (:func:`transactional_id_of`), where the
scope is the batch job's own id, or for a stream ``{sink_id}/{run_id}``: the sink id and the
id of the query run (:func:`stream_run_id`), new each time the query starts (just the sink id
if Spark names no run).

- Two attempts that Spark runs at once (speculative execution, or a retry beside a zombie)
  never fence each other: each prepares its own transaction, the driver commits the one whose
  message Spark kept, and the same decision aborts the others (the sink's scope).
- A new run of a stream re-runs an unfinished micro-batch under ids of its own; its commit
  aborts whatever an earlier run left open or prepared.
- When a micro-batch fails, the driver's abort also *closes* the run's scope at the
  coordinator (:func:`~spark_mq.sink.commit.abort_prepared`): a task Spark is still
  cancelling cannot prepare a transaction afterwards that nothing would ever complete.

The task ends by *preparing* its transaction (the producer flushes, the coordinator moves it
to Prepared) and returns the handle in its commit message; the driver commits every handle
of the micro-batch as one decision (:mod:`spark_mq.sink.commit`). Without ``exactlyOnce`` the
task uses an idempotent producer and flushes: at least once, like Spark's Kafka sink.

A task holds no connection before ``write()`` runs: everything it needs is the plain,
picklable :class:`TaskPlan` that Spark ships inside the writer object.

Crash point ``sink.task.after_send`` (:mod:`spark_mq.crash_points`), keyed by the batch id:
the crash test needs a first attempt that dies after its records reached the log, leaving its
transaction open for the micro-batch's commit to abort. When armed, the first attempt of
partition 0's task of a streaming micro-batch flushes what it sent and kills its own Python
worker.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from spark_mq import crash_points
from spark_mq.client.admin import Admin
from spark_mq.client.futures import FutureBatchMetadata
from spark_mq.client.producer import Producer
from spark_mq.datasource.executor_endpoint import ExecutorEndpoint
from spark_mq.datasource.worker_gc import freeze_long_lived
from spark_mq.errors import ConfigError, InvalidTransactionTimeoutError
from spark_mq.sink.columns import ColumnPlan, to_send_tables
from spark_mq.sink.options import SINK_TRANSACTION_TIMEOUT_MS, SinkOptions

#: TaskContext local property holding the streaming query id. Spark stores the id in the
#: checkpoint's ``metadata`` file, so it is the same for every run of a query that restarts
#: from one checkpoint location, and different for another checkpoint (docs/spark_sink.md).
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
#: TaskContext local property holding the job group. Spark's stream execution sets it, for
#: every job of a query run, to that run's id (``StreamingQuery.runId``), new each time the
#: query starts, also from the same checkpoint.
JOB_GROUP_PROPERTY: Final = "spark.jobGroup.id"

#: A task sends its rows in tables of about this many times ``max.request.size``. Spark hands
#: a task Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000: 1.2 MB
#: of 100-byte values), which sent one by one cut into a full record batch and a small
#: remainder each; grouped, nearly every record batch is full, and each costs the producer
#: and the broker the same whatever its size (docs/spark_sink.md, "What it costs").
SEND_GROUP_REQUESTS: Final = 8

#: A running task sends this many owner heartbeats per ``transaction.timeout.ms``.
HEARTBEATS_PER_TIMEOUT: Final = 4
#: Shortest time between two heartbeats of a task, in seconds.
MIN_HEARTBEAT_INTERVAL_S: Final = 0.05

#: TaskContext local property holding the micro-batch id of a streaming task.
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"

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
    stream: bool = False
    #: With ``path``: where executors reach its broker, resolved on the driver when Spark
    #: created the writer (:mod:`spark_mq.datasource.executor_endpoint`).
    executor_endpoint: ExecutorEndpoint | None = None

    def client_endpoint(self) -> dict[str, object]:
        """The broker settings of an executor's clients (runs on the executor; raises
        ExecutorEndpointError when the driver's broker cannot be reached)."""
        if self.executor_endpoint is None:
            return dict(self.options.endpoint)
        return self.executor_endpoint.client_properties()


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a write task reports to the driver.

    ``transaction`` is the prepared transaction's JSON handle
    (:meth:`~spark_mq.client.transactions.PreparedTransaction.to_json`), None when the task
    wrote nothing or ran without ``exactlyOnce``. ``run_id`` is the streaming query run whose
    ids the task used (:func:`stream_run_id`), None for a batch job. ``query_id`` is the
    streaming query's id (:func:`stream_query_id`), the instance the driver's decision binds
    the sink id to; None for a batch job.
    """

    sink_id: str
    partition_id: int
    attempt_number: int
    rows: int
    transaction: str | None = None
    run_id: str | None = None
    query_id: str | None = None


def _task_context() -> Any:
    context = TaskContext.get()
    if context is None:
        raise ConfigError("the spark_mq sink's write() runs only inside a Spark task")
    return context


def stream_query_id(context: Any) -> str | None:
    """The id of the streaming query a task belongs to (the same in every run from one
    checkpoint), None when Spark names none."""
    return context.getLocalProperty(QUERY_ID_PROPERTY) or None


def stream_sink_id(options: SinkOptions, context: Any) -> str:
    """The sink id of a streaming write task (see docs/spark_sink.md for the derivation)."""
    if options.sink_id is not None:
        return options.sink_id
    query_id = stream_query_id(context)
    if query_id:
        return f"spark-query-{query_id}"
    if options.checkpoint_location:
        digest = hashlib.sha256(options.checkpoint_location.encode()).hexdigest()[:24]
        return f"spark-checkpoint-{digest}"
    raise ConfigError(
        'the spark_mq sink cannot derive a stable sink id here; set .option("sink.id", NAME)',
        key="sink.id",
    )


def stream_run_id(context: Any) -> str | None:
    """The id of the streaming query run a task belongs to, None when there is none (not a
    streaming task, or a Spark that does not set it): Spark runs every job of a query run in
    the job group named by the run's id, a UUID."""
    group = context.getLocalProperty(JOB_GROUP_PROPERTY)
    if not group:
        return None
    try:
        return str(uuid.UUID(group))
    except ValueError:
        return None


def run_scope(sink_id: str, run_id: str | None) -> str:
    """The prefix a task's transactional id starts under: ``{sink_id}/{run_id}`` in a named
    query run, the sink id alone otherwise. The stream's abort closes it."""
    return sink_id if run_id is None else f"{sink_id}/{run_id}"


def transactional_id_of(scope: str, partition_id: int, attempt: int) -> str:
    """The transactional id of one attempt of a write task (see the module docstring).

    Attempt 0 is ``{scope}/{partition}``; attempt ``k`` adds ``.k``. Every id starts with
    ``{scope}/``, the prefix the driver's commit and abort end leftovers by.
    """
    if attempt < 0:
        raise ValueError(f"a Spark task attempt number is never negative, got {attempt}")
    base = f"{scope}/{partition_id}"
    return base if attempt == 0 else f"{base}.{attempt}"


def _send_all(
    producer: Producer, batches: Iterable[pa.RecordBatch], columns: ColumnPlan
) -> tuple[int, list[FutureBatchMetadata]]:
    """Send every row, each topic's in order. A topic's consecutive tables go to
    ``send_batch`` together, as one table of about :data:`SEND_GROUP_REQUESTS` times
    ``max.request.size`` (``pa.concat_tables``: no copy), so the producer fills its record
    batches across Spark's Arrow batches instead of cutting each one into a full piece and a
    remainder."""
    rows = 0
    futures = []
    # Per topic: the tables waiting to be sent, and their bytes.
    groups: dict[str, tuple[list[pa.Table], int]] = {}
    target = SEND_GROUP_REQUESTS * producer.config.max_request_size

    def send(topic: str) -> None:
        group, _ = groups.pop(topic)
        table = group[0] if len(group) == 1 else pa.concat_tables(group)
        futures.append(producer.send_batch(topic, table))

    for batch in batches:
        for topic, table in to_send_tables(batch, columns):
            rows += table.num_rows
            if topic in groups and table.schema != groups[topic][0][0].schema:
                send(topic)  # a timestamp column cast in one batch and not the next
            group, size = groups.get(topic, ([], 0))
            group.append(table)
            groups[topic] = (group, size + table.nbytes)
            if size + table.nbytes >= target:
                send(topic)
    for topic in list(groups):
        send(topic)
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
    run_id = stream_run_id(context) if plan.stream else None
    query_id = stream_query_id(context) if plan.stream else None
    endpoint = plan.client_endpoint()
    props = {**plan.options.producer_settings, **endpoint}
    if not plan.options.exactly_once:
        with Producer(**props) as producer:  # type: ignore[arg-type]
            rows, futures = _send_all(producer, batches, plan.columns)
            producer.flush()
            _check_delivered(futures)
        return SinkCommitMessage(sink_id, partition_id, attempt, rows, query_id=query_id)
    scope = run_scope(sink_id, run_id)
    owner_prefix = scope + "/"
    transactional_id = transactional_id_of(scope, partition_id, attempt)
    producer = Producer(**props, transactional_id=transactional_id)  # type: ignore[arg-type]
    try:
        # Fences an earlier producer of this id and aborts what it left open or prepared.
        try:
            producer.init_transactions()
        except InvalidTransactionTimeoutError as exc:
            raise InvalidTransactionTimeoutError(
                f"{exc}. The spark_mq sink's transaction.timeout.ms defaults to "
                f"{SINK_TRANSACTION_TIMEOUT_MS} (the broker default of "
                "transaction.max.timeout.ms): set .option('kafka.transaction.timeout.ms', ...) "
                "to at most this broker's transaction.max.timeout.ms, or raise that"
            ) from exc
        producer.begin_transaction()
        prepared = False
        heartbeat = OwnerHeartbeat(
            endpoint,
            owner_prefix,
            producer.config.transaction_timeout_ms / 1000 / HEARTBEATS_PER_TIMEOUT,
        )
        try:
            with heartbeat:
                rows, futures = _send_all(producer, batches, plan.columns)
                _crash_point_after_send(producer, context, partition_id, attempt, rows)
                if rows == 0:
                    producer.abort_transaction()
                    return SinkCommitMessage(
                        sink_id, partition_id, attempt, 0, run_id=run_id, query_id=query_id
                    )
                # The owner prefix lets the coordinator abort the prepared transaction if
                # no task of this job or micro-batch stays active and no decision comes (a
                # dead driver), instead of holding back readers until the prepared limit.
                handle = producer.prepare_transaction(owner_prefix=owner_prefix)
                prepared = True
            _check_delivered(futures)
        except BaseException:
            # End our own transaction at once rather than leave it holding back the last
            # stable offset until the batch's commit or abort ends it (a retry has an id of
            # its own); a failure here changes nothing, since the driver's scope
            # aborts it anyway.
            if not prepared:
                _abort_quietly(producer)
            raise
        return SinkCommitMessage(
            sink_id, partition_id, attempt, rows, handle.to_json(), run_id, query_id
        )
    finally:
        # close() keeps a prepared transaction prepared: the driver decides its outcome.
        producer.close()


class OwnerHeartbeat:
    """While a write task runs, a thread tells the coordinator every ``interval_s`` seconds
    that the task's job or micro-batch is alive (:meth:`~spark_mq.Admin.owner_heartbeat` for
    ``owner_prefix``), so that the transactions its other tasks prepared are not aborted for a
    quiet owner while this one still computes its rows or writes them. The first heartbeat is
    due only after ``interval_s`` (the task's own InitProducerId counts until then, and most
    tasks end sooner), so a short task opens no connection for it. A failed heartbeat is
    logged, not raised: the task's own work decides whether it fails."""

    def __init__(self, endpoint: dict[str, object], owner_prefix: str, interval_s: float) -> None:
        self._endpoint = endpoint
        self._owner_prefix = owner_prefix
        self._interval_s = max(interval_s, MIN_HEARTBEAT_INTERVAL_S)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="spark_mq-owner-heartbeat", daemon=True
        )

    def __enter__(self) -> OwnerHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # A heartbeat in flight finishes on its own; the task does not wait for it.
        self._thread.join(timeout=MIN_HEARTBEAT_INTERVAL_S)

    def _run(self) -> None:
        admin: Admin | None = None
        try:
            while not self._stop.wait(self._interval_s):
                try:
                    if admin is None:
                        admin = Admin(**self._endpoint)  # type: ignore[arg-type]
                    admin.owner_heartbeat(self._owner_prefix)
                except Exception as exc:
                    _log.warning(
                        "spark_mq sink: heartbeat of %s failed (%r); retrying in %.1f s",
                        self._owner_prefix,
                        exc,
                        self._interval_s,
                    )
        finally:
            if admin is not None:
                admin.close()


def _crash_point_after_send(
    producer: Producer, context: Any, partition_id: int, attempt: int, rows: int
) -> None:
    """Crash point ``sink.task.after_send`` (see the module docstring)."""
    if attempt != 0 or partition_id != 0 or rows == 0:
        return
    batch = context.getLocalProperty(BATCH_ID_PROPERTY)
    if batch is None or not crash_points.armed("sink.task.after_send", int(batch)):
        return
    producer.flush()
    crash_points.reach("sink.task.after_send", int(batch))


def _abort_quietly(producer: Producer) -> None:
    try:
        producer.abort_transaction()
    except Exception as exc:  # the task's own error is the one to raise
        _log.warning("aborting the transaction of a failed write task failed too: %r", exc)
