"""Transactions and consumer groups through broker bounces on a real three-broker
LocalCluster (issue "Cluster, part 3": coordinators move with their partitions).

- A transactional copier (Kafka's TransactionalMessageCopier): a read_committed consumer in
  a group reads numbered input, and each poll's records go to the output topic in one
  transaction together with the consumed offsets (``send_offsets_to_transaction``). Meanwhile
  the transaction coordinator's broker (the leader of the transactional id's
  ``__transaction_state`` partition) is killed, the group coordinator's broker is stopped
  cleanly, the leader of an output partition is killed, and the controller is killed, each
  started again. At the end the committed output holds every acknowledged input record
  exactly once, and nothing else: no loss, no duplicate, no aborted record read.
- A consumer group of two members committing after every poll, while the group
  coordinator's broker is killed and stopped cleanly: the group keeps processing, every
  acknowledged record is processed, and the group's committed offsets never go back and end
  at the log end.

Each test prints its seed and the schedule of the faults it injected, and asserts each
happened (the victim's process is gone, the coordinator's partition got a new leader epoch).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest
from cluster_fixtures import ClusterFactory
from queue_workload import FAULT_BROKER_PROPERTIES, SESSION_TIMEOUT_MS, NumberedProducer
from waiting import wait_for

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.broker.coordinator_topic import coordinator_partition
from spark_mq.broker.zk.client import ZkClient
from spark_mq.broker.zk.partition_states import read_partition_state
from spark_mq.cluster.local_cluster import LocalCluster, process_is
from spark_mq.errors import ProducerFencedError, SparkMQError

pytestmark = pytest.mark.slow

PARTITIONS = 2
#: Few partitions of the internal topics, so their leaders are quick to elect.
INTERNAL_PARTITIONS = 3
OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        broker_properties={
            **FAULT_BROKER_PROPERTIES,
            "offsets.topic.num.partitions": str(INTERNAL_PARTITIONS),
            "transaction.state.log.num.partitions": str(INTERNAL_PARTITIONS),
            "group.initial.rebalance.delay.ms": "0",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        },
    )


def _leader(zk: ZkClient, topic: str, partition: int) -> tuple[int, int]:
    found = read_partition_state(zk, topic, partition)
    assert found is not None, f"{topic}-{partition} has no state"
    return found.value.leader, found.value.leader_epoch


def _full_isr(cluster: LocalCluster, zk: ZkClient, topics: dict[str, int]) -> bool:
    for topic, count in topics.items():
        for p in range(count):
            found = read_partition_state(zk, topic, p)
            if found is None or sorted(found.value.isr) != sorted(cluster.broker_ids):
                return False
    return True


def _create(cluster: LocalCluster, zk: ZkClient, *topics: str) -> None:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        for topic in topics:
            admin.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_for(lambda: _full_isr(cluster, zk, dict.fromkeys(topics, PARTITIONS)), 30)


def _bounce(
    cluster: LocalCluster,
    zk: ZkClient,
    rng: random.Random,
    *,
    name: str,
    topic: str,
    partition: int,
    clean: bool,
    watched: dict[str, int],
) -> str:
    """Stop the leader of ``topic``-``partition`` (``topic`` None: the controller), check it
    moved, start the broker again and wait for full ISRs; the fault as printed."""
    time.sleep(rng.uniform(0.5, 2.0))  # work flowing before the fault
    if topic == "controller":
        victim = cluster.controller_id()
        assert victim is not None
        epoch_before = cluster.controller_epoch() or -1
    else:
        victim, epoch_before = _leader(zk, topic, partition)
    pid = int(cluster.state["brokers"][str(victim)]["pid"])
    started = time.monotonic()
    if clean:
        cluster.stop_broker(victim)
    else:
        cluster.kill(victim)
    assert not process_is(pid, str(cluster.properties_path(victim)))
    if topic == "controller":
        wait_for(lambda: cluster.controller_id() not in (None, victim), 30)
        epoch_after = cluster.controller_epoch() or -1
    else:
        wait_for(lambda: _leader(zk, topic, partition)[0] not in (victim, -1), 30)
        epoch_after = _leader(zk, topic, partition)[1]
    assert epoch_after > epoch_before, (name, epoch_before, epoch_after)
    time.sleep(rng.uniform(0.0, 1.0))
    cluster.start_broker(victim)
    wait_for(lambda: _full_isr(cluster, zk, watched), 60)
    fault = (
        f"{'clean stop' if clean else 'kill'} of {name} broker {victim} (pid {pid}, epoch "
        f"{epoch_before}->{epoch_after}, down {time.monotonic() - started:.1f} s)"
    )
    print(f"fault: {fault}")
    return fault


class Copier:
    """Kafka's TransactionalMessageCopier in a thread: every poll of the input goes to the
    output in one transaction with its offsets; a failed transaction is aborted and the
    consumer rewound to the committed offsets; a fenced producer is replaced."""

    def __init__(
        self, servers: Callable[[], str], source: str, sink: str, group: str, txn_id: str
    ) -> None:
        # The current bootstrap servers: a restarted broker listens on a new port, so a
        # producer made after a few bounces must not bootstrap from the first addresses.
        self.servers, self.source, self.sink, self.txn_id = servers, source, sink, txn_id
        self.consumer = Consumer(
            bootstrap_servers=servers(),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            max_poll_records=50,
        )
        self.consumer.subscribe([source])
        self.producer = self._new_producer()
        self.committed = 0
        self.aborted = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="copier", daemon=True)

    def _new_producer(self) -> Producer:
        while True:
            producer = Producer(
                bootstrap_servers=self.servers(),
                transactional_id=self.txn_id,
                linger_ms=2,
                config={"retry.backoff.max.ms": 300},
            )
            try:
                producer.init_transactions()
            except SparkMQError as exc:
                self.errors.append(f"init_transactions: {exc!r}")
                producer.close()
                time.sleep(0.3)
                continue
            return producer

    def start(self) -> Copier:
        self._thread.start()
        return self

    def _rewind(self) -> None:
        assigned = sorted(self.consumer.assignment())
        committed = self.consumer.committed(assigned)
        for tp in assigned:
            found = committed.get(tp)
            if found is None:
                self.consumer.seek_to_beginning([tp])
            else:
                self.consumer.seek(tp, found.offset)

    def _run(self) -> None:
        try:
            self._copy()
        except BaseException as exc:
            # Anything else ends the copier: the test's report names it (a thread that dies
            # silently would only show as "no transaction committed").
            self.errors.append(f"copier stopped: {exc!r}")
            raise

    def _copy(self) -> None:
        while not self._stop.is_set():
            try:
                polled = self.consumer.poll(timeout_ms=200)
                if not polled:
                    continue
                self.producer.begin_transaction()
                for records in polled.values():
                    for record in records:
                        self.producer.send(self.sink, record.value, partition=record.partition)
                positions = {tp: self.consumer.position(tp) for tp in polled}
                self.producer.send_offsets_to_transaction(positions, self.consumer.group_metadata())
                self.producer.commit_transaction()
                self.committed += 1
            except ProducerFencedError as exc:
                self.errors.append(repr(exc))
                self.producer.close()
                self.producer = self._new_producer()
                self._recover()
            except SparkMQError as exc:
                self.errors.append(repr(exc))
                try:
                    self.producer.abort_transaction()
                    self.aborted += 1
                except SparkMQError as abort_exc:
                    self.errors.append(f"abort: {abort_exc!r}")
                    self.producer.close()
                    self.producer = self._new_producer()
                self._recover()

    def _recover(self) -> None:
        while not self._stop.is_set():
            try:
                self._rewind()
                return
            except SparkMQError as exc:
                self.errors.append(f"rewind: {exc!r}")
                time.sleep(0.3)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.producer.close()
        self.consumer.close()


def _committed_numbers(servers: str, topic: str) -> list[int]:
    """Every record of ``topic`` a read_committed consumer sees (record numbers)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: list[int] = []
    with Consumer(bootstrap_servers=servers, isolation_level="read_committed") as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "the committed output did not read to its end"
            for records in consumer.poll(timeout_ms=300).values():
                out.extend(int(r.value or b"-1") for r in records)
    return out


def test_a_transactional_copier_keeps_output_equal_to_input(
    cluster: LocalCluster, zk: ZkClient, rng: random.Random
) -> None:
    source, sink, group, txn_id = "copy-in", "copy-out", "copiers", "copier-1"
    _create(cluster, zk, source, sink)
    servers = cluster.bootstrap_servers
    producer = NumberedProducer(servers, source, PARTITIONS).start()
    copier = Copier(lambda: cluster.bootstrap_servers, source, sink, group, txn_id).start()
    watched = {
        source: PARTITIONS,
        sink: PARTITIONS,
        OFFSETS_TOPIC: INTERNAL_PARTITIONS,
        TXN_TOPIC: INTERNAL_PARTITIONS,
    }
    txn_partition = coordinator_partition(txn_id, INTERNAL_PARTITIONS)
    group_partition = coordinator_partition(group, INTERNAL_PARTITIONS)
    schedule = []
    try:
        # The copier is running transactions before the first fault.
        wait_for(lambda: copier.committed >= 3, 60)
        wait_for(lambda: _full_isr(cluster, zk, watched), 60)
        for name, topic, partition, clean in (
            ("transaction coordinator", TXN_TOPIC, txn_partition, False),
            ("group coordinator", OFFSETS_TOPIC, group_partition, True),
            ("output leader", sink, rng.randrange(PARTITIONS), False),
            ("transaction coordinator", TXN_TOPIC, txn_partition, True),
            ("controller", "controller", 0, False),
        ):
            before = copier.committed
            schedule.append(
                _bounce(
                    cluster,
                    zk,
                    rng,
                    name=name,
                    topic=topic,
                    partition=partition,
                    clean=clean,
                    watched=watched,
                )
            )
            # The copier commits transactions again after each fault.
            try:
                wait_for(lambda before=before: copier.committed > before + 2, 90)
            except AssertionError:
                raise AssertionError(
                    f"the copier committed no transaction after {schedule[-1]}; its last "
                    f"errors: {copier.errors[-8:]}"
                ) from None
    except BaseException:
        copier.stop()
        raise
    finally:
        producer.stop()
    print("schedule: " + "; ".join(schedule))
    acked = {n for _, _, n in producer.acknowledged}
    assert not producer.failed
    try:
        wait_for(lambda: acked <= set(_committed_numbers(cluster.bootstrap_servers, sink)), 120)
    finally:
        copier.stop()
    print(
        f"copier: {copier.committed} transactions committed, {copier.aborted} aborted, "
        f"errors {len(copier.errors)} {copier.errors[:5]}"
    )
    # The brokers listen on new ports since they were restarted.
    output = _committed_numbers(cluster.bootstrap_servers, sink)
    duplicates = sorted({n for n in output if output.count(n) > 1})
    assert not duplicates, f"copied twice: {duplicates[:20]}"
    assert set(output) == acked, (
        f"lost {sorted(acked - set(output))[:20]}, unexpected {sorted(set(output) - acked)[:20]}"
    )


class Member:
    """A consumer group member in a thread, committing synchronously after every poll."""

    def __init__(self, servers: str, topic: str, group: str, name: str) -> None:
        self.consumer = Consumer(
            bootstrap_servers=servers,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            max_poll_records=50,
        )
        self.consumer.subscribe([topic])
        self.processed: list[int] = []
        self.commits = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                polled = self.consumer.poll(timeout_ms=200)
                for records in polled.values():
                    self.processed.extend(int(r.value or b"-1") for r in records)
                if polled:
                    self.consumer.commit()
                    self.commits += 1
            except SparkMQError as exc:
                # A commit refused during a rebalance or a coordinator move: the records are
                # processed again by whoever owns them next (at least once).
                self.errors.append(repr(exc))
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def test_a_consumer_group_keeps_processing_with_commits_that_hold(
    cluster: LocalCluster, zk: ZkClient, rng: random.Random
) -> None:
    topic, group = "group-in", "processors"
    _create(cluster, zk, topic)
    servers = cluster.bootstrap_servers
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    watched = {topic: PARTITIONS, OFFSETS_TOPIC: INTERNAL_PARTITIONS}
    group_partition = coordinator_partition(group, INTERNAL_PARTITIONS)
    producer = NumberedProducer(servers, topic, PARTITIONS).start()
    members = [Member(servers, topic, group, f"member-{i}").start() for i in range(2)]
    committed_seen: list[dict[TopicPartition, int]] = []
    schedule = []

    def committed_now() -> dict[TopicPartition, int]:
        # cluster.bootstrap_servers: restarted brokers listen on new ports.
        with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            found = admin.list_group_offsets(group, tps)
        return {tp: meta.offset for tp, meta in found.items()}

    try:
        wait_for(lambda: sum(m.commits for m in members) >= 4, 60)
        for clean in (False, True, False):
            committed_seen.append(committed_now())
            before = sum(m.commits for m in members)
            schedule.append(
                _bounce(
                    cluster,
                    zk,
                    rng,
                    name="group coordinator",
                    topic=OFFSETS_TOPIC,
                    partition=group_partition,
                    clean=clean,
                    watched=watched,
                )
            )
            # The group commits again on its new coordinator.
            wait_for(lambda before=before: sum(m.commits for m in members) > before + 2, 90)
            committed_seen.append(committed_now())
    except BaseException:
        for member in members:
            member.stop()
        raise
    finally:
        producer.stop()
    print("schedule: " + "; ".join(schedule))
    acked = {n for _, _, n in producer.acknowledged}
    assert not producer.failed
    try:
        wait_for(lambda: acked <= {n for m in members for n in m.processed}, 90)
        with Consumer(bootstrap_servers=cluster.bootstrap_servers) as reader:
            ends = reader.end_offsets(tps)
        wait_for(lambda: committed_now() == ends, 60)
    finally:
        for member in members:
            member.stop()
    committed_seen.append(committed_now())
    print(f"member errors: {[m.errors[:3] for m in members]}")
    # Commits hold: a partition's committed offset never goes back, through every move.
    for tp in tps:
        series = [seen[tp] for seen in committed_seen if tp in seen]
        assert series == sorted(series), f"{tp} committed offsets went back: {series}"
