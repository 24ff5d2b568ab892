"""Partition reassignment on the controller (Kafka's ZooKeeper-mode
``KafkaController.onPartitionReassignment``, driven by KIP-455's AlterPartitionReassignments):
move a partition from its replicas ORS to target replicas TRS without ever holding fewer
in-sync copies of its data than before. The sets are in :mod:`.reassignment_sets`.

1. **Start** (an AlterPartitionReassignments event): check each request; write RS = TRS +
   ORS with AR and RR to ``/brokers/topics/<t>`` (ZooKeeper first, so a new controller can
   carry on); put RS in the context; stop replicas an earlier target was adding that the new
   one does not want.
2. **Move** (TRS not yet all in the ISR): write the partition state with leader epoch + 1
   and send LeaderAndIsr, with RS as the replicas, to every live replica of RS: the new
   replicas (AR) create their logs and fetch from the leader, which adds each to the ISR
   through AlterPartition once it has caught up. A new replica on a broker that is down
   starts when the broker comes back (its FULL LeaderAndIsr lists the partition).
3. **Finish** (every TRS replica in the ISR; checked after every ISR change the controller
   accepts, and at once at the start): one partition state write with leader epoch + 1, the
   ISR cut to TRS and, if the leader is leaving (in RR) or dead, the first live TRS replica
   of the ISR as leader; LeaderAndIsr with TRS as the replicas to TRS; StopReplica with
   deletion to RR; then TRS as the assignment in ``/brokers/topics/<t>`` (last, as Kafka:
   until then ZooKeeper still says where the data was). UpdateMetadata to every broker.

Until step 3 the ISR keeps every ORS replica that was in it, and step 3 only drops RR once
all of TRS is in sync: the partition never has fewer in-sync replicas than it had.

**Cancelling** (a null target) reassigns to ORS: the adding replicas are stopped and
deleted and ORS is written back. **Failover**: a new controller reads AR and RR with the
assignments at Startup and carries on with step 2 or 3 for each.

Runs on the controller's event thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping

from kazoo.client import TransactionRequest

from spark_mq.errors import CorruptZnodeError, StateChangeFailedError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.reassignment import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)

from ..zk import znodes
from ..zk.client import ZkClient
from ..zk.controller_election import checked_commit
from ..zk.partition_states import read_partition_state, update_partition_states
from ..zk.znodes import NO_LEADER, PartitionState, TopicAssignment, Versioned
from .context import ControllerContext, TopicPartition
from .partition_leadership import MAX_ATTEMPTS
from .reassignment_sets import ReplicaAssignment, check_target
from .request_batch import RequestBatch
from .state_machines import PartitionState as PartitionPhase
from .state_machines import ReplicaState

log = logging.getLogger(__name__)


def full_assignment(ctx: ControllerContext, tp: TopicPartition) -> ReplicaAssignment | None:
    """The partition's RS with AR and RR (None: unknown, or its topic is being deleted)."""
    if tp in ctx.reassignments:
        return ctx.reassignments[tp]
    replicas = ctx.replicas(tp)
    if not replicas or ctx.is_being_deleted(tp):
        return None
    return ReplicaAssignment(replicas)


def known_brokers(ctx: ControllerContext) -> set[int]:
    """The brokers a reassignment may name: the live ones, and those that are down but hold
    replicas (members of the cluster under maintenance; ZooKeeper keeps no other record of
    a broker that is down)."""
    hosting = {b for topic in ctx.assignments.values() for rs in topic.values() for b in rs}
    return ctx.live_ids | hosting


def record_reassignments(ctx: ControllerContext, topic: str, assignment: TopicAssignment) -> None:
    """Take the reassignments in progress of ``topic`` from its znode (controller Startup)."""
    for p, replicas in assignment.partitions.items():
        adding = assignment.adding.get(p, ())
        removing = assignment.removing.get(p, ())
        if not (adding or removing):
            continue
        # Checked here, not by ReplicaAssignment's assertions: this is ZooKeeper's data.
        if not set(adding) | set(removing) <= set(replicas) or set(adding) & set(removing):
            raise CorruptZnodeError(
                f"znode {znodes.topic_path(topic)}: partition {p}'s adding {list(adding)} "
                f"and removing {list(removing)} replicas do not fit its replicas "
                f"{list(replicas)} (they must be distinct members of it)",
                path=znodes.topic_path(topic),
            )
        ctx.reassignments[(topic, p)] = ReplicaAssignment(replicas, adding, removing)


# ---------------------------------------------------------------------------------------------
# ZooKeeper writes


def _write_topic(
    zk: ZkClient, ctx: ControllerContext, topic: str, changes: Mapping[int, ReplicaAssignment]
) -> None:
    """Write ``changes`` into ``/brokers/topics/<topic>``: a compare-and-set of the znode as
    just read behind the controller-epoch check, so partitions an admin added meanwhile are
    kept (a lost race is read and written again)."""
    path = znodes.topic_path(topic)
    for _attempt in range(MAX_ATTEMPTS):
        found = zk.get(path)
        if found is None:
            raise StateChangeFailedError(f"topic {topic} was deleted during its reassignment")
        data, stat = found
        current = TopicAssignment.decode(topic, data)
        partitions = dict(current.partitions)
        adding = dict(current.adding)
        removing = dict(current.removing)
        for p, a in changes.items():
            partitions[p] = a.replicas
            for field, value in ((adding, a.adding), (removing, a.removing)):
                if value:
                    field[p] = value
                else:
                    field.pop(p, None)
        new = TopicAssignment(partitions, adding, removing, current.topic_id).encode()

        def add(txn: TransactionRequest, new: bytes = new, version: int = stat.version) -> None:
            txn.set_data(path, new, version)

        result = checked_commit(zk, ctx.epoch, add, f"writing the assignment of topic {topic}")
        if not isinstance(result[0], Exception):
            return
    raise StateChangeFailedError(
        f"the assignment of topic {topic} kept changing; {MAX_ATTEMPTS} writes were lost"
    )


def _write_state(
    zk: ZkClient, ctx: ControllerContext, tp: TopicPartition, new: PartitionState
) -> bool:
    """Compare-and-set ``new`` at the partition epoch the context holds; on a lost race the
    state is read again and the caller decides again. Whether it was written."""
    current = ctx.leadership[tp]
    result = update_partition_states(zk, ctx.epoch, {tp: Versioned(new, current.version)})[tp]
    if isinstance(result, Exception):
        fresh = read_partition_state(zk, *tp)
        if fresh is not None:
            ctx.leadership[tp] = fresh
        return False
    ctx.leadership[tp] = Versioned(new, result)
    return True


# ---------------------------------------------------------------------------------------------
# The steps


def _move_replicas(ctx: ControllerContext, tp: TopicPartition, brokers: Iterable[int]) -> None:
    """New replicas: NewReplica, then Online (or Offline on a broker that is down)."""
    for broker in brokers:
        key = (tp[0], tp[1], broker)
        if ctx.replica_states.state(key) is ReplicaState.NON_EXISTENT:
            ctx.replica_states.move(key, ReplicaState.NEW)
        live = broker in ctx.live_brokers
        ctx.replica_states.move_all([key], ReplicaState.ONLINE if live else ReplicaState.OFFLINE)


def _delete_replicas(
    ctx: ControllerContext, tp: TopicPartition, brokers: Collection[int], batch: RequestBatch
) -> None:
    """Replicas leaving the partition: Offline, deletion started (StopReplica with
    deletion to the live ones), then forgotten. A broker that is down gets no request: when
    it comes back its FULL LeaderAndIsr no longer lists the partition and it sets the
    replica aside as stray."""
    if not brokers:
        return
    batch.add_stop_replica(
        sorted(b for b in brokers if b in ctx.live_brokers), tp, delete_partition=True
    )
    for broker in brokers:
        key = (tp[0], tp[1], broker)
        ctx.replica_states.move_all([key], ReplicaState.OFFLINE)
        ctx.replica_states.move_all([key], ReplicaState.DELETION_STARTED)
        ctx.replica_states.forget(key)


def _leader_for(
    ctx: ControllerContext, state: PartitionState, eligible: tuple[int, ...], isr: Collection[int]
) -> int | None:
    """The current leader if it stays eligible and alive, else the first live eligible
    replica of the ISR (Kafka's ReassignPartitionLeaderElection); None if there is none."""
    if state.leader in eligible and state.leader in ctx.live_brokers:
        return state.leader
    return next((b for b in eligible if b in ctx.live_brokers and b in isr), None)


def advance(
    zk: ZkClient,
    ctx: ControllerContext,
    tp: TopicPartition,
    batch: RequestBatch,
    stopped: Collection[int] = (),
) -> bool:
    """Step 2 or 3 of the module docstring for ``tp``, whose RS, AR and RR are in the
    context and in ZooKeeper. ``stopped``: adding replicas of an earlier target that leave
    now. Whether the reassignment finished."""
    assignment = full_assignment(ctx, tp)
    if assignment is None or tp not in ctx.leadership:
        return False  # no state yet: the partition's first leader election will send it all
    gone = set(stopped)
    for _attempt in range(MAX_ATTEMPTS):
        state = ctx.leadership[tp].value
        isr = [b for b in state.isr if b not in gone]
        target = assignment.target
        done = set(target) <= set(isr)
        if done:
            leader = _leader_for(ctx, state, target, isr)
        elif state.leader in gone:
            # An earlier target's replica leads and leaves: another live in-sync one leads.
            leader = _leader_for(ctx, state, assignment.replicas, isr)
        else:
            # Moving does not elect: an offline partition waits for the usual election.
            leader = state.leader
        if done and leader is None:
            log.warning(
                "reassignment of %s-%d waits: its target replicas %s are in the ISR but none "
                "is alive to lead",
                tp[0],
                tp[1],
                list(target),
            )
            done, leader = False, state.leader
        if done:
            isr = [b for b in isr if b in target]
        if not isr:
            isr = list(state.isr)  # the last member stays, as in an ISR shrink
        new = PartitionState(
            NO_LEADER if leader is None else leader,
            state.leader_epoch + 1,
            tuple(isr),
            ctx.epoch.epoch,
        )
        if _write_state(zk, ctx, tp, new):
            break
    else:
        log.warning("reassignment of %s-%d: the partition state kept changing", *tp)
        return False
    if new.leader != NO_LEADER:
        ctx.partition_states.move_all([tp], PartitionPhase.ONLINE)
        if new.leader != state.leader:
            ctx.on_leader_elected(False)  # the leaving leader handed over to a target replica
    _move_replicas(ctx, tp, assignment.adding)
    if not done:
        batch.add_leader_and_isr([b for b in assignment.replicas if b in ctx.live_brokers], tp)
        batch.add_leader_and_isr(
            [b for b in assignment.adding if b in ctx.live_brokers], tp, is_new=True
        )
        _delete_replicas(ctx, tp, gone, batch)
        return False
    final = ReplicaAssignment(assignment.target)
    ctx.assignments[tp[0]][tp[1]] = final.replicas
    ctx.reassignments.pop(tp, None)
    batch.add_leader_and_isr([b for b in final.replicas if b in ctx.live_brokers], tp)
    _delete_replicas(ctx, tp, gone | set(assignment.removing), batch)
    _write_topic(zk, ctx, tp[0], {tp[1]: final})
    log.info(
        "reassignment of %s-%d finished: replicas %s (leader %d, leader epoch %d)",
        tp[0],
        tp[1],
        list(final.replicas),
        ctx.leadership[tp].value.leader,
        ctx.leadership[tp].value.leader_epoch,
    )
    return True


def alter_partition_reassignments(
    zk: ZkClient,
    ctx: ControllerContext,
    request: AlterPartitionReassignmentsRequest,
    batch: RequestBatch,
) -> AlterPartitionReassignmentsResponse:
    """Step 1 for every partition of the request, then step 2 or 3 for each started."""
    codes: dict[TopicPartition, tuple[int, str | None]] = {}
    started: dict[TopicPartition, tuple[ReplicaAssignment, ReplicaAssignment]] = {}
    brokers = known_brokers(ctx)
    for topic in request.topics:
        for asked in topic.partitions:
            tp = (topic.name, asked.partition_index)
            if tp in codes or tp in started:
                codes[tp] = (ErrorCode.INVALID_REQUEST, f"{tp[0]}-{tp[1]} is named twice")
                started.pop(tp, None)
                continue
            current = full_assignment(ctx, tp)
            refused = check_target(tp[0], tp[1], asked.replicas, current, brokers)
            if refused is not None:
                codes[tp] = refused
                continue
            assert current is not None
            target = current.origin if asked.replicas is None else asked.replicas
            started[tp] = (current, current.reassign_to(target))
    by_topic: dict[str, dict[int, ReplicaAssignment]] = {}
    for tp, (_old, new) in started.items():
        by_topic.setdefault(tp[0], {})[tp[1]] = new
    for name, changes in sorted(by_topic.items()):
        try:
            _write_topic(zk, ctx, name, changes)
        except StateChangeFailedError as exc:
            for p in changes:
                codes[(name, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc))
                started.pop((name, p))
    for tp, (old, new) in sorted(started.items()):
        ctx.assignments[tp[0]][tp[1]] = new.replicas
        if new.is_being_reassigned:
            ctx.reassignments[tp] = new
        else:
            ctx.reassignments.pop(tp, None)
        log.info(
            "reassignment of %s-%d %s: replicas %s, adding %s, removing %s",
            tp[0],
            tp[1],
            "cancelled"
            if new == ReplicaAssignment(old.origin) and old.is_being_reassigned
            else "started",
            list(new.replicas),
            list(new.adding),
            list(new.removing),
        )
        advance(zk, ctx, tp, batch, set(old.adding) - set(new.target))
        codes[tp] = (ErrorCode.NONE, None)
    batch.send()
    responses = []
    for topic in request.topics:
        parts = [
            ReassignablePartitionResponse(
                p.partition_index, *codes[(topic.name, p.partition_index)]
            )
            for p in topic.partitions
        ]
        responses.append(ReassignableTopicResponse(topic.name, parts))
    return AlterPartitionReassignmentsResponse(ErrorCode.NONE, responses)


def on_isr_change(
    zk: ZkClient, ctx: ControllerContext, partitions: Iterable[TopicPartition], batch: RequestBatch
) -> None:
    """After the controller accepted ISR changes: finish the reassignments whose target
    replicas are now all in sync."""
    for tp in partitions:
        assignment = ctx.reassignments.get(tp)
        current = ctx.leadership.get(tp)
        in_sync = current is not None and set(current.value.isr)
        if assignment is not None and in_sync and set(assignment.target) <= in_sync:
            advance(zk, ctx, tp, batch)
    batch.send()


def resume(zk: ZkClient, ctx: ControllerContext, batch: RequestBatch) -> None:
    """Controller Startup: carry on every reassignment ZooKeeper holds."""
    for tp in sorted(ctx.reassignments):
        log.info("resuming the reassignment of %s-%d: %s", tp[0], tp[1], ctx.reassignments[tp])
        advance(zk, ctx, tp, batch)
    batch.send()


def list_partition_reassignments(
    ctx: ControllerContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    """The reassignments in progress (of the partitions asked, or all)."""
    if request.topics is None:
        wanted = sorted(ctx.reassignments)
    else:
        wanted = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    by_topic: dict[str, list[OngoingPartitionReassignment]] = {}
    for tp in wanted:
        a = ctx.reassignments.get(tp)
        if a is not None:
            by_topic.setdefault(tp[0], []).append(
                OngoingPartitionReassignment(
                    tp[1], list(a.replicas), list(a.adding), list(a.removing)
                )
            )
    topics = [OngoingTopicReassignment(name, parts) for name, parts in sorted(by_topic.items())]
    return ListPartitionReassignmentsResponse(ErrorCode.NONE, topics)
