"""What the admin client sends and returns for partition reassignment (KIP-455): the request
built from a plan, the per-partition errors turned into one typed exception, and the
reassignments in progress as Kafka's ``PartitionReassignment`` values.

A plan maps each partition to its target replicas (the first is the preferred leader), or to
None to cancel the partition's reassignment in progress::

    {TopicPartition("orders", 0): [2, 3], ("orders", 1): None}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from spark_mq.client.records import TopicPartition
from spark_mq.errors import SparkMQError, UsageError
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.reassignment import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsTopic,
    ReassignablePartition,
    ReassignableTopic,
)

#: A reassignment plan: partition -> target replicas, or None to cancel.
ReassignmentPlan = Mapping[TopicPartition | tuple[str, int], Sequence[int] | None]


@dataclasses.dataclass(frozen=True)
class PartitionReassignment:
    """A reassignment in progress (Kafka's ``PartitionReassignment``): the full replica set
    while moving (target first), the replicas being added and those being removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(b for b in self.replicas if b not in self.removing_replicas)


def _as_tp(item: TopicPartition | tuple[str, int]) -> TopicPartition:
    return item if isinstance(item, TopicPartition) else TopicPartition(*item)


def alter_request(plan: ReassignmentPlan, timeout_ms: int) -> AlterPartitionReassignmentsRequest:
    """The request for ``plan``; an empty plan, or a target that is not a list of broker
    ids, is a UsageError (nothing is sent)."""
    if not plan:
        raise UsageError("the reassignment plan names no partition")
    by_topic: dict[str, list[ReassignablePartition]] = {}
    for key, target in plan.items():
        tp = _as_tp(key)
        replicas = None
        if target is not None:
            if isinstance(target, str | bytes) or not all(
                isinstance(b, int) and not isinstance(b, bool) for b in target
            ):
                raise UsageError(
                    f"partition {tp.topic}-{tp.partition}: the target replicas must be a list "
                    f"of broker ids (or None to cancel), got {target!r}"
                )
            replicas = list(target)
        by_topic.setdefault(tp.topic, []).append(ReassignablePartition(tp.partition, replicas))
    topics = [ReassignableTopic(name, parts) for name, parts in sorted(by_topic.items())]
    return AlterPartitionReassignmentsRequest(topics, timeout_ms=timeout_ms)


def raise_for_alter(response: AlterPartitionReassignmentsResponse) -> None:
    """Raise the typed error of the first partition refused, its message naming every
    refused partition (the others were started)."""
    if response.error_code != ErrorCode.NONE:
        raise error_from_code(response.error_code, response.error_message)
    failed = [
        (t.name, p)
        for t in response.responses
        for p in t.partitions
        if p.error_code != ErrorCode.NONE
    ]
    if not failed:
        return
    started = sum(len(t.partitions) for t in response.responses) - len(failed)
    detail = "; ".join(f"{name}-{p.partition_index}: {p.error_message}" for name, p in failed)
    name, first = failed[0]
    error: SparkMQError = error_from_code(
        first.error_code,
        f"{len(failed)} partition(s) refused ({detail}); {started} other(s) started",
        topic=name,
        partition=first.partition_index,
    )
    raise error


def list_request(
    partitions: Sequence[TopicPartition | tuple[str, int]] | None, timeout_ms: int
) -> ListPartitionReassignmentsRequest:
    if partitions is None:
        return ListPartitionReassignmentsRequest(None, timeout_ms)
    by_topic: dict[str, list[int]] = {}
    for item in partitions:
        tp = _as_tp(item)
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = [ListPartitionReassignmentsTopic(n, ps) for n, ps in sorted(by_topic.items())]
    return ListPartitionReassignmentsRequest(topics, timeout_ms)


def ongoing(
    response: ListPartitionReassignmentsResponse,
) -> dict[TopicPartition, PartitionReassignment]:
    if response.error_code != ErrorCode.NONE:
        raise error_from_code(response.error_code, response.error_message)
    return {
        TopicPartition(t.name, p.partition_index): PartitionReassignment(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)
        )
        for t in response.topics
        for p in t.partitions
    }


# ---------------------------------------------------------------------------------------------
# Kafka's JSON files (kafka-reassign-partitions.sh)


def _plan_error(source: str, what: str) -> UsageError:
    return UsageError(f"reassignment plan {source}: {what}")


def parse_plan_json(text: str, source: str = "") -> dict[TopicPartition, list[int]]:
    """Kafka's reassignment JSON, ``{"version":1,"partitions":[{"topic":"t","partition":0,
    "replicas":[2,3]}]}``, as a plan. ``log_dirs`` may be given only as ``"any"`` per
    replica (spark_mq has one log directory per broker). Every fault is a UsageError naming
    the entry and what is wrong; duplicate replicas and unknown brokers are the controller's
    to refuse (INVALID_REPLICA_ASSIGNMENT), with the cluster's brokers in the message."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _plan_error(source, f"not JSON ({exc})") from exc
    if not isinstance(document, dict) or document.get("version") != 1:
        raise _plan_error(source, 'must be an object with "version": 1 and "partitions"')
    entries = document.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise _plan_error(source, '"partitions" must be a non-empty list')
    plan: dict[TopicPartition, list[int]] = {}
    for i, entry in enumerate(entries):
        where = f"partitions[{i}]"
        if not isinstance(entry, dict):
            raise _plan_error(source, f"{where} must be an object")
        topic, partition, replicas = (entry.get(k) for k in ("topic", "partition", "replicas"))
        if not isinstance(topic, str) or not topic:
            raise _plan_error(source, f'{where}: "topic" must be a topic name, got {topic!r}')
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise _plan_error(
                source, f'{where}: "partition" must be a partition number, got {partition!r}'
            )
        if not isinstance(replicas, list) or not all(_is_int(b) for b in replicas):
            raise _plan_error(
                source, f'{where}: "replicas" must be a list of broker ids, got {replicas!r}'
            )
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (
            not isinstance(log_dirs, list)
            or len(log_dirs) != len(replicas)
            or any(d != "any" for d in log_dirs)
        ):
            raise _plan_error(
                source,
                f'{where}: "log_dirs" may only be "any" for each replica (a broker has one '
                f"log directory), got {log_dirs!r}",
            )
        tp = TopicPartition(topic, partition)
        if tp in plan:
            raise _plan_error(source, f"{where}: partition {topic}-{partition} is named twice")
        plan[tp] = list(replicas)
    return plan


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def plan_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """``assignment`` in Kafka's reassignment JSON (what ``--generate`` and ``--execute``
    print, for a plan and its rollback)."""
    partitions = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(replicas),
            "log_dirs": ["any"] * len(replicas),
        }
        for tp, replicas in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def parse_topics_to_move_json(text: str, source: str = "") -> list[str]:
    """Kafka's ``--topics-to-move-json-file``: ``{"topics":[{"topic":"t"}],"version":1}``."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _plan_error(source, f"not JSON ({exc})") from exc
    topics = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(topics, list) or not topics:
        raise _plan_error(source, 'must be an object with a non-empty "topics" list')
    names = []
    for i, entry in enumerate(topics):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise _plan_error(source, f'topics[{i}] must be {{"topic": NAME}}, got {entry!r}')
        names.append(name)
    return names
