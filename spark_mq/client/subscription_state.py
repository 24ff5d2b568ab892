"""What a consumer reads: its subscription, its assigned partitions, their positions and
pause flags.

Partitions come from one of two sources, never both (:class:`SubscriptionType`): the
application (``assign``: :meth:`SubscriptionState.assign_from_user`) or the consumer group
(``subscribe`` to topics or a pattern; the group's coordinator calls
:meth:`SubscriptionState.assign_from_group` after each rebalance). Partitions that stay
assigned keep their state either way, so a cooperative rebalance does not disturb them.

The *position* of a partition is the offset of the next record the application will see:
``poll`` advances it past what it returns, ``seek`` sets it. A partition without one (just
assigned, or out of range) gets one before it is fetched: a newly assigned partition of a
consumer with a ``group.id`` first from the group's committed offset
(``awaiting_committed``), otherwise, and after an out-of-range error, from
``auto.offset.reset``.

Threads: a consumer is used from one thread; this class has no lock.

>>> state = SubscriptionState()
>>> state.assign_from_user([TopicPartition("t", 0)])
>>> state.seek(TopicPartition("t", 0), 42)
>>> state.position(TopicPartition("t", 0)), state.fetchable()
(42, [TopicPartition(topic='t', partition=0)])
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable

from spark_mq.client.records import TopicPartition
from spark_mq.errors import UsageError


class SubscriptionType(enum.Enum):
    """Where the assignment comes from; ``assign`` and ``subscribe`` exclude each other."""

    NONE = "none"
    #: ``subscribe(["a", "b"])``: the group assigns partitions of these topics.
    AUTO_TOPICS = "topics"
    #: ``subscribe("re")``: the group assigns partitions of the topics matching a pattern.
    AUTO_PATTERN = "pattern"
    #: ``assign([...])``: the application chose the partitions.
    USER_ASSIGNED = "user"


class PartitionState:
    """One assigned partition: position, pause flag, and the offsets its last fetch saw.
    ``awaiting_committed``: its position should come from the group's committed offset."""

    __slots__ = (
        "awaiting_committed",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "paused",
        "position",
    )

    def __init__(self) -> None:
        self.position: int | None = None
        self.paused = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.awaiting_committed = True


def _is_internal(topic: str) -> bool:
    # Kafka's exclude.internal.topics: a pattern never matches __consumer_offsets and kin.
    return topic.startswith("__")


class SubscriptionState:
    """The subscription and the assignment of one consumer, in assignment order."""

    def __init__(self) -> None:
        self._assignment: dict[TopicPartition, PartitionState] = {}
        self.subscription_type = SubscriptionType.NONE
        #: The topics the group assigns from: those named, or those the pattern matched
        #: in the last metadata seen.
        self.subscription: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None

    # -- the subscription ----------------------------------------------------------------

    def _set_type(self, kind: SubscriptionType) -> None:
        if self.subscription_type not in (SubscriptionType.NONE, kind) and not (
            self.is_auto_subscribed
            and kind in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)
        ):
            raise UsageError(
                "assign() and subscribe() cannot be mixed on one consumer: call unsubscribe() first"
            )
        self.subscription_type = kind

    @property
    def is_auto_subscribed(self) -> bool:
        return self.subscription_type in (
            SubscriptionType.AUTO_TOPICS,
            SubscriptionType.AUTO_PATTERN,
        )

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to these topics (replacing an earlier subscription)."""
        names = frozenset(topics)
        for name in names:
            if not isinstance(name, str) or not name:
                raise UsageError(f"subscribe(): {name!r} is not a topic name")
        self._set_type(SubscriptionType.AUTO_TOPICS)
        self.pattern = None
        self.subscription = names

    def subscribe_pattern(self, pattern: re.Pattern[str]) -> None:
        """Subscribe to every topic whose whole name matches ``pattern``; the topics are
        filled in by :meth:`match_topics` from metadata."""
        self._set_type(SubscriptionType.AUTO_PATTERN)
        self.pattern = pattern
        self.subscription = frozenset()

    def match_topics(self, topics: Iterable[str]) -> bool:
        """With a pattern, subscribe to the ``topics`` it matches; returns whether that
        changed the subscription."""
        if self.pattern is None:
            return False
        matched = frozenset(t for t in topics if not _is_internal(t) and self.pattern.fullmatch(t))
        changed = matched != self.subscription
        self.subscription = matched
        return changed

    def unsubscribe(self) -> None:
        """No subscription and no assignment."""
        self.subscription_type = SubscriptionType.NONE
        self.subscription = frozenset()
        self.pattern = None
        self._assignment = {}

    # -- the assignment -------------------------------------------------------------------

    def _replace(self, partitions: Iterable[TopicPartition]) -> None:
        new = list(dict.fromkeys(partitions))
        self._assignment = {tp: self._assignment.get(tp) or PartitionState() for tp in new}

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; partitions kept keep their positions."""
        new = list(partitions)
        if self.is_auto_subscribed:
            raise UsageError("assign() on a consumer that subscribed: call unsubscribe() first")
        self.subscription_type = SubscriptionType.USER_ASSIGNED if new else SubscriptionType.NONE
        self._replace(new)

    def assign_from_group(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's assignment after a rebalance; partitions kept keep their state."""
        assert self.is_auto_subscribed, "the group assigns only to a subscribed consumer"
        self._replace(partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def partitions(self) -> list[TopicPartition]:
        return list(self._assignment)

    def all_in(self, partitions: set[TopicPartition]) -> bool:
        """Whether every assigned partition is in ``partitions``."""
        return self._assignment.keys() <= partitions

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
