"""Where a broker serves its Prometheus metrics (``ServerConfig.metrics``).

Off by default for a broker started on its own (an embedded broker opens no port nobody
asked for); ``spark-mq cluster start`` turns it on for each broker it starts.

    >>> MetricsConfig.from_properties({"metrics.port": "9404"}).metrics_port
    9404
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spark_mq.config import Config, between, parse_int, parse_str, setting


@dataclasses.dataclass(frozen=True)
class MetricsConfig(Config):
    """The metrics endpoint (``metrics.*``)."""

    component = "metrics endpoint"

    metrics_port: int = setting(
        "metrics.port",
        -1,
        "TCP port of the Prometheus metrics endpoint (HTTP GET /metrics). -1: no endpoint "
        "(the default); 0: a free port, written to the broker's log and its ready file.",
        parse=parse_int,
        check=between(-1, 65535),
    )
    metrics_host: str = setting(
        "metrics.host",
        "127.0.0.1",
        "Address the metrics endpoint binds; empty binds every interface. The default serves "
        "only this machine: metrics name topics and groups, so expose them deliberately.",
        parse=parse_str,
    )

    @classmethod
    def owns(cls, key: str) -> bool:
        """Whether ``key`` (dotted or underscored) is one of these settings."""
        settings: dict[str, Any] = cls.settings()
        return key in settings or key.replace("_", ".") in settings
