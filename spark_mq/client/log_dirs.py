"""Replica sizes on the brokers' disks, through DescribeLogDirs (35), as Kafka's
``Admin.describeLogDirs``: each broker is asked for the replicas it holds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spark_mq.client.cluster import Cluster
from spark_mq.client.records import TopicPartition
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse


@dataclass(frozen=True)
class LogDirDescription:
    """One broker's log directory: its path on that broker, the size in bytes of each
    replica it holds, and the space of the file system it is on."""

    broker_id: int
    path: str
    replica_sizes: dict[TopicPartition, int]
    total_bytes: int
    usable_bytes: int


def describe_log_dirs(
    cluster: Cluster, timeout_ms: int, broker_ids: Iterable[int] | None = None
) -> dict[int, list[LogDirDescription]]:
    """Ask each of ``broker_ids`` (None: every live broker) for its log directories."""
    if broker_ids is None:
        # A single node's metadata may name no broker: ask whichever node answers.
        broker_ids = sorted({b.node_id for b in cluster.refresh([]).brokers}) or [-1]
    found: dict[int, list[LogDirDescription]] = {}
    for broker_id in broker_ids:
        response: DescribeLogDirsResponse = cluster.request(
            DescribeLogDirsRequest(None), node_id=broker_id, timeout_ms=timeout_ms
        )
        for code in [response.error_code, *(r.error_code for r in response.results)]:
            if code != ErrorCode.NONE:
                raise error_from_code(code, f"DescribeLogDirs of broker {broker_id}")
        found[broker_id] = [
            LogDirDescription(
                broker_id,
                result.log_dir,
                {
                    TopicPartition(topic.name, p.partition_index): p.partition_size
                    for topic in result.topics
                    for p in topic.partitions
                },
                result.total_bytes,
                result.usable_bytes,
            )
            for result in response.results
        ]
    return found
