"""The transactional producer's client-side state machine, its settings and the handle
types, without a broker: calls out of order raise InvalidTxnStateError saying what to call
first, a fenced producer raises ProducerFencedError from every call, the transition table
refuses illegal moves."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from spark_mq import (
    CompletionResult,
    ConfigError,
    InvalidTxnStateError,
    PreparedTransaction,
    Producer,
    ProducerConfig,
    ProducerFencedError,
    TopicPartition,
    TransactionAbortableError,
    UsageError,
)
from spark_mq.client.accumulator import stamp_header
from spark_mq.client.transactions import (
    ALLOWED_CALLS,
    TRANSITIONS,
    TransactionStateMachine,
    TxnState,
    fenced_error,
)
from spark_mq.errors import InvalidProducerEpochError, NetworkError
from spark_mq.storage.batch_decoder import validate_batch
from spark_mq.storage.record_batch import BatchHeader, encode_batch_parts

S = TxnState


def ready_machine() -> TransactionStateMachine:
    machine = TransactionStateMachine("tx")
    machine.transition(S.INITIALIZING)
    machine.transition(S.READY)
    return machine


# -- the transition table ---------------------------------------------------------------------


def test_every_state_has_a_row_and_every_call_a_set() -> None:
    assert set(TRANSITIONS) == set(TxnState)
    assert set(ALLOWED_CALLS) == {
        "init_transactions",
        "begin_transaction",
        "send",
        "send_batch",
        "send_offsets_to_transaction",
        "commit_transaction",
        "abort_transaction",
        "prepare_transaction",
    }


@pytest.mark.parametrize("source", list(TxnState))
@pytest.mark.parametrize("target", list(TxnState))
def test_transition_follows_the_table(source: TxnState, target: TxnState) -> None:
    machine = TransactionStateMachine("tx")
    machine._state = source  # a white-box start: every pair is checked
    if source is S.FATAL_ERROR:
        machine.transition(target)  # fatal is final: ignored, not refused
        assert machine.state is S.FATAL_ERROR
    elif source in TRANSITIONS[target]:
        machine.transition(target)
        assert machine.state is target
    else:
        with pytest.raises(AssertionError, match="illegal transaction state change"):
            machine.transition(target)
        assert machine.state is source


def test_a_full_cycle() -> None:
    machine = ready_machine()
    for _ in range(2):
        machine.require("begin_transaction")
        machine.transition(S.IN_TRANSACTION)
        machine.require("send")
        machine.require("commit_transaction")
        machine.transition(S.COMMITTING_TRANSACTION)
        machine.require("commit_transaction")  # a timed out commit may be repeated
        machine.transition(S.READY)
    machine.transition(S.IN_TRANSACTION)
    machine.transition(S.ABORTING_TRANSACTION)
    machine.require("abort_transaction")
    machine.transition(S.READY)


# -- calls out of order -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "call", "advice"),
    [
        (S.UNINITIALIZED, "begin_transaction", "call init_transactions\\(\\) first"),
        (S.UNINITIALIZED, "send", "call init_transactions\\(\\) first"),
        (S.UNINITIALIZED, "commit_transaction", "call init_transactions\\(\\) first"),
        (S.READY, "send", "call begin_transaction\\(\\) first"),
        (S.READY, "commit_transaction", "call begin_transaction\\(\\) first"),
        (S.READY, "abort_transaction", "call begin_transaction\\(\\) first"),
        (S.READY, "send_offsets_to_transaction", "call begin_transaction\\(\\) first"),
        (S.READY, "prepare_transaction", "call begin_transaction\\(\\) first"),
        (S.READY, "init_transactions", "already called"),
        (S.IN_TRANSACTION, "begin_transaction", "already open"),
        (S.COMMITTING_TRANSACTION, "abort_transaction", "commit_transaction\\(\\) did not"),
        (S.COMMITTING_TRANSACTION, "send", "commit_transaction\\(\\) did not"),
        (S.ABORTING_TRANSACTION, "commit_transaction", "abort_transaction\\(\\) did not"),
        (S.PREPARED_TRANSACTION, "begin_transaction", "complete_prepared_transactions"),
        (S.PREPARED_TRANSACTION, "abort_transaction", "complete_prepared_transactions"),
        (S.PREPARED_TRANSACTION, "send", "complete_prepared_transactions"),
    ],
)
def test_out_of_order_calls_say_what_to_call_first(state: TxnState, call: str, advice: str) -> None:
    machine = TransactionStateMachine("tx-7")
    machine._state = state
    with pytest.raises(InvalidTxnStateError, match=advice) as info:
        machine.require(call)
    assert f"{call}()" in str(info.value)
    assert "tx-7" in str(info.value)


def test_abortable_error_refuses_commit_and_send_but_allows_abort() -> None:
    machine = ready_machine()
    machine.transition(S.IN_TRANSACTION)
    cause = NetworkError("send failed for good")
    machine.abortable(cause)
    assert machine.state is S.ABORTABLE_ERROR
    for call in ("commit_transaction", "send", "send_batch", "prepare_transaction"):
        with pytest.raises(TransactionAbortableError, match="abort_transaction") as info:
            machine.require(call)
        assert info.value.__cause__ is cause
    machine.require("abort_transaction")
    machine.transition(S.ABORTING_TRANSACTION)
    machine.abortable(NetworkError("a failure caused by the abort itself"))
    state: TxnState = machine.state
    assert state is S.ABORTING_TRANSACTION  # an abort is not disturbed
    machine.transition(S.READY)
    assert machine.error is None


def test_a_failure_while_committing_makes_the_transaction_abortable() -> None:
    machine = ready_machine()
    machine.transition(S.IN_TRANSACTION)
    machine.transition(S.COMMITTING_TRANSACTION)
    machine.abortable(NetworkError("batch failed"))
    assert machine.state is S.ABORTABLE_ERROR


def test_failures_outside_a_transaction_do_not_change_the_state() -> None:
    machine = ready_machine()
    machine.abortable(NetworkError("late failure"))
    assert machine.state is S.READY


def test_fenced_producer_raises_producer_fenced_from_every_call() -> None:
    machine = ready_machine()
    machine.transition(S.IN_TRANSACTION)
    machine.fatal(
        fenced_error("tx", InvalidProducerEpochError("old", producer_id=1, producer_epoch=0))
    )
    assert machine.state is S.FATAL_ERROR
    for call in ALLOWED_CALLS:
        with pytest.raises(ProducerFencedError, match="fenced"):
            machine.require(call)
    machine.fatal(NetworkError("a later error does not replace the first"))
    assert isinstance(machine.error, ProducerFencedError)


# -- value types ------------------------------------------------------------------------------


def test_prepared_transaction_round_trips_through_json_and_pickle() -> None:
    handle = PreparedTransaction(
        "sink-1-p3", 1234, 7, (TopicPartition("out", 0), TopicPartition("out", 2))
    )
    assert PreparedTransaction.from_json(handle.to_json()) == handle
    assert pickle.loads(pickle.dumps(handle)) == handle
    assert len(pickle.dumps(handle)) < 400
    with pytest.raises(UsageError, match="not a prepared transaction handle"):
        PreparedTransaction.from_json('{"transactional_id": "x"}')
    with pytest.raises(UsageError, match="not a prepared transaction handle"):
        PreparedTransaction.from_json("not json")


def test_completion_result_is_a_frozen_value() -> None:
    result = CompletionResult(True, False, 4, ("a",))
    assert pickle.loads(pickle.dumps(result)) == result
    with pytest.raises(AttributeError):
        result.committed = False  # type: ignore[misc]


def test_stamped_header_sets_the_transactional_bit_and_a_valid_crc() -> None:
    header, body = encode_batch_parts(pa.array([b"a", b"b"]), now_ms=1)
    batch = stamp_header(bytes(header), body, 5, 1, 10, transactional=True) + bytes(body)
    parsed = validate_batch(batch)
    assert parsed.is_transactional
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (5, 1, 10)
    plain = BatchHeader.unpack_from(stamp_header(bytes(header), body, 5, 1, 10))
    assert not plain.is_transactional


# -- settings ---------------------------------------------------------------------------------


def test_transactional_id_implies_idempotence_and_acks_all() -> None:
    config = ProducerConfig.from_user({"path": "/x", "transactional.id": "t"})
    assert config.enable_idempotence
    assert config.acks == -1
    assert config.transaction_timeout_ms == 60_000


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"enable.idempotence": False}, "enable.idempotence"),
        ({"acks": 1}, "acks"),
        ({"acks": 0}, "acks"),
        ({"retries": 0}, "retries"),
        ({"max.in.flight.requests.per.connection": 6}, "max.in.flight.requests.per.connection"),
    ],
)
def test_settings_that_conflict_with_a_transactional_id_are_refused(
    settings: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError, match=r"transactional\.id needs") as info:
        ProducerConfig.from_user({"path": "/x", "transactional.id": "t", **settings})
    assert info.value.key == key


def test_transaction_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"transaction\.timeout\.ms"):
        ProducerConfig.from_user(
            {"path": "/x", "transactional.id": "t", "transaction.timeout.ms": 0}
        )


# -- the producer, before it talks to any broker ----------------------------------------------


@pytest.fixture
def txn_producer(tmp_path: Path) -> Iterator[Producer]:
    # Nothing here reaches a broker: every call below is refused by the state machine first.
    producer = Producer(path=tmp_path / "mq", transactional_id="tx-unit")
    yield producer
    producer.close()


def test_producer_refuses_calls_before_init_transactions(txn_producer: Producer) -> None:
    assert txn_producer.transaction_state is S.UNINITIALIZED
    with pytest.raises(InvalidTxnStateError, match="init_transactions\\(\\) first"):
        txn_producer.begin_transaction()
    with pytest.raises(InvalidTxnStateError, match="init_transactions\\(\\) first"):
        txn_producer.send("t", b"v")
    with pytest.raises(InvalidTxnStateError, match="init_transactions\\(\\) first"):
        txn_producer.send_batch("t", pa.table({"value": [b"v"]}))
    with pytest.raises(InvalidTxnStateError, match="init_transactions\\(\\) first"):
        txn_producer.commit_transaction()
    with pytest.raises(InvalidTxnStateError, match="init_transactions\\(\\) first"):
        txn_producer.send_offsets_to_transaction({TopicPartition("t", 0): 1}, "g")
    with pytest.raises(InvalidTxnStateError, match="init_transactions\\(\\) first"):
        txn_producer.prepare_transaction()


def test_transaction_calls_need_a_transactional_producer(tmp_path: Path) -> None:
    with Producer(path=tmp_path / "mq") as producer:
        assert producer.transaction_state is None
        for call in (
            producer.init_transactions,
            producer.begin_transaction,
            producer.commit_transaction,
            producer.abort_transaction,
            producer.prepare_transaction,
        ):
            with pytest.raises(UsageError, match=r"transactional\.id"):
                call()


def test_closed_transactional_producer_refuses_calls(tmp_path: Path) -> None:
    producer = Producer(path=tmp_path / "mq", transactional_id="tx-closed")
    producer.close()
    producer.close()  # twice is fine
    with pytest.raises(UsageError, match="closed"):
        producer.init_transactions()
