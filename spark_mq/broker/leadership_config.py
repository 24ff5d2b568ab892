"""Leadership settings of a cluster broker (``ServerConfig.leadership``): how it hands its
leaderships over when it stops (controlled shutdown) and how the controller moves leadership
back to preferred replicas. Kafka's keys and defaults; docs/cluster.md says what each trades.

    >>> cfg = LeadershipConfig.from_properties({"leader.imbalance.check.interval.seconds": "5"})
    >>> cfg.leader_imbalance_check_interval_seconds, cfg.controlled_shutdown_enable
    (5, True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spark_mq.config import Config, at_least, between, parse_bool, parse_int, setting


@dataclasses.dataclass(frozen=True)
class LeadershipConfig(Config):
    """``controlled.shutdown.*``, ``auto.leader.rebalance.enable`` and ``leader.imbalance.*``."""

    component = "leadership"

    controlled_shutdown_enable: bool = setting(
        "controlled.shutdown.enable",
        True,
        "On SIGTERM a cluster broker asks the controller to move its leaderships to other "
        "in-sync replicas before it stops, so clients switch at once instead of after "
        "zookeeper.session.timeout.ms.",
        parse=parse_bool,
    )
    controlled_shutdown_max_retries: int = setting(
        "controlled.shutdown.max.retries",
        3,
        "ControlledShutdown attempts before the broker stops anyway (a controller that cannot "
        "be reached, or partitions no other in-sync replica can take yet).",
        parse=parse_int,
        check=at_least(1),
    )
    controlled_shutdown_retry_backoff_ms: int = setting(
        "controlled.shutdown.retry.backoff.ms",
        5000,
        "Wait between two ControlledShutdown attempts (time for lagging followers to rejoin "
        "the ISR, or for a new controller to be elected).",
        parse=parse_int,
        check=at_least(0),
    )
    auto_leader_rebalance_enable: bool = setting(
        "auto.leader.rebalance.enable",
        True,
        "The controller moves leadership back to preferred replicas (the first of each "
        "assignment) when a broker's imbalance passes leader.imbalance.per.broker.percentage.",
        parse=parse_bool,
    )
    leader_imbalance_per_broker_percentage: int = setting(
        "leader.imbalance.per.broker.percentage",
        10,
        "Share (%) of a broker's preferred partitions led elsewhere that triggers an automatic "
        "preferred leader election.",
        parse=parse_int,
        check=between(0, 100),
    )
    leader_imbalance_check_interval_seconds: int = setting(
        "leader.imbalance.check.interval.seconds",
        300,
        "How often the controller checks the leader imbalance.",
        parse=parse_int,
        check=at_least(1),
    )

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings
