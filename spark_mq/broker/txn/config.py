"""The transaction coordinator's settings: Kafka's broker keys for transactions.

Part of the broker's configuration (``ServerConfig.transactions``), read from the same
properties file and ``--override`` flags as every other broker key. Defaults are Kafka's,
except the internal topic's partition count and segment size, which are chosen for one node
(fewer, smaller partitions load and compact sooner), and
``transaction.prepared.max.timeout.ms``, which is spark_mq's own.

    >>> cfg = TxnConfig.from_properties({"transaction.max.timeout.ms": "60000"})
    >>> cfg.transaction_max_timeout_ms, cfg.transaction_state_log_num_partitions
    (60000, 8)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from spark_mq.config import Config, at_least, between, parse_int, setting

#: Kafka's default ``transactional.id.expiration.ms``: seven days.
SEVEN_DAYS_MS: Final = 7 * 24 * 3600 * 1000


@dataclasses.dataclass(frozen=True)
class TxnConfig(Config):
    """Transaction coordinator and ``__transaction_state`` (``transaction.*``)."""

    component = "transaction coordinator"

    transaction_state_log_num_partitions: int = setting(
        "transaction.state.log.num.partitions",
        8,
        "Partitions of __transaction_state when it is created (Kafka: 50; one node needs "
        "fewer). A transactional id lives in partition abs(hash(transactional.id)) % this. An "
        "existing topic keeps its count.",
        parse=parse_int,
        check=between(1, 10_000),
    )
    transaction_state_log_replication_factor: int = setting(
        "transaction.state.log.replication.factor",
        3,
        "Replication factor of __transaction_state when a cluster broker creates it (on the "
        "first FindCoordinator of a transactional id). With fewer live brokers it is not "
        "created and clients get COORDINATOR_NOT_AVAILABLE saying so. A single-node broker "
        "keeps it on itself.",
        parse=parse_int,
        check=between(1, 32767),
    )
    transaction_state_log_segment_bytes: int = setting(
        "transaction.state.log.segment.bytes",
        16 * 1024 * 1024,
        "segment.bytes of __transaction_state (Kafka: 100 MiB): smaller segments compact "
        "sooner and load faster.",
        parse=parse_int,
        check=at_least(1024),
    )
    transaction_max_timeout_ms: int = setting(
        "transaction.max.timeout.ms",
        900_000,
        "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT "
        "above).",
        parse=parse_int,
        check=at_least(1),
    )
    transaction_prepared_max_timeout_ms: int = setting(
        "transaction.prepared.max.timeout.ms",
        SEVEN_DAYS_MS,
        "A Prepared transaction (two-phase commit) is aborted by the coordinator this long "
        "after it was prepared; transaction.timeout.ms no longer applies to it. spark_mq's "
        "own key.",
        parse=parse_int,
        check=at_least(1),
    )
    transactional_id_expiration_ms: int = setting(
        "transactional.id.expiration.ms",
        SEVEN_DAYS_MS,
        "A transactional id with no open transaction and no request for this long is "
        "forgotten (a tombstone in __transaction_state); so is a closed two-phase owner "
        "(a finished batch job) whose last decision is this old.",
        parse=parse_int,
        check=at_least(1),
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        10_000,
        "How often open transactions past their timeout are aborted.",
        parse=parse_int,
        check=at_least(1),
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        3_600_000,
        "How often transactional ids past transactional.id.expiration.ms are removed.",
        parse=parse_int,
        check=at_least(1),
    )

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings
