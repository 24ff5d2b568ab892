"""The half-message state machine: final states are final, and the table agrees with a
reference model of RocketMQ's lifecycle over every pair of states."""

from __future__ import annotations

import itertools

from spark_mq.broker.half.state import is_final, is_transition_valid
from spark_mq.protocol.half_messages import HalfState

FINAL = {HalfState.COMMITTED, HalfState.ROLLED_BACK, HalfState.DISCARDED}


def test_every_pair_follows_the_model() -> None:
    for old, new in itertools.product(HalfState, repeat=2):
        # The model: only a pending message moves, to anything (a check keeps it pending).
        assert is_transition_valid(old, new) == (old is HalfState.PENDING), (old, new)


def test_final_states() -> None:
    assert {s for s in HalfState if is_final(s)} == FINAL
