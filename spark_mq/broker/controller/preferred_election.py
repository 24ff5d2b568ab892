"""Elections asked for by an operator or by the clock (Kafka's ``KafkaController.
onReplicaElection`` with its ElectLeaders and auto-rebalance callers).

- **Preferred** (ElectLeaders PREFERRED, and the auto rebalance): a partition whose leader is
  not its preferred replica (the first of its assignment) moves to it, in leader epoch + 1
  with the same ISR, if the preferred replica is alive, in the ISR and not shutting down
  (:func:`~.leader_election.preferred_replica_leader`). Already led by it:
  ``ELECTION_NOT_NEEDED``; it cannot lead: ``PREFERRED_LEADER_NOT_AVAILABLE``.
- **Unclean** (ElectLeaders UNCLEAN): a partition without a live leader gets one by the
  offline election with unclean election allowed whatever the topic says
  (:func:`~.partition_leadership.elect_leaders`): the first live ISR replica, else the first
  live replica. It has a live leader: ``ELECTION_NOT_NEEDED``; no live replica:
  ``ELIGIBLE_LEADERS_NOT_AVAILABLE``.
- **Auto rebalance** (``auto.leader.rebalance.enable``): every
  ``leader.imbalance.check.interval.seconds`` the controller counts, for each broker, the
  partitions it is preferred leader of and how many of them another broker leads; when that
  share is above ``leader.imbalance.per.broker.percentage`` %, the ones whose preferred
  replica can lead get a preferred election (:func:`imbalanced_partitions`, Kafka's
  ``checkAndTriggerAutoLeaderRebalance``).

Why preferred leaders matter: topic creation spreads the first replicas over the brokers, so
leadership (and with it the produce and fetch load) is spread too; a broker that restarts
comes back leading nothing, and without an election the others keep its share.

Runs on the controller's event thread only, except :class:`AutoRebalanceTimer`, whose thread
only enqueues the event.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterable

from spark_mq.protocol.elect_leaders import (
    PREFERRED,
    UNCLEAN,
    ElectLeadersPartitionResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ReplicaElectionResult,
)
from spark_mq.protocol.error_codes import ErrorCode

from ..zk.client import ZkClient
from ..zk.znodes import PartitionState
from .context import ControllerContext, TopicPartition
from .leader_election import preferred_replica_leader
from .partition_leadership import elect_leaders, write_partition_states
from .request_batch import RequestBatch

log = logging.getLogger(__name__)

#: Per partition: (error code, message or None).
Outcome = tuple[int, str | None]


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _known(ctx: ControllerContext, tp: TopicPartition) -> bool:
    return tp in ctx.leadership and bool(ctx.replicas(tp)) and not ctx.is_being_deleted(tp)


def _unknown(tp: TopicPartition) -> Outcome:
    return (
        int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        f"{_name(tp)} is not a partition the controller knows (or its topic is being deleted)",
    )


def elect_preferred(
    zk: ZkClient,
    ctx: ControllerContext,
    partitions: Iterable[TopicPartition],
    batch: RequestBatch,
) -> dict[TopicPartition, Outcome]:
    """Preferred replica election for ``partitions`` (module docstring); the outcome of each."""
    outcomes: dict[TopicPartition, Outcome] = {}
    wanted: list[TopicPartition] = []
    for tp in dict.fromkeys(partitions):
        if not _known(ctx, tp):
            outcomes[tp] = _unknown(tp)
        elif ctx.leadership[tp].value.leader == ctx.replicas(tp)[0]:
            outcomes[tp] = (
                int(ErrorCode.ELECTION_NOT_NEEDED),
                f"{_name(tp)} is already led by its preferred replica {ctx.replicas(tp)[0]}",
            )
        else:
            wanted.append(tp)

    def decide(tp: TopicPartition, current: PartitionState) -> PartitionState | None:
        preferred = ctx.replicas(tp)[0]
        if current.leader == preferred:
            return None  # elected meanwhile (a re-read after a lost race)
        if preferred_replica_leader(ctx.replicas(tp), current.isr, ctx.eligible_ids) is None:
            return None
        return PartitionState(preferred, current.leader_epoch + 1, current.isr, ctx.epoch.epoch)

    written = set(write_partition_states(zk, ctx, wanted, decide, "preferred replica election"))
    for tp in wanted:
        state = ctx.leadership[tp].value
        preferred = ctx.replicas(tp)[0]
        if tp in written:
            ctx.on_leader_elected(False)
            outcomes[tp] = (int(ErrorCode.NONE), None)
            batch.add_leader_and_isr([b for b in ctx.replicas(tp) if b in ctx.live_brokers], tp)
            log.info("%s: preferred replica %d leads again", _name(tp), preferred)
        elif state.leader == preferred:
            outcomes[tp] = (
                int(ErrorCode.ELECTION_NOT_NEEDED),
                f"{_name(tp)} is already led by its preferred replica {preferred}",
            )
        else:
            alive = "alive" if preferred in ctx.eligible_ids else "not alive (or shutting down)"
            outcomes[tp] = (
                int(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE),
                f"{_name(tp)}: preferred replica {preferred} cannot lead: it is {alive}, and "
                f"the ISR is {list(state.isr)}; elect again once it is back in the ISR",
            )
    return outcomes


def elect_unclean(
    zk: ZkClient,
    ctx: ControllerContext,
    partitions: Iterable[TopicPartition],
    batch: RequestBatch,
) -> dict[TopicPartition, Outcome]:
    """Unclean election for the leaderless ones of ``partitions`` (module docstring)."""
    outcomes: dict[TopicPartition, Outcome] = {}
    wanted: list[TopicPartition] = []
    for tp in dict.fromkeys(partitions):
        if not _known(ctx, tp):
            outcomes[tp] = _unknown(tp)
        elif ctx.leadership[tp].value.leader in ctx.eligible_ids:
            outcomes[tp] = (
                int(ErrorCode.ELECTION_NOT_NEEDED),
                f"{_name(tp)} has a live leader, broker {ctx.leadership[tp].value.leader}",
            )
        else:
            wanted.append(tp)
    elect_leaders(zk, ctx, wanted, batch, lambda _topic: True)
    for tp in wanted:
        if ctx.leadership[tp].value.leader in ctx.eligible_ids:
            outcomes[tp] = (int(ErrorCode.NONE), None)
        else:
            outcomes[tp] = (
                int(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE),
                f"{_name(tp)}: none of its replicas {list(ctx.replicas(tp))} is alive; start "
                "one of their brokers, then elect again",
            )
    return outcomes


def elect_leaders_request(
    zk: ZkClient, ctx: ControllerContext, request: ElectLeadersRequest, batch: RequestBatch
) -> ElectLeadersResponse:
    """Serve ElectLeaders: run the election asked for, send the requests, answer per
    partition (a nil partition list means every partition)."""
    if request.election_type not in (PREFERRED, UNCLEAN):
        message = f"unknown election type {request.election_type}: 0 (PREFERRED) or 1 (UNCLEAN)"
        return ElectLeadersResponse(int(ErrorCode.INVALID_REQUEST), [], message)
    if request.topic_partitions is None:
        asked = [tp for tp in ctx.all_partitions() if not ctx.is_being_deleted(tp)]
    else:
        asked = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    elect = elect_preferred if request.election_type == PREFERRED else elect_unclean
    outcomes = elect(zk, ctx, asked, batch)
    batch.send()
    by_topic: dict[str, list[ElectLeadersPartitionResult]] = collections.defaultdict(list)
    for tp in dict.fromkeys(asked):
        code, detail = outcomes[tp]
        by_topic[tp[0]].append(ElectLeadersPartitionResult(tp[1], code, detail))
    return ElectLeadersResponse(
        0, [ReplicaElectionResult(topic, results) for topic, results in by_topic.items()]
    )


def imbalanced_partitions(ctx: ControllerContext, percentage: int) -> list[TopicPartition]:
    """The partitions an auto rebalance moves (Kafka's checkAndTriggerAutoLeaderRebalance):
    for each preferred replica B, the share of the partitions B is preferred leader of that
    another broker (or nobody) leads; when it is above ``percentage`` %, those of them whose
    preferred replica can lead now."""
    by_preferred: dict[int, list[TopicPartition]] = collections.defaultdict(list)
    for tp in ctx.all_partitions():
        if _known(ctx, tp):
            by_preferred[ctx.replicas(tp)[0]].append(tp)
    chosen: list[TopicPartition] = []
    for broker, owned in sorted(by_preferred.items()):
        elsewhere = [tp for tp in owned if ctx.leadership[tp].value.leader != broker]
        ratio = len(elsewhere) / len(owned)
        if ratio <= percentage / 100:
            continue
        log.info(
            "leader imbalance of broker %d is %.0f%% (%d of its %d preferred partitions led "
            "elsewhere), above leader.imbalance.per.broker.percentage=%d",
            broker,
            100 * ratio,
            len(elsewhere),
            len(owned),
            percentage,
        )
        chosen.extend(
            tp
            for tp in elsewhere
            if preferred_replica_leader(
                ctx.replicas(tp), ctx.leadership[tp].value.isr, ctx.eligible_ids
            )
            is not None
        )
    return chosen


class AutoRebalanceTimer:
    """Calls ``trigger()`` every ``interval_s`` on its own daemon thread until stopped (the
    controller's ``auto-leader-rebalance-task``; ``trigger`` only enqueues the event)."""

    def __init__(self, interval_s: float, trigger: Callable[[], None], name: str) -> None:
        self._interval_s = interval_s
        self._trigger = trigger
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Never blocks (it may run on the ZooKeeper event thread)."""
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self._trigger()
