"""The controller's partition and replica state machines (Kafka's PartitionStateMachine and
ReplicaStateMachine), as enums with transition tables.

Partition states (the partition as a whole)::

    NonExistent -> New -> Online <-> Offline -> NonExistent (deleted)
                     \\____________^   ^ Online -> Online: a new leader or ISR

Replica states (one replica of one partition on one broker)::

    NonExistent -> New -> Online <-> Offline -> DeletionStarted -> DeletionSuccessful
                                 ^                  |                     |
                                 +-- DeletionIneligible <--+     NonExistent

The tables say which states a state may be entered *from*, as Kafka writes them. A
:class:`StateTracker` holds the current state of each partition or replica and refuses an
illegal move with :class:`StateChangeFailedError`; a batch move moves the legal ones and
reports the rest, as Kafka's controller does (it logs them and goes on).

Threads: a tracker is used only by the controller's event thread.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable, Mapping
from typing import Final, Generic, TypeVar

from spark_mq.errors import StateChangeFailedError


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"


#: target state -> the states it may be entered from.
PARTITION_VALID_PREVIOUS: Final[Mapping[PartitionState, frozenset[PartitionState]]] = {
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    PartitionState.OFFLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
}


class ReplicaState(enum.Enum):
    NON_EXISTENT = "NonExistentReplica"
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"


_R = ReplicaState
REPLICA_VALID_PREVIOUS: Final[Mapping[ReplicaState, frozenset[ReplicaState]]] = {
    _R.NEW: frozenset({_R.NON_EXISTENT}),
    _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.DELETION_STARTED: frozenset({_R.OFFLINE}),
    _R.DELETION_SUCCESSFUL: frozenset({_R.DELETION_STARTED}),
    _R.DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.DELETION_STARTED}),
    _R.NON_EXISTENT: frozenset({_R.DELETION_SUCCESSFUL}),
}

S = TypeVar("S", bound=enum.Enum)
K = TypeVar("K", bound=Hashable)


def is_transition_valid(table: Mapping[S, frozenset[S]], old: S, new: S) -> bool:
    return old in table[new]


class StateTracker(Generic[K, S]):
    """The current state of each key (a partition, or a (partition, broker) replica); keys
    never seen are in ``initial`` (NonExistent)."""

    def __init__(self, table: Mapping[S, frozenset[S]], initial: S, what: str) -> None:
        self._table: Mapping[S, frozenset[S]] = table
        self._initial: S = initial
        self._what = what
        self._states: dict[K, S] = {}

    def state(self, key: K) -> S:
        return self._states.get(key, self._initial)

    def keys_in(self, state: S) -> list[K]:
        return [k for k, s in self._states.items() if s == state]

    def move(self, key: K, new: S) -> None:
        """Move ``key`` to ``new``; :class:`StateChangeFailedError` if the table forbids it."""
        old = self.state(key)
        if not is_transition_valid(self._table, old, new):
            allowed = ", ".join(sorted(s.value for s in self._table[new]))
            raise StateChangeFailedError(
                f"{self._what} {key} cannot move from {old.value} to {new.value} (it may be "
                f"entered only from: {allowed})"
            )
        if new == self._initial:
            self._states.pop(key, None)
        else:
            self._states[key] = new

    def forget(self, key: K) -> None:
        """Drop ``key`` whatever its state: the thing it names is gone (a deleted topic's
        partitions and replicas, once their znodes are deleted)."""
        self._states.pop(key, None)

    def move_all(self, keys: Iterable[K], new: S) -> dict[K, StateChangeFailedError]:
        """Move every key that may move; return the refusals by key."""
        refused = {}
        for key in keys:
            try:
                self.move(key, new)
            except StateChangeFailedError as exc:
                refused[key] = exc
        return refused


def partition_tracker() -> StateTracker[tuple[str, int], PartitionState]:
    return StateTracker(PARTITION_VALID_PREVIOUS, PartitionState.NON_EXISTENT, "partition")


def replica_tracker() -> StateTracker[tuple[str, int, int], ReplicaState]:
    """Keys are (topic, partition, broker id)."""
    return StateTracker(REPLICA_VALID_PREVIOUS, ReplicaState.NON_EXISTENT, "replica")
