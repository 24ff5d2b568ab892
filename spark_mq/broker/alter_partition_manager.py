"""A leader's ISR changes, proposed to the controller (Kafka's AlterPartitionManager and the
ISR checks of its ReplicaManager, KIP-497).

Every ``replica.lag.time.max.ms / 2`` (as Kafka's ``isr-expiration`` task), and at once when
a follower outside the ISR catches up (:meth:`AlterPartitionManager.wake`, called by the
fetch handler), each partition this broker leads is asked for a proposal
(:meth:`~spark_mq.broker.partition.Partition.propose_isr_change`: a shrink of the followers
that lag, else an expansion by those that caught up; one proposal in flight per partition).
The proposals go in one AlterPartition request to the controller, found as
``core.membership.controller_id`` with its endpoint from its ``/brokers/ids/<id>``
registration, on a connection authenticated with AuthenticateBroker. Each answer settles its
partition (:meth:`~spark_mq.broker.partition.Partition.on_alter_partition`); a high watermark
that moves wakes the fetches and acks=all answers waiting on it. A refusal saying the leader's
view is stale (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER) whose
carried state shows another leader or leader epoch fences the leader until the controller's
next LeaderAndIsr: its waiting acks=all answers and fetches are ended with
NOT_LEADER_OR_FOLLOWER at once (one that still names it leader of its epoch just updates its
ISR and partition epoch). A request that fails whole
(no controller known, the controller moved, the connection failed) drops the proposals; the
next check proposes again.

Threads: :meth:`AlterPartitionManager.wake` and the checks run on the event loop; the
request runs on an executor thread (the connection is blocking), one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from spark_mq.broker.partition import ReplicaState
from spark_mq.client.broker_auth import authenticate_as_broker
from spark_mq.client.connection import BrokerConnection
from spark_mq.errors import ControllerMovedError, SparkMQError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterPartitionState,
)
from spark_mq.protocol.error_codes import ErrorCode

if TYPE_CHECKING:
    from spark_mq.broker.partition import Partition
    from spark_mq.broker.replica_manager import ReplicaManager
    from spark_mq.broker.zk.membership import ClusterMembership

log = logging.getLogger(__name__)

#: How long one AlterPartition may take, connection and authentication included.
REQUEST_TIMEOUT_S = 30.0


class AlterPartitionManager:
    """Proposes this broker's ISR changes to the controller (see the module docstring)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        membership: ClusterMembership,
        *,
        node_id: int,
        lag_time_max_ms: int,
        run_blocking: Callable[..., Awaitable[Any]],
        on_isr_change: Callable[[int, int], None] | None = None,
    ) -> None:
        self._replicas = replicas
        #: Told ``(old ISR size, new ISR size)`` of every change the controller accepted
        #: (the broker's ISR shrink/expand metrics).
        self._on_isr_change = on_isr_change
        self._membership = membership
        self._node_id = node_id
        self._lag_time_max_ms = lag_time_max_ms
        self._run_blocking = run_blocking
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # The connection to the controller and whom it reaches (executor thread only).
        self._conn: BrokerConnection | None = None
        self._conn_to: tuple[int, BrokerAddress] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="alter-partition")

    def wake(self) -> None:
        """A follower caught up: check now rather than at the next period."""
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._run_blocking(self._close_connection)

    async def _run(self) -> None:
        interval_s = self._lag_time_max_ms / 2 / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval_s)
            self._wake.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug in one check must not end ISR maintenance for good.
                log.exception("ISR check failed")

    async def check(self) -> None:
        """Propose the ISR changes due now and apply the controller's answers."""
        proposals: dict[tuple[str, int], tuple[Partition, AlterPartitionState]] = {}
        for part in self._replicas.leaders():
            proposal = part.propose_isr_change(self._lag_time_max_ms)
            if proposal is not None:
                proposals[(part.topic, part.index)] = (part, proposal)
        if not proposals:
            return
        states = [proposal for _, proposal in proposals.values()]
        try:
            response: AlterPartitionResponse = await self._run_blocking(self._send, states)
        except (SparkMQError, OSError) as exc:
            log.warning(
                "AlterPartition for %d partitions failed: %s; proposing again", len(states), exc
            )
            response = AlterPartitionResponse(
                int(ErrorCode.UNKNOWN_SERVER_ERROR),
                [
                    AlterPartitionResult(s.topic, s.partition, int(ErrorCode.UNKNOWN_SERVER_ERROR))
                    for s in states
                ],
            )
        answered = {(r.topic, r.partition): r for r in response.partitions}
        moved = []
        for tp, (part, proposal) in proposals.items():
            result = answered.get(tp) or AlterPartitionResult(
                tp[0], tp[1], int(ErrorCode.UNKNOWN_SERVER_ERROR)
            )
            if result.error_code:
                log.info(
                    "%s-%d: the controller refused ISR %s: %s",
                    *tp,
                    proposal.new_isr,
                    result.error_message or ErrorCode(result.error_code).name,
                )
            else:
                log.info("%s-%d: ISR is now %s", *tp, result.isr)
                if self._on_isr_change is not None:
                    self._on_isr_change(len(part.isr), len(result.isr))
            if part.on_alter_partition(proposal, result):
                moved.append(part)
            if part.state is ReplicaState.FENCED_LEADER:
                log.warning(
                    "%s-%d: stopped acting as leader until the controller's LeaderAndIsr: %s",
                    *tp,
                    part.role_description,
                )
        if moved:
            self._replicas.notify(moved)

    # -- the request (executor thread) ----------------------------------------------------

    def _controller(self) -> tuple[int, BrokerAddress]:
        controller_id = self._membership.controller_id
        if controller_id is None:
            raise ControllerMovedError("no controller is known yet; the ISR change waits")
        # Imported here: only a cluster broker reads registrations.
        from spark_mq.broker.zk.broker_registration import read_live_brokers  # noqa: PLC0415

        found = read_live_brokers(self._membership.zk).get(controller_id)
        if found is None:
            raise ControllerMovedError(f"controller {controller_id} is not registered")
        return controller_id, self._membership.inter_broker.address(found[0])

    def _send(self, states: list[AlterPartitionState]) -> AlterPartitionResponse:
        epoch = self._membership.broker_epoch
        secret = self._membership.inter_broker_secret
        if epoch is None or secret is None:
            raise ControllerMovedError("this broker is not registered; the ISR change waits")
        target = self._controller()
        if self._conn is None or not self._conn.connected or self._conn_to != target:
            self._close_connection()
            conn = self._membership.inter_broker.connection(
                target[1],
                node_id=target[0],
                client_id=f"alter-partition-{self._node_id}",
                connect_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
                request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
            )
            authenticate_as_broker(
                conn,
                broker_id=self._node_id,
                broker_epoch=epoch,
                secret=secret,
                timeout_s=REQUEST_TIMEOUT_S,
            )
            self._conn, self._conn_to = conn, target
        try:
            response: AlterPartitionResponse = self._conn.request(
                AlterPartitionRequest(self._node_id, epoch, states), timeout_s=REQUEST_TIMEOUT_S
            )
        except (SparkMQError, OSError):
            self._close_connection()
            raise
        return response

    def _close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._conn_to = None
