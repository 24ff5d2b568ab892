"""The console's settings: a typed, frozen value checked when built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from spark_mq.errors import ConfigError

#: Lag samples kept per group for the chart: at the default interval, 20 minutes.
DEFAULT_HISTORY_SAMPLES = 240


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """Where the broker is and how the console behaves.

    >>> ConsoleConfig(bootstrap_servers="localhost:9092").endpoint_text
    'localhost:9092'
    >>> ConsoleConfig(path="/data/mq", bootstrap_servers="localhost:9092")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_mq.errors.ConfigError: console: give exactly one of path=DIR or ...
    """

    #: The local broker's log directory (its broker is started if none runs) ...
    path: str | None = None
    #: ... or the address of a running broker.
    bootstrap_servers: str | None = None
    #: Whether the pages that change the cluster (reset offsets, abort a transaction, delete
    #: a topic) are served; without it they answer 403.
    allow_admin: bool = False
    #: Time between two samples of every group's lag and every partition's end offset.
    sample_interval_ms: int = 5000
    #: Samples kept per group and per topic (older ones are dropped).
    history_samples: int = DEFAULT_HISTORY_SAMPLES
    #: Records on one page of the topic browser, and the most a page may ask for.
    page_records: int = 20
    max_page_records: int = 500
    #: ``default.api.timeout.ms`` of the console's clients: how long a page waits for an
    #: unreachable broker before it says so.
    api_timeout_ms: int = 10000
    #: Client settings of the console's Admin and consumers (``security.protocol``,
    #: ``ssl.*``, ``sasl.*``, ...: what ``--command-config`` and ``-X`` give). Not shown in
    #: repr: they may hold a password.
    client_settings: Mapping[str, object] = dataclasses.field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if (self.path is None) == (self.bootstrap_servers is None):
            raise ConfigError(
                "console: give exactly one of path=DIR or bootstrap_servers=HOST:PORT"
            )
        for name in ("sample_interval_ms", "history_samples", "page_records", "api_timeout_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"console: {name} must be 1 or more, got {getattr(self, name)}")
        if self.max_page_records < self.page_records:
            raise ConfigError("console: max_page_records must be at least page_records")

    @property
    def endpoint_text(self) -> str:
        """The broker as the user named it, for pages and error messages."""
        return self.bootstrap_servers if self.bootstrap_servers is not None else f"{self.path}"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of an Admin or Consumer for this broker."""
        where: dict[str, Any] = (
            {"path": self.path}
            if self.path is not None
            else {"bootstrap_servers": self.bootstrap_servers}
        )
        where.update(self.client_settings)
        where["default.api.timeout.ms"] = self.api_timeout_ms
        return where
