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

The states and their moves are :mod:`~spark_mq.broker.partition_loads`' (shared with the
transaction coordinator's placement).

A single node never uses this: its service owns its one partition from the start.

Threads: the event loop thread only.

    >>> p = HalfPlacement()
    >>> p.begin(3, 7), p.state_of(3)
    (True, <LoadState.LOADING: 'Loading'>)
    >>> p.finish(3, 7), p.state_of(3)
    (True, <LoadState.LOADED: 'Loaded'>)
    >>> p.end(3), p.state_of(3)
    (True, None)
"""

from __future__ import annotations

from spark_mq.broker.internal_topics import HALF_MESSAGES_TOPIC
from spark_mq.broker.partition_loads import PartitionLoads


class HalfPlacement(PartitionLoads):
    """The load state of every ``__half_messages`` partition this broker leads."""

    def __init__(self) -> None:
        super().__init__(HALF_MESSAGES_TOPIC)

    def check(self, partition: int, group: str) -> None:
        """NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (both retriable) unless this
        broker serves ``partition``, the partition of producer group ``group``."""
        self.require_loaded(
            partition,
            whose=f"producer group {group!r}",
            find_again="find the group's broker again (FindCoordinator, key type 2)",
        )
