"""The load state of the coordinator-topic partitions a cluster broker leads, shared by the
services that live on those leaders: the transaction coordinator (``__transaction_state``,
:mod:`~spark_mq.broker.txn.placement`) and the half-message service (``__half_messages``,
:mod:`~spark_mq.broker.half.placement`).

When the controller makes this broker the leader of partition ``p`` with leader epoch ``e``
(:mod:`~spark_mq.broker.coordinator_leadership`), ``p`` starts Loading: the service reads it
on an executor thread while requests for its keys answer COORDINATOR_LOAD_IN_PROGRESS; once
the read is installed, ``p`` is Loaded and served. When the broker stops leading ``p`` the
service unloads it and requests for its keys answer NOT_COORDINATOR. States of one partition
(absent: not led here)::

    (absent) --begin--> Loading --finish--> Loaded
    Loading|Loaded --end--> (absent)
    Loading|Loaded --begin with a newer epoch--> Loading   (the service unloads first)

A newer epoch reloads, as Kafka's coordinators do: the partition may have moved away and
back, and what memory holds may be stale. A read that finishes after its partition resigned
or was re-elected is stale and not installed (:meth:`PartitionLoads.finish` says so).

Threads: the event loop thread only.

    >>> loads = PartitionLoads("__half_messages")
    >>> loads.begin(3, 7), loads.state_of(3)
    (True, <LoadState.LOADING: 'Loading'>)
    >>> loads.begin(3, 7)  # the same epoch announced again: nothing to do
    False
    >>> loads.finish(3, 7), loads.state_of(3)
    (True, <LoadState.LOADED: 'Loaded'>)
    >>> loads.end(3), loads.state_of(3)
    (True, None)
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

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
    """A partition this broker leads: its load state and leader epoch (the coordinator
    epoch)."""

    state: LoadState
    epoch: int


class PartitionLoads:
    """The load state of every partition of ``topic`` this broker leads."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.led: dict[int, Led] = {}

    def _move(self, partition: int, to: Led | None) -> None:
        current = self.led.get(partition)
        before = None if current is None else current.state
        after = None if to is None else to.state
        if after not in TRANSITIONS[before]:
            # A bug in the service, never the world's doing.
            raise AssertionError(f"{self.topic}-{partition}: {before} -> {after}")
        if to is None:
            self.led.pop(partition, None)
        else:
            self.led[partition] = to

    def state_of(self, partition: int) -> LoadState | None:
        led = self.led.get(partition)
        return None if led is None else led.state

    def loaded(self, partition: int) -> bool:
        return self.state_of(partition) is LoadState.LOADED

    def begin(self, partition: int, epoch: int) -> bool:
        """This broker leads ``partition`` with ``epoch``: whether a load is to start (False:
        the same or an older epoch was announced already). The caller unloads first when the
        partition was led here already (:meth:`state_of` is not None)."""
        current = self.led.get(partition)
        if current is not None and current.epoch >= epoch:
            return False
        self._move(partition, Led(LoadState.LOADING, epoch))
        return True

    def finish(self, partition: int, epoch: int) -> bool:
        """The load of ``partition`` with ``epoch`` finished: whether it is to be installed
        (False: the partition resigned or was re-elected meanwhile, the read is stale)."""
        if self.led.get(partition) != Led(LoadState.LOADING, epoch):
            return False
        self._move(partition, Led(LoadState.LOADED, epoch))
        return True

    def end(self, partition: int) -> bool:
        """This broker no longer leads ``partition``; whether it was loading or had loaded it."""
        if partition not in self.led:
            return False
        self._move(partition, None)
        return True

    def require_loaded(self, partition: int, *, whose: str, find_again: str) -> None:
        """Raise NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (both retriable) unless
        ``partition`` is Loaded here. ``whose`` names what the request is about (``producer
        group 'g'``), ``find_again`` how the client finds the right broker."""
        led = self.led.get(partition)
        if led is None:
            raise NotCoordinatorError(
                f"{whose}: this broker does not lead its partition {self.topic}-{partition}; "
                f"{find_again} and retry there"
            )
        if led.state is LoadState.LOADING:
            raise CoordinatorLoadInProgressError(
                f"{whose}: this broker is loading {self.topic}-{partition} after becoming its "
                f"leader (coordinator epoch {led.epoch}); retry shortly"
            )
