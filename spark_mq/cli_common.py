"""What the ``spark-mq`` commands share: exit statuses, usage errors, where the broker is,
``KEY=VALUE`` options, and the admin lookups several commands need.

>>> import argparse
>>> endpoint(argparse.Namespace(path="/data/mq", bootstrap_server=None))
{'path': '/data/mq'}
>>> parse_key_values(["retention.ms=1000"], "--config")
{'retention.ms': '1000'}
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, Final

from spark_mq import TopicPartition
from spark_mq.errors import UnknownTopicOrPartitionError

ENV_PATH: Final = "SPARK_MQ_PATH"

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130
EXIT_BROKEN_PIPE: Final = 141
EXIT_TERMINATED: Final = 143


class CliUsageError(Exception):
    """A command line that cannot be run as written (exit status 2)."""


# ---------------------------------------------------------------------------------------------
# Shared option parsing


def parse_key_values(items: Sequence[str] | None, option: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a missing ``=`` is a usage error."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliUsageError(f"{option} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def endpoint(args: argparse.Namespace) -> dict[str, Any]:
    """The client keyword that says where the broker is: ``path`` or ``bootstrap_servers``."""
    path = getattr(args, "path", None)
    servers = getattr(args, "bootstrap_server", None)
    if path and servers:
        raise CliUsageError("give either --path or --bootstrap-server, not both")
    if servers:
        return {"bootstrap_servers": servers}
    if path:
        return {"path": path}
    env = os.environ.get(ENV_PATH)
    if env:
        return {"path": env}
    raise CliUsageError(
        f"say which broker to use: --path DIR (or the {ENV_PATH} environment variable) "
        "or --bootstrap-server HOST:PORT"
    )


def client_config(args: argparse.Namespace) -> dict[str, Any]:
    """Endpoint plus ``--property`` overrides, as keyword arguments of a client."""
    config: dict[str, Any] = dict(parse_key_values(getattr(args, "property", None), "--property"))
    config.update(endpoint(args))
    return config


def non_negative_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def positive_int(text: str) -> int:
    value = any_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def any_int(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


# ---------------------------------------------------------------------------------------------
# Lookups several commands need


def topic_partitions(consumer: Any, topic: str) -> list[TopicPartition]:
    """Every partition of ``topic``; UnknownTopicOrPartitionError if the broker has no such
    topic (the consumer's metadata names every topic with its partition count)."""
    count = consumer.topics().get(topic)
    if count is None:
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist; create it with: spark-mq topics create {topic}",
            topic=topic,
        )
    return [TopicPartition(topic, p) for p in range(count)]
