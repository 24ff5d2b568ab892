"""The admin client's leader elections (Kafka's ``Admin.electLeaders``, KIP-460): building
the ElectLeaders request and reading its answer. :meth:`spark_mq.client.admin.Admin.
elect_leaders` sends it to the controller.

>>> request = election_request("preferred", [("t", 0), ("t", 1)])
>>> request.election_type, request.topic_partitions[0].partitions
(0, [0, 1])
>>> election_request("random", None)
Traceback (most recent call last):
...
spark_mq.errors.UsageError: election_type must be 'preferred' or 'unclean', got 'random'
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_mq.client.records import TopicPartition
from spark_mq.errors import SparkMQError, UsageError
from spark_mq.protocol.elect_leaders import (
    ELECTION_TYPES,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersTopic,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code


def election_request(
    election_type: str,
    partitions: Iterable[TopicPartition | tuple[str, int]] | None,
    timeout_ms: int = 60_000,
) -> ElectLeadersRequest:
    """The ElectLeaders request for ``election_type`` ('preferred' or 'unclean') and
    ``partitions`` (None: every partition of the cluster)."""
    kind = ELECTION_TYPES.get(str(election_type).lower())
    if kind is None:
        raise UsageError(f"election_type must be 'preferred' or 'unclean', got {election_type!r}")
    if partitions is None:
        return ElectLeadersRequest(kind, None, timeout_ms)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        raise UsageError("no partitions given: name some, or give None for every partition")
    topics = [ElectLeadersTopic(t, sorted(set(ps))) for t, ps in by_topic.items()]
    return ElectLeadersRequest(kind, topics, timeout_ms)


def response_codes(response: ElectLeadersResponse) -> list[int]:
    """Every error code of the answer (the top one and each partition's)."""
    return [response.error_code] + [
        p.error_code for t in response.replica_election_results for p in t.partition_results
    ]


def election_results(
    response: ElectLeadersResponse,
) -> dict[TopicPartition, SparkMQError | None]:
    """Each partition's outcome: None if elected, else the error (ElectionNotNeededError when
    it already had that leader). An error of the whole request is raised."""
    if response.error_code != ErrorCode.NONE:
        raise error_from_code(response.error_code, response.error_message)
    out: dict[TopicPartition, SparkMQError | None] = {}
    for topic in response.replica_election_results:
        for p in topic.partition_results:
            tp = TopicPartition(topic.topic, p.partition)
            out[tp] = (
                None
                if p.error_code == ErrorCode.NONE
                else error_from_code(p.error_code, p.error_message, topic=topic.topic)
            )
    return out
