"""The controller's side of AlterPartition (KIP-497): a leader's proposed ISR, checked and
written by the controller, the only writer of partition state.

Per partition of the request, in this order:

- the partition is unknown to the controller (or its topic is being deleted):
  UNKNOWN_TOPIC_OR_PARTITION;
- the sender does not lead it: NOT_LEADER_OR_FOLLOWER;
- the request's leader epoch is not the current one: FENCED_LEADER_EPOCH (the leader is
  stale and must wait for LeaderAndIsr);
- the request's partition epoch is not the current version of the state znode:
  INVALID_UPDATE_VERSION (the state changed since the leader learned it);
- the new ISR does not hold the leader, names a broker that is not a replica, or a broker
  that is not alive: INVALID_REQUEST;
- otherwise the new ISR is written with a compare-and-set at that version behind the
  controller-epoch check (:func:`~spark_mq.broker.zk.partition_states.update_partition_states`);
  a lost race re-reads the state and answers INVALID_UPDATE_VERSION.

Every answer carries the partition's state after the request (the new one, or the current
one after a refusal) so the leader catches up. Every broker gets UpdateMetadata for the
partitions changed. A request whose broker epoch is not the sender's current registration is
refused whole with STALE_BROKER_EPOCH.

Runs on the controller's event thread only.
"""

from __future__ import annotations

import logging

from spark_mq.protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterPartitionState,
)
from spark_mq.protocol.error_codes import ErrorCode

from ..zk.client import ZkClient
from ..zk.partition_states import read_partition_state, update_partition_states
from ..zk.znodes import PartitionState, Versioned
from .context import ControllerContext, TopicPartition
from .request_batch import RequestBatch

log = logging.getLogger(__name__)


def _result(
    asked: AlterPartitionState,
    code: int,
    current: Versioned[PartitionState] | None,
    message: str | None = None,
) -> AlterPartitionResult:
    if current is None:
        return AlterPartitionResult(asked.topic, asked.partition, code, error_message=message)
    state = current.value
    return AlterPartitionResult(
        asked.topic,
        asked.partition,
        code,
        state.leader,
        state.leader_epoch,
        list(state.isr),
        current.version,
        message,
    )


def _check(
    ctx: ControllerContext, broker_id: int, asked: AlterPartitionState
) -> tuple[int, str] | None:
    """Why the proposal is refused (code, message), or None."""
    tp = (asked.topic, asked.partition)
    where = f"{asked.topic}-{asked.partition}"
    current = ctx.leadership.get(tp)
    if current is None or ctx.is_being_deleted(tp):
        return (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"{where} is not a partition the controller knows",
        )
    state = current.value
    if state.leader != broker_id:
        return (
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {broker_id} proposed an ISR for {where}, which broker {state.leader} leads",
        )
    if asked.leader_epoch != state.leader_epoch:
        return (
            ErrorCode.FENCED_LEADER_EPOCH,
            f"{where}: the proposal's leader epoch {asked.leader_epoch} is not the current "
            f"{state.leader_epoch}; wait for the controller's LeaderAndIsr",
        )
    if asked.partition_epoch != current.version:
        return (
            ErrorCode.INVALID_UPDATE_VERSION,
            f"{where}: the proposal's partition epoch {asked.partition_epoch} is not the "
            f"current {current.version}; the partition changed since the leader learned it",
        )
    replicas = set(ctx.replicas(tp))
    new = set(asked.new_isr)
    if broker_id not in new or not new <= replicas or not new <= ctx.live_ids:
        return (
            ErrorCode.INVALID_REQUEST,
            f"{where}: the proposed ISR {sorted(new)} must hold the leader {broker_id} and "
            f"only live replicas (replicas {sorted(replicas)}, live brokers "
            f"{sorted(ctx.live_ids)})",
        )
    return None


def alter_partition(
    zk: ZkClient, ctx: ControllerContext, request: AlterPartitionRequest, batch: RequestBatch
) -> AlterPartitionResponse:
    """Apply a leader's AlterPartition (rules in the module docstring)."""
    known_epoch = ctx.broker_epochs.get(request.broker_id)
    if known_epoch is None or request.broker_epoch != known_epoch:
        message = (
            f"AlterPartition from broker {request.broker_id} with broker epoch "
            f"{request.broker_epoch}, but the controller knows {known_epoch} for it"
        )
        stale = int(ErrorCode.STALE_BROKER_EPOCH)
        return AlterPartitionResponse(
            stale,
            [
                AlterPartitionResult(p.topic, p.partition, stale, error_message=message)
                for p in request.partitions
            ],
            message,
        )
    results: list[AlterPartitionResult | None] = [None] * len(request.partitions)
    updates: dict[TopicPartition, Versioned[PartitionState]] = {}
    where: dict[TopicPartition, int] = {}
    for i, asked in enumerate(request.partitions):
        tp = (asked.topic, asked.partition)
        refused = _check(ctx, request.broker_id, asked)
        if refused is not None or tp in where:
            code, message = refused or (int(ErrorCode.INVALID_REQUEST), "partition named twice")
            results[i] = _result(asked, code, ctx.leadership.get(tp), message)
            continue
        state = ctx.leadership[tp].value
        new = PartitionState(
            state.leader, state.leader_epoch, tuple(asked.new_isr), ctx.epoch.epoch
        )
        updates[tp] = Versioned(new, asked.partition_epoch)
        where[tp] = i
    written: list[TopicPartition] = []
    for tp, outcome in update_partition_states(zk, ctx.epoch, updates).items():
        asked = request.partitions[where[tp]]
        if isinstance(outcome, Exception):
            # Someone wrote the state since the context read it: answer what it is now.
            current = read_partition_state(zk, *tp)
            if current is not None:
                ctx.leadership[tp] = current
            results[where[tp]] = _result(
                asked,
                ErrorCode.INVALID_UPDATE_VERSION,
                current,
                f"{tp[0]}-{tp[1]} changed meanwhile",
            )
            continue
        ctx.leadership[tp] = Versioned(updates[tp].value, outcome)
        written.append(tp)
        results[where[tp]] = _result(asked, ErrorCode.NONE, ctx.leadership[tp])
        log.info(
            "%s-%d: ISR changed to %s by leader %d (partition epoch %d)",
            tp[0],
            tp[1],
            list(asked.new_isr),
            request.broker_id,
            outcome,
        )
    if written:
        batch.add_update_metadata(ctx.live_ids, written)
        batch.send()
    assert all(r is not None for r in results)
    return AlterPartitionResponse(0, [r for r in results if r is not None])
