"""Topic metadata: the per-topic JSON file of a log directory, and the snapshots shown to users.

``__meta/topics/<topic>.json`` (replaced atomically, see
:mod:`~spark_mq.storage.checkpoint_file`) is the commit point of every topic change: the
topic exists if and only if this file does::

    {"version": 0, "name": "events", "topic_id": "<32 hex digits, new on every create>",
     "partitions": 3, "config": {"retention.ms": "86400000"}, "created_ms": 1732190000000}

``config`` holds only the topic's overrides (Kafka key to string). ``topic_id`` is new on
every create, so a deleted and recreated topic can be told apart from the original.
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

TOPIC_METADATA_VERSION: Final = 0
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

    @classmethod
    def offline(cls, topic: str, partition: int, reason: str) -> PartitionInfo:
        return cls(topic, partition, -1, -1, -1, -1, 0, 0, offline_reason=reason)


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

    def to_json(self) -> bytes:
        obj = {
            "version": TOPIC_METADATA_VERSION,
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
            "config": dict(sorted(self.config.items())),
            "created_ms": self.created_ms,
        }
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
        if not isinstance(obj, dict) or obj.get("version") != TOPIC_METADATA_VERSION:
            raise corrupt(f"not a version {TOPIC_METADATA_VERSION} topic metadata object")
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
        return cls(name, topic_id, partitions, MappingProxyType(dict(config)), created_ms)
