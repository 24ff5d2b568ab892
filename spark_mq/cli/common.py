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
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from spark_mq import TopicPartition
from spark_mq.errors import UnknownTopicOrPartitionError

ENV_PATH: Final = "SPARK_MQ_PATH"

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130
EXIT_BROKEN_PIPE: Final = 141
EXIT_TERMINATED: Final = 143


#: What runs one command: it takes the parsed command line and returns the exit status.
Handler = Callable[[argparse.Namespace], int]


class CliUsageError(Exception):
    """A command line that cannot be run as written (exit status 2)."""


# ---------------------------------------------------------------------------------------------
# Parsers every command group builds on


class ArgumentParser(argparse.ArgumentParser):
    """argparse with our exit status and message prefix for usage errors."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise CliUsageError(message)


def broker_options(
    json_help: str = "print one JSON document instead of a table",
) -> ArgumentParser:
    """Options every command accepts (after the command name)."""
    p = ArgumentParser(add_help=False)
    where = p.add_argument_group("broker")
    where.add_argument(
        "--path",
        metavar="DIR",
        help="log directory of the local broker (started if none runs; only commands that "
        f"write create a new one; default ${ENV_PATH})",
    )
    where.add_argument(
        "--bootstrap-server", metavar="HOST:PORT", help="address of a running broker"
    )
    p.add_argument("--json", action="store_true", help=json_help)
    return p


#: The example in the help of -X: a key the client really takes.
_PROPERTY_EXAMPLES: Final = {"producer": "linger.ms=5", "consumer": "fetch.max.wait.ms=100"}


def client_properties(p: argparse.ArgumentParser, what: str) -> None:
    """Add ``--property/-X KEY=VALUE`` for the settings of a ``what`` client."""
    p.add_argument(
        "--property",
        "-X",
        action="append",
        metavar="KEY=VALUE",
        help=f"{what} setting with Kafka's key (repeatable), e.g. {_PROPERTY_EXAMPLES[what]}",
    )


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
