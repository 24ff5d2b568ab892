"""Where a Spark source or sink finds its broker: ``path`` or ``bootstrap.servers``.

Exactly one of the two options is required (docs/architecture.md: the embedded default
starts a local broker for the directory on demand; ``bootstrap.servers`` names running
brokers). Spark passes option names case-insensitively, so both spellings are matched
without regard to case, and ``kafka.bootstrap.servers`` (the Kafka source's name) is accepted
as an alias. How to connect goes with where: ``kafka.security.protocol``, ``kafka.ssl.*``
and ``kafka.sasl.*`` (:data:`CONNECTION_KEYS`), written as Spark's Kafka connector users
write them, reach every client the source or sink opens (the consumers and producers of
the tasks, and the Admin of the driver).

>>> client_endpoint({"path": "/data/mq"})
{'path': '/data/mq'}
>>> client_endpoint({"kafka.bootstrap.servers": "h1:9092,h2:9092"})
{'bootstrap.servers': 'h1:9092,h2:9092'}
>>> client_endpoint({})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
spark_mq.errors.ConfigError: spark_mq needs exactly one of .option("path", DIR) ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from spark_mq.client.sasl import Password
from spark_mq.errors import ConfigError

PATH_OPTION: Final = "path"
SERVERS_OPTION: Final = "bootstrap.servers"
_SERVERS_ALIASES: Final = (SERVERS_OPTION, "kafka.bootstrap.servers")
#: Secrets among them: carried as :class:`~spark_mq.client.sasl.Password`, so that the
#: source's and sink's options (which travel to executors) never print them.
SECRET_KEYS: Final = frozenset({"ssl.key.password", "sasl.password", "sasl.jaas.config"})
#: Client settings that say how to connect, taken from ``kafka.<key>`` options.
CONNECTION_KEYS: Final = (
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
)


def hidden(key: str, value: str) -> object:
    """``value`` of client setting ``key``, as a Password if it is a secret."""
    return Password(value) if key in SECRET_KEYS else value


def lookup(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name``, matched without regard to case (as Spark does)."""
    if name in options:
        return options[name]
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


def client_endpoint(options: Mapping[str, str]) -> dict[str, object]:
    """The client properties that say where the broker is, from Spark options."""
    path = lookup(options, PATH_OPTION)
    servers = [v for v in (lookup(options, name) for name in _SERVERS_ALIASES) if v]
    if path and servers:
        raise ConfigError(
            'spark_mq takes exactly one of .option("path", DIR) (the embedded broker of a log '
            'directory) and .option("bootstrap.servers", "host:port,..."), not both'
        )
    if servers:
        endpoint: dict[str, object] = {SERVERS_OPTION: servers[0]}
        for key in CONNECTION_KEYS:
            value = lookup(options, f"kafka.{key}")
            if value is not None:
                endpoint[key] = hidden(key, value)
        return endpoint
    if path:
        return {PATH_OPTION: path}
    raise ConfigError(
        'spark_mq needs exactly one of .option("path", DIR) (a log directory; its broker is '
        'started on demand) or .option("bootstrap.servers", "host:port,...") (running brokers)'
    )
