"""Topic metadata: the per-topic JSON file of a log directory, and the snapshots shown to users.

``__meta/topics/<topic>.json`` (replaced atomically, see
:mod:`~spark_mq.storage.checkpoint_file`) is the commit point of every topic change: the
topic exists if and only if this file does::

    {"version": 0, "name": "events", "topic_id": "<32 hex digits, new on every create>",
     "partitions": 3, "config": {"retention.ms": "86400000"}, "created_ms": 1732190000000}

``config`` holds only the topic's overrides (Kafka key to string). ``topic_id`` is new on
every create, so a deleted and recreated topic can be told apart from the original.

Version 1 adds ``hosted``: the partitions of the topic this broker holds a replica of, sorted
(a cluster broker holds only the replicas the controller assigned to it)::

    {"version": 1, "name": "events", "topic_id": "...", "partitions": 3, "hosted": [0, 2],
     "config": {}, "created_ms": 1732190000000}

A topic whose every partition is local (always so on a single node) is written as version 0,
as before, and a version 0 file reads as "every partition hosted". Version 1 is only written
when a partition is not hosted, so a version 0 reader never meets it, and one that did would
refuse it rather than open replicas this broker was told it does not hold.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from spark_mq.errors import CorruptCheckpointError, InvalidTopicError
from spark_mq.storage.log_config import LogConfig
from spark_mq.storage.topic_names import validate_topic_name

#: Every partition of the topic is hosted.
TOPIC_METADATA_VERSION: Final = 0
#: ``hosted`` lists the partitions this broker holds a replica of.
TOPIC_METADATA_HOSTED_VERSION: Final = 1
#: With this cap, ``<topic>-<partition>`` fits 255 bytes even for a 249-character topic name.
MAX_PARTITIONS_PER_TOPIC: Final = 10_000
#: A topic metadata file is a few hundred bytes; a larger one is not ours.
MAX_METADATA_BYTES: Final = 1024 * 1024


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    """A snapshot of one partition log's offsets and size.

    An offline partition (:mod:`~spark_mq.storage.offline_partition`) has no log to ask: its
    offsets are -1, its size and segment count 0, and ``offline_reason`` says why.
    """

    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    recovery_point: int
    size_bytes: int
    num_segments: int
    offline_reason: str | None = None
    #: Whether this broker holds a replica of the partition (a cluster broker holds only the
    #: ones assigned to it); one it does not host has no log here, offsets -1 and size 0.
    hosted: bool = True

    @classmethod
    def offline(cls, topic: str, partition: int, reason: str) -> PartitionInfo:
        return cls(topic, partition, -1, -1, -1, -1, 0, 0, offline_reason=reason)

    @classmethod
    def not_hosted(cls, topic: str, partition: int) -> PartitionInfo:
        return cls(topic, partition, -1, -1, -1, -1, 0, 0, hosted=False)


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    """A snapshot of one topic: identity, config and partitions (as Kafka's TopicDescription)."""

    name: str
    topic_id: str
    partitions: tuple[PartitionInfo, ...]
    #: Only the topic's own settings, Kafka key to string.
    config_overrides: Mapping[str, str]
    #: The manager's default config with the overrides applied.
    config: LogConfig
    created_ms: int

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclasses.dataclass(frozen=True)
class TopicMetadata:
    """The content of ``__meta/topics/<topic>.json``."""

    name: str
    topic_id: str
    partitions: int
    config: Mapping[str, str]
    created_ms: int
    #: The partitions this broker holds a replica of; None: every partition.
    hosted: frozenset[int] | None = None

    def hosts(self, partition: int) -> bool:
        return self.hosted is None or partition in self.hosted

    def to_json(self) -> bytes:
        obj: dict[str, object] = {
            "version": TOPIC_METADATA_VERSION,
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
        }
        if self.hosted is not None:
            obj["version"] = TOPIC_METADATA_HOSTED_VERSION
            obj["hosted"] = sorted(self.hosted)
        obj["config"] = dict(sorted(self.config.items()))
        obj["created_ms"] = self.created_ms
        return (json.dumps(obj, indent=1) + "\n").encode()

    @classmethod
    def read(cls, path: Path) -> TopicMetadata:
        """Parse and validate one metadata file; anything off raises CorruptCheckpointError."""

        def corrupt(problem: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(
                f"corrupt topic metadata file {path}: {problem}. Restore it from a backup, or "
                "remove it together with the topic's partition directories to drop the topic",
                path=str(path),
            )

        with open(path, "rb") as f:
            data = f.read(MAX_METADATA_BYTES + 1)
        if len(data) > MAX_METADATA_BYTES:
            raise corrupt(f"larger than {MAX_METADATA_BYTES} bytes")
        try:
            obj: Any = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise corrupt(f"not valid JSON ({exc})") from exc
        versions = (TOPIC_METADATA_VERSION, TOPIC_METADATA_HOSTED_VERSION)
        if not isinstance(obj, dict) or obj.get("version") not in versions:
            raise corrupt(f"not a version {versions[0]} or {versions[1]} topic metadata object")
        name, topic_id, partitions = obj.get("name"), obj.get("topic_id"), obj.get("partitions")
        config, created_ms = obj.get("config"), obj.get("created_ms")
        if not isinstance(name, str):
            raise corrupt(f"the topic name {name!r} is not a string")
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            raise corrupt(str(exc)) from exc
        if not (isinstance(topic_id, str) and len(topic_id) == 32 and _is_hex(topic_id)):
            raise corrupt(f"topic_id {topic_id!r} is not 32 hex digits")
        if type(partitions) is not int or not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise corrupt(f"partition count {partitions!r} is not in 1..{MAX_PARTITIONS_PER_TOPIC}")
        if not isinstance(config, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in config.items()
        ):
            raise corrupt("config is not an object of string keys and string values")
        if type(created_ms) is not int:
            raise corrupt(f"created_ms {created_ms!r} is not an integer")
        hosted: frozenset[int] | None = None
        if obj["version"] == TOPIC_METADATA_HOSTED_VERSION:
            listed = obj.get("hosted")
            if not (
                isinstance(listed, list)
                and all(type(p) is int and 0 <= p < partitions for p in listed)
                and listed == sorted(set(listed))
            ):
                raise corrupt(
                    f"hosted {listed!r} is not a sorted list of distinct partitions in "
                    f"0..{partitions - 1}"
                )
            hosted = frozenset(listed)
        return cls(name, topic_id, partitions, MappingProxyType(dict(config)), created_ms, hosted)
