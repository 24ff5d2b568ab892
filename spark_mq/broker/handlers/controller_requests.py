"""LeaderAndIsr (4) and StopReplica (5): the controller tells a broker which replicas it holds
and what each is (leader or follower), or that one stops.

Each request is first checked against the broker's
:class:`~spark_mq.broker.controller_fence.ControllerFence`: a controller epoch older than one
already accepted (an ex-controller that has not noticed) or a broker epoch older than this
broker's registration (a request meant for its earlier life) refuses the request whole,
with STALE_CONTROLLER_EPOCH (11) or STALE_BROKER_EPOCH (77) in every partition, before
anything is changed. The rest is the ReplicaManager's
(:meth:`~spark_mq.broker.replica_manager.ReplicaManager.become_leader_or_follower`,
:meth:`~spark_mq.broker.replica_manager.ReplicaManager.stop_replica`: the per-partition
rules are in its module docstring), on an executor thread because it creates, closes and
deletes logs (fsyncs). The response has one entry per partition of the request, in request
order; then the fetches waiting on every partition that changed are woken, so a consumer
parked on a replica that stopped leading is answered NOT_LEADER_OR_FOLLOWER at once.

Only brokers of the cluster may send these (the dispatch table's guard refuses clients with
CLUSTER_AUTHORIZATION_FAILED), and only a cluster broker serves them: a single node has no
controller.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from spark_mq.broker.context import RequestContext, Response
from spark_mq.broker.handlers.errors import error_of
from spark_mq.broker.replica_manager import ReplicaChanges, TopicConfigSource
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.controller import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
)

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore

#: What a client refused one of these is told to do instead.
REFUSAL_HINT = (
    "Partition leadership is the controller's to decide: create topics with CreateTopics "
    "(Admin.create_topic) and find each partition's leader with Metadata."
)


def _require_cluster(core: BrokerCore, api: str) -> None:
    if not core.replicas.cluster:
        raise InvalidRequestError(
            f"{api} is the controller's request to the brokers of a cluster, and this broker "
            "is a single node (zookeeper.connect is not set); nothing was changed"
        )


def _topic_config(core: BrokerCore) -> TopicConfigSource:
    """Where the overrides of a topic new to this broker come from: ZooKeeper's
    ``/config/topics/<t>``, as in Kafka."""
    membership = core.membership
    if membership is None:
        # Only in process: a request reaches the handler over the wire only on a connection
        # authenticated with the cluster's secret, which a broker learns from its session.
        return lambda _topic: {}
    # Imported here: a single-node broker never loads kazoo.
    from spark_mq.broker.zk.partition_states import read_topic_config  # noqa: PLC0415

    zk = membership.zk
    return lambda topic: read_topic_config(zk, topic)


def _partition_errors(changes: ReplicaChanges, api: str) -> list[PartitionError]:
    out = []
    for topic, partition, error in changes.results:
        if error is None:
            out.append(PartitionError(topic, partition, 0))
        else:
            code, message = error_of(error, f"{api} for {topic}-{partition}")
            out.append(PartitionError(topic, partition, code, message))
    return out


async def handle_leader_and_isr(
    ctx: RequestContext, request: LeaderAndIsrRequest, _: memoryview
) -> Response:
    core = ctx.core
    _require_cluster(core, "LeaderAndIsr")
    core.controller_fence.check(
        request.controller_id, request.controller_epoch, request.broker_epoch, core.broker_epoch
    )
    apply = functools.partial(
        core.replicas.become_leader_or_follower, request, topic_config=_topic_config(core)
    )
    changes = await core.run_blocking(apply)
    core.replicas.notify(changes.touched)
    core.replicas.announce_leadership(changes.touched)
    return Response(LeaderAndIsrResponse(0, _partition_errors(changes, "LeaderAndIsr")))


async def handle_stop_replica(
    ctx: RequestContext, request: StopReplicaRequest, _: memoryview
) -> Response:
    core = ctx.core
    _require_cluster(core, "StopReplica")
    core.controller_fence.check(
        request.controller_id, request.controller_epoch, request.broker_epoch, core.broker_epoch
    )
    changes = await core.run_blocking(core.replicas.stop_replica, request)
    core.replicas.notify(changes.touched)
    core.replicas.announce_leadership(changes.touched)
    return Response(StopReplicaResponse(0, _partition_errors(changes, "StopReplica")))
