"""A half message's lifecycle as an explicit state machine.

    PENDING --COMMIT--> COMMITTED
    PENDING --ROLLBACK--> ROLLED_BACK
    PENDING --last check unanswered--> DISCARDED
    PENDING --check handed out--> PENDING (the count grows)

The three end states are final: nothing leaves them, so a late or repeated end is answered
from the recorded outcome and never changes it. The states are the wire's ``HalfState``
(``protocol/half_messages.py``), which ``__half_ops`` records.

    >>> is_transition_valid(HalfState.PENDING, HalfState.COMMITTED)
    True
    >>> is_transition_valid(HalfState.ROLLED_BACK, HalfState.COMMITTED)
    False
"""

from __future__ import annotations

from typing import Final

from spark_mq.protocol.half_messages import HalfState

_TRANSITIONS: Final[dict[HalfState, frozenset[HalfState]]] = {
    HalfState.PENDING: frozenset(
        {HalfState.PENDING, HalfState.COMMITTED, HalfState.ROLLED_BACK, HalfState.DISCARDED}
    ),
    HalfState.COMMITTED: frozenset(),
    HalfState.ROLLED_BACK: frozenset(),
    HalfState.DISCARDED: frozenset(),
}


def is_transition_valid(old: HalfState, new: HalfState) -> bool:
    """Whether a half message in ``old`` may move to ``new``."""
    return new in _TRANSITIONS[old]


def is_final(state: HalfState) -> bool:
    """Whether ``state`` ends the message (no transition leaves it)."""
    return not _TRANSITIONS[state]
