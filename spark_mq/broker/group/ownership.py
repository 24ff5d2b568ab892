"""Which ``__consumer_offsets`` partitions this broker's group coordinator owns.

In a cluster the coordinator of a group is the leader of the group's partition of
``__consumer_offsets``. The replica manager announces each election (with the leader epoch,
the partition's *coordinator epoch*) and each resignation; the coordinator then loads the
partition's groups in the background and, once they are installed, serves them. Each
partition is in one of these states (Kafka's ``loadingPartitions`` and ``ownedPartitions``):

============  =============================  =============================================
state         a group request is answered    left by
============  =============================  =============================================
(absent)      NOT_COORDINATOR                an election: LOADING
LOADING       COORDINATOR_LOAD_IN_PROGRESS   the load finishing: OWNED; a resignation
OWNED         by the coordinator             a resignation: (absent)
============  =============================  =============================================

A re-election of the same broker with a higher epoch keeps the state and takes the new
epoch (the groups in memory are already the partition's); an election with an older epoch
than the one known is stale and ignored, as Kafka's ``maybeUpdateCoordinatorEpoch`` does.
Every load carries a token: a load that finishes after its partition resigned, or after a
newer load began, is discarded instead of installing groups nobody owns.

A single node owns every partition from the start (:meth:`PartitionOwnership.everything`)
and is never told anything.

Not thread-safe: it lives on the broker's event loop thread with the coordinator.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from spark_mq.errors import CoordinatorLoadInProgressError, NotCoordinatorError


class PartitionState(enum.Enum):
    LOADING = "Loading"
    OWNED = "Owned"


#: The transitions an election or a load may make (absence is None).
TRANSITIONS: Final[Mapping[PartitionState | None, frozenset[PartitionState | None]]] = (
    MappingProxyType(
        {
            None: frozenset({PartitionState.LOADING}),
            PartitionState.LOADING: frozenset({PartitionState.LOADING, PartitionState.OWNED, None}),
            PartitionState.OWNED: frozenset({PartitionState.OWNED, None}),
        }
    )
)


@dataclasses.dataclass(frozen=True, slots=True)
class Owned:
    """One partition's state, its coordinator epoch and the token of its current load."""

    state: PartitionState
    epoch: int
    load_token: int


class PartitionOwnership:
    """The partitions this coordinator loads or owns (see the module docstring)."""

    def __init__(self, *, owns_everything: bool = False) -> None:
        self._owns_everything = owns_everything
        self._partitions: dict[int, Owned] = {}
        self._tokens = itertools.count(1)

    @classmethod
    def everything(cls) -> PartitionOwnership:
        """A single node's: every partition is owned, always."""
        return cls(owns_everything=True)

    @property
    def owns_everything(self) -> bool:
        return self._owns_everything

    def state_of(self, partition: int) -> PartitionState | None:
        if self._owns_everything:
            return PartitionState.OWNED
        owned = self._partitions.get(partition)
        return None if owned is None else owned.state

    def epoch_of(self, partition: int) -> int | None:
        owned = self._partitions.get(partition)
        return None if owned is None else owned.epoch

    def owned(self) -> list[int]:
        return sorted(p for p, o in self._partitions.items() if o.state is PartitionState.OWNED)

    def loading(self) -> list[int]:
        return sorted(p for p, o in self._partitions.items() if o.state is PartitionState.LOADING)

    def _move(self, partition: int, target: Owned | None) -> None:
        current = self._partitions.get(partition)
        source = None if current is None else current.state
        wanted = None if target is None else target.state
        if wanted not in TRANSITIONS[source]:
            raise AssertionError(  # a bug in the coordinator, never the world's doing
                f"__consumer_offsets-{partition}: no transition {source} -> {wanted}"
            )
        if target is None:
            self._partitions.pop(partition, None)
        else:
            self._partitions[partition] = target

    # -- what the replica manager announces ------------------------------------------------

    def elect(self, partition: int, epoch: int) -> int | None:
        """This broker leads ``partition`` with ``epoch``: the token of the load to start,
        or None when there is none to start (already loading or owned: the new epoch is
        kept; a stale epoch: ignored)."""
        current = self._partitions.get(partition)
        if current is not None:
            if epoch > current.epoch:
                self._move(partition, dataclasses.replace(current, epoch=epoch))
            return None
        token = next(self._tokens)
        self._move(partition, Owned(PartitionState.LOADING, epoch, token))
        return token

    def resign(self, partition: int) -> bool:
        """This broker no longer leads ``partition``; whether it had loaded or owned it."""
        if partition not in self._partitions:
            return False
        self._move(partition, None)
        return True

    def finish_loading(self, partition: int, token: int) -> bool:
        """The load ``token`` finished: whether its groups are to be installed (the
        partition is still loading with that token; it is owned from now on)."""
        current = self._partitions.get(partition)
        if current is None or current.state is not PartitionState.LOADING:
            return False
        if current.load_token != token:
            return False
        self._move(partition, dataclasses.replace(current, state=PartitionState.OWNED))
        return True

    def is_current_load(self, partition: int, token: int) -> bool:
        current = self._partitions.get(partition)
        return (
            current is not None
            and current.state is PartitionState.LOADING
            and current.load_token == token
        )

    # -- what a group request checks --------------------------------------------------------

    def check(self, partition: int, group_id: str) -> None:
        """Raise NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (both retriable) unless
        this coordinator owns ``partition``, the partition of ``group_id``."""
        state = self.state_of(partition)
        if state is PartitionState.OWNED:
            return
        if state is PartitionState.LOADING:
            raise CoordinatorLoadInProgressError(
                f"group {group_id!r}: this broker is loading its partition "
                f"__consumer_offsets-{partition} after becoming its leader; retry shortly"
            )
        raise NotCoordinatorError(
            f"group {group_id!r}: this broker is not the leader of its partition "
            f"__consumer_offsets-{partition}, so it is not the group's coordinator; find the "
            "coordinator again (FindCoordinator) and retry there"
        )
