"""Produce (key 0): append record batches to partitions.

The batches travel in the frame's records section, not in the body: partition ``i`` of the
body owns the next ``records_size`` bytes (see ``framing``). Each partition's bytes are one
or more whole record batches as the producer encoded them; the broker validates and appends
them as they came, assigning offsets.

The response mirrors the request's shape: one topic entry per request topic entry and, in
each, one partition answer per request partition entry, in the same order. A request may name
a partition more than once (a producer without idempotence sends several batches of a
partition in one request); each entry gets its own answer, and only the position tells them
apart, so a client matches answers to batches by position (:func:`answers_by_entry`), never
by (topic, partition).
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


def answers_by_entry(
    request_topics: list[ProduceTopic], response: ProduceResponse
) -> list[ProducePartitionResponse | None]:
    """The answer to each partition entry of a request, in request order (topic entries in
    order, each one's partition entries in order), read by position from a response that
    mirrors the request (see the module docstring).

    An entry gets None when the answer at its position is for another topic or partition, or
    when the response is shorter: a broker that broke the contract. Matching answers by
    (topic, partition) instead would give every batch of a partition sent twice in one
    request the same answer, reporting unwritten records as written.
    """
    answers: list[ProducePartitionResponse | None] = []
    for i, topic in enumerate(request_topics):
        answered = response.topics[i] if i < len(response.topics) else None
        given = answered.partitions if answered is not None and answered.name == topic.name else []
        for j, entry in enumerate(topic.partitions):
            answer = given[j] if j < len(given) else None
            answers.append(
                answer if answer is not None and answer.partition == entry.partition else None
            )
    return answers


def produce_error(request: ProduceRequest, code: int, message: str) -> ProduceResponse:
    """The answer to a request that failed as a whole: every entry, in request order, with
    ``code`` (the response mirrors the request, see :func:`answers_by_entry`)."""
    return ProduceResponse(
        [
            ProduceTopicResponse(
                t.name,
                [
                    ProducePartitionResponse(p.partition, code, error_message=message)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )
