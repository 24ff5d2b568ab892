"""DescribeLogDirs (35): what a broker holds on disk, per log directory, topic and partition.

Kafka's message, which its ``kafka-log-dirs.sh`` and admin consoles use for partition sizes:
a client asks each broker for the replicas it hosts (``topics`` nil: all of them), and gets
each replica's ``partition_size`` (bytes of its segment files, as the broker's
``spark_mq_log_size_bytes`` metric counts them) and the directory's ``total_bytes`` and
``usable_bytes``. A spark_mq broker has one log directory; ``offset_lag`` and
``is_future_key`` concern Kafka's moves between directories of one broker, which spark_mq
has not, so they are always 0 and false. Schemas in docs/protocol.md.
"""

from __future__ import annotations

import msgspec


class DescribableLogDirTopic(msgspec.Struct, array_like=True):
    topic: str
    partitions: list[int]


class DescribeLogDirsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    topics: list[DescribableLogDirTopic] | None = None


class DescribeLogDirsPartition(msgspec.Struct, array_like=True):
    partition_index: int
    partition_size: int
    offset_lag: int = 0
    is_future_key: bool = False


class DescribeLogDirsTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[DescribeLogDirsPartition]


class DescribeLogDirsResult(msgspec.Struct, array_like=True):
    error_code: int
    log_dir: str
    topics: list[DescribeLogDirsTopic]
    total_bytes: int = -1
    usable_bytes: int = -1


class DescribeLogDirsResponse(msgspec.Struct, array_like=True):
    error_code: int
    results: list[DescribeLogDirsResult]
    throttle_time_ms: int = 0


def describe_log_dirs_error(
    _request: DescribeLogDirsRequest, code: int, _message: str
) -> DescribeLogDirsResponse:
    return DescribeLogDirsResponse(code, [])
