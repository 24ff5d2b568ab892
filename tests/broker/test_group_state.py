"""The group state machine: Kafka's names and transition table, illegal moves refused."""

from __future__ import annotations

import itertools

import pytest

from spark_mq.broker.group.group import Group
from spark_mq.broker.group.state import (
    TRANSITIONS,
    GroupState,
    IllegalGroupStateError,
    check_transition,
    is_transition_valid,
)

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

#: Kafka's GroupMetadata validPreviousStates, written as (from, to) pairs.
KAFKA_MOVES = {
    (P, E),
    (S, P),
    (C, P),
    (E, P),
    (P, C),
    (C, S),
    (S, D),
    (P, D),
    (C, D),
    (E, D),
    (D, D),
}


def test_state_names_are_kafkas():
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]
    assert GroupState.parse("stable") is S
    assert GroupState.parse(" PreparingRebalance ") is P
    assert GroupState.parse("Rebalancing") is None


@pytest.mark.parametrize(("old", "new"), list(itertools.product(GroupState, repeat=2)))
def test_transition_table_is_kafkas(old, new):
    assert is_transition_valid(old, new) == ((old, new) in KAFKA_MOVES)
    if (old, new) in KAFKA_MOVES:
        check_transition("g", old, new)
    else:
        with pytest.raises(IllegalGroupStateError, match=f"from {old.value} to {new.value}"):
            check_transition("g", old, new)


def test_every_state_has_an_entry():
    assert set(TRANSITIONS) == set(GroupState)


def test_group_refuses_an_illegal_move_and_keeps_its_state():
    group = Group("g", now_ms=5)
    with pytest.raises(IllegalGroupStateError) as info:
        group.transition_to(S, now_ms=10)
    assert (info.value.group_id, info.value.old, info.value.new) == ("g", "Empty", "Stable")
    assert group.state is E and group.state_timestamp_ms == 5
    group.transition_to(P, now_ms=10)
    assert group.state is P and group.state_timestamp_ms == 10
    group.transition_to(D, now_ms=11)
    with pytest.raises(IllegalGroupStateError):
        group.transition_to(E, now_ms=12)
