"""The transactional producer and the transaction admin calls against a real broker:
commit and abort as read_committed and read_uncommitted consumers see them, zombie fencing,
offsets committed inside a transaction, two-phase commit across processes (prepare in a
subprocess, commit from here), a replayed owner sequence, and a hanging prepared
transaction found and ended with ``spark-mq transactions``.

Visibility is checked without timing: a reader reads up to a record it knows must come
(the last record of a later committed transaction), then looks at what came before it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
import pytest

from spark_mq import (
    Admin,
    Consumer,
    InvalidTxnStateError,
    PreparedTransaction,
    Producer,
    ProducerFencedError,
    TopicPartition,
    UsageError,
)
from spark_mq.errors import ProducerStateError

PREPARE_SCRIPT = """
import sys
from spark_mq import Producer
servers, txn_id, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
producer = Producer(bootstrap_servers=servers, transactional_id=txn_id)
producer.init_transactions()
producer.begin_transaction()
for i in range(count):
    producer.send(topic, f"{txn_id}-{i}".encode(), partition=i % 2)
handle = producer.prepare_transaction()
producer.close()
print(handle.to_json())
"""


def servers(broker: Any) -> str:
    return str(broker.address)


def create(broker: Any, topic: str, partitions: int = 2) -> None:
    with Admin(bootstrap_servers=servers(broker)) as admin:
        admin.create_topic(topic, partitions=partitions)


def txn_producer(broker: Any, txn_id: str, **config: Any) -> Producer:
    producer = Producer(bootstrap_servers=servers(broker), transactional_id=txn_id, **config)
    producer.init_transactions()
    return producer


def read_until(
    broker: Any, topic: str, last: bytes, *, partitions: int = 2, level: str = "read_committed"
) -> list[bytes]:
    """Every value of ``topic`` up to and including ``last`` (which must arrive: the
    deadline only guards against a hang)."""
    consumer = Consumer(
        bootstrap_servers=servers(broker),
        auto_offset_reset="earliest",
        isolation_level=level,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while last not in values:
            assert time.monotonic() < deadline, f"{last!r} never arrived; got {values}"
            values.extend(consumer.poll_batch(timeout_ms=200).column("value").to_pylist())
    finally:
        consumer.close()
    return values


def commit_sentinel(broker: Any, topic: str, name: str) -> bytes:
    """Commit one record to each partition; returns the value of the last one."""
    with txn_producer(broker, f"sentinel-{name}") as producer:
        producer.begin_transaction()
        for p in range(2):
            producer.send(topic, f"sentinel-{name}-{p}".encode(), partition=p)
        producer.commit_transaction()
    return f"sentinel-{name}-1".encode()


def prepare_in_subprocess(
    broker: Any, env: dict[str, str], txn_id: str, topic: str, count: int
) -> PreparedTransaction:
    result = subprocess.run(
        [sys.executable, "-c", PREPARE_SCRIPT, servers(broker), txn_id, topic, str(count)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return PreparedTransaction.from_json(result.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------


def test_commit_makes_every_record_visible(broker: Any) -> None:
    create(broker, "t")
    with txn_producer(broker, "tx-commit") as producer:
        for round_ in range(3):
            producer.begin_transaction()
            futures = [
                producer.send("t", f"r{round_}-{i}".encode(), partition=i % 2) for i in range(20)
            ]
            producer.send_batch(
                "t",
                pa.table(
                    {"value": [f"b{round_}-{i}".encode() for i in range(10)], "partition": [1] * 10}
                ),
            )
            producer.commit_transaction()
            assert all(f.get().offset >= 0 for f in futures)
    values = read_until(broker, "t", b"b2-9")
    expected = {f"r{r}-{i}".encode() for r in range(3) for i in range(20)}
    expected |= {f"b{r}-{i}".encode() for r in range(3) for i in range(10)}
    assert sorted(values) == sorted(expected)


def test_abort_hides_records_from_read_committed_only(broker: Any) -> None:
    create(broker, "t")
    with txn_producer(broker, "tx-abort") as producer:
        producer.begin_transaction()
        for i in range(10):
            producer.send("t", f"aborted-{i}".encode(), partition=i % 2)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(10):
            producer.send("t", f"kept-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
    committed = read_until(broker, "t", b"kept-9")
    assert sorted(committed) == sorted(f"kept-{i}".encode() for i in range(10))
    uncommitted = read_until(broker, "t", b"kept-9", level="read_uncommitted")
    assert {f"aborted-{i}".encode() for i in range(10)} <= set(uncommitted)


def test_abort_of_unsent_records_fails_their_futures(broker: Any) -> None:
    create(broker, "t")
    with txn_producer(broker, "tx-unsent", linger_ms=60_000, batch_size=1 << 20) as producer:
        producer.begin_transaction()
        future = producer.send("t", b"never", partition=0)
        producer.abort_transaction()
        with pytest.raises(Exception, match="aborted"):
            future.get(timeout=30)
        producer.begin_transaction()
        producer.send("t", b"after", partition=0)
        producer.send("t", b"after-1", partition=1)
        producer.commit_transaction()
    assert b"never" not in read_until(broker, "t", b"after-1", level="read_uncommitted")


def test_zombie_producer_is_fenced(broker: Any) -> None:
    create(broker, "t")
    zombie = txn_producer(broker, "tx-zombie")
    zombie.begin_transaction()
    for i in range(5):
        zombie.send("t", f"zombie-{i}".encode(), partition=i % 2)
    zombie.flush()
    successor = txn_producer(broker, "tx-zombie")  # fences the zombie, aborts its transaction
    with pytest.raises(ProducerFencedError):
        zombie.send("t", b"zombie-late", partition=0)
        zombie.commit_transaction()
    with pytest.raises(ProducerFencedError):
        zombie.begin_transaction()
    zombie.close()  # close still works
    successor.begin_transaction()
    successor.send("t", b"successor-0", partition=0)
    successor.send("t", b"successor-1", partition=1)
    successor.commit_transaction()
    successor.close()
    values = read_until(broker, "t", b"successor-1")
    assert sorted(values) == [b"successor-0", b"successor-1"]


def test_zombie_commit_is_rejected_after_a_new_incarnation(broker: Any) -> None:
    create(broker, "t")
    zombie = txn_producer(broker, "tx-zombie-2")
    zombie.begin_transaction()
    zombie.send("t", b"zombie", partition=0)
    zombie.flush()
    with txn_producer(broker, "tx-zombie-2"):
        pass
    with pytest.raises((ProducerFencedError, ProducerStateError)):
        zombie.commit_transaction()
    zombie.close()
    assert b"zombie" not in read_until(broker, "t", commit_sentinel(broker, "t", "z2"))


def test_offsets_in_a_transaction_are_visible_only_on_commit(broker: Any) -> None:
    create(broker, "t")
    tp = TopicPartition("t", 0)
    with Admin(bootstrap_servers=servers(broker)) as admin:
        with txn_producer(broker, "tx-offsets") as producer:
            producer.begin_transaction()
            producer.send("t", b"x", partition=0)
            producer.send_offsets_to_transaction({tp: 5}, "g-offsets")
            producer.abort_transaction()
            assert admin.list_group_offsets("g-offsets") == {}
            producer.begin_transaction()
            producer.send("t", b"y", partition=0)
            producer.send_offsets_to_transaction({tp: 7}, "g-offsets")
            producer.commit_transaction()
        deadline = time.monotonic() + 30
        while admin.list_group_offsets("g-offsets").get(tp) is None:
            assert time.monotonic() < deadline, "the committed offset never became visible"
            time.sleep(0.05)
        assert admin.list_group_offsets("g-offsets")[tp].offset == 7


def test_two_phase_commit_across_processes(broker: Any, subprocess_env: dict[str, str]) -> None:
    create(broker, "t")
    handles = [prepare_in_subprocess(broker, subprocess_env, f"2pc-{n}", "t", 6) for n in range(2)]
    assert handles[0].partitions == (TopicPartition("t", 0), TopicPartition("t", 1))
    with Admin(bootstrap_servers=servers(broker)) as admin:
        described = admin.describe_transactions([h.transactional_id for h in handles])
        assert [d.state for d in described] == ["Prepared", "Prepared"]
        assert admin.last_committed_sequence("job-1") == -1
        result = admin.complete_prepared_transactions(handles, owner="job-1", sequence=0)
        assert result.committed and not result.already_committed
        assert result.last_sequence == 0
        assert admin.last_committed_sequence("job-1") == 0
    values = read_until(broker, "t", commit_sentinel(broker, "t", "2pc"))
    assert sorted(v for v in values if not v.startswith(b"sentinel")) == sorted(
        f"2pc-{n}-{i}".encode() for n in range(2) for i in range(6)
    )


def test_replayed_sequence_aborts_instead_of_committing_twice(
    broker: Any, subprocess_env: dict[str, str]
) -> None:
    create(broker, "t")
    first = prepare_in_subprocess(broker, subprocess_env, "replay-a", "t", 4)
    with Admin(bootstrap_servers=servers(broker)) as admin:
        assert admin.complete_prepared_transactions([first], owner="job-2", sequence=3).committed
        replay = prepare_in_subprocess(broker, subprocess_env, "replay-b", "t", 4)
        result = admin.complete_prepared_transactions([replay], owner="job-2", sequence=3)
        assert result.already_committed and not result.committed
        assert result.last_sequence == 3
        (state,) = admin.describe_transactions(["replay-b"])
        assert state.state in ("PrepareAbort", "CompleteAbort")
    values = read_until(broker, "t", commit_sentinel(broker, "t", "replay"))
    assert sorted(v for v in values if not v.startswith(b"sentinel")) == sorted(
        f"replay-a-{i}".encode() for i in range(4)
    )


def test_a_commit_fails_whole_when_one_handle_is_stale(
    broker: Any, subprocess_env: dict[str, str]
) -> None:
    create(broker, "t")
    good = prepare_in_subprocess(broker, subprocess_env, "stale-a", "t", 2)
    bad = PreparedTransaction("stale-b", 999_999, 0, ())
    with Admin(bootstrap_servers=servers(broker)) as admin:
        with pytest.raises(Exception, match="stale-b"):
            admin.complete_prepared_transactions([good, bad], owner="job-3", sequence=0)
        assert admin.last_committed_sequence("job-3") == -1
        (state,) = admin.describe_transactions(["stale-a"])
        assert state.state == "Prepared"
        admin.complete_prepared_transactions([good], commit=False)


def test_prepared_producer_refuses_a_new_transaction(broker: Any) -> None:
    create(broker, "t")
    with txn_producer(broker, "tx-prepared") as producer:
        producer.begin_transaction()
        producer.send("t", b"p", partition=0)
        handle = producer.prepare_transaction()
        with pytest.raises(InvalidTxnStateError, match="complete_prepared_transactions"):
            producer.begin_transaction()
    with Admin(bootstrap_servers=servers(broker)) as admin:
        # close() did not abort it: it is still prepared, and can still be committed.
        assert admin.describe_transactions(["tx-prepared"])[0].state == "Prepared"
        assert admin.complete_prepared_transactions([handle]).committed
    assert b"p" in read_until(broker, "t", commit_sentinel(broker, "t", "prep"))


def test_a_prepared_transaction_named_by_its_owner_prefix_ends_when_the_owner_dies(
    start_broker: Any,
) -> None:
    """Two tasks of a job prepare under the job's prefix, and no decision comes (the
    driver died): once no task has been active for transaction.timeout.ms, the coordinator
    aborts them and a read_committed reader gets past them."""
    broker = start_broker(
        overrides={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "50"}
    )
    create(broker, "t")
    for task in ("job-3/0", "job-3/1"):
        with txn_producer(broker, task, transaction_timeout_ms=300) as producer:
            producer.begin_transaction()
            producer.send("t", task.encode(), partition=0)
            with pytest.raises(UsageError, match="strict prefix"):
                producer.prepare_transaction(owner_prefix=task)
            producer.prepare_transaction(owner_prefix="job-3/")
    commit_sentinel(broker, "t", "after")
    # Partition 0's sentinel is behind the prepared transactions: it shows once they end.
    got = read_until(broker, "t", b"sentinel-after-0")
    assert not any(value.startswith(b"job-3/") for value in got), got
    with Admin(bootstrap_servers=servers(broker)) as admin:
        states = {t.transactional_id: t.state for t in admin.list_transactions(prefix="job-3/")}
    assert states == {"job-3/0": "CompleteAbort", "job-3/1": "CompleteAbort"}


def test_a_closed_owner_fences_a_task_that_outlived_its_job(broker: Any) -> None:
    """A batch job's abort closes its owner while one of its tasks still writes: that task
    cannot prepare afterwards, nor can a later attempt start, so nothing is left hanging."""
    create(broker, "t")
    with txn_producer(broker, "job-9/0") as late:
        late.begin_transaction()
        late.send("t", b"late", partition=0).get(timeout=10)
        with Admin(bootstrap_servers=servers(broker)) as admin:
            with pytest.raises(UsageError, match="close_owner=True needs an owner"):
                admin.complete_prepared_transactions([], commit=False, close_owner=True)
            admin.complete_prepared_transactions(
                [], commit=False, owner="job-9", abort_prefix="job-9/", close_owner=True
            )
        with pytest.raises(ProducerFencedError):
            late.prepare_transaction()
    refused = Producer(bootstrap_servers=servers(broker), transactional_id="job-9/1")
    with pytest.raises(ProducerFencedError, match="owner 'job-9', which is closed"):
        refused.init_transactions()
    refused.close()
    with Admin(bootstrap_servers=servers(broker)) as admin:
        states = {t.transactional_id: t.state for t in admin.list_transactions(prefix="job-9/")}
    assert states == {"job-9/0": "CompleteAbort"}


def test_hanging_prepared_transaction_is_ended_from_the_cli(
    broker: Any, subprocess_env: dict[str, str]
) -> None:
    create(broker, "t")
    prepare_in_subprocess(broker, subprocess_env, "hanging-1", "t", 4)
    cli = [sys.executable, "-m", "spark_mq.cli", "transactions"]
    where = ["--bootstrap-server", servers(broker)]

    def run(*args: str) -> Any:
        result = subprocess.run(
            [*cli, *args, *where, "--json"],
            env=subprocess_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    with Admin(bootstrap_servers=servers(broker)) as admin:
        lso = admin.list_offsets({TopicPartition("t", 0): "latest"})[TopicPartition("t", 0)]
        assert lso.offset == 0  # the prepared transaction holds back the last stable offset
        hanging = run("list", "--duration-ms", "0", "--state", "Prepared")
        assert [t["transactional_id"] for t in hanging] == ["hanging-1"]
        described = run("describe", "--transactional-id", "hanging-1")
        assert described["state"] == "Prepared"
        assert described["partitions"] == [["t", 0], ["t", 1]]
        assert run("abort", "--transactional-id", "hanging-1")["aborted"]
        deadline = time.monotonic() + 30
        while (
            admin.list_offsets({TopicPartition("t", 0): "latest"})[TopicPartition("t", 0)].offset
            == 0
        ):
            assert time.monotonic() < deadline, "the last stable offset never moved on"
            time.sleep(0.05)
        assert run("list", "--state", "Prepared") == []
    assert read_until(broker, "t", commit_sentinel(broker, "t", "hang"))[0].startswith(b"sentinel")
