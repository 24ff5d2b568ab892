"""The controller's requests to brokers, and a broker's to the controller: LeaderAndIsr (4),
StopReplica (5), UpdateMetadata (6), ControlledShutdown (7), AlterPartition (56), and
AuthenticateBroker (1009), with which a broker proves on a connection that it belongs to the
cluster before it sends any of them.

These are Kafka's ZooKeeper-era inter-broker APIs, field for field where the field means the
same here (Kafka's camelCase names in snake case). Every request from the controller carries
the epochs that fence a stale sender:

- ``controller_epoch``: the value of ``/controller_epoch`` when the sender won the election.
  A broker that has seen a newer one refuses the request whole with
  ``STALE_CONTROLLER_EPOCH`` (11) and changes nothing: the sender is an ex-controller that
  has not noticed yet (paused, partitioned, or its ZooKeeper session expired).
- ``broker_epoch``: the receiving broker's epoch as the controller knows it (the czxid of its
  ``/brokers/ids/<id>`` znode). A broker refuses one older than its own registration with
  ``STALE_BROKER_EPOCH`` (77): the request was meant for an earlier life of this broker.
  -1 skips the check (a request built before the broker registered).
- per partition ``leader_epoch``: a broker applies a partition state only if its leader epoch
  is newer than the one it has (equal is accepted for the ISR-only changes the controller
  sends with the same epoch, as Kafka does); an older one is answered
  ``FENCED_LEADER_EPOCH`` (74) for that partition.

``partition_epoch`` is Kafka's ``zkVersion``: the version of the partition's state znode, the
compare-and-set token of every ISR change (AlterPartition's ``partition_epoch``).

Only brokers of the cluster may send these; a client's attempt is refused with
``CLUSTER_AUTHORIZATION_FAILED`` (see ``api.INTER_BROKER_APIS`` and docs/protocol.md). A
connection becomes a broker's with AuthenticateBroker: the sender shows the cluster's
inter-broker secret, which every broker reads from ZooKeeper (``/spark_mq/inter_broker_secret``,
made by the first broker of the cluster, like ``/cluster/id``). Anyone who can read
ZooKeeper can act as a broker, which is Kafka's ZooKeeper-era trust boundary too; on a
PLAINTEXT listener the secret crosses the network in the clear, as a SASL/PLAIN password
does (TLS listeners come with the security work).

Each request type has an error-response builder (``*_error``) for the dispatcher: it answers
a request that failed as a whole with that error in every part.
"""

from __future__ import annotations

import msgspec

#: ``LeaderAndIsrRequest.type``: the request lists every partition the broker hosts (sent
#: after the broker registers or a new controller takes over); partitions it has that are
#: not listed are stale (Kafka's ``LeaderAndIsrRequestType.FULL``, KIP-516).
LEADER_AND_ISR_FULL = 1
#: The request lists only the partitions that changed.
LEADER_AND_ISR_INCREMENTAL = 0


class LeaderAndIsrPartitionState(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """What one partition should be on the receiving broker: its leader (a broker id; the
    receiver leads it if that is its own id, else follows), leader epoch, ISR and replicas.
    ``is_new`` marks a partition just created, whose log the broker may create empty."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    adding_replicas: list[int] = []
    removing_replicas: list[int] = []
    is_new: bool = False


class LiveLeader(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Where a leader named in the request is reached (the broker's inter-broker listener),
    so that a follower can fetch from it before its metadata knows the broker."""

    broker_id: int
    host: str
    port: int


class LeaderAndIsrRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: list[LeaderAndIsrPartitionState]
    live_leaders: list[LiveLeader]
    type: int = LEADER_AND_ISR_INCREMENTAL


class PartitionError(msgspec.Struct, array_like=True):
    topic: str
    partition: int
    error_code: int
    error_message: str | None = None


class LeaderAndIsrResponse(msgspec.Struct, array_like=True):
    """``error_code`` refuses the whole request (a stale controller or broker epoch); else each
    listed partition has its entry, in request order."""

    error_code: int
    partition_errors: list[PartitionError] = []
    error_message: str | None = None


class StopReplicaPartitionState(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Stop serving a partition; ``delete_partition`` also deletes its log (topic deletion,
    a reassignment that moved the replica away). ``leader_epoch`` fences an older request as
    in LeaderAndIsr; -2 (Kafka's ``EpochDuringDelete``) skips the check on deletion."""

    topic: str
    partition: int
    leader_epoch: int
    delete_partition: bool


class StopReplicaRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: list[StopReplicaPartitionState]


class StopReplicaResponse(msgspec.Struct, array_like=True):
    error_code: int
    partition_errors: list[PartitionError] = []
    error_message: str | None = None


class UpdateMetadataPartitionState(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """One partition as every broker's metadata cache should describe it to clients."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    offline_replicas: list[int] = []


class UpdateMetadataEndpoint(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """One listener of a live broker (Kafka: ``UpdateMetadataEndpoint``)."""

    host: str
    port: int
    listener: str
    security_protocol: str = "PLAINTEXT"


class UpdateMetadataBroker(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    broker_id: int
    endpoints: list[UpdateMetadataEndpoint]
    rack: str | None = None


class UpdateMetadataRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The cluster as the controller sees it. ``live_brokers`` is always the whole list;
    ``partition_states`` the partitions that changed (every partition after a controller
    takes over or a broker starts). A partition whose ``leader`` is -2 (Kafka's
    ``LeaderDuringDelete``) is being deleted: brokers drop it from their caches."""

    controller_id: int
    controller_epoch: int
    broker_epoch: int
    partition_states: list[UpdateMetadataPartitionState]
    live_brokers: list[UpdateMetadataBroker]


class UpdateMetadataResponse(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None


class ControlledShutdownRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A broker asks the controller to move its leaderships away before it stops."""

    broker_id: int
    broker_epoch: int


class TopicPartitionRef(msgspec.Struct, array_like=True):
    topic: str
    partition: int


class ControlledShutdownResponse(msgspec.Struct, array_like=True):
    """``remaining_partitions``: partitions the broker still leads (no other in-sync replica
    could take them yet); the broker retries, as Kafka's
    ``controlled.shutdown.max.retries`` says, and then stops anyway."""

    error_code: int
    remaining_partitions: list[TopicPartitionRef] = []
    error_message: str | None = None


class AlterPartitionState(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A leader's proposed ISR for one partition it leads. ``partition_epoch`` is the epoch
    the leader last learned: the controller refuses the change with
    ``INVALID_UPDATE_VERSION`` (95) if the partition state changed since, and with
    ``FENCED_LEADER_EPOCH`` if ``leader_epoch`` is not the current one."""

    topic: str
    partition: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int


class AlterPartitionRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    broker_id: int
    broker_epoch: int
    partitions: list[AlterPartitionState]


class AlterPartitionResult(msgspec.Struct, array_like=True):
    """The partition's state after the request: the new one if it was applied, else the
    controller's current one (so the leader catches up either way)."""

    topic: str
    partition: int
    error_code: int
    leader: int = -1
    leader_epoch: int = -1
    isr: list[int] = []
    partition_epoch: int = -1
    error_message: str | None = None


class AlterPartitionResponse(msgspec.Struct, array_like=True):
    error_code: int
    partitions: list[AlterPartitionResult] = []
    error_message: str | None = None


# -- Error responses (the dispatcher's answer to a request that failed whole) ----------------


def _partition_errors(
    parts: list[LeaderAndIsrPartitionState] | list[StopReplicaPartitionState],
    code: int,
    message: str,
) -> list[PartitionError]:
    return [PartitionError(p.topic, p.partition, code, message) for p in parts]


def leader_and_isr_error(
    request: LeaderAndIsrRequest, code: int, message: str
) -> LeaderAndIsrResponse:
    return LeaderAndIsrResponse(
        code, _partition_errors(request.partition_states, code, message), message
    )


def stop_replica_error(request: StopReplicaRequest, code: int, message: str) -> StopReplicaResponse:
    return StopReplicaResponse(
        code, _partition_errors(request.partition_states, code, message), message
    )


def update_metadata_error(
    _: UpdateMetadataRequest, code: int, message: str
) -> UpdateMetadataResponse:
    return UpdateMetadataResponse(code, message)


def controlled_shutdown_error(
    _: ControlledShutdownRequest, code: int, message: str
) -> ControlledShutdownResponse:
    return ControlledShutdownResponse(code, [], message)


def alter_partition_error(
    request: AlterPartitionRequest, code: int, message: str
) -> AlterPartitionResponse:
    results = [
        AlterPartitionResult(p.topic, p.partition, code, error_message=message)
        for p in request.partitions
    ]
    return AlterPartitionResponse(code, results, message)


# -- AuthenticateBroker (1009) ------------------------------------------------------------------


class AuthenticateBrokerRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The first request a broker sends on a connection to another broker: its id, its
    broker epoch (-1 if not registered yet) and the cluster's inter-broker secret."""

    broker_id: int
    broker_epoch: int
    secret: str


class AuthenticateBrokerResponse(msgspec.Struct, array_like=True):
    """0: this connection may send the inter-broker APIs from now on. Otherwise
    SASL_AUTHENTICATION_FAILED (58) and the connection stays a client's."""

    error_code: int
    error_message: str | None = None


def authenticate_broker_error(
    _: AuthenticateBrokerRequest, code: int, message: str
) -> AuthenticateBrokerResponse:
    return AuthenticateBrokerResponse(code, message)
