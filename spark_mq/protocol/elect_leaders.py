"""ElectLeaders (43): ask the controller to elect leaders for partitions (Kafka's
``kafka-leader-election.sh``, ``Admin.electLeaders``, KIP-460).

The fields are those of Kafka's ElectLeaders v1-2 (v0 had no ``election_type``; it was
always a preferred election), in snake case, at spark_mq's version 0:

- ``election_type``: :data:`PREFERRED` (0) moves leadership to each partition's preferred
  replica (the first of its assignment) if that replica is alive and in the ISR;
  :data:`UNCLEAN` (1) elects a leader for a partition that has none, taking the first live
  replica in the ISR or, failing that, the first live replica even if it is out of sync
  (records only the old leader had are lost).
- ``topic_partitions``: the partitions, or nil for every partition of the cluster.
- ``timeout_ms``: how long the controller may take.

The request is served by the controller; any other broker answers ``NOT_CONTROLLER`` (41)
at the top and in every partition, and the client asks the controller it finds in its
metadata. Per partition the answer is 0 (elected), ``ELECTION_NOT_NEEDED`` (84: it already
has that leader), ``PREFERRED_LEADER_NOT_AVAILABLE`` (80), ``ELIGIBLE_LEADERS_NOT_AVAILABLE``
(83) or ``UNKNOWN_TOPIC_OR_PARTITION`` (3).
"""

from __future__ import annotations

from typing import Final

import msgspec

#: ``ElectLeadersRequest.election_type`` values (Kafka's ``ElectionType``).
PREFERRED: Final = 0
UNCLEAN: Final = 1
ELECTION_TYPES: Final = {"preferred": PREFERRED, "unclean": UNCLEAN}


class ElectLeadersTopic(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    topic: str
    partitions: list[int]


class ElectLeadersRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    election_type: int
    #: None: every partition of the cluster.
    topic_partitions: list[ElectLeadersTopic] | None
    timeout_ms: int = 60_000


class ElectLeadersPartitionResult(msgspec.Struct, array_like=True):
    partition: int
    error_code: int
    error_message: str | None = None


class ReplicaElectionResult(msgspec.Struct, array_like=True):
    topic: str
    partition_results: list[ElectLeadersPartitionResult]


class ElectLeadersResponse(msgspec.Struct, array_like=True):
    """``error_code`` refuses the whole request (NOT_CONTROLLER, INVALID_REQUEST); else each
    partition has its own result."""

    error_code: int
    replica_election_results: list[ReplicaElectionResult] = []
    error_message: str | None = None
    throttle_time_ms: int = 0


def elect_leaders_error(
    request: ElectLeadersRequest, code: int, message: str
) -> ElectLeadersResponse:
    results = [
        ReplicaElectionResult(
            t.topic, [ElectLeadersPartitionResult(p, code, message) for p in t.partitions]
        )
        for t in request.topic_partitions or []
    ]
    return ElectLeadersResponse(code, results, message)
