"""What a consumer reads: its assigned partitions, their positions and pause flags.

The *position* of a partition is the offset of the next record the application will see:
``poll`` advances it past what it returns, ``seek`` sets it, and a partition without one
(just assigned, or out of range) gets one from ``auto.offset.reset``. Today partitions are
assigned by the application (``assign``); consumer groups (``subscribe``, commits, rebalances)
add a second source of assignments in a later issue, and will set ``subscription`` and call
:meth:`SubscriptionState.assign_from_group` without changing how positions work.

Threads: a consumer is used from one thread; this class has no lock.

>>> state = SubscriptionState()
>>> state.assign_from_user([TopicPartition("t", 0)])
>>> state.seek(TopicPartition("t", 0), 42)
>>> state.position(TopicPartition("t", 0)), state.fetchable()
(42, [TopicPartition(topic='t', partition=0)])
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_mq.client.records import TopicPartition
from spark_mq.errors import UsageError


class PartitionState:
    """One assigned partition: position, pause flag, and the offsets its last fetch saw."""

    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "paused", "position")

    def __init__(self) -> None:
        self.position: int | None = None
        self.paused = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1


class SubscriptionState:
    """The assignment of one consumer, in assignment order."""

    def __init__(self) -> None:
        self._assignment: dict[TopicPartition, PartitionState] = {}
        #: Topics subscribed to through a consumer group (a later issue); empty today.
        self.subscription: frozenset[str] = frozenset()

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their positions."""
        new = list(dict.fromkeys(partitions))
        self._assignment = {tp: self._assignment.get(tp) or PartitionState() for tp in new}

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def partitions(self) -> list[TopicPartition]:
        return list(self._assignment)

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self._assignment[tp]
        except KeyError:
            raise UsageError(
                f"partition {tp} is not assigned to this consumer; assign() it first"
            ) from None

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._assignment

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise UsageError(f"seek({tp}, {offset}): an offset is never negative")
        self.state(tp).position = offset

    def position(self, tp: TopicPartition) -> int | None:
        return self.state(tp).position

    def reset(self, tp: TopicPartition) -> None:
        """Forget the position so that ``auto.offset.reset`` chooses a new one."""
        self.state(tp).position = None

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self._assignment.items() if s.position is None]

    def fetchable(self) -> list[TopicPartition]:
        """Assigned, not paused, with a position: what a fetch may ask for."""
        return [tp for tp, s in self._assignment.items() if not s.paused and s.position is not None]

    def pause(self, tp: TopicPartition) -> None:
        self.state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}

    def is_fetchable(self, tp: TopicPartition) -> bool:
        s = self._assignment.get(tp)
        return s is not None and not s.paused and s.position is not None
