"""The half-message service's settings (``ServerConfig.half_messages``).

RocketMQ's defaults under Kafka-style keys: a check every 30 s
(``transactionCheckInterval``), a message is first checked 6 s after it was sent
(``transactionTimeOut``; a message may override it), and at most 15 checks
(``transactionCheckMax``) before it is moved to the discard topic. The outcome of an ended
message is kept 7 days (``transaction.half.op.retention.ms``, as Kafka's
``offsets.retention.minutes``), then forgotten.

    >>> cfg = HalfMessageConfig.from_properties({"transaction.check.max": "3"})
    >>> cfg.transaction_check_max, cfg.transaction_check_interval_ms
    (3, 30000)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spark_mq.config import Config, at_least, between, parse_int, setting


@dataclasses.dataclass(frozen=True)
class HalfMessageConfig(Config):
    """Half messages and their check-back (``transaction.check.*``,
    ``transaction.half.*``)."""

    component = "half-message service"

    transaction_check_interval_ms: int = setting(
        "transaction.check.interval.ms",
        30_000,
        "How often the broker looks for half messages to check, and the least time between "
        "two checks of one message (RocketMQ's transactionCheckInterval).",
        parse=parse_int,
        check=at_least(1),
    )
    transaction_half_timeout_ms: int = setting(
        "transaction.half.timeout.ms",
        6_000,
        "A half message is first checked this long after it was sent, unless its "
        "SendHalfMessage gave check_immunity_ms (RocketMQ's transactionTimeOut).",
        parse=parse_int,
        check=at_least(0),
    )
    transaction_check_max: int = setting(
        "transaction.check.max",
        15,
        "Checks of one half message; when the last gets no COMMIT or ROLLBACK within "
        "transaction.check.interval.ms the message moves to __half_discarded "
        "(RocketMQ's transactionCheckMax).",
        parse=parse_int,
        check=between(1, 1_000_000),
    )
    transaction_half_op_retention_ms: int = setting(
        "transaction.half.op.retention.ms",
        7 * 24 * 60 * 60 * 1000,
        "How long the outcome of an ended half message (committed, rolled back or "
        "discarded) is kept to answer a repeated end; after it the broker forgets the "
        "message (tombstones in __half_messages and __half_ops, removed by compaction) "
        "and a late end is answered HALF_MESSAGE_NOT_FOUND (Kafka's offsets.retention "
        "default, 7 days).",
        parse=parse_int,
        check=at_least(1),
    )
    transaction_half_log_segment_bytes: int = setting(
        "transaction.half.log.segment.bytes",
        16 * 1024 * 1024,
        "segment.bytes of __half_messages and __half_ops (compacted; smaller segments "
        "compact sooner and load faster).",
        parse=parse_int,
        check=at_least(1024),
    )

    half_messages_topic_num_partitions: int = setting(
        "half.messages.topic.num.partitions",
        8,
        "Partitions of __half_messages when a cluster broker creates it (on the first "
        "FindCoordinator of a producer group). A producer group's half messages and their "
        "outcomes live in partition abs(hash(producer group)) % this, and its leader runs "
        "the group's half-message service. An existing topic keeps its count; a single-node "
        "broker keeps one partition.",
        parse=parse_int,
        check=between(1, 10_000),
    )
    half_messages_topic_replication_factor: int = setting(
        "half.messages.topic.replication.factor",
        3,
        "Replication factor of __half_messages and __half_discarded when a cluster broker "
        "creates them. With fewer live brokers they are not created and clients get "
        "COORDINATOR_NOT_AVAILABLE saying so (as offsets.topic.replication.factor).",
        parse=parse_int,
        check=between(1, 32767),
    )
    half_messages_topic_min_isr: int = setting(
        "half.messages.topic.min.isr",
        2,
        "min.insync.replicas of __half_messages and __half_discarded on a cluster (at most "
        "their replication factor), as Kafka's transaction.state.log.min.isr: a half "
        "message, an outcome or a discarded record is acknowledged once on this many "
        "replicas.",
        parse=parse_int,
        check=between(1, 32767),
    )

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings
