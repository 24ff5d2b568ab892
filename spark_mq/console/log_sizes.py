"""Partition sizes for the console: the bytes of each partition's leader replica, as its
broker reports them in DescribeLogDirs (the segment files, as the broker's
``spark_mq_log_size_bytes`` metric counts them), whether the console reads a local broker
(``--path``) or a cluster.

A broker that cannot be asked (it just died, or is unreachable) leaves its partitions'
sizes unknown: the page still shows everything else it read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from spark_mq.client.admin import Admin
from spark_mq.client.records import TopicPartition
from spark_mq.errors import SparkMQError

log = logging.getLogger(__name__)


def leader_sizes(admin: Admin, leaders: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The size in bytes of each partition's leader replica (``leaders``: partition to
    leader id, -1 for none); a partition whose leader did not answer is left out."""
    sizes: dict[TopicPartition, int] = {}
    for broker in sorted({b for b in leaders.values() if b >= 0}):
        try:
            described = admin.describe_log_dirs([broker])
        except SparkMQError as exc:
            log.warning("console: broker %d did not give its log sizes: %s", broker, exc)
            continue
        for directory in described.get(broker, []):
            for tp, size in directory.replica_sizes.items():
                if leaders.get(tp) == broker:
                    sizes[tp] = size
    return sizes


def format_bytes(size: int | None) -> str:
    """A size for people (binary units); ``unknown`` for None.

    >>> format_bytes(512), format_bytes(1536), format_bytes(None)
    ('512 B', '1.5 KiB', 'unknown')
    """
    if size is None:
        return "unknown"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
