"""DescribeLogDirs (35): the replicas this broker holds in its log directory and their sizes.

Every open log of the directory is answered, whatever its role (leader, follower, or a single
node's partition no client has touched since the broker started), so a client that asks each
broker sees every replica. Read on the event loop: listing the logs and their sizes takes
each log's lock only for a moment, and the directory's space is one ``statvfs``.
"""

from __future__ import annotations

import shutil

from spark_mq.broker.context import RequestContext, Response
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.log_dirs import (
    DescribeLogDirsPartition,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)


async def handle_describe_log_dirs(
    ctx: RequestContext, request: DescribeLogDirsRequest, _: memoryview
) -> Response:
    logs = ctx.core.logs
    wanted = (
        None
        if request.topics is None
        else {(t.topic, p) for t in request.topics for p in t.partitions}
    )
    topics: dict[str, list[DescribeLogDirsPartition]] = {}
    for log in logs.logs():
        if wanted is None or (log.topic, log.partition) in wanted:
            topics.setdefault(log.topic, []).append(
                DescribeLogDirsPartition(log.partition, log.size_bytes)
            )
    usage = shutil.disk_usage(logs.root)
    result = DescribeLogDirsResult(
        ErrorCode.NONE,
        str(logs.root),
        [DescribeLogDirsTopic(name, partitions) for name, partitions in topics.items()],
        total_bytes=usage.total,
        usable_bytes=usage.free,
    )
    return Response(DescribeLogDirsResponse(ErrorCode.NONE, [result]))
