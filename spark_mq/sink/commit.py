"""The driver side of the exactly-once sink: one decision per micro-batch (or batch job).

Spark calls ``commit(messages, batchId)`` once every write task has succeeded, in a fresh
writer on the driver, and calls it again with the same ``batchId`` after a restart when the
driver died before recording the batch in its own commit log. :func:`commit_prepared` asks
the transaction coordinator to commit every prepared transaction of the batch as one
decision tagged ``(owner=sink id, sequence=batchId)``, from the instance the streaming query's
id names, and to abort every other open or
prepared transaction whose id starts with ``{sink_id}/`` (the attempts Spark did not keep:
a failed, zombie or speculative one, each under its own id; and leftovers of a run with more
partitions). The coordinator records the decision and
the tag in one durable append before it writes any marker, and answers a sequence that is
not above the owner's last one by aborting the given transactions: a replayed batch never
doubles output, and the second call is harmless. The first commit binds the sink id to the
query's id; a query from another checkpoint (whose batch ids start again at 0) that reuses
the sink id is refused with OwnerInstanceConflictError rather than have its batches taken as
replays and dropped.

Crash points (:mod:`spark_mq.crash_points`), keyed by the batch id: the crash tests kill the
driver at ``sink.commit.before_complete`` (handles collected, nothing decided),
``sink.commit.during_complete`` (the coordinator call in flight) and
``sink.commit.after_complete`` (decided, but Spark has not yet written its commit log).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from spark_mq import crash_points
from spark_mq.client.admin import Admin
from spark_mq.client.transactions import PreparedTransaction
from spark_mq.errors import (
    InvalidTxnStateError,
    OwnerInstanceConflictError,
    SparkMQError,
    UsageError,
)
from spark_mq.sink.task import SinkCommitMessage, run_scope

#: Delay of the ``during_complete`` crash after the coordinator call starts, in seconds.
_DURING_DELAY_S: Final = 0.003

_log = logging.getLogger(__name__)


def _messages(messages: Sequence[Any], what: str) -> list[SinkCommitMessage]:
    out = []
    for message in messages:
        if message is None:
            continue
        if not isinstance(message, SinkCommitMessage):
            raise UsageError(
                f"spark_mq sink {what}: a commit message of type {type(message).__name__} is "
                "not from this sink"
            )
        out.append(message)
    return out


def sink_id_of(messages: Sequence[SinkCommitMessage], configured: str | None) -> str | None:
    """The sink id the tasks used (they must all agree, and agree with ``sink.id``)."""
    ids = {m.sink_id for m in messages}
    if configured is not None:
        ids.add(configured)
    if len(ids) > 1:
        raise UsageError(f"spark_mq sink: write tasks used different sink ids {sorted(ids)}")
    return next(iter(ids), None)


def _agreed(messages: Sequence[SinkCommitMessage], field: str) -> str | None:
    """The value of ``field`` that the tasks' messages name (they must all agree), None
    when none does."""
    values = {v for m in messages if (v := getattr(m, field)) is not None}
    if len(values) > 1:
        raise UsageError(f"spark_mq sink: write tasks of one batch differ in {field}: {values}")
    return next(iter(values), None)


def run_id_of(messages: Sequence[SinkCommitMessage]) -> str | None:
    """The streaming query run the tasks wrote in, None when none says (a batch job, or a
    Spark that does not name its runs)."""
    return _agreed(messages, "run_id")


def query_id_of(messages: Sequence[SinkCommitMessage]) -> str | None:
    """The streaming query the tasks belong to, None when none says (a batch job, or a
    Spark that does not name its queries)."""
    return _agreed(messages, "query_id")


def _handles(messages: Sequence[SinkCommitMessage]) -> list[PreparedTransaction]:
    return [PreparedTransaction.from_json(m.transaction) for m in messages if m.transaction]


def commit_prepared(
    endpoint: dict[str, object],
    messages: Sequence[Any],
    *,
    sink_id: str | None,
    sequence: int,
    close_owner: bool = False,
) -> Any:
    """Commit the prepared transactions of ``messages`` as one decision ``(sink_id, sequence)``
    and abort every other transaction of the sink; returns the coordinator's
    :class:`~spark_mq.client.transactions.CompletionResult` (None when there was nothing to
    decide: no task ran). ``close_owner`` (a batch job, which decides once) also closes the
    sink id's transactional ids for good, so a straggling attempt can prepare nothing."""
    if any(m is None for m in messages):
        raise UsageError("spark_mq sink: commit called with a failed task's missing message")
    ours = _messages(messages, "commit")
    owner = sink_id_of(ours, sink_id)
    if owner is None or (not ours and not close_owner):
        # No task ran (a micro-batch without partitions): nothing was written, and without a
        # task's message the query's id is unknown, so a decision could not be checked
        # against the sink id's binding. Leftovers end with the next commit, or when their
        # owner has been quiet for transaction.timeout.ms.
        return None
    handles = _handles(ours)
    crash_points.reach("sink.commit.before_complete", sequence)
    with Admin(**endpoint) as admin:  # type: ignore[arg-type]
        sink = admin.txn_owner(owner, instance=query_id_of(ours))
        timer = crash_points.reach_soon("sink.commit.during_complete", sequence, _DURING_DELAY_S)
        try:
            result = sink.commit(handles, sequence, close=close_owner)
        except OwnerInstanceConflictError as exc:
            raise OwnerInstanceConflictError(
                f"spark_mq sink {owner}: {exc}. Another checkpoint's streaming query already "
                "writes as this sink.id, and a query from a new checkpoint numbers its batches "
                "from 0 again, so its commits would be taken as replays and dropped. Give each "
                "checkpoint its own sink.id (or leave the option unset: the default is derived "
                "from the query's id)"
            ) from exc
        except InvalidTxnStateError as exc:
            raise InvalidTxnStateError(
                f"spark_mq sink {owner}: {exc}. A transaction of this batch was aborted before "
                "its decision: the coordinator does that once no task of the batch has been "
                "active for kafka.transaction.timeout.ms (tasks waiting that long for "
                "executors, or a commit that long after the last task; raise the option), "
                "and `spark-mq transactions abort` does it by hand. Nothing of the batch is "
                "visible: run the job again (a stream re-runs the batch when restarted)",
                producer_id=exc.producer_id,
                producer_epoch=exc.producer_epoch,
            ) from exc
        finally:
            if timer is not None:
                timer.join()
    crash_points.reach("sink.commit.after_complete", sequence)
    if result.already_committed:
        _log.warning(
            "spark_mq sink %s: batch %d was already committed; its %d re-run transactions "
            "were aborted",
            owner,
            sequence,
            len(handles),
        )
    return result


def abort_prepared(
    endpoint: dict[str, object],
    messages: Sequence[Any],
    *,
    sink_id: str | None,
    close_owner: bool = False,
) -> None:
    """Abort the prepared transactions of the tasks that finished and, when the sink id is
    known, every other open transaction of the sink (tasks Spark cancelled mid-write), so
    that nothing of the failed batch holds back ``read_committed`` readers.

    Spark calls this as soon as the job fails, while tasks it is cancelling may still run
    and prepare. ``close_owner`` (a batch job, whose sink id is its own) closes the sink id
    at the coordinator in the same decision, so those late tasks are refused
    (ProducerFencedError) instead of leaving a prepared transaction that nothing completes.
    A stream cannot close its sink id (a restart re-runs the batch under it), but a failed
    micro-batch ends its query run, so the stream's abort closes the run's scope
    ``{sink_id}/{run_id}`` (owner and prefix) instead: its late tasks are refused the same
    way, and the next run writes under a scope of its own.

    Best effort: a transaction that is already aborted or fenced is what abort wants, so a
    failure is logged, not raised (Spark is already failing the batch for its own reason)."""
    ours = _messages(messages, "abort")
    owner = sink_id_of(ours, sink_id)
    handles = _handles(ours)
    if (not handles and owner is None) or (not ours and not close_owner):
        # A stream's batch of which no task finished: its query is unknown, so a sweep of
        # the sink id's transactions could end another checkpoint's (the sink id may be
        # bound to it). Its tasks' transactions end with the next run's first commit, or
        # once no task of the batch has been active for transaction.timeout.ms.
        return
    run = None if close_owner else run_id_of(ours)
    query = None if owner is None else query_id_of(ours)
    try:
        with Admin(**endpoint) as admin:  # type: ignore[arg-type]
            if owner is not None and run is not None:
                scope = run_scope(owner, run)
                admin.txn_owner(scope).abort(handles, close=True)
                handles = []
            if owner is None:
                admin.complete_prepared_transactions(handles, commit=False)
            else:
                # The rest of the sink: leftovers of earlier runs, or of tasks without a run.
                # The query id makes the coordinator refuse this part if the sink id is bound
                # to another checkpoint's query, whose open transactions are not ours to end.
                admin.txn_owner(owner, instance=query).abort(handles, close=close_owner)
    except SparkMQError as exc:
        _log.warning(
            "spark_mq sink %s: the abort of batch transactions failed or was refused (%s); "
            "what it did not end ends once no task of the batch has been active for "
            "kafka.transaction.timeout.ms, at the next run's first commit, or with "
            "`spark-mq transactions abort`",
            owner,
            exc,
        )
