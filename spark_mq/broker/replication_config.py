"""Replication settings of a cluster broker (``ServerConfig.replication``): its replica
fetchers and how long a follower may lag before it leaves the ISR. Kafka's keys and defaults.

    >>> cfg = ReplicationConfig.from_properties({"replica.lag.time.max.ms": "2000"})
    >>> cfg.replica_lag_time_max_ms, cfg.fetcher_config().fetch_wait_max_ms
    (2000, 500)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from spark_mq.config import Config, at_least, parse_int, setting

if TYPE_CHECKING:
    from spark_mq.broker.replica_fetcher import ReplicaFetcherConfig


@dataclasses.dataclass(frozen=True)
class ReplicationConfig(Config):
    """Replica fetchers (``replica.fetch.*``, ``num.replica.fetchers``) and the ISR's
    ``replica.lag.time.max.ms``."""

    component = "replication"

    replica_fetch_max_bytes: int = setting(
        "replica.fetch.max.bytes",
        1024 * 1024,
        "Bytes a follower asks per partition per fetch (the first batch comes whole even if "
        "larger).",
        parse=parse_int,
        check=at_least(1),
    )
    replica_fetch_response_max_bytes: int = setting(
        "replica.fetch.response.max.bytes",
        10 * 1024 * 1024,
        "Bytes a follower asks per fetch in all.",
        parse=parse_int,
        check=at_least(1),
    )
    replica_fetch_wait_max_ms: int = setting(
        "replica.fetch.wait.max.ms",
        500,
        "How long the leader may hold a follower's fetch that finds no new data; keep it "
        "below replica.lag.time.max.ms.",
        parse=parse_int,
        check=at_least(0),
    )
    replica_fetch_min_bytes: int = setting(
        "replica.fetch.min.bytes",
        1,
        "Bytes a follower's fetch waits for (up to replica.fetch.wait.max.ms).",
        parse=parse_int,
        check=at_least(1),
    )
    replica_fetch_backoff_ms: int = setting(
        "replica.fetch.backoff.ms",
        1000,
        "Pause of a replica fetcher after a failed fetch (the leader unreachable, say).",
        parse=parse_int,
        check=at_least(0),
    )
    replica_socket_timeout_ms: int = setting(
        "replica.socket.timeout.ms",
        30_000,
        "Connect and request timeout of a follower to its leader.",
        parse=parse_int,
        check=at_least(1),
    )
    num_replica_fetchers: int = setting(
        "num.replica.fetchers",
        1,
        "Fetcher threads per leader broker; partitions are spread over them.",
        parse=parse_int,
        check=at_least(1),
    )
    replica_lag_time_max_ms: int = setting(
        "replica.lag.time.max.ms",
        30_000,
        "A follower that has not caught up with the leader's log end for this long leaves "
        "the ISR; the leader checks every half of it.",
        parse=parse_int,
        check=at_least(1),
    )

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings

    def fetcher_config(self) -> ReplicaFetcherConfig:
        # Imported here: the fetchers' module uses the client's connections, which a
        # single-node broker never loads (tests/test_public_api.py).
        from spark_mq.broker.replica_fetcher import ReplicaFetcherConfig  # noqa: PLC0415

        return ReplicaFetcherConfig(
            fetch_max_bytes=self.replica_fetch_max_bytes,
            fetch_response_max_bytes=self.replica_fetch_response_max_bytes,
            fetch_wait_max_ms=self.replica_fetch_wait_max_ms,
            fetch_min_bytes=self.replica_fetch_min_bytes,
            fetch_backoff_ms=self.replica_fetch_backoff_ms,
            socket_timeout_ms=self.replica_socket_timeout_ms,
            num_fetchers=self.num_replica_fetchers,
        )
