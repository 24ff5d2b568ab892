"""Where one consumer stands in its group: an explicit state machine and the generation.

The classic rebalance protocol, seen from the member (Kafka's ``MemberState``)::

    UNJOINED --JoinGroup sent--> PREPARING_REBALANCE --joined--> COMPLETING_REBALANCE
        ^                              |    ^                          |      |
        |                       error  |    +-- REBALANCE_IN_PROGRESS -+      | SyncGroup ok
        +------------------------------+----------- error ---------------+    v
        +----------------- lost, left, poll timeout --------------------- STABLE
                                                                            |
                       PREPARING_REBALANCE <---- rejoin (JoinGroup sent) ---+

A *generation* is what the coordinator hands a member when it joins: the generation id, the
member id and the assignor the group chose. Every group request carries it, and the
coordinator refuses requests from an older generation (ILLEGAL_GENERATION) or a removed member
(UNKNOWN_MEMBER_ID): that is how a member that missed a rebalance finds out, and why its
commits fail instead of overwriting the new owner's progress.

>>> MemberState.UNJOINED.can_move_to(MemberState.STABLE)
False
>>> NO_GENERATION.is_valid, Generation(3, "m-1", "range").is_valid
(False, True)
"""

from __future__ import annotations

import enum
from typing import Final, NamedTuple


class MemberState(enum.Enum):
    """The member's side of the rebalance protocol (see the module docstring)."""

    #: Not in the group: never joined, left, or lost its membership.
    UNJOINED = "unjoined"
    #: JoinGroup sent, waiting for every member to join.
    PREPARING_REBALANCE = "preparing_rebalance"
    #: Joined; SyncGroup sent, waiting for the leader's assignment.
    COMPLETING_REBALANCE = "completing_rebalance"
    #: Has its assignment; heartbeats keep it in the group.
    STABLE = "stable"

    def can_move_to(self, target: MemberState) -> bool:
        return target in _TRANSITIONS[self]

    @property
    def in_rebalance(self) -> bool:
        return self in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)


_TRANSITIONS: Final[dict[MemberState, frozenset[MemberState]]] = {
    MemberState.UNJOINED: frozenset({MemberState.UNJOINED, MemberState.PREPARING_REBALANCE}),
    MemberState.PREPARING_REBALANCE: frozenset(
        {
            # MEMBER_ID_REQUIRED and retriable errors send JoinGroup again.
            MemberState.PREPARING_REBALANCE,
            MemberState.COMPLETING_REBALANCE,
            MemberState.UNJOINED,
        }
    ),
    MemberState.COMPLETING_REBALANCE: frozenset(
        {MemberState.STABLE, MemberState.PREPARING_REBALANCE, MemberState.UNJOINED}
    ),
    MemberState.STABLE: frozenset({MemberState.PREPARING_REBALANCE, MemberState.UNJOINED}),
}


class IllegalMemberTransitionError(AssertionError):
    """A state change the table does not allow: a bug in the client, never the world's."""


def checked_transition(current: MemberState, target: MemberState) -> MemberState:
    """``target`` if the table allows moving there from ``current``; raises otherwise."""
    if not current.can_move_to(target):
        raise IllegalMemberTransitionError(f"member state {current.name} -> {target.name}")
    return target


class Generation(NamedTuple):
    """What a successful JoinGroup gives a member: ``generation_id``, ``member_id`` and the
    ``protocol`` (assignor name) the group uses. ``generation_id`` -1 means none."""

    generation_id: int
    member_id: str
    protocol: str | None

    @property
    def is_valid(self) -> bool:
        return self.generation_id >= 0

    def reset(self, *, keep_member_id: bool) -> Generation:
        """No generation; the member id survives ILLEGAL_GENERATION (Kafka keeps it so the
        member rejoins as itself), not UNKNOWN_MEMBER_ID."""
        return Generation(-1, self.member_id if keep_member_id else "", None)


#: The generation of a member that has not joined (or lost its membership).
NO_GENERATION: Final = Generation(-1, "", None)


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's place in its group, as :meth:`~spark_mq.Consumer.group_metadata`
    reports it (Kafka's ``ConsumerGroupMetadata``): ``generation_id`` -1 and ``member_id``
    "" while it is not in a generation."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
