"""The transaction state machine and the records of ``__transaction_state``."""

from __future__ import annotations

import dataclasses
import itertools

import msgspec
import pytest

from spark_mq.broker.txn.records import (
    Decision,
    DecisionEntry,
    DecisionKey,
    OwnerKey,
    TxnKey,
    decision_key,
    decode_decision,
    decode_key,
    decode_txn_value,
    encode_decision,
    encode_txn_value,
    owner_key,
    txn_key,
)
from spark_mq.broker.txn.state import (
    TRANSITIONS,
    IllegalTxnTransitionError,
    TxnMetadata,
    TxnState,
    is_transition_valid,
)
from spark_mq.errors import CorruptRecordError, InvalidRequestError, InvalidTxnStateError
from spark_mq.protocol.error_codes import ErrorCode, code_for
from spark_mq.protocol.transactions import TXN_STATES

S = TxnState

#: The legal moves, written out independently of the table under test.
LEGAL = {
    (S.EMPTY, S.EMPTY), (S.EMPTY, S.ONGOING), (S.EMPTY, S.PREPARED), (S.EMPTY, S.DEAD),
    (S.ONGOING, S.ONGOING), (S.ONGOING, S.PREPARED), (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT), (S.ONGOING, S.PREPARE_EPOCH_FENCE),
    (S.PREPARED, S.PREPARE_COMMIT), (S.PREPARED, S.PREPARE_ABORT),
    (S.PREPARED, S.PREPARE_EPOCH_FENCE),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.COMPLETE_COMMIT, S.EMPTY), (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_COMMIT, S.PREPARED), (S.COMPLETE_COMMIT, S.DEAD),
    (S.COMPLETE_ABORT, S.EMPTY), (S.COMPLETE_ABORT, S.ONGOING),
    (S.COMPLETE_ABORT, S.PREPARED), (S.COMPLETE_ABORT, S.DEAD),
    (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
}  # fmt: skip


def test_the_states_are_the_protocols() -> None:
    assert [s.value for s in TxnState] == list(TXN_STATES)
    assert set(TRANSITIONS) == set(TxnState)


@pytest.mark.parametrize("old,new", list(itertools.product(TxnState, TxnState)))
def test_every_transition_against_the_reference(old: TxnState, new: TxnState) -> None:
    txn = TxnMetadata("t", 1, 0, 1000, state=old, partitions=frozenset({("a", 0)}))
    assert is_transition_valid(old, new) == ((old, new) in LEGAL)
    if (old, new) in LEGAL:
        moved = txn.transition(new, 5)
        assert moved.state is new and moved.last_update_ms == 5
        assert txn.state is old  # a copy: the original is untouched until installed
    else:
        with pytest.raises(IllegalTxnTransitionError) as info:
            txn.transition(new, 5)
        assert isinstance(info.value, InvalidTxnStateError)
        assert code_for(info.value) is ErrorCode.INVALID_TXN_STATE
        assert old.value in str(info.value) and new.value in str(info.value)


def test_dead_is_final_and_completion_clears_the_transaction() -> None:
    assert TRANSITIONS[S.DEAD] == frozenset()
    txn = TxnMetadata(
        "t", 1, 0, 1000, state=S.PREPARE_COMMIT, partitions=frozenset({("a", 0)}),
        txn_start_ms=3, prepared_ms=4,
    )  # fmt: skip
    done = txn.transition(S.COMPLETE_COMMIT, 9)
    assert (done.partitions, done.txn_start_ms, done.prepared_ms) == (frozenset(), -1, -1)
    with pytest.raises(AttributeError):
        txn.transition(S.COMPLETE_COMMIT, 9, no_such_field=1)


def test_keys_round_trip_and_differ_by_kind() -> None:
    assert decode_key(txn_key("tx-1")) == TxnKey("tx-1")
    assert decode_key(owner_key("sink")) == OwnerKey("sink")
    assert decode_key(decision_key("d")) == DecisionKey("d")
    assert len({txn_key("x"), owner_key("x"), decision_key("x")}) == 3
    assert txn_key("é") == b"\x00\x00\x00\x02\xc3\xa9"
    assert decode_key(b"\x00\x09\x00\x01x") is None  # a newer broker's key
    for bad in (b"\x00", b"\x00\x00\x00\x05ab", b"\x00\x00\x00\x01\xff"):
        with pytest.raises(CorruptRecordError):
            decode_key(bad)
    with pytest.raises(InvalidRequestError):
        txn_key("")


def test_transaction_values_round_trip() -> None:
    txn = TxnMetadata(
        "tx", 17, 3, 60_000, state=S.PREPARED, last_producer_id=16, last_producer_epoch=9,
        partitions=frozenset({("b", 1), ("a", 2), ("a", 0)}), txn_start_ms=100,
        prepared_ms=200, last_update_ms=300, txn_number=4,
    )  # fmt: skip
    assert decode_txn_value("tx", encode_txn_value(txn)) == txn
    named = dataclasses.replace(txn, transactional_id="job/tx", owner_prefix="job/")
    assert decode_txn_value("job/tx", encode_txn_value(named)) == named
    # A value written before prepares named an owner prefix (12 elements) reads without one.
    old = msgspec.msgpack.decode(encode_txn_value(named))[:12]
    unnamed = dataclasses.replace(named, owner_prefix=None)
    assert decode_txn_value("job/tx", msgspec.msgpack.encode(old)) == unnamed
    with pytest.raises(CorruptRecordError):
        decode_txn_value("tx", b"\x93\x00\x01")
    bad_state = encode_txn_value(txn).replace(b"Prepared", b"Sleeping")
    with pytest.raises(CorruptRecordError):
        decode_txn_value("tx", bad_state)


def test_decision_values_round_trip() -> None:
    decision = Decision(
        7, 123, (DecisionEntry("a", 1, 0, 2, True), DecisionEntry("b", 2, 5, 1, False))
    )
    assert decode_decision(encode_decision(decision)) == decision
    closed = Decision(-1, 124, (), closed_prefix="job-9/")
    assert decode_decision(encode_decision(closed)) == closed
    bound = Decision(3, 125, (), instance="0b6f3a5e-query")
    assert decode_decision(encode_decision(bound)) == bound
    # A value written before owners had instances (five elements) reads as not bound.
    unbound = msgspec.msgpack.encode([0, 7, 123, [], "job-9/"])
    assert decode_decision(unbound) == Decision(7, 123, (), closed_prefix="job-9/")
    # A value written before closed_prefix existed (four elements) reads as not closed.
    old_value = msgspec.msgpack.encode([0, 7, 123, [["a", 1, 0, 2, True]]])
    assert decode_decision(old_value) == Decision(7, 123, (DecisionEntry("a", 1, 0, 2, True),))
    with pytest.raises(CorruptRecordError):
        decode_decision(b"\xc1")
