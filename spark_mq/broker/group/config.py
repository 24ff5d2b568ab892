"""The group coordinator's settings: Kafka's broker keys for groups and committed offsets.

Part of the broker's configuration (``ServerConfig.groups``), read from the same properties
file and ``--override`` flags as every other broker key. Defaults are Kafka's.

    >>> cfg = GroupConfig.from_properties({"offsets.retention.minutes": "60"})
    >>> cfg.offsets_retention_ms, cfg.group_initial_rebalance_delay_ms
    (3600000, 3000)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from spark_mq.config import Config, at_least, between, parse_int, setting
from spark_mq.errors import ConfigError

#: Kafka's ``Int.MaxValue`` default of ``group.max.size``.
INT_MAX: Final = 2**31 - 1

#: The int16 string length of the offsets topic's key format bounds the group id.
MAX_GROUP_ID_BYTES: Final = 32767


@dataclasses.dataclass(frozen=True)
class GroupConfig(Config):
    """Consumer group coordinator and committed offsets (``group.*``, ``offsets.*``)."""

    component = "group coordinator"

    offsets_topic_num_partitions: int = setting(
        "offsets.topic.num.partitions",
        50,
        "Partitions of __consumer_offsets when it is created (a group's coordinator is the "
        "leader of partition abs(hash(group.id)) % this). An existing topic keeps its count.",
        parse=parse_int,
        check=between(1, 10_000),
    )
    offsets_topic_replication_factor: int = setting(
        "offsets.topic.replication.factor",
        3,
        "Replication factor of __consumer_offsets when a cluster broker creates it (on the "
        "first FindCoordinator). With fewer live brokers it is not created and clients get "
        "COORDINATOR_NOT_AVAILABLE saying so. A single-node broker keeps it on itself.",
        parse=parse_int,
        check=between(1, 32767),
    )
    offsets_topic_segment_bytes: int = setting(
        "offsets.topic.segment.bytes",
        100 * 1024 * 1024,
        "segment.bytes of __consumer_offsets: smaller segments compact sooner and load faster.",
        parse=parse_int,
        check=at_least(1024),
    )
    offsets_retention_minutes: int = setting(
        "offsets.retention.minutes",
        10080,
        "Committed offsets of a group are removed this long after the group became Empty (for "
        "a group that only commits, after the offset's commit).",
        parse=parse_int,
        check=at_least(1),
    )
    offsets_retention_check_interval_ms: int = setting(
        "offsets.retention.check.interval.ms",
        600_000,
        "How often expired offsets (and empty groups without offsets) are removed.",
        parse=parse_int,
        check=at_least(1),
    )
    offsets_commit_timeout_ms: int = setting(
        "offsets.commit.timeout.ms",
        5000,
        "In a cluster, how long an offset commit (or a group's metadata) waits for every "
        "in-sync replica of its __consumer_offsets partition before it is answered "
        "REQUEST_TIMED_OUT (a SyncGroup: REBALANCE_IN_PROGRESS).",
        parse=parse_int,
        check=at_least(1),
    )
    offset_metadata_max_bytes: int = setting(
        "offset.metadata.max.bytes",
        4096,
        "Longest metadata string an offset commit may carry (OFFSET_METADATA_TOO_LARGE).",
        parse=parse_int,
        check=at_least(0),
    )
    group_initial_rebalance_delay_ms: int = setting(
        "group.initial.rebalance.delay.ms",
        3000,
        "How long the first rebalance of an empty group waits for more members to join "
        "(extended by this much while members keep arriving, up to the rebalance timeout). "
        "0 completes it as soon as every member has joined; tests and single-consumer "
        "setups use 0.",
        parse=parse_int,
        check=at_least(0),
    )
    group_min_session_timeout_ms: int = setting(
        "group.min.session.timeout.ms",
        6000,
        "Smallest session.timeout.ms a member may ask for (INVALID_SESSION_TIMEOUT below).",
        parse=parse_int,
        check=at_least(1),
    )
    group_max_session_timeout_ms: int = setting(
        "group.max.session.timeout.ms",
        1_800_000,
        "Largest session.timeout.ms a member may ask for (INVALID_SESSION_TIMEOUT above).",
        parse=parse_int,
        check=at_least(1),
    )
    group_max_size: int = setting(
        "group.max.size",
        INT_MAX,
        "Most members a group may have; one more gets GROUP_MAX_SIZE_REACHED.",
        parse=parse_int,
        check=at_least(1),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(
                f"group.min.session.timeout.ms ({self.group_min_session_timeout_ms}) is above "
                f"group.max.session.timeout.ms ({self.group_max_session_timeout_ms}); lower "
                "the first or raise the second",
                key="group.min.session.timeout.ms",
                value=self.group_min_session_timeout_ms,
            )

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def keys(cls) -> frozenset[str]:
        return frozenset(cls.settings())

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings
