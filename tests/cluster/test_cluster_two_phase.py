"""Two-phase decisions whose transactions three transaction coordinators coordinate, on one
real three-broker LocalCluster shared by the module (docs/cluster.md, "Two-phase decisions
across coordinators").

Every test picks its owner and transactional ids by the leader of their
``__transaction_state`` partition, so that the decision's owner lives on one broker and its
transactions on others; each writes values of its own to one shared topic and reads them
back with read_committed: every acknowledged record exactly once, nothing of an aborted
one. The brokers run with the crash point ``txn.before_delivery`` armed for the owner
:data:`CRASH_OWNER` only: its coordinator dies (SIGKILL) right after its decision record is
durable and before any participant is told.

Without the cross-coordinator decision (the decider refusing each id it does not
coordinate with NOT_COORDINATOR) the commit and abort tests time out; without the
termination protocol (a participant presuming abort for its quiet owner on its own) the
crash test loses the committed transactions; without the re-delivery on load they stay
Prepared and the read misses them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence

import pytest
from cluster_fixtures import ClusterFactory, replica_properties
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.internal_topics import TRANSACTION_STATE_TOPIC
from spark_mq.broker.txn.state_topic import partition_for
from spark_mq.client.transactions import PreparedTransaction
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.crash_points import ENV, POINTS
from spark_mq.errors import InvalidTxnStateError, SparkMQError

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 4000
TOPIC = "two-phase"
CRASH_OWNER = "crash-owner"
BROKERS = (1, 2, 3)


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> Iterator[LocalCluster]:
    before = os.environ.get(ENV)
    if "txn.before_delivery" in POINTS:
        # Inherited by every broker process, restarts included; it fires only for the
        # decisions of CRASH_OWNER.
        os.environ[ENV] = f"txn.before_delivery@{CRASH_OWNER}"
    try:
        local = start_module_cluster(
            3,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            broker_properties={
                **replica_properties(),
                "transaction.state.log.num.partitions": "6",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            },
        )
        with Admin(bootstrap_servers=local.bootstrap_servers) as admin:
            admin.create_topic(TOPIC, partitions=3, replication_factor=3)
        _wait_in_sync(local)
        yield local
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def _wait_in_sync(cluster: LocalCluster) -> dict[int, int]:
    """Wait until the data topic and ``__transaction_state`` have a live leader and three
    in-sync replicas everywhere; the leaders of ``__transaction_state``'s partitions."""
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:

        def ready() -> bool:
            if TRANSACTION_STATE_TOPIC not in admin.list_topics():
                with contextlib.suppress(SparkMQError):
                    _producer(cluster, "creates-the-topic", timeout=2).close()
                return False
            topics = [TOPIC, TRANSACTION_STATE_TOPIC]
            return all(
                p.leader > 0 and len(p.isr) == 3
                for t in topics
                for p in admin.describe_topic(t).partitions
            )

        wait_for(ready, timeout_s=60)
        parts = admin.describe_topic(TRANSACTION_STATE_TOPIC).partitions
    return {p.partition: p.leader for p in parts}


def _restart(cluster: LocalCluster, broker: int) -> None:
    """Start ``broker`` again and give the preferred replicas their leaderships back, so
    that the next test finds a coordinator on every broker."""
    cluster.start_broker(broker)
    _wait_in_sync(cluster)
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.elect_leaders("preferred")

        def preferred() -> bool:
            return all(
                p.leader == p.replicas[0]
                for t in (TOPIC, TRANSACTION_STATE_TOPIC)
                for p in admin.describe_topic(t).partitions
            )

        wait_for(preferred, timeout_s=30)
    _wait_in_sync(cluster)


def _producer(
    cluster: LocalCluster,
    transactional_id: str,
    *,
    timeout: float = 30,
    txn_timeout_ms: int = 60000,
) -> Producer:
    producer = Producer(
        bootstrap_servers=cluster.bootstrap_servers,
        transactional_id=transactional_id,
        config={"retry.backoff.max.ms": 200, "transaction.timeout.ms": txn_timeout_ms},
    )
    try:
        producer.init_transactions(timeout=timeout)
    except BaseException:
        producer.close()
        raise
    return producer


def _on(leaders: dict[int, int], base: str, broker: int) -> str:
    """The first name ``{base}{i}`` whose transaction coordinator is ``broker``."""
    return next(
        n
        for n in (f"{base}{i}" for i in range(100_000))
        if leaders[partition_for(n, len(leaders))] == broker
    )


def _coordinator(leaders: dict[int, int], key: str) -> int:
    return leaders[partition_for(key, len(leaders))]


def _prepare(
    cluster: LocalCluster, tid: str, value: bytes, owner_prefix: str, txn_timeout_ms: int = 60000
) -> PreparedTransaction:
    with _producer(cluster, tid, txn_timeout_ms=txn_timeout_ms) as producer:
        producer.begin_transaction()
        producer.send(TOPIC, value, partition=sum(value) % 3)
        return producer.prepare_transaction(timeout=30, owner_prefix=owner_prefix)


def _read(cluster: LocalCluster, tag: str, sentinels: bool, count: int) -> list[bytes]:
    """The values starting with ``tag`` that read_committed sees, read until ``count`` of
    them arrived (and a moment more: a duplicate would follow) or, with ``sentinels``,
    until a sentinel written now to every partition is read (the last stable offset has
    passed whatever was decided before)."""
    marker = f"{tag}sentinel".encode()
    if sentinels:
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as plain:
            for p in range(3):
                plain.send(TOPIC, marker, partition=p)
            plain.flush(timeout=30)
    tps = [TopicPartition(TOPIC, p) for p in range(3)]
    got: list[bytes] = []
    seen = 0
    with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_committed"
    ) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                for r in records:
                    if r.value == marker:
                        seen += 1
                    elif r.value and r.value.startswith(tag.encode()):
                        got.append(r.value)
            if (sentinels and seen >= 3) or (not sentinels and len(got) >= count):
                for records in consumer.poll(timeout_ms=500).values():
                    got += [
                        r.value
                        for r in records
                        if r.value and r.value.startswith(tag.encode()) and r.value != marker
                    ]
                break
    return got


def _states(cluster: LocalCluster, ids: Sequence[str]) -> list[str]:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        return [d.state for d in admin.describe_transactions(list(ids))]


def _wait_states(cluster: LocalCluster, ids: Sequence[str], state: str, timeout_s: float) -> None:
    last: list[object] = []

    def reached() -> bool:
        try:
            last[:] = _states(cluster, ids)
        except SparkMQError as exc:
            last[:] = [exc]
            return False
        return last == [state] * len(ids)

    try:
        wait_for(reached, timeout_s=timeout_s)
    except AssertionError:
        raise AssertionError(f"{list(ids)} are {last}, not all {state}") from None


def _spread(leaders: dict[int, int], owner: str, brokers: Sequence[int]) -> list[str]:
    ids = [_on(leaders, f"{owner}/{b}-", b) for b in brokers]
    assert sorted(_coordinator(leaders, t) for t in ids) == sorted(brokers)
    return ids


def test_a_commit_spans_three_coordinators(cluster: LocalCluster) -> None:
    leaders = _wait_in_sync(cluster)
    owner = _on(leaders, "commit-", 1)
    ids = _spread(leaders, owner, BROKERS)
    values = [f"c1-{t}".encode() for t in ids]
    handles = [_prepare(cluster, t, v, owner + "/") for t, v in zip(ids, values, strict=True)]
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        result = admin.txn_owner(owner).commit(handles, 0)
    assert result.committed and not result.already_committed
    assert sorted(_read(cluster, "c1-", False, 3)) == sorted(values)
    _wait_states(cluster, ids, "CompleteCommit", 30)


def test_an_abort_spans_three_coordinators(cluster: LocalCluster) -> None:
    leaders = _wait_in_sync(cluster)
    owner = _on(leaders, "abort-", 2)
    ids = _spread(leaders, owner, BROKERS)
    handles = [_prepare(cluster, t, f"a1-{t}".encode(), owner + "/") for t in ids]
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.txn_owner(owner).abort(handles)
    _wait_states(cluster, ids, "CompleteAbort", 30)
    assert _read(cluster, "a1-", True, 0) == []


def test_a_commit_is_all_or_nothing_across_coordinators(cluster: LocalCluster) -> None:
    leaders = _wait_in_sync(cluster)
    owner = _on(leaders, "whole-", 3)
    ids = _spread(leaders, owner, BROKERS)
    handles = [_prepare(cluster, t, f"w1-{t}".encode(), owner + "/") for t in ids]
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        # One of them is no longer Prepared: on a coordinator that is not the owner's.
        not_prepared = next(t for t in ids if _coordinator(leaders, t) != 3)
        admin.abort_transaction(not_prepared)
        with pytest.raises(InvalidTxnStateError):
            admin.txn_owner(owner).commit(handles, 0)
        others = [t for t in ids if t != not_prepared]
        assert _states(cluster, others) == ["Prepared", "Prepared"]
        assert admin.txn_owner(owner).last_sequence() == -1
        admin.txn_owner(owner).abort([h for h in handles if h.transactional_id in others])
    _wait_states(cluster, ids, "CompleteAbort", 30)
    assert _read(cluster, "w1-", True, 0) == []


def test_a_replayed_commit_is_not_doubled(cluster: LocalCluster) -> None:
    leaders = _wait_in_sync(cluster)
    owner = _on(leaders, "replay-", 1)
    ids = _spread(leaders, owner, BROKERS)
    first = [_prepare(cluster, t, f"r1-a-{t}".encode(), owner + "/") for t in ids]
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        assert admin.txn_owner(owner).commit(first, 0).committed
        again = [_prepare(cluster, t, f"r1-b-{t}".encode(), owner + "/") for t in ids]
        replay = admin.txn_owner(owner).commit(again, 0)
    assert replay.already_committed and not replay.committed
    _wait_states(cluster, ids, "CompleteAbort", 30)
    got = _read(cluster, "r1-", True, 0)
    assert sorted(got) == sorted(f"r1-a-{t}".encode() for t in ids)


def _alive(cluster: LocalCluster, broker: int) -> bool:
    # LocalCluster has no public "is it running" (a crash point kills without it).
    child = cluster._children.get(broker)
    return child is not None and child.poll() is None


def test_the_new_owner_coordinator_finishes_a_decision_whose_decider_died(
    cluster: LocalCluster,
) -> None:
    assert "txn.before_delivery" in POINTS, "the crash point this test arms"
    leaders = _wait_in_sync(cluster)
    decider = _coordinator(leaders, CRASH_OWNER)
    participants = [b for b in BROKERS if b != decider]
    ids = _spread(leaders, CRASH_OWNER, participants)
    values = [f"k1-{t}".encode() for t in ids]
    # Short transaction timeouts: the participants' owner goes quiet while the decider is
    # dead, so they must ask (and wait for the new decider) rather than presume abort.
    handles = [
        _prepare(cluster, t, v, CRASH_OWNER + "/", txn_timeout_ms=2000)
        for t, v in zip(ids, values, strict=True)
    ]
    with Admin(
        bootstrap_servers=cluster.bootstrap_servers, config={"default.api.timeout.ms": 60000}
    ) as admin:
        result = admin.txn_owner(CRASH_OWNER).commit(handles, 0)
    # The decider died after its record and before any participant heard of it; the
    # client's retry reached the new coordinator, which found its own decision (a replay).
    assert not _alive(cluster, decider), "the crash point fired"
    assert result.committed or result.already_committed
    assert sorted(_read(cluster, "k1-", False, 2)) == sorted(values)
    _wait_states(cluster, ids, "CompleteCommit", 30)
    _restart(cluster, decider)


def test_a_participant_coordinator_killed_while_prepared(cluster: LocalCluster) -> None:
    leaders = _wait_in_sync(cluster)
    owner = _on(leaders, "moved-", 1)
    ids = _spread(leaders, owner, (2, 3))
    values = [f"m1-{t}".encode() for t in ids]
    handles = [_prepare(cluster, t, v, owner + "/") for t, v in zip(ids, values, strict=True)]
    cluster.kill(2)
    moved = next(t for t in ids if _coordinator(leaders, t) == 2)
    # The new coordinator of the killed one's partition loaded it Prepared.
    _wait_states(cluster, [moved], "Prepared", 30)
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        assert admin.txn_owner(owner).commit(handles, 0).committed
    assert sorted(_read(cluster, "m1-", False, 2)) == sorted(values)
    _restart(cluster, 2)


def test_a_quiet_owners_transactions_elsewhere_are_aborted_after_asking(
    cluster: LocalCluster,
) -> None:
    leaders = _wait_in_sync(cluster)
    owner = _on(leaders, "quiet-", 1)
    ids = _spread(leaders, owner, (2, 3))
    for t in ids:
        _prepare(cluster, t, f"q1-{t}".encode(), owner + "/", txn_timeout_ms=1500)
    # Nobody decides and nobody heartbeats: each participant asks every broker, none holds
    # a decision naming them, and they are aborted.
    _wait_states(cluster, ids, "CompleteAbort", 30)
    assert _read(cluster, "q1-", True, 0) == []
