"""Which ``__half_messages`` partitions this broker's half-message service serves, on a cluster.

The half messages of a producer group, and their outcomes, live in the group's partition of
``__half_messages`` (``abs(hash(group)) % partitions``, as a group's ``__consumer_offsets``
partition); the service of that partition runs on its leader. When the controller makes this
broker the leader of partition ``p`` with leader epoch ``e``
(:mod:`~spark_mq.broker.coordinator_leadership`), ``p`` starts Loading: its records are read
on an executor thread while requests for its groups answer COORDINATOR_LOAD_IN_PROGRESS;
once installed, ``p`` is Loaded and served. When the broker stops leading ``p`` its messages
are unloaded and requests for its groups answer NOT_COORDINATOR: the client finds the
coordinator again (FindCoordinator, key type 2) and follows it.

States of one partition (absent: not led here)::

    (absent) --elect--> Loading --install--> Loaded
    Loading|Loaded --resign--> (absent)
    Loading|Loaded --elect with a newer epoch--> Loading   (unloaded first)

A single node never uses this: its service owns its one partition from the start.

Threads: the event loop thread only.

    >>> p = HalfPlacement()
    >>> p.elect(3, 7), p.state_of(3)
    (True, <LoadState.LOADING: 'Loading'>)
    >>> p.install(3, 7), p.state_of(3)
    (True, <LoadState.LOADED: 'Loaded'>)
    >>> p.resign(3), p.state_of(3)
    (True, None)
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from spark_mq.broker.internal_topics import HALF_MESSAGES_TOPIC
from spark_mq.errors import CoordinatorLoadInProgressError, NotCoordinatorError


class LoadState(enum.Enum):
    LOADING = "Loading"
    LOADED = "Loaded"


#: The legal moves of a partition led here (None: not led here).
TRANSITIONS: Final[dict[LoadState | None, frozenset[LoadState | None]]] = {
    None: frozenset({LoadState.LOADING}),
    LoadState.LOADING: frozenset({LoadState.LOADED, LoadState.LOADING, None}),
    LoadState.LOADED: frozenset({LoadState.LOADING, None}),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Led:
    """A partition this broker leads: its load state and leader epoch."""

    state: LoadState
    epoch: int


class HalfPlacement:
    """The load state of every ``__half_messages`` partition this broker leads."""

    def __init__(self) -> None:
        self.led: dict[int, Led] = {}

    def _move(self, partition: int, to: Led | None) -> None:
        current = self.led.get(partition)
        before = None if current is None else current.state
        after = None if to is None else to.state
        if after not in TRANSITIONS[before]:
            raise AssertionError(f"{HALF_MESSAGES_TOPIC}-{partition}: {before} -> {after}")
        if to is None:
            self.led.pop(partition, None)
        else:
            self.led[partition] = to

    def state_of(self, partition: int) -> LoadState | None:
        led = self.led.get(partition)
        return None if led is None else led.state

    def elect(self, partition: int, epoch: int) -> bool:
        """This broker leads ``partition`` with ``epoch``; whether a load is to start
        (False: the same or an older epoch was announced already). A newer epoch reloads:
        the partition may have moved away and back, and what memory holds may be stale."""
        current = self.led.get(partition)
        if current is not None and current.epoch >= epoch:
            return False
        self._move(partition, Led(LoadState.LOADING, epoch))
        return True

    def install(self, partition: int, epoch: int) -> bool:
        """The load of ``partition`` with ``epoch`` finished: whether it is to be installed
        (False: the partition resigned or was re-elected meanwhile, the read is stale)."""
        if self.led.get(partition) != Led(LoadState.LOADING, epoch):
            return False
        self._move(partition, Led(LoadState.LOADED, epoch))
        return True

    def resign(self, partition: int) -> bool:
        """This broker no longer leads ``partition``; whether it had loaded or was loading it."""
        if partition not in self.led:
            return False
        self._move(partition, None)
        return True

    def check(self, partition: int, group: str) -> None:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (both retriable) unless this
        broker serves ``partition``, the partition of producer group ``group``."""
        led = self.led.get(partition)
        if led is None:
            raise NotCoordinatorError(
                f"producer group {group!r}: this broker does not lead its partition "
                f"{HALF_MESSAGES_TOPIC}-{partition}, so it does not serve the group's half "
                "messages; find the coordinator again (FindCoordinator, key type 2) and retry "
                "there"
            )
        if led.state is LoadState.LOADING:
            raise CoordinatorLoadInProgressError(
                f"producer group {group!r}: this broker is loading {HALF_MESSAGES_TOPIC}-"
                f"{partition} after becoming its leader (epoch {led.epoch}); retry shortly"
            )
