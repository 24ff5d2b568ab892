"""Half messages on a real three-broker LocalCluster: each producer group is served by the
leader of its ``__half_messages`` partition, real records go to their partitions' leaders
(often other brokers) with acks=all, and producers follow the service when its leader is
killed (SIGKILL): the new leader loads the group's pending messages, an end sent after the
kill and a check-back both complete them, and every committed record is in its topic once.
A message whose checks all go unanswered still lands in ``__half_discarded``, and
``spark-mq half-messages list --bootstrap-server`` lists what every broker serves. An
outcome is forgotten after ``transaction.half.op.retention.ms`` (its record and op
tombstoned in its partition), also after its group moved.

One cluster is shared by the tests of this module; the kill test runs last."""

from __future__ import annotations

import json
import threading
import time

import pytest
from cluster_fixtures import ClusterFactory, connect_to, replica_properties
from waiting import wait_for

from spark_mq import (
    Admin,
    Consumer,
    LocalTransactionState,
    TopicPartition,
    TransactionalMessageProducer,
)
from spark_mq.broker.half.records import HalfRecord, decode_record
from spark_mq.cli import main
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import AdminConfig
from spark_mq.client.half_coordinator import HalfCoordinator
from spark_mq.client.half_messages import TransactionalMessage, list_half_messages
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import HalfMessageNotFoundError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.half_messages import ListHalfMessagesRequest, SendHalfMessageRequest
from spark_mq.protocol.produce import ProducePartition, ProduceRequest, ProduceTopic
from spark_mq.storage.arrow_arrays import binary_array
from spark_mq.storage.record_batch import encode_batch

pytestmark = pytest.mark.slow

#: A killed broker's session ends, and its partitions move, this long after the kill.
SESSION_TIMEOUT_MS = 4000
HALF_PARTITIONS = 3
RETENTION_MS = 12_000
COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN


@pytest.fixture(scope="module")
def cluster(start_module_cluster: ClusterFactory) -> LocalCluster:
    return start_module_cluster(
        3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        broker_properties={
            **replica_properties(),
            # Checks every half second, the first one half a second after a send, and a
            # message is discarded after three unanswered ones.
            "transaction.check.interval.ms": "500",
            "transaction.half.timeout.ms": "500",
            "transaction.check.max": "3",
            "half.messages.topic.num.partitions": str(HALF_PARTITIONS),
            # Outcomes are forgotten (tombstoned) this long after their message ended.
            "transaction.half.op.retention.ms": str(RETENTION_MS),
        },
    )


class Ledger:
    """The producers' "local database": which message ids committed. A check answers from
    it; ids in ``unknown`` are answered UNKNOWN (the outcome not known yet)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.committed: set[str] = set()
        self.unknown: set[str] = set()
        self.checked: list[str] = []

    def execute_local_transaction(
        self, message: TransactionalMessage, arg: object
    ) -> LocalTransactionState:
        with self._lock:
            if arg == "commit":
                self.committed.add(message.message_id)
                return COMMIT
            if arg == "commit-unended":  # committed locally, then the end is never sent
                self.committed.add(message.message_id)
                return UNKNOWN
            if arg == "unknown":
                self.unknown.add(message.message_id)
                return UNKNOWN
            return ROLLBACK

    def check_local_transaction(self, message: TransactionalMessage) -> LocalTransactionState:
        with self._lock:
            self.checked.append(message.message_id)
            if message.message_id in self.unknown:
                return UNKNOWN
            return COMMIT if message.message_id in self.committed else ROLLBACK


def _create(cluster: LocalCluster, topic: str) -> None:
    """``topic`` with 3 partitions, replication factor 3, every replica in sync."""
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, partitions=3, replication_factor=3)
    # Every broker's metadata has it (the service checks a real partition in its own).
    for broker_id in cluster.broker_ids:
        with Admin(bootstrap_servers=cluster.broker_server(broker_id)) as admin:

            def full(a: Admin = admin) -> bool:
                if topic not in a.list_topics():
                    return False
                parts = a.describe_topic(topic).partitions
                return all(p.leader > 0 and sorted(p.isr) == [1, 2, 3] for p in parts)

            wait_for(full, timeout_s=30)


def _leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        return {p.partition: p.leader for p in admin.describe_topic(topic).partitions}


def _coordinator(servers: str, group: str) -> int:
    """The node serving ``group``'s half messages, as a fresh client finds it."""
    cluster = Cluster(AdminConfig.from_properties({"bootstrap.servers": servers}))
    try:
        return HalfCoordinator(cluster, group).node(30_000)
    finally:
        cluster.close()


def _records(servers: str, topic: str, expected: int, *, settle_s: float = 1.0) -> list[bytes]:
    """Every value in ``topic`` once ``expected`` are there (and ``settle_s`` more passed
    without another: a duplicate would show)."""
    tps = [TopicPartition(topic, p) for p in range(3)]
    got: list[bytes] = []
    with Consumer(bootstrap_servers=servers) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + 45
        quiet_until: float | None = None
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=300)
            got += [r.value for records in batch.values() for r in records if r.value]
            if len(got) >= expected:
                quiet_until = quiet_until or time.monotonic() + settle_s
                if time.monotonic() >= quiet_until:
                    break
    return sorted(got)


def _half_record(servers: str, message_id: str) -> HalfRecord:
    """The stored half record of ``message_id``, read from ``__half_messages``."""
    with Consumer(bootstrap_servers=servers) as consumer:
        tps = [TopicPartition("__half_messages", p) for p in range(HALF_PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                for r in records:
                    if r.key == message_id.encode() and r.value is not None:
                        return decode_record(r.value)
    raise AssertionError(f"half record {message_id} not found")


def _tombstoned_keys(servers: str) -> set[str]:
    """The keys whose newest value in ``__half_messages`` is a tombstone."""
    newest: dict[str, bytes | None] = {}
    tps = [TopicPartition("__half_messages", p) for p in range(HALF_PARTITIONS)]
    with Consumer(bootstrap_servers=servers) as consumer:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=300).values():
                for r in records:
                    if r.key is not None:
                        newest[r.key.decode()] = r.value
    return {key for key, value in newest.items() if value is None}


def _write_real_record(cluster: LocalCluster, topic: str, partition: int, half: HalfRecord) -> int:
    """Produce ``half``'s real record to the partition's leader as the half-message service
    does (its producer id, epoch 0, sequence 0, acks=all); its offset."""
    batch = bytes(
        encode_batch(
            binary_array([half.value]),
            key=binary_array([half.key]),
            headers=[None],
            producer_id=half.producer_id,
            producer_epoch=0,
            base_sequence=0,
            now_ms=int(time.time() * 1000),
        )
    )
    leader = _leaders(cluster, topic)[partition]
    conn = connect_to(cluster, leader)
    try:
        request = ProduceRequest(
            acks=-1,
            timeout_ms=10_000,
            topics=[ProduceTopic(topic, [ProducePartition(partition, len(batch))])],
        )
        conn.send(request, records=[batch])
        response = conn.receive(15)
        assert response is not None
        (answer,) = response.result().topics[0].partitions
    finally:
        conn.close()
    assert answer.error_code == 0, answer
    return int(answer.base_offset)


@pytest.fixture(scope="module")
def committed_early() -> list[str]:
    """Ids of messages the first test committed, whose outcomes the last test sees expire."""
    return []


def test_commit_and_rollback_write_each_committed_record_once_on_its_leader(
    cluster: LocalCluster, committed_early: list[str]
) -> None:
    _create(cluster, "pay")
    servers = cluster.bootstrap_servers
    ledger = Ledger()
    with TransactionalMessageProducer(
        bootstrap_servers=servers, producer_group="basic", listener=ledger
    ) as producer:
        results = [
            producer.send("pay", f"{arg}-{p}".encode(), partition=p, arg=arg)
            for arg in ("commit", "rollback")
            for p in range(3)
        ]
        # A repeated COMMIT answers the first one's offset and writes nothing.
        first = results[0]
        assert producer._end(first.message_id, COMMIT, from_check=False) == first.offset
        committed_early.append(first.message_id)
    assert [r.state for r in results] == [COMMIT] * 3 + [ROLLBACK] * 3
    assert all(r.offset >= 0 for r in results[:3]) and all(r.offset == -1 for r in results[3:])
    # Some real partitions are led by a broker other than the group's service: their
    # records went over the inter-broker path.
    coordinator = _coordinator(servers, "basic")
    assert set(_leaders(cluster, "pay").values()) - {coordinator}
    # Another broker does not serve the group: NOT_COORDINATOR, and nothing stored there.
    other = next(b for b in cluster.broker_ids if b != coordinator)
    conn = connect_to(cluster, other)
    try:
        send = SendHalfMessageRequest("basic", "elsewhere", "pay", 0, None, b"x")
        assert conn.request(send, timeout_s=10).error_code == ErrorCode.NOT_COORDINATOR
        listing = conn.request(ListHalfMessagesRequest(False, "basic"), timeout_s=10)
        assert listing.error_code == ErrorCode.NOT_COORDINATOR
    finally:
        conn.close()
    assert _records(servers, "pay", 3) == [b"commit-0", b"commit-1", b"commit-2"]


def test_unanswered_checks_discard_and_the_cli_lists_every_broker(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    _create(cluster, "lost")
    servers = cluster.bootstrap_servers
    ledger = Ledger()
    with TransactionalMessageProducer(
        bootstrap_servers=servers, producer_group="undecided", listener=ledger
    ) as producer:
        result = producer.send("lost", b"never-decided", partition=0, arg="unknown")

        def discarded() -> bool:
            listing = list_half_messages(
                bootstrap_servers=servers, discarded=True, producer_group="undecided"
            )
            return [m.message_id for m in listing.messages] == [result.message_id]

        wait_for(discarded, timeout_s=30)
    assert ledger.checked.count(result.message_id) >= 3  # asked, and never answered
    # The discard topic holds the record, with where it came from.
    tp = TopicPartition("__half_discarded", 0)
    with Consumer(bootstrap_servers=servers) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        found = []
        deadline = time.monotonic() + 30
        while not found and time.monotonic() < deadline:
            found = [
                r
                for r in consumer.poll(timeout_ms=300).get(tp, [])
                if dict(r.headers).get("half.message.id") == result.message_id.encode()
            ]
    assert [r.value for r in found] == [b"never-decided"]
    assert _records(servers, "lost", 0, settle_s=0.5) == []
    # The CLI, pointed at the cluster, asks every broker.
    capsys.readouterr()
    assert (
        main(["half-messages", "list", "--discarded", "--bootstrap-server", servers, "--json"]) == 0
    )
    listed = json.loads(capsys.readouterr().out)
    assert result.message_id in [m["message_id"] for m in listed["messages"]]
    assert listed["discarded_count"] >= 1


def test_the_service_leader_killed_between_send_and_end(
    cluster: LocalCluster, committed_early: list[str]
) -> None:
    _create(cluster, "orders")
    servers = cluster.bootstrap_servers
    ledger = Ledger()
    with TransactionalMessageProducer(
        bootstrap_servers=servers,
        producer_group="moving",
        listener=ledger,
        # The first check comes after the kill and the new leader's election.
        check_immunity_ms=8000,
    ) as producer:
        # Committed locally but never ended: only a check-back can complete it.
        checked = producer.send("orders", b"by-check", partition=0, arg="commit-unended")
        # Not known to the checks (UNKNOWN): the producer ends it itself after the kill.
        ended = producer.send("orders", b"by-end", partition=1, arg="unknown")
        assert checked.offset == -1 and ended.offset == -1
        # The service's leader wrote the real record of ``ended`` and died before its op:
        # done here as the leader does it (the message's own producer id, sequence 0).
        written = _write_real_record(cluster, "orders", 1, _half_record(servers, ended.message_id))
        victim = _coordinator(servers, "moving")
        cluster.kill(victim)
        survivors = ",".join(cluster.broker_server(b) for b in cluster.broker_ids if b != victim)
        # The end is sent to the killed broker first, then follows the service.
        ledger.committed.add(ended.message_id)
        offset = producer._end(ended.message_id, COMMIT, from_check=False)
        # The new leader's COMMIT wrote it again: a duplicate, answered with the first offset.
        assert offset == written
        # The fault happened: another broker serves the group now.
        assert _coordinator(survivors, "moving") != victim
        # The check-back reached this producer over its connection to the new leader.
        assert _records(survivors, "orders", 2) == [b"by-check", b"by-end"]
        assert checked.message_id in ledger.checked
        assert not list_half_messages(bootstrap_servers=survivors, producer_group="moving").messages
    # The first test's outcome expired (wherever its group is served now): a late end is
    # HALF_MESSAGE_NOT_FOUND, and both its record and its op are tombstoned.
    (early,) = committed_early
    with TransactionalMessageProducer(
        bootstrap_servers=survivors, producer_group="basic", listener=ledger
    ) as late:

        def forgotten() -> bool:
            try:
                late._end(early, COMMIT, from_check=False)
            except HalfMessageNotFoundError:
                return True
            time.sleep(0.25)
            return False

        wait_for(forgotten, timeout_s=RETENTION_MS / 1000 + 10)
    keys = _tombstoned_keys(survivors)
    assert {early, f"op:{early}"} <= keys
