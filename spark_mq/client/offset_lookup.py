"""ListOffsets for clients: ask each partition's leader for an offset by time or position.

A spec is a timestamp in ms or one of the sentinels ``LATEST_TIMESTAMP`` (-1, the high
watermark, or the last stable offset for ``read_committed``), ``EARLIEST_TIMESTAMP`` (-2, the
log start offset) and ``MAX_TIMESTAMP`` (-3). Requests go to the partition leaders over the
cluster's control connections; retriable errors (a stale leader, a broker restarting) are
retried with backoff until ``timeout_ms``, anything else raises its typed error. A topic the
broker does not know raises UnknownTopicOrPartitionError at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_mq.client.cluster import ANY_NODE, Cluster
from spark_mq.client.records import EARLIEST, LATEST, TopicPartition
from spark_mq.client.retry import Retry
from spark_mq.errors import (
    RequestTimedOutError,
    SparkMQError,
    UnknownTopicOrPartitionError,
    UsageError,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)

#: (offset, timestamp) per partition; offset -1 when no record matches a timestamp.
OffsetAnswer = tuple[int, int]

#: ``Admin.list_offsets`` spec names, besides a timestamp in ms.
OFFSET_SPECS = {
    EARLIEST: EARLIEST_TIMESTAMP,
    LATEST: LATEST_TIMESTAMP,
    "max_timestamp": MAX_TIMESTAMP,
}


def resolve_specs(specs: Mapping[TopicPartition, str | int]) -> dict[TopicPartition, int]:
    """Each partition's spec as ListOffsets carries it: a name of :data:`OFFSET_SPECS` or a
    timestamp in ms (UsageError naming the partition for anything else)."""
    resolved: dict[TopicPartition, int] = {}
    for tp, spec in specs.items():
        if isinstance(spec, str):
            if spec not in OFFSET_SPECS:
                raise UsageError(
                    f"list_offsets spec {spec!r} for {tp}: use earliest, latest, "
                    "max_timestamp or a timestamp in ms"
                )
            resolved[tp] = OFFSET_SPECS[spec]
        elif isinstance(spec, int) and spec >= 0:
            resolved[tp] = spec
        else:
            raise UsageError(f"list_offsets spec {spec!r} for {tp} is not valid")
    return resolved


def _leaders(cluster: Cluster, partitions: list[TopicPartition]) -> dict[int, list[TopicPartition]]:
    """Group partitions by leader, refreshing metadata for unknown ones once."""
    unknown = [tp for tp in partitions if cluster.leader(tp.topic, tp.partition) is None]
    if unknown:
        response = cluster.refresh(sorted({tp.topic for tp in unknown}))
        for topic in response.topics:
            if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic.name!r} does not exist; create it first (Admin.create_topic)",
                    topic=topic.name,
                )
    by_node: dict[int, list[TopicPartition]] = {}
    for tp in partitions:
        count = cluster.partition_count(tp.topic)
        if count is not None and not 0 <= tp.partition < count:
            raise UnknownTopicOrPartitionError(
                f"partition {tp.partition} of topic {tp.topic!r} does not exist (the topic has "
                f"{count})",
                topic=tp.topic,
                partition=tp.partition,
            )
        node = cluster.leader(tp.topic, tp.partition)
        by_node.setdefault(ANY_NODE if node is None else node, []).append(tp)
    return by_node


def list_offsets(
    cluster: Cluster,
    specs: Mapping[TopicPartition, int],
    *,
    isolation_level: int,
    timeout_ms: int,
) -> dict[TopicPartition, OffsetAnswer]:
    """The (offset, timestamp) answer for every partition of ``specs``."""
    retry = Retry.within_ms(
        timeout_ms,
        backoff_s=cluster.config.retry_backoff_ms / 1000,
        max_backoff_s=max(cluster.config.retry_backoff_max_ms / 1000, 0.001),
        clock=cluster.clock,
        sleep=cluster.sleep,
    )
    pending = dict(specs)
    answers: dict[TopicPartition, OffsetAnswer] = {}
    last_error: SparkMQError | None = None
    while pending:
        for node, tps in _leaders(cluster, list(pending)).items():
            topics: dict[str, list[ListOffsetsPartition]] = {}
            for tp in tps:
                # The leader epoch as this client knows it: a broker that no longer leads,
                # or one ahead of the client, says so (and the metadata is refreshed).
                epoch = cluster.leader_epoch(tp.topic, tp.partition)
                topics.setdefault(tp.topic, []).append(
                    ListOffsetsPartition(tp.partition, pending[tp], epoch)
                )
            request = ListOffsetsRequest(
                [ListOffsetsTopic(name, parts) for name, parts in topics.items()],
                isolation_level=isolation_level,
            )
            # No single request may outlast the caller's timeout (poll() passes what is left
            # of its own).
            request_ms = retry.remaining_ms()
            try:
                response: ListOffsetsResponse = cluster.request(
                    request,
                    node_id=node,
                    timeout_ms=min(request_ms, cluster.config.request_timeout_ms),
                )
            except SparkMQError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
                continue
            for topic in response.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition)
                    if tp not in pending:
                        continue
                    if part.error_code == ErrorCode.NONE:
                        answers[tp] = (part.offset, part.timestamp)
                        del pending[tp]
                        continue
                    error = error_from_code(
                        part.error_code, part.error_message, topic=tp.topic, partition=tp.partition
                    )
                    if not error.retriable:
                        raise error
                    last_error = error
        if pending:
            if not retry.backoff():
                raise RequestTimedOutError(
                    f"ListOffsets for {', '.join(map(str, pending))} did not succeed within "
                    f"{timeout_ms} ms (last error: {last_error})"
                )
            cluster.refresh(sorted({tp.topic for tp in pending}))
    return answers
