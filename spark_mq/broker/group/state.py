"""The states of a consumer group and the moves between them (Kafka's classic protocol).

::

    Empty ──join──> PreparingRebalance ──every member joined──> CompletingRebalance
      ^                 ^        │                                 │       │
      │                 │        └──nobody left──> Empty           │       │
      │                 └──member joins/leaves/expires─────────────┘       │
      │                 └──member joins/leaves/expires─── Stable <──leader's SyncGroup
      └── (every state) ──DeleteGroups / offsets expired──> Dead

- **Empty**: no members; the group may still hold committed offsets.
- **PreparingRebalance**: waiting for every known member to (re)join, at most the rebalance
  timeout (or ``group.initial.rebalance.delay.ms`` for the first rebalance of an empty group).
- **CompletingRebalance**: the join round is over; waiting for the leader's assignment.
- **Stable**: every member has its assignment and heartbeats.
- **Dead**: the group is gone (deleted, or expired with no offsets left); a terminal state.

The names are Kafka's, which DescribeGroups and ListGroups report (``GroupState.value``).
"""

from __future__ import annotations

import enum
from typing import Final

from spark_mq.errors import UsageError


class GroupState(enum.Enum):
    """A group's state; ``value`` is Kafka's name for it."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        """The state named ``name`` (any case, as ListGroups filters), or None."""
        folded = name.strip().lower()
        for state in cls:
            if state.value.lower() == folded:
                return state
        return None


#: Where each state may go: Kafka's ``validPreviousStates``, read forwards.
TRANSITIONS: Final[dict[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.PREPARING_REBALANCE, GroupState.STABLE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset({GroupState.DEAD}),
}


def is_transition_valid(old: GroupState, new: GroupState) -> bool:
    return new in TRANSITIONS[old]


class IllegalGroupStateError(UsageError):
    """A state change the transition table does not allow: a coordinator bug."""

    def __init__(self, message: str, *, group_id: str, old: str, new: str) -> None:
        super().__init__(message)
        self.group_id = group_id
        self.old = old
        self.new = new


def check_transition(group_id: str, old: GroupState, new: GroupState) -> None:
    """Raise :class:`IllegalGroupStateError` unless ``old -> new`` is in the table."""
    if not is_transition_valid(old, new):
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[old])) or "nothing"
        raise IllegalGroupStateError(
            f"group {group_id!r} cannot go from {old.value} to {new.value} (from {old.value} it "
            f"may go to: {allowed}); this is a coordinator bug, please report it",
            group_id=group_id,
            old=old.value,
            new=new.value,
        )
