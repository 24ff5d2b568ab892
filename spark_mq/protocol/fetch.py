"""Fetch (key 1): read record batches from several partitions, with long polling.

The broker answers once ``min_bytes`` of records are available or ``max_wait_ms`` passed.
Each partition's bytes travel in the frame's records section, ``records_size`` bytes per
partition in body order: whole batches exactly as stored, which the client decodes with
``spark_mq.storage.batch_decoder``. A reader advances to ``lastOffset + 1`` of the last
batch it received (from the batch headers), never to its last record's offset + 1: after
compaction batches may keep no records at all.
"""

from __future__ import annotations

import msgspec

#: ``isolation_level`` values, Kafka's numbering.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class FetchPartition(msgspec.Struct, array_like=True):
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


class FetchTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[FetchPartition]


class FetchRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``replica_id`` is -1 for consumers and the broker id for follower replicas.

    ``max_bytes`` bounds the whole response and ``partition_max_bytes`` each partition,
    except that the first batch of the first non-empty partition is always returned whole
    so a consumer can make progress past a batch larger than its limits.
    """

    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    topics: list[FetchTopic]
    isolation_level: int = READ_COMMITTED
    replica_id: int = -1


class AbortedTransaction(msgspec.Struct, array_like=True):
    producer_id: int
    first_offset: int


class FetchPartitionResponse(msgspec.Struct, array_like=True):
    """``aborted_transactions`` is set for ``read_committed`` fetches: the reader drops the
    data of these producers from ``first_offset`` up to their abort marker."""

    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records_size: int
    aborted_transactions: list[AbortedTransaction] | None = None
    error_message: str | None = None


class FetchTopicResponse(msgspec.Struct, array_like=True):
    name: str
    partitions: list[FetchPartitionResponse]


class FetchResponse(msgspec.Struct, array_like=True):
    error_code: int
    topics: list[FetchTopicResponse]
    throttle_time_ms: int = 0


def fetch_error(request: FetchRequest, code: int, message: str) -> FetchResponse:
    """The answer to a request that failed as a whole: every partition with ``code`` and no
    records (the request-level ``error_code`` stays 0: clients read the partitions')."""
    return FetchResponse(
        0,
        [
            FetchTopicResponse(
                t.name,
                [
                    FetchPartitionResponse(p.partition, code, -1, -1, -1, 0, error_message=message)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )
