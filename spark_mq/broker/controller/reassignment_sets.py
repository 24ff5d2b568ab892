"""The sets of a partition reassignment (Kafka's ReplicaAssignment, KIP-455) and the checks a
requested reassignment must pass. Pure: no ZooKeeper, no threads.

While a partition moves from its original replicas ORS to the target replicas TRS, its
assignment is the full replica set RS = TRS + (ORS - TRS), in that order (the target first,
so the preferred leader is the target's), with

- AR (adding) = RS - ORS: replicas that must be created and catch up;
- RR (removing) = RS - TRS: replicas that leave once every TRS replica is in the ISR.

ORS = RS - AR and TRS = RS - RR can always be recovered from what ZooKeeper holds
(``/brokers/topics/<t>``: ``partitions``, ``adding_replicas``, ``removing_replicas``), which
is why a new controller can carry on a reassignment its predecessor started.

Reassigning a partition that is already moving starts from its ORS, not its RS (Kafka's
``reassignTo``): the new target replaces the old one, and replicas the old one was adding
that the new one does not want are stopped. Cancelling is reassigning to ORS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from spark_mq.protocol.error_codes import ErrorCode


def _distinct(replicas: Sequence[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(replicas))


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's assignment: RS, and AR and RR while it is being reassigned."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        assert len(set(self.replicas)) == len(self.replicas), self.replicas
        assert set(self.adding) <= set(self.replicas), (self.adding, self.replicas)
        assert set(self.removing) <= set(self.replicas), (self.removing, self.replicas)
        assert not set(self.adding) & set(self.removing), (self.adding, self.removing)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def origin(self) -> tuple[int, ...]:
        """ORS: the replicas before the reassignment."""
        return tuple(b for b in self.replicas if b not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: the replicas after it."""
        return tuple(b for b in self.replicas if b not in self.removing)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """The assignment that moves this partition's ORS to ``target`` (Kafka's
        ``ReplicaAssignment.reassignTo``)."""
        origin = self.origin
        full = _distinct([*target, *origin])
        return ReplicaAssignment(
            full,
            tuple(b for b in full if b not in origin),
            tuple(b for b in full if b not in target),
        )


def check_target(
    topic: str,
    partition: int,
    target: Sequence[int] | None,
    current: ReplicaAssignment | None,
    known_brokers: Collection[int],
) -> tuple[int, str] | None:
    """Why a requested reassignment of ``topic``-``partition`` to ``target`` (None: cancel)
    is refused, as (error code, message), or None. ``current`` is the partition's
    assignment (None: the controller does not know the partition); ``known_brokers`` the
    brokers of the cluster (live, or down but holding replicas)."""
    where = f"{topic}-{partition}"
    if current is None:
        return (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"partition {where} does not exist (or its topic is being deleted); describe the "
            "topic to see its partitions",
        )
    if target is None:
        if not current.is_being_reassigned:
            return (
                ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"partition {where} is not being reassigned, so there is nothing to cancel",
            )
        return None
    if not target:
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"partition {where}: the target replica list is empty; name at least one broker",
        )
    if len(set(target)) != len(target):
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"partition {where}: the target replicas {list(target)} name a broker more than "
            "once; a broker holds at most one replica of a partition",
        )
    unknown = sorted(b for b in target if b < 0 or b not in known_brokers)
    if unknown:
        return (
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"partition {where}: the target replicas {list(target)} name brokers {unknown} "
            f"that are not in the cluster (its brokers: {sorted(known_brokers)}); a broker "
            "that is down may be named only if it holds replicas already",
        )
    return None
