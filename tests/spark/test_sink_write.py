"""The sink through Spark (format "spark_mq"): what lands in the topic, batch atomicity,
aborted and replayed micro-batches. Output is read back with our Consumer."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType, StructField, StructType
from sink_helpers import create_topic, produce, read_topic, start_upper_copy, values

from spark_mq import (
    Admin,
    InvalidTxnStateError,
    LogDirectoryNotFoundError,
    OwnerInstanceConflictError,
    Producer,
    ProducerFencedError,
    UsageError,
)
from spark_mq.broker.local import ensure_broker
from spark_mq.sink import SinkCommitMessage, stream_writer
from spark_mq.sink.task import stream_run_id, transactional_id_of

SCHEMA = StructType([StructField("value", StringType())])


#: The straggler test's transaction.timeout.ms, and how long its slow task computes.
STRAGGLER_TIMEOUT_MS = 5_000
STRAGGLER_SLEEP_S = 15.0
STRAGGLER_ROW = 10


def _rows(spark: Any, n: int, parts: int = 4) -> Any:
    return spark.range(0, n, 1, parts).selectExpr(
        "CAST(id AS STRING) AS key", "concat('v-', CAST(id AS STRING)) AS value"
    )


def test_at_least_once_write_keeps_every_column(spark: Any, mq_dir: Path) -> None:
    create_topic(mq_dir, "plain", 3)
    df = spark.range(0, 50, 1, 2).selectExpr(
        "CAST(CAST(id AS STRING) AS BINARY) AS key",
        "concat('v-', CAST(id AS STRING)) AS value",
        "CAST(id % 3 AS INT) AS partition",
        "array(named_struct('key', 'h', 'value', CAST('x' AS BINARY))) AS headers",
        "timestamp_millis(1700000000000 + id) AS timestamp",
    )
    (
        df.write.format("spark_mq")
        .mode("append")
        .option("path", str(mq_dir))
        .option("topic", "plain")
        .option("exactlyOnce", "false")
        .save()
    )
    table = read_topic(mq_dir, "plain").to_pylist()
    assert len(table) == 50
    for row in table:
        n = int(row["value"][2:])
        assert row["partition"] == n % 3
        assert row["headers"] == [{"key": "h", "value": b"x"}]
        assert row["timestamp"] == 1700000000000 + n


def test_rows_go_to_the_topic_of_their_column(spark: Any, mq_dir: Path) -> None:
    create_topic(mq_dir, "even", 1)
    create_topic(mq_dir, "odd", 1)
    df = spark.range(0, 20, 1, 2).selectExpr(
        "IF(id % 2 = 0, 'even', 'odd') AS topic", "CAST(id AS STRING) AS value"
    )
    df.write.format("spark_mq").mode("append").option("path", str(mq_dir)).save()
    assert values(mq_dir, "even") == sorted(str(i).encode() for i in range(0, 20, 2))
    assert values(mq_dir, "odd") == sorted(str(i).encode() for i in range(1, 20, 2))


def test_a_bad_column_fails_before_any_task(spark: Any, mq_dir: Path) -> None:
    df = spark.range(3).selectExpr("id AS value")
    with pytest.raises(Exception, match="column 'value' has type bigint") as info:
        df.write.format("spark_mq").mode("append").option("path", str(mq_dir)).option(
            "topic", "t"
        ).save()
    assert "value (string or binary)" in str(info.value)
    # No task ran: nothing began, and not even the log was created (the directory holds no
    # log, which readers refuse).
    assert list(mq_dir.iterdir()) == []
    with pytest.raises(LogDirectoryNotFoundError), Admin(path=str(mq_dir)) as admin:
        admin.list_transactions()


def test_a_straggler_task_keeps_the_jobs_prepared_transactions(spark: Any, mq_dir: Path) -> None:
    """One task of a batch job computes for three times the sink's transaction.timeout.ms
    before it has a row to send, while the other has long prepared. The straggler's
    heartbeats keep the job alive at the coordinator: its first task's prepared transaction
    is not aborted for a quiet owner, and the job commits whole."""
    ensure_broker(
        mq_dir, config={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "50"}
    )
    create_topic(mq_dir, "out", 2)
    straggler_row, sleep_s = STRAGGLER_ROW, STRAGGLER_SLEEP_S

    def slow_value(number):  # no hints: pyspark would read them as a pandas UDF
        if number == straggler_row:
            time.sleep(sleep_s)
        return f"v{number}"

    rows = spark.range(0, 20, numPartitions=2)  # partition 1 starts at row 10
    rows.select(udf(slow_value, "string")("id").alias("value")).write.format("spark_mq").mode(
        "append"
    ).option("path", str(mq_dir)).option("topic", "out").option(
        "kafka.transaction.timeout.ms", str(STRAGGLER_TIMEOUT_MS)
    ).save()
    assert values(mq_dir, "out") == sorted(f"v{i}".encode() for i in range(20))


def test_exactly_once_batch_write_is_visible_whole(spark: Any, mq_dir: Path) -> None:
    create_topic(mq_dir, "eo", 2)
    _rows(spark, 200).write.format("spark_mq").mode("append").option("path", str(mq_dir)).option(
        "topic", "eo"
    ).save()
    expected = sorted(f"v-{i}".encode() for i in range(200))
    assert values(mq_dir, "eo") == expected
    assert values(mq_dir, "eo", "read_uncommitted") == expected
    # The commit closed the job's id (spark-batch/{uuid}): a straggling attempt of one of its
    # tasks can no longer prepare a transaction that would hang.
    with Admin(path=str(mq_dir)) as admin:
        listed = admin.list_transactions(prefix="spark-batch/")
    assert {t.state for t in listed} == {"CompleteCommit"}
    straggler = Producer(path=str(mq_dir), transactional_id=listed[0].transactional_id)
    with pytest.raises(ProducerFencedError, match="which is closed"):
        straggler.init_transactions()
    straggler.close()


def test_a_failed_batch_job_leaves_nothing_visible(spark: Any, mq_dir: Path) -> None:
    create_topic(mq_dir, "atomic", 2)

    @udf("string")
    def fail_on_last_partition(value):  # no hints: pyspark would read them as a pandas UDF
        if int(value[2:]) >= 150:  # the last of the 4 input partitions
            raise RuntimeError("injected task failure")
        return value

    df = _rows(spark, 200).select("key", fail_on_last_partition("value").alias("value"))
    with pytest.raises(Exception, match="injected task failure"):
        df.write.format("spark_mq").mode("append").option("path", str(mq_dir)).option(
            "topic", "atomic"
        ).option("sink.id", "atomic-job").save()
    assert values(mq_dir, "atomic") == []
    assert values(mq_dir, "atomic", "read_uncommitted"), "the finished tasks wrote nothing"
    with Admin(path=str(mq_dir)) as admin:
        listed = admin.list_transactions(prefix="atomic-job/")
    states = {t.state for t in listed}
    assert not states & {"Ongoing", "Prepared"}, states
    # The abort closed the job's id: a task Spark was still cancelling when the job failed
    # cannot prepare afterwards (or start again), so nothing can appear later either.
    late = Producer(path=str(mq_dir), transactional_id=listed[0].transactional_id)
    with pytest.raises(ProducerFencedError, match="which is closed"):
        late.init_transactions()
    late.close()


def _prepare(mq_dir: Path, tid: str, topic: str, data: list[bytes]) -> str:
    producer = Producer(path=str(mq_dir), transactional_id=tid)
    producer.init_transactions()
    producer.begin_transaction()
    for value in data:
        producer.send(topic, value)
    handle = producer.prepare_transaction()
    producer.close()
    return handle.to_json()


def _message(sink: str, partition: int, handle: str, rows: int) -> SinkCommitMessage:
    return SinkCommitMessage(sink, partition, 0, rows, handle)


def test_an_aborted_micro_batch_is_invisible(mq_dir: Path) -> None:
    create_topic(mq_dir, "out", 1)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s1"}
    handles = [_prepare(mq_dir, f"s1/{p}", "out", [b"a", b"b"]) for p in range(2)]
    writer = stream_writer(options, SCHEMA, False)
    writer.abort([_message("s1", p, h, 2) for p, h in enumerate(handles)], 0)
    assert values(mq_dir, "out") == []
    assert values(mq_dir, "out", "read_uncommitted") == [b"a", b"a", b"b", b"b"]


def test_a_replayed_batch_id_commits_nothing_new(mq_dir: Path) -> None:
    create_topic(mq_dir, "out", 2)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s2"}
    first = [_prepare(mq_dir, f"s2/{p}", "out", [f"first-{p}".encode()]) for p in range(2)]
    # Spark runs commit in a fresh writer each time; so do we.
    stream_writer(options, SCHEMA, False).commit(
        [_message("s2", p, h, 1) for p, h in enumerate(first)], 7
    )
    # After a restart the batch is re-run (new transactions, same ids) and committed again.
    again = [_prepare(mq_dir, f"s2/{p}", "out", [f"again-{p}".encode()]) for p in range(2)]
    stream_writer(options, SCHEMA, False).commit(
        [_message("s2", p, h, 1) for p, h in enumerate(again)], 7
    )
    assert values(mq_dir, "out") == [b"first-0", b"first-1"]
    with Admin(path=str(mq_dir)) as admin:
        assert admin.last_committed_sequence("s2") == 7
        states = {t.state for t in admin.list_transactions(prefix="s2/")}
    assert not states & {"Ongoing", "Prepared"}, states


def test_leftover_transactions_of_the_sink_are_aborted_at_commit(mq_dir: Path) -> None:
    create_topic(mq_dir, "out", 1)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s3"}
    # A run with 3 partitions left partition 2's transaction prepared; this run has 2.
    stale = _prepare(mq_dir, "s3/2", "out", [b"stale"])
    assert stale
    current = [_prepare(mq_dir, f"s3/{p}", "out", [b"new"]) for p in range(2)]
    stream_writer(options, SCHEMA, False).commit(
        [_message("s3", p, h, 1) for p, h in enumerate(current)], 0
    )
    assert values(mq_dir, "out") == [b"new", b"new"]
    with Admin(path=str(mq_dir)) as admin:
        states = {t.state for t in admin.list_transactions(prefix="s3/")}
    assert not states & {"Ongoing", "Prepared"}, states


def test_a_sink_id_reused_by_another_checkpoint_is_refused_not_dropped(mq_dir: Path) -> None:
    """Two streaming queries (two checkpoints, so two query ids) with one sink.id: the
    second numbers its batches from 0, under the first's last committed batch. Its commit
    fails with a typed error instead of being taken as a replay and dropped, and neither
    its commit nor its abort ends the first query's open transaction."""
    create_topic(mq_dir, "out", 1)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s8"}
    q1, q2 = str(uuid.uuid4()), str(uuid.uuid4())
    run1, run2 = str(uuid.uuid4()), str(uuid.uuid4())

    def message(query: str, run: str, data: bytes) -> SinkCommitMessage:
        tid = transactional_id_of(f"s8/{run}", 0, 0)
        handle = _prepare(mq_dir, tid, "out", [data])
        return SinkCommitMessage("s8", 0, 0, 1, handle, run_id=run, query_id=query)

    stream_writer(options, SCHEMA, False).commit([message(q1, run1, b"q1-5")], 5)
    # The first query's next batch is being written while the second query starts.
    busy = Producer(path=str(mq_dir), transactional_id=transactional_id_of(f"s8/{run1}", 1, 0))
    busy.init_transactions()
    busy.begin_transaction()
    busy.send("out", b"q1-6").get()
    second = message(q2, run2, b"q2-0")
    with pytest.raises(OwnerInstanceConflictError, match=f"belongs to instance '{q1}'.*sink.id"):
        stream_writer(options, SCHEMA, False).commit([second], 0)
    stream_writer(options, SCHEMA, False).abort([second], 0)  # what Spark does next

    busy.prepare_transaction()  # not aborted by the second query's commit or abort
    busy.close()
    with Admin(path=str(mq_dir)) as admin:
        states = {t.transactional_id: t.state for t in admin.list_transactions(prefix="s8/")}
        assert admin.last_committed_sequence("s8") == 5
    assert states[transactional_id_of(f"s8/{run2}", 0, 0)] == "CompleteAbort", states
    assert states[transactional_id_of(f"s8/{run1}", 1, 0)] == "Prepared", states
    assert values(mq_dir, "out") == [b"q1-5"]


def test_tasks_of_one_batch_must_agree_on_their_query(mq_dir: Path) -> None:
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s11"}
    messages = [SinkCommitMessage("s11", p, 0, 0, query_id=f"q{p}") for p in range(2)]
    with pytest.raises(UsageError, match="differ in query_id"):
        stream_writer(options, SCHEMA, False).commit(messages, 0)


def test_a_micro_batch_without_tasks_decides_nothing(mq_dir: Path) -> None:
    """Without a task's message the query is unknown: neither its commit nor its abort may
    sweep the sink id, which could belong to another checkpoint's query."""
    create_topic(mq_dir, "out", 1)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s9"}
    other = Producer(path=str(mq_dir), transactional_id="s9/run-of-another-query/0")
    other.init_transactions()
    other.begin_transaction()
    other.send("out", b"theirs").get()
    stream_writer(options, SCHEMA, False).commit([], 3)
    stream_writer(options, SCHEMA, False).abort([], 3)
    other.prepare_transaction()  # still open: neither call aborted it
    other.close()
    with Admin(path=str(mq_dir)) as admin:
        assert admin.last_committed_sequence("s9") == -1


def test_a_commit_whose_transaction_was_aborted_says_why(mq_dir: Path) -> None:
    create_topic(mq_dir, "out", 1)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s10"}
    handle = _prepare(mq_dir, "s10/0", "out", [b"lost"])
    with Admin(path=str(mq_dir)) as admin:
        admin.abort_transaction("s10/0")
    with pytest.raises(InvalidTxnStateError, match="aborted before its decision") as info:
        stream_writer(options, SCHEMA, False).commit([_message("s10", 0, handle, 1)], 0)
    assert "kafka.transaction.timeout.ms" in str(info.value)
    assert values(mq_dir, "out") == []


def test_a_broker_with_a_lower_transaction_limit_names_the_sink_option(
    spark: Any, mq_dir: Path
) -> None:
    ensure_broker(mq_dir, config={"transaction.max.timeout.ms": "60000"})
    with pytest.raises(Exception, match="InvalidTransactionTimeoutError") as info:
        _rows(spark, 4, parts=1).write.format("spark_mq").mode("append").option(
            "path", str(mq_dir)
        ).option("topic", "out").save()
    assert ".option('kafka.transaction.timeout.ms'" in str(info.value)
    _rows(spark, 4, parts=1).write.format("spark_mq").mode("append").option(
        "path", str(mq_dir)
    ).option("topic", "out").option("kafka.transaction.timeout.ms", "60000").save()
    assert len(values(mq_dir, "out")) == 4


def test_each_attempt_of_a_task_has_its_own_transactional_id() -> None:
    ids = [transactional_id_of("sink", 3, attempt) for attempt in range(4)]
    assert ids[0] == "sink/3"  # a task's first attempt keeps the id earlier runs used
    assert len(set(ids)) == 4
    assert all(tid.startswith("sink/") for tid in ids)  # the prefix commit and abort end
    assert transactional_id_of("sink", 31, 0) not in ids


class _Properties:
    """Stands in for a TaskContext's local properties."""

    def __init__(self, **properties: str) -> None:
        self.properties = properties

    def getLocalProperty(self, key: str) -> str | None:
        return self.properties.get(key)


def test_a_stream_task_takes_its_run_id_from_the_job_group() -> None:
    run = uuid.uuid4()
    assert stream_run_id(_Properties(**{"spark.jobGroup.id": str(run)})) == str(run)
    assert stream_run_id(_Properties(**{"spark.jobGroup.id": str(run).upper()})) == str(run)
    # A job group that is not a run id (set by hand outside a stream), or none: no run.
    assert stream_run_id(_Properties(**{"spark.jobGroup.id": "nightly-load"})) is None
    assert stream_run_id(_Properties()) is None


@pytest.mark.parametrize("winner", [0, 1])
def test_speculative_attempts_of_a_task_both_prepare_and_the_chosen_one_commits(
    mq_dir: Path, winner: int
) -> None:
    """Spark may run a speculative copy of a slow task beside it and keep the message of
    whichever finishes first. The copy must not fence the original: if it did, the
    original's prepared transaction would be aborted and committing its message would fail."""
    create_topic(mq_dir, "out", 1)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s5"}
    handles = [
        _prepare(mq_dir, transactional_id_of("s5", 0, attempt), "out", [f"a{attempt}".encode()])
        for attempt in (0, 1)
    ]
    chosen = SinkCommitMessage("s5", 0, winner, 1, handles[winner])
    stream_writer(options, SCHEMA, False).commit([chosen], 0)
    assert values(mq_dir, "out") == [f"a{winner}".encode()]
    with Admin(path=str(mq_dir)) as admin:
        states = {t.transactional_id: t.state for t in admin.list_transactions(prefix="s5/")}
    loser = transactional_id_of("s5", 0, 1 - winner)
    assert states[loser] in {"CompleteAbort", "PrepareAbort"}, states
    assert not set(states.values()) & {"Ongoing", "Prepared"}, states


def test_an_aborted_micro_batch_closes_its_query_run(mq_dir: Path) -> None:
    """A failed micro-batch ends its query run. Its abort closes the run's ids, so a task
    Spark is still cancelling cannot leave a prepared transaction behind that nothing would
    complete; the query's next run writes under new ids and commits the same batch id."""
    create_topic(mq_dir, "out", 1)
    options = {"path": str(mq_dir), "topic": "out", "sink.id": "s6"}
    failed_run, next_run = str(uuid.uuid4()), str(uuid.uuid4())
    scope = f"s6/{failed_run}"
    handle = _prepare(mq_dir, transactional_id_of(scope, 0, 0), "out", [b"failed-0"])
    # Partition 1's task is still writing when the abort comes.
    mid = Producer(path=str(mq_dir), transactional_id=transactional_id_of(scope, 1, 0))
    mid.init_transactions()
    mid.begin_transaction()
    mid.send("out", b"failed-1").get()
    finished = SinkCommitMessage("s6", 0, 0, 1, handle, run_id=failed_run)
    stream_writer(options, SCHEMA, False).abort([finished, None], 4)

    with pytest.raises(ProducerFencedError):
        mid.prepare_transaction()
    mid.close()
    late = Producer(path=str(mq_dir), transactional_id=transactional_id_of(scope, 2, 0))
    with pytest.raises(ProducerFencedError, match="which is closed"):
        late.init_transactions()  # a task that had not started its transaction yet
    late.close()

    again = [
        _prepare(
            mq_dir, transactional_id_of(f"s6/{next_run}", p, 0), "out", [f"again-{p}".encode()]
        )
        for p in range(2)
    ]
    stream_writer(options, SCHEMA, False).commit(
        [SinkCommitMessage("s6", p, 0, 1, h, run_id=next_run) for p, h in enumerate(again)], 4
    )
    assert values(mq_dir, "out") == [b"again-0", b"again-1"]
    with Admin(path=str(mq_dir)) as admin:
        states = {t.state for t in admin.list_transactions(prefix="s6/")}
        assert admin.last_committed_sequence("s6") == 4
    assert not states & {"Ongoing", "Prepared"}, states


def test_streaming_query_commits_under_a_sink_id_stable_across_restarts(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    create_topic(mq_dir, "src", 2)
    create_topic(mq_dir, "dst", 2)
    checkpoint = str(tmp_path / "checkpoint")

    def run(first: int) -> Any:
        produce(mq_dir, "src", [f"r{i}".encode() for i in range(first, first + 100)])
        query = start_upper_copy(spark, mq_dir, checkpoint, columns=("key",))
        query.awaitTermination()
        return query

    first = run(0)
    second = run(100)
    assert first.id == second.id  # Spark keeps the query id in the checkpoint
    assert values(mq_dir, "dst") == sorted(f"R{i}".encode() for i in range(200))
    with Admin(path=str(mq_dir)) as admin:
        last = admin.last_committed_sequence(f"spark-query-{first.id}")
        ids = {t.transactional_id for t in admin.list_transactions(prefix="spark-query-")}
    assert last == second.lastProgress["batchId"]
    # Each run wrote under a scope of its own, named by Spark's run id.
    assert first.runId != second.runId
    for query in (first, second):
        scope = f"spark-query-{query.id}/{query.runId}/"
        assert any(tid.startswith(scope) for tid in ids), (scope, ids)
    assert all(tid.count("/") == 2 for tid in ids), ids


def test_a_query_from_a_new_checkpoint_cannot_take_over_a_sink_id(
    spark: Any, mq_dir: Path, tmp_path: Path
) -> None:
    create_topic(mq_dir, "src", 2)
    create_topic(mq_dir, "dst", 2)
    produce(mq_dir, "src", [f"r{i}".encode() for i in range(50)])

    def run(checkpoint: str, sink_id: str) -> Any:
        query = start_upper_copy(
            spark, mq_dir, str(tmp_path / checkpoint), sink={"sink.id": sink_id}
        )
        query.awaitTermination()
        return query

    first = run("a", "named")
    with pytest.raises(Exception, match="OwnerInstanceConflictError") as failed:
        run("b", "named")  # batch 0 again, under the first query's batch 0
    assert "sink.id" in str(failed.value)
    assert values(mq_dir, "dst") == sorted(f"R{i}".encode() for i in range(50))
    with Admin(path=str(mq_dir)) as admin:
        open_ = {t.state for t in admin.list_transactions(prefix="named/")}
    assert not open_ & {"Ongoing", "Prepared"}, open_
    # Restarted from its checkpoint under a sink id of its own, the second query's copy is
    # committed, not dropped.
    second = run("b", "renamed")
    assert values(mq_dir, "dst") == sorted([f"R{i}".encode() for i in range(50)] * 2)
    with Admin(path=str(mq_dir)) as admin:
        assert admin.last_committed_sequence("named") == first.lastProgress["batchId"]
        assert admin.last_committed_sequence("renamed") == second.lastProgress["batchId"]
