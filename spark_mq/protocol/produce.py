"""Produce (key 0): append record batches to partitions.

The batches travel in the frame's records section, not in the body: partition ``i`` of the
body owns the next ``records_size`` bytes (see ``framing``). Each partition's bytes are one
or more whole record batches as the producer encoded them; the broker validates and appends
them as they came, assigning offsets.
"""

from __future__ import annotations

import msgspec


class ProducePartition(msgspec.Struct, array_like=True):
    partition: int
    records_size: int


class ProduceTopic(msgspec.Struct, array_like=True):
    name: str
    partitions: list[ProducePartition]


class ProduceRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """``acks``: 0 (no response is sent at all), 1 (the leader appended) or -1 (all
    in-sync replicas appended). ``timeout_ms`` bounds the wait for replication."""

    acks: int
    timeout_ms: int
    topics: list[ProduceTopic]
    transactional_id: str | None = None


class ProducePartitionResponse(msgspec.Struct, array_like=True):
    """``base_offset`` is the offset of the first record appended (or, for a duplicate of
    an idempotent batch, of the original append). ``log_append_time_ms`` is -1 unless the
    topic uses LogAppendTime."""

    partition: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class ProduceTopicResponse(msgspec.Struct, array_like=True):
    name: str
    partitions: list[ProducePartitionResponse]


class ProduceResponse(msgspec.Struct, array_like=True):
    topics: list[ProduceTopicResponse]
    throttle_time_ms: int = 0
