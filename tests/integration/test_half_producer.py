"""TransactionalMessageProducer against a local broker with short check settings, in one
process: a listener that raises is UNKNOWN and its own producer's check thread commits the
message later; a rolled back message never reaches the topic."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_mq import (
    Consumer,
    LocalTransactionState,
    TopicPartition,
    TransactionalMessage,
    TransactionalMessageProducer,
)
from spark_mq.broker import ensure_broker, stop_broker

SETTINGS = {
    "broker.idle.exit.ms": "-1",
    "transaction.check.interval.ms": "200",
    "transaction.half.timeout.ms": "500",
}


class Flaky:
    """Raises in execute_local_transaction for values starting with b"boom"; the check
    then says what ``decisions`` holds (filled in later, as a database would be)."""

    def __init__(self) -> None:
        self.decisions: dict[bytes, LocalTransactionState] = {}
        self.checked = threading.Event()

    def execute_local_transaction(
        self, message: TransactionalMessage, arg: object
    ) -> LocalTransactionState:
        assert message.value is not None
        if message.value.startswith(b"boom"):
            raise RuntimeError("the database went away")
        return LocalTransactionState(arg)

    def check_local_transaction(self, message: TransactionalMessage) -> LocalTransactionState:
        assert message.value is not None and message.check_count >= 1
        self.checked.set()
        return self.decisions.get(message.value, LocalTransactionState.UNKNOWN)


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "mq"
    ensure_broker(directory, config=SETTINGS)
    yield directory
    stop_broker(directory)


def values(path: Path, topic: str) -> list[bytes]:
    with Consumer(path=path, auto_offset_reset="earliest") as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                out.extend(r.value for r in records)
        return out


def test_an_unknown_outcome_is_settled_by_the_check_back(path: Path) -> None:
    listener = Flaky()
    with TransactionalMessageProducer(path, producer_group="g", listener=listener) as producer:
        kept = producer.send("t", b"kept", arg="COMMIT")
        dropped = producer.send("t", b"dropped", arg="ROLLBACK")
        unsure = producer.send("t", b"boom-1")
        assert (kept.state, kept.offset) == (LocalTransactionState.COMMIT, 0)
        assert (dropped.state, dropped.offset) == (LocalTransactionState.ROLLBACK, -1)
        assert (unsure.state, unsure.offset) == (LocalTransactionState.UNKNOWN, -1)
        assert listener.checked.wait(30)  # asked, answered UNKNOWN: still pending
        assert [m.message_id for m in producer.list_half_messages()] == [unsure.message_id]
        listener.decisions[b"boom-1"] = LocalTransactionState.COMMIT
        deadline = time.monotonic() + 30
        while producer.list_half_messages() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert producer.list_half_messages() == []
        assert producer.list_half_messages(discarded=True) == []  # ended, not discarded
    assert values(path, "t") == [b"kept", b"boom-1"]
