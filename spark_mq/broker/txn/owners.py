"""Two-phase owners: who decides a group of prepared transactions, and what the coordinator
keeps about each.

An *owner* (a Spark sink id, a batch job, a streaming query run's scope) tags the decisions
of :mod:`~spark_mq.broker.txn.two_phase`. Its durable state is its newest decision record
(:class:`~spark_mq.broker.txn.records.Decision`, under the owner's key in
``__transaction_state``): the last committed sequence, the instance it is bound to, the
prefix it closed. Its state follows from that record, and :data:`OWNER_TRANSITIONS` says
which records may follow which; anything else raises :class:`IllegalOwnerTransitionError`
(an invariant of this module's callers, never a client's mistake)::

    from      to
    New       Active, Bound, Closed
    Active    Active, Bound, Closed      (records sequences; any instance may decide)
    Bound     Bound, Closed              (bound to one instance; never rebound)
    Closed    Closed, Dead               (its prefix is closed for good; keeps its binding)
    Dead      (nothing)                  (expired and tombstoned)

Besides the records, :class:`OwnerRegistry` holds what is kept in memory only: the closed
prefixes as an index (to refuse ids under them quickly), and each owner prefix's *activity*
(client requests for ids under it and OwnerHeartbeats), by which a Prepared transaction whose
decider went quiet is aborted. A coordinator that loads its state counts every owner as
active then.

Threads: the event loop's, as the coordinator's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from spark_mq.broker.txn.records import Decision


class OwnerState(enum.Enum):
    """A two-phase owner's state."""

    NEW = "New"
    ACTIVE = "Active"
    BOUND = "Bound"
    CLOSED = "Closed"
    DEAD = "Dead"


OWNER_TRANSITIONS: Final[dict[OwnerState, frozenset[OwnerState]]] = {
    OwnerState.NEW: frozenset({OwnerState.ACTIVE, OwnerState.BOUND, OwnerState.CLOSED}),
    OwnerState.ACTIVE: frozenset({OwnerState.ACTIVE, OwnerState.BOUND, OwnerState.CLOSED}),
    OwnerState.BOUND: frozenset({OwnerState.BOUND, OwnerState.CLOSED}),
    OwnerState.CLOSED: frozenset({OwnerState.CLOSED, OwnerState.DEAD}),
    OwnerState.DEAD: frozenset(),
}


class IllegalOwnerTransitionError(AssertionError):
    """A record that would reopen, rebind or revive an owner: a bug in the decision code,
    which must check first (it raises the client's typed errors)."""


def state_of(decision: Decision) -> OwnerState:
    """The state an owner's record puts it in."""
    if decision.closed_prefix is not None:
        return OwnerState.CLOSED
    return OwnerState.BOUND if decision.instance is not None else OwnerState.ACTIVE


@dataclasses.dataclass(frozen=True, slots=True)
class Owner:
    """One owner: its state and its newest decision record."""

    name: str
    state: OwnerState
    record: Decision

    @property
    def last_sequence(self) -> int:
        return self.record.sequence

    @property
    def instance(self) -> str | None:
        return self.record.instance

    @property
    def closed_prefix(self) -> str | None:
        return self.record.closed_prefix

    def follow(self, record: Decision) -> Owner:
        """The owner after ``record``; raises if the move breaks the table or rebinds,
        reopens or moves a closed prefix."""
        return _moved(self.name, self.state, self.instance, self.closed_prefix, record)


def _moved(
    name: str, state: OwnerState, instance: str | None, closed: str | None, record: Decision
) -> Owner:
    new = state_of(record)
    if new not in OWNER_TRANSITIONS[state]:
        raise IllegalOwnerTransitionError(
            f"owner {name!r} is {state.value} and cannot become {new.value}"
        )
    if instance is not None and record.instance != instance:
        raise IllegalOwnerTransitionError(f"owner {name!r} is bound to {instance!r}")
    if closed is not None and record.closed_prefix != closed:
        raise IllegalOwnerTransitionError(f"owner {name!r} closed {closed!r}")
    return Owner(name, new, record)


def first(name: str, record: Decision) -> Owner:
    """A new owner's first record."""
    return _moved(name, OwnerState.NEW, None, None, record)


class OwnerRegistry:
    """Every owner with a record, the closed prefixes, and the owner prefixes' activity."""

    def __init__(self) -> None:
        self._reset(-1)

    def _reset(self, loaded_ms: int) -> None:
        self._owners: dict[str, Owner] = {}
        #: Closed transactional id prefix -> the owner that closed it, and the prefixes'
        #: lengths (an id is looked up once per length, not once per closed owner).
        self._closed: dict[str, str] = {}
        self._closed_lengths: frozenset[int] = frozenset()
        #: When a client last asked something of each transactional id, and when a write
        #: task last said its owner prefix was alive (OwnerHeartbeat), in ms. The quiet-owner
        #: rule goes by these, never by the coordinator's own transitions.
        self._client_seen: dict[str, int] = {}
        self._heartbeats: dict[str, int] = {}
        self._loaded_ms = loaded_ms

    # -- records ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._owners))

    def __contains__(self, name: object) -> bool:
        return name in self._owners

    def __getitem__(self, name: str) -> Owner:
        return self._owners[name]

    def get(self, name: str) -> Owner | None:
        return self._owners.get(name)

    def last_sequence(self, name: str) -> int:
        """The newest sequence recorded for ``name`` (-1: none)."""
        owner = self._owners.get(name)
        return -1 if owner is None else owner.last_sequence

    def records(self) -> Iterable[Decision]:
        return [o.record for o in self._owners.values()]

    def after(self, name: str, record: Decision) -> Owner:
        """The owner ``name`` would be after ``record`` (checked before it is written)."""
        known = self._owners.get(name)
        return first(name, record) if known is None else known.follow(record)

    def install(self, owner: Owner) -> None:
        """Install an owner from :meth:`after` once its record is durable."""
        name = owner.name
        self._owners[name] = owner
        if owner.closed_prefix is not None:
            self._closed[owner.closed_prefix] = name
            self._closed_lengths = self._closed_lengths | {len(owner.closed_prefix)}

    def forget(self, name: str) -> None:
        """Closed -> Dead, once its tombstone is durable."""
        owner = self._owners.pop(name)
        if OwnerState.DEAD not in OWNER_TRANSITIONS[owner.state]:
            self._owners[name] = owner
            raise IllegalOwnerTransitionError(f"owner {name!r} is {owner.state.value}")
        prefix = owner.closed_prefix
        if prefix is not None and self._closed.get(prefix) == name:
            del self._closed[prefix]
            self._closed_lengths = frozenset(len(p) for p in self._closed)

    def expirable(self, now_ms: int, limit_ms: int, unfinished: Iterable[str]) -> list[str]:
        """The closed owners whose record is ``limit_ms`` old and under whose prefix no id in
        ``unfinished`` (open or still completing) lies: no attempt of them can still run.
        An owner that is not closed (a stream's sink id) is kept: its sequence guards
        against a replay."""
        pending = list(unfinished)
        return [
            name
            for name, owner in self._owners.items()
            if owner.state is OwnerState.CLOSED
            and now_ms - owner.record.timestamp_ms >= limit_ms
            and not any(tid.startswith(owner.closed_prefix or "") for tid in pending)
        ]

    def closed_prefixes(self) -> Mapping[str, str]:
        """Closed prefix -> the owner that closed it."""
        return dict(self._closed)

    def closer_of(self, transactional_id: str) -> str | None:
        """The owner that closed a prefix of ``transactional_id``, None if none did."""
        for length in self._closed_lengths:
            owner = self._closed.get(transactional_id[:length])
            if owner is not None:
                return owner
        return None

    def load(self, records: Mapping[str, Decision], now_ms: int) -> None:
        """Replace everything with the loaded records; every owner counts as active now."""
        self._reset(now_ms)
        for name, record in records.items():
            self.install(first(name, record))

    def load_more(self, records: Mapping[str, Decision], now_ms: int) -> None:
        """Add the owners of one more ``__transaction_state`` partition (a cluster broker
        became its leader); every owner counts as active now, as after :meth:`load`."""
        self._loaded_ms = max(self._loaded_ms, now_ms)
        for name, record in records.items():
            self.install(first(name, record))

    def drop(self, names: Iterable[str]) -> None:
        """Unload owners whose partition this broker no longer leads (no state change:
        their new coordinator loads them as they are)."""
        for name in names:
            owner = self._owners.pop(name, None)
            prefix = owner.closed_prefix if owner is not None else None
            if prefix is not None and self._closed.get(prefix) == name:
                del self._closed[prefix]
                self._closed_lengths = frozenset(len(p) for p in self._closed)

    # -- activity (memory only) ---------------------------------------------------------

    def client_seen(self, transactional_id: str, now_ms: int) -> None:
        self._client_seen[transactional_id] = now_ms

    def heartbeat(self, owner_prefix: str, now_ms: int) -> None:
        self._heartbeats[owner_prefix] = now_ms

    def forget_id(self, transactional_id: str) -> None:
        self._client_seen.pop(transactional_id, None)

    def expire_heartbeats(self, now_ms: int, limit_ms: int) -> None:
        for prefix, seen in list(self._heartbeats.items()):
            if now_ms - seen >= limit_ms:
                del self._heartbeats[prefix]

    def last_active(self, prefixes: Iterable[str]) -> dict[str, int]:
        """For each owner prefix, when its owner was last active (ms): a client request for
        an id under it, a heartbeat, or the load."""
        wanted = set(prefixes)
        latest = {p: max(self._loaded_ms, self._heartbeats.get(p, -1)) for p in wanted}
        if not wanted:
            return latest
        for tid, seen in self._client_seen.items():
            for prefix in wanted:
                if seen > latest[prefix] and tid.startswith(prefix):
                    latest[prefix] = seen
        return latest
