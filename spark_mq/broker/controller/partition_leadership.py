"""The controller's leadership writes (the ZooKeeper side of Kafka's PartitionStateMachine and
of ReplicaStateMachine's ISR shrink): pick leaders with :mod:`.leader_election`, write them
to the partition state znodes behind the controller-epoch check, update the context, and add
the LeaderAndIsr requests to the event's batch.

Every write is a compare-and-set at the partition epoch the context holds. A lost one
(BadVersion: the partition changed since we read it, e.g. a leader's ISR change) is re-read
and decided again, at most :data:`MAX_ATTEMPTS` times, as Kafka's controller retries. A
refused epoch check raises :class:`~spark_mq.errors.ControllerMovedError` from the write:
nothing of that write happened, and the controller resigns.

Runs on the controller's event thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from spark_mq.errors import StateChangeFailedError

from ..zk.client import ZkClient
from ..zk.partition_states import (
    create_partition_states,
    read_partition_state,
    update_partition_states,
)
from ..zk.znodes import NO_LEADER, PartitionState, Versioned
from .context import ControllerContext, TopicPartition
from .leader_election import initial_leader_and_isr, offline_partition_leader
from .request_batch import RequestBatch
from .state_machines import PartitionState as Phase

log = logging.getLogger(__name__)

#: Compare-and-set rounds before a partition is left for the next event.
MAX_ATTEMPTS = 3


def _live_replicas(ctx: ControllerContext, tp: TopicPartition) -> list[int]:
    return [b for b in ctx.replicas(tp) if b in ctx.live_brokers]


def _move(ctx: ControllerContext, tp: TopicPartition, phase: Phase) -> None:
    try:
        ctx.partition_states.move(tp, phase)
    except StateChangeFailedError as exc:
        log.warning("%s", exc)


def initialize_leadership(
    zk: ZkClient, ctx: ControllerContext, partitions: Iterable[TopicPartition], batch: RequestBatch
) -> None:
    """NewPartition -> OnlinePartition: create each partition's first state (the first live
    replica leads, every live replica in the ISR). A partition with no live replica stays
    New; one whose state exists already (an earlier controller made it) takes that state."""
    states: dict[TopicPartition, PartitionState] = {}
    for tp in partitions:
        try:
            states[tp] = initial_leader_and_isr(
                tp[0], tp[1], ctx.replicas(tp), ctx.eligible_ids, ctx.epoch.epoch
            )
        except StateChangeFailedError as exc:
            log.warning("%s; it stays %s", exc, Phase.NEW.value)
    if not states:
        return
    for tp, result in create_partition_states(zk, ctx.epoch, states).items():
        if isinstance(result, Exception):
            existing = read_partition_state(zk, *tp)
            if existing is None:
                log.warning("creating the state of %s-%d failed: %r", tp[0], tp[1], result)
                continue
            ctx.leadership[tp] = existing
            leader_live = existing.value.leader in ctx.live_brokers
            _move(ctx, tp, Phase.ONLINE if leader_live else Phase.OFFLINE)
        else:
            ctx.leadership[tp] = Versioned(states[tp], result)
            _move(ctx, tp, Phase.ONLINE)
        batch.add_leader_and_isr(_live_replicas(ctx, tp), tp, is_new=True)


def _reread(zk: ZkClient, ctx: ControllerContext, tps: Iterable[TopicPartition]) -> None:
    for tp in tps:
        current = read_partition_state(zk, *tp)
        if current is not None:
            ctx.leadership[tp] = current


def _write_all(
    zk: ZkClient,
    ctx: ControllerContext,
    partitions: Iterable[TopicPartition],
    decide: Callable[[TopicPartition, PartitionState], PartitionState | None],
    what: str,
) -> list[TopicPartition]:
    """Compare-and-set ``decide(tp, current)`` for each partition (None: no change), with
    re-reads after lost races; the partitions written."""
    written: list[TopicPartition] = []
    remaining = [tp for tp in partitions if tp in ctx.leadership]
    for _attempt in range(MAX_ATTEMPTS):
        updates: dict[TopicPartition, Versioned[PartitionState]] = {}
        for tp in remaining:
            current = ctx.leadership[tp]
            new = decide(tp, current.value)
            if new is not None:
                updates[tp] = Versioned(new, current.version)
        if not updates:
            break
        lost = []
        for tp, result in update_partition_states(zk, ctx.epoch, updates).items():
            if isinstance(result, Exception):
                lost.append(tp)
            else:
                ctx.leadership[tp] = Versioned(updates[tp].value, result)
                written.append(tp)
        if not lost:
            break
        log.info("%s: %d partition states changed meanwhile; reading them again", what, len(lost))
        _reread(zk, ctx, lost)
        remaining = lost
    else:
        log.warning("%s: gave up on %s after %d attempts", what, remaining, MAX_ATTEMPTS)
    return written


def write_partition_states(
    zk: ZkClient,
    ctx: ControllerContext,
    partitions: Iterable[TopicPartition],
    decide: Callable[[TopicPartition, PartitionState], PartitionState | None],
    what: str,
) -> list[TopicPartition]:
    """The compare-and-set loop of the elections here, for the other elections of the
    controller (:mod:`.controlled_shutdown`, :mod:`.preferred_election`)."""
    return _write_all(zk, ctx, partitions, decide, what)


def elect_leaders(
    zk: ZkClient,
    ctx: ControllerContext,
    partitions: Iterable[TopicPartition],
    batch: RequestBatch,
    unclean_allowed: Callable[[str], bool],
) -> None:
    """OfflinePartition -> OnlinePartition (Kafka's offline partition election): the first
    live replica in the ISR leads, in leader epoch + 1, with the ISR cut to its live members;
    failing that, and only if ``unclean_allowed(topic)``, the first live replica with an ISR
    of itself. A partition with no eligible leader stays Offline, unchanged. The context's
    ``on_leader_elected`` is told of each leader written (whether it was unclean)."""
    elected: dict[TopicPartition, bool] = {}

    def decide(tp: TopicPartition, current: PartitionState) -> PartitionState | None:
        leader, unclean = offline_partition_leader(
            ctx.replicas(tp),
            current.isr,
            ctx.eligible_ids,
            unclean_leader_election_enable=unclean_allowed(tp[0]),
        )
        if leader is None:
            log.warning(
                "partition %s-%d stays offline: no replica of %s in its ISR %s is alive "
                "(unclean.leader.election.enable is off)",
                tp[0],
                tp[1],
                list(ctx.replicas(tp)),
                list(current.isr),
            )
            return None
        elected[tp] = unclean
        isr = (leader,) if unclean else tuple(b for b in current.isr if b in ctx.live_brokers)
        return PartitionState(leader, current.leader_epoch + 1, isr, ctx.epoch.epoch)

    for tp in _write_all(zk, ctx, partitions, decide, "leader election"):
        if elected.get(tp):
            log.warning(
                "unclean leader election for %s-%d: broker %d leads though it was not in "
                "sync; records it did not have are lost",
                tp[0],
                tp[1],
                ctx.leadership[tp].value.leader,
            )
        ctx.on_leader_elected(elected.get(tp, False))
        _move(ctx, tp, Phase.ONLINE)
        batch.add_leader_and_isr(_live_replicas(ctx, tp), tp)


def remove_replicas_from_isr(
    zk: ZkClient,
    ctx: ControllerContext,
    dead: Iterable[int],
    partitions: Iterable[TopicPartition],
    batch: RequestBatch,
) -> None:
    """Kafka's removeReplicasFromIsr for replicas gone offline: each leaves the ISR of the
    partitions it was in (the last member stays, so the partition waits for it rather than
    lose what only it has), a dead leader leaves the partition leaderless, and the leader
    epoch goes up by one."""
    gone = set(dead)

    def decide(_tp: TopicPartition, current: PartitionState) -> PartitionState | None:
        if current.leader not in gone and not gone & set(current.isr):
            return None
        isr = list(current.isr)
        for broker in current.isr:
            if broker in gone and len(isr) > 1:
                isr.remove(broker)
        leader = NO_LEADER if current.leader in gone else current.leader
        return PartitionState(leader, current.leader_epoch + 1, tuple(isr), ctx.epoch.epoch)

    for tp in _write_all(zk, ctx, partitions, decide, "ISR shrink"):
        if ctx.leadership[tp].value.leader == NO_LEADER:
            _move(ctx, tp, Phase.OFFLINE)
        batch.add_leader_and_isr(_live_replicas(ctx, tp), tp)


def unclean_setting(topic_config: Mapping[str, str], default: bool) -> bool:
    """``unclean.leader.election.enable`` of a topic: its override, else the broker's."""
    value = topic_config.get("unclean.leader.election.enable")
    return default if value is None else value.strip().lower() == "true"
