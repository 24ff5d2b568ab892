"""DeleteRecords for clients: move each partition's log start offset up, at its leader.

Each partition's request goes to its leader (a broker deletes only what it leads), grouped
into one request per leader. A leader that moved or a lost connection leaves the partition
pending: the metadata is refreshed and the next round, after a backoff, asks the new
leader, until the caller's deadline. Any other error raises its typed error at once. What
comes back is each partition's new log start offset (Kafka's low watermark).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from spark_mq.client.cluster import ANY_NODE, LEADER_MOVED, Cluster
from spark_mq.client.records import TopicPartition
from spark_mq.client.retry import Again, Retry, sent
from spark_mq.errors import RequestTimedOutError, SparkMQError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.offsets import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopic,
)


def delete_records(
    cluster: Cluster,
    offsets: Mapping[TopicPartition, int],
    *,
    retry: Retry,
    timeout_ms: int,
    check_open: Callable[[], None],
) -> dict[TopicPartition, int]:
    """Delete every record below each offset (-1: up to the high watermark); each
    partition's new log start offset. RequestTimedOutError naming the partitions still
    without an answer when ``retry`` gives up; ``check_open`` raises if the caller closed
    meanwhile."""
    pending = dict(offsets)
    out: dict[TopicPartition, int] = {}
    while True:
        last = _round(cluster, pending, out, timeout_ms=timeout_ms, check_open=check_open)
        if not pending:
            return out
        if not retry.backoff():
            raise RequestTimedOutError(
                f"DeleteRecords for {', '.join(map(str, pending))} found no leader "
                f"within default.api.timeout.ms={timeout_ms} (last error: {last})"
            )


def _round(
    cluster: Cluster,
    pending: dict[TopicPartition, int],
    out: dict[TopicPartition, int],
    *,
    timeout_ms: int,
    check_open: Callable[[], None],
) -> SparkMQError | None:
    """Send each pending partition's DeleteRecords to its leader once; move the answered
    ones to ``out``. A leader that moved or a lost connection leaves the partition
    pending (the metadata is refreshed before the next round); any other error raises.
    Returns the last retriable error."""
    unknown = [tp for tp in pending if cluster.leader(tp.topic, tp.partition) is None]
    if unknown or cluster.update_requested:
        cluster.refresh(sorted({tp.topic for tp in pending}))
    by_node: dict[int, dict[str, list[DeleteRecordsPartition]]] = {}
    for tp, offset in pending.items():
        node = cluster.leader(tp.topic, tp.partition)
        topics = by_node.setdefault(ANY_NODE if node is None else node, {})
        topics.setdefault(tp.topic, []).append(DeleteRecordsPartition(tp.partition, offset))
    last: SparkMQError | None = None
    for node, topics in by_node.items():
        request = DeleteRecordsRequest(
            [DeleteRecordsTopic(name, parts) for name, parts in topics.items()],
            timeout_ms=timeout_ms,
        )
        check_open()
        response: DeleteRecordsResponse | Again = sent(
            functools.partial(cluster.request, request, node_id=node, timeout_ms=timeout_ms)
        )
        if isinstance(response, Again):
            cluster.request_update()
            last = response.error
            continue
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(topic.name, part.partition)
                if part.error_code == ErrorCode.NONE:
                    out[tp] = part.low_watermark
                    pending.pop(tp, None)
                    continue
                error = error_from_code(
                    part.error_code, part.error_message, topic=tp.topic, partition=tp.partition
                )
                if part.error_code not in LEADER_MOVED:
                    raise error
                cluster.request_update()
                last = error
    return last
