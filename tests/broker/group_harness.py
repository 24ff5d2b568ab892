"""A group coordinator under test: an in-memory store, a clock the test moves, member ids
that count, and helpers that speak JoinGroup / SyncGroup / Heartbeat in one line each.

Nothing sleeps: :meth:`Harness.tick` moves time and runs the deadlines that came due, and
every helper checks the groups' invariants afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_mq.broker.coordinator_topic import Record
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.coordinator import GroupCoordinator, counting_member_ids
from spark_mq.broker.group.group import Group
from spark_mq.broker.group.offsets import OffsetCommit
from spark_mq.broker.group.offsets_topic import LoadedGroups
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.groups import (
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

SESSION_MS = 10_000
REBALANCE_MS = 30_000
PROTOCOLS: tuple[tuple[str, bytes], ...] = (("range", b"sub"),)


class MemoryStore:
    """Records appended, in order; ``fail`` makes the next appends raise it."""

    def __init__(self) -> None:
        self.appends: list[tuple[str, list[Record]]] = []
        self.fail: Exception | None = None

    def append(self, group_id: str, records: Sequence[Record], now_ms: int) -> None:
        if self.fail is not None:
            raise self.fail
        if records:
            self.appends.append((group_id, list(records)))

    def records(self) -> list[Record]:
        return [record for _, batch in self.appends for record in batch]

    def loaded(self) -> LoadedGroups:
        """What a broker restart would read back."""
        loaded = LoadedGroups()
        for key, value in self.records():
            loaded.apply(key, value)
        return loaded


class Answers:
    """The answers a waiting request got (it must get exactly one)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def __call__(self, response: Any) -> None:
        self.items.append(response)

    @property
    def done(self) -> bool:
        return bool(self.items)

    @property
    def one(self) -> Any:
        assert len(self.items) == 1, self.items
        return self.items[0]


class Harness:
    """A coordinator, its store and its clock."""

    def __init__(self, **config: Any) -> None:
        settings = {
            "group_initial_rebalance_delay_ms": 0,
            "group_min_session_timeout_ms": 1,
            **config,
        }
        self.config = GroupConfig(**settings)
        self.store = MemoryStore()
        self.now = 1_000_000
        self.coordinator = GroupCoordinator(
            self.config, self.store, new_member_id=counting_member_ids()
        )

    def restarted(self) -> Harness:
        """A new coordinator loaded from this one's records, at the same time."""
        other = Harness.__new__(Harness)
        other.config = self.config
        other.store = self.store
        other.now = self.now
        other.coordinator = GroupCoordinator(
            self.config, self.store, new_member_id=counting_member_ids()
        )
        other.coordinator.load(self.store.loaded(), self.now)
        return other

    # -----------------------------------------------------------------------------------------

    def group(self, group_id: str = "g") -> Group:
        return self.coordinator.groups[group_id]

    def check(self) -> None:
        for group in self.coordinator.groups.values():
            group.check_invariants()

    def tick(self, ms: int) -> None:
        self.now += ms
        self.coordinator.advance(self.now)
        self.check()

    # -----------------------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        group: str = "g",
        protocols: Sequence[tuple[str, bytes]] = PROTOCOLS,
        instance: str | None = None,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        client: str = "c",
        protocol_type: str = "consumer",
    ) -> Answers:
        answers = Answers()
        request = JoinGroupRequest(
            group,
            session_ms,
            rebalance_ms,
            member_id,
            protocol_type,
            [JoinGroupProtocol(n, m) for n, m in protocols],
            instance,
        )
        self.coordinator.join(
            request, client_id=client, client_host="/127.0.0.1", now_ms=self.now, respond=answers
        )
        self.check()
        return answers

    def new_member(self, **kw: Any) -> tuple[str, Answers]:
        """A dynamic member's first join: MEMBER_ID_REQUIRED, then the join with its id."""
        first = self.join(**kw).one
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
        return first.member_id, self.join(first.member_id, **kw)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group: str = "g",
        instance: str | None = None,
    ) -> Answers:
        answers = Answers()
        given = [SyncGroupAssignment(m, a) for m, a in (assignments or {}).items()]
        request = SyncGroupRequest(group, generation, member_id, given, instance)
        self.coordinator.sync(request, now_ms=self.now, respond=answers)
        self.check()
        return answers

    def heartbeat(
        self, member_id: str, generation: int, *, group: str = "g", instance: str | None = None
    ) -> ErrorCode:
        try:
            self.coordinator.heartbeat(
                HeartbeatRequest(group, generation, member_id, instance), now_ms=self.now
            )
        except Exception as exc:
            from spark_mq.protocol.error_codes import code_for

            return code_for(exc)
        finally:
            self.check()
        return ErrorCode.NONE

    def leave(
        self, *members: str, group: str = "g", instance: str | None = None
    ) -> LeaveGroupResponse:
        request = LeaveGroupRequest(group, [LeavingMember(m, instance) for m in members])
        response = self.coordinator.leave(request, now_ms=self.now)
        self.check()
        return response

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        *,
        group: str = "g",
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        metadata: str | None = None,
    ) -> list[Any]:
        commits = [OffsetCommit(t, p, o, -1, metadata) for (t, p), o in offsets.items()]
        result = self.coordinator.commit_offsets(
            group,
            commits,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance,
            now_ms=self.now,
        )
        self.check()
        return result

    def committed(self, group: str = "g") -> dict[tuple[str, int], int]:
        return {
            (f.topic, f.partition): f.entry.offset
            for f in self.coordinator.fetch_offsets(group)
            if f.entry is not None
        }

    # -----------------------------------------------------------------------------------------

    def stable_group(self, n: int, **kw: Any) -> list[str]:
        """``n`` dynamic members in a Stable group at generation 1; their ids, leader first,
        each assigned ``b"a-<id>"``."""
        joins = []
        for _ in range(n):
            member_id, answers = self.new_member(**kw)
            joins.append((member_id, answers))
        # With no initial delay the round completes once everyone has (re)joined, which the
        # late joiners force with a rebalance; the last round answers everyone.
        ids = [m for m, _ in joins]
        self.rejoin_all(ids, **kw)
        return ids

    def rejoin_all(self, ids: list[str], **kw: Any) -> dict[str, JoinGroupResponse]:
        """Every member in ``ids`` (re)joins; complete the round and sync; the join answers."""
        answers = {m: self.join(m, **kw) for m in ids}
        results = {m: a.items[-1] for m, a in answers.items()}
        assert all(r.error_code == 0 for r in results.values()), results
        generation = next(iter(results.values())).generation_id
        leader = next(iter(results.values())).leader
        group = kw.get("group", "g")
        syncs = {m: self.sync(m, generation, group=group) for m in ids if m != leader}
        assigned = {m: f"a-{m}".encode() for m in ids}
        syncs[leader] = self.sync(leader, generation, assigned, group=group)
        for m, s in syncs.items():
            response: SyncGroupResponse = s.one
            assert response.error_code == 0 and response.assignment == f"a-{m}".encode()
        return results
