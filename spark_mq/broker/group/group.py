"""One consumer group: its state, generation, members, leader, protocol and offsets.

A :class:`Group` is plain data with the bookkeeping rules that never need the clock or the
log (who leads, which protocol wins, whether everyone has rejoined); the rebalance logic
that uses them lives in :mod:`~spark_mq.broker.group.rebalance`. Only the event loop thread
touches a group.

Invariants (checked by :meth:`Group.check_invariants` in tests):

- ``leader_id`` is a member, or None exactly when there are no members;
- ``static_members`` maps each static member's ``group_instance_id`` to its member id, and
  nothing else;
- an Empty or Dead group has no members; a member waits in SyncGroup only while the group
  is CompletingRebalance or Stable, and in JoinGroup only while it is PreparingRebalance.
"""

from __future__ import annotations

from collections import Counter

from spark_mq.broker.group.member import Member
from spark_mq.broker.group.records import (
    GroupRecord,
    MemberRecord,
    OffsetEntry,
    TopicPartitionKey,
    encode_group_value,
)
from spark_mq.broker.group.state import GroupState, check_transition
from spark_mq.broker.group.subscriptions import subscribed_topics
from spark_mq.protocol.groups import JoinGroupMember


class Group:
    """A group's membership and committed offsets."""

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        #: When the group entered its current state (offsets of an Empty group expire from
        #: the moment it became empty).
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        #: Set by the first member to join (the consumer's "consumer"); kept while the group
        #: is empty. None for a group that only ever committed offsets.
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        #: Members in the order they joined (the next leader is the oldest member).
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        #: Member ids handed out with MEMBER_ID_REQUIRED, not joined yet.
        self.pending_members: set[str] = set()
        #: Members of this generation that have not sent SyncGroup yet.
        self.pending_sync: set[str] = set()
        #: While the first rebalance of an empty group waits (group.initial.rebalance.delay.ms):
        #: how much of the rebalance timeout is left to extend it by, and whether a member
        #: joined since the wait started.
        self.initial_delay_remaining_ms: int | None = None
        self.new_member_added = False
        self.offsets: dict[TopicPartitionKey, OffsetEntry] = {}
        #: The hook for transactional offset commits (issue 6): offsets a transaction
        #: committed, by producer id, invisible to OffsetFetch until the transaction commits
        #: (``offsets.OffsetManager.complete_transaction``).
        self.pending_txn_offsets: dict[int, dict[TopicPartitionKey, OffsetEntry]] = {}

    # -----------------------------------------------------------------------------------------
    # State

    def transition_to(self, new: GroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, new)
        self.state = new
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def can_rebalance(self) -> bool:
        return self.state in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
        )

    # -----------------------------------------------------------------------------------------
    # Members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def size(self) -> int:
        """Members plus ids handed out and not joined yet (what ``group.max.size`` bounds)."""
        return len(self.members) + len(self.pending_members)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """Whether ``group_instance_id`` now belongs to another member id than ``member_id``."""
        current = self.static_member_id(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> Member:
        """Give the static member ``old_id`` the id ``new_id``, keeping its place (and its
        leadership). Returns the member, renamed."""
        old_members = self.members
        member = old_members[old_id]
        member.member_id = new_id
        self.members = {(new_id if k == old_id else k): v for k, v in old_members.items()}
        self.static_members[group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    # -----------------------------------------------------------------------------------------
    # Join rounds

    @property
    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members (how long a join round may wait)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else make the first rejoined member leader; False
        if no member has rejoined."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -----------------------------------------------------------------------------------------
    # Protocols

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member offering ``names`` of ``protocol_type`` may join: an empty group
        takes any non-empty offer; otherwise the type must match and at least one of the
        names must be supported by every current member."""
        if not protocol_type or not names:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self.candidate_protocols() & set(names))

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        common = set(first.protocol_names())
        for member in members:
            common &= set(member.protocol_names())
        return common

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred candidate, the most votes
        win. Ties go to the candidate the leader prefers, so the result never depends on
        dictionary order."""
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id}: members share no protocol"
        votes = Counter(m.vote(sorted(candidates)) for m in self.members.values())
        best = max(votes.values())
        tied = {name for name, n in votes.items() if n == best}
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name in leader.protocol_names():
            if name in tied:
                return name
        return min(tied)

    def subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members subscribe to, decoded from their metadata for the group's
        protocol (KIP-496); None when unknown (not a consumer group, no protocol chosen yet,
        or a member's metadata does not decode)."""
        if self.protocol_name is None or not self.members:
            return None
        return subscribed_topics(
            self.protocol_type,
            (m.metadata_for(self.protocol_name) for m in self.members.values()),
        )

    def member_metadata(self) -> list[JoinGroupMember]:
        """Every member's metadata for the group's protocol (the leader's JoinGroup answer)."""
        return [
            JoinGroupMember(m.member_id, m.metadata_for(self.protocol_name), m.group_instance_id)
            for m in self.members.values()
        ]

    # -----------------------------------------------------------------------------------------
    # Persistence (records.py has the format)

    def to_record(self) -> GroupRecord:
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation_id=self.generation_id,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            state_timestamp_ms=self.state_timestamp_ms,
            members=[
                MemberRecord(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(self.protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ],
        )

    def to_record_value(self) -> bytes:
        return encode_group_value(self.to_record())

    @classmethod
    def from_record(cls, group_id: str, record: GroupRecord, now_ms: int) -> Group:
        """A group as its last metadata record left it: Stable with its members (who keep
        their assignments; sessions restart at ``now_ms``), or Empty since the record's
        ``state_timestamp_ms``."""
        group = cls(group_id, now_ms)
        group.generation_id = record.generation_id
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol_name
        for m in record.members:
            protocols = [(record.protocol_name, m.subscription)] if record.protocol_name else []
            group.add(
                Member(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=record.protocol_type,
                    protocols=protocols,
                    assignment=m.assignment,
                )
            )
        if record.leader_id in group.members:
            group.leader_id = record.leader_id
        if group.members and group.protocol_name is not None:
            group.state = GroupState.STABLE
        else:
            # Members without a protocol cannot be: the record was written as the group
            # emptied. Start empty; members rejoin.
            group.members.clear()
            group.static_members.clear()
            group.leader_id = None
            group.protocol_name = None
            group.state_timestamp_ms = record.state_timestamp_ms
        return group

    # -----------------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Assert the invariants of the module docstring (tests call this after each step)."""
        assert (self.leader_id is None) == (not self.members), (self.leader_id, self.members)
        assert self.leader_id is None or self.leader_id in self.members
        statics = {
            m.group_instance_id: m.member_id
            for m in self.members.values()
            if m.group_instance_id is not None
        }
        assert statics == self.static_members, (statics, self.static_members)
        assert all(k == m.member_id for k, m in self.members.items())
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            assert not self.members, self.state
        for member in self.members.values():
            if member.awaiting_join:
                assert self.state is GroupState.PREPARING_REBALANCE, self.state
            if member.awaiting_sync:
                assert self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
        assert self.pending_sync <= set(self.members)

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
            f"members={list(self.members)}, leader={self.leader_id})"
        )
