"""What the ``spark-mq`` commands share: exit statuses, usage errors, how a command group
registers its actions, where the broker is, ``KEY=VALUE`` options, the client settings that
come from ``--command-config`` and ``--property/-X``, and the admin lookups several commands need.

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

from spark_mq import Admin, TopicPartition
from spark_mq.cli.command_config import read_command_config
from spark_mq.client.config import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig
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


class CommandGroup:
    """A command whose actions follow it (``spark-mq topics create``, ``topics list``, ...).

    Each action is added with ``parents``, the options it shares with its siblings (the
    broker options every command that asks a broker takes), unless :meth:`add` is given
    others."""

    def __init__(
        self,
        commands: Any,
        name: str,
        *,
        help: str,
        parents: Sequence[argparse.ArgumentParser],
    ) -> None:
        group = commands.add_parser(name, help=help)
        self._actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
        self._parents = tuple(parents)

    def add(
        self,
        name: str,
        handler: Handler,
        *,
        parents: Sequence[argparse.ArgumentParser] | None = None,
        **kwargs: Any,
    ) -> argparse.ArgumentParser:
        """Add the action ``name``, run by ``handler`` (see :func:`add_action`)."""
        chosen = self._parents if parents is None else parents
        return add_action(self._actions, name, handler, parents=chosen, **kwargs)


def add_action(
    actions: Any,
    name: str,
    handler: Handler,
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """Add the (sub)command ``name``, run by ``handler``; ``kwargs`` are argparse's (``help``,
    ``description``). The parser records the handler by its name, the key of the module's
    ``HANDLERS`` (see :func:`handler_table`), so the two cannot drift apart."""
    parser: argparse.ArgumentParser = actions.add_parser(name, parents=list(parents), **kwargs)
    parser.set_defaults(handler=handler.__name__)
    return parser


def handler_table(*handlers: Handler) -> dict[str, Handler]:
    """A module's ``HANDLERS``: each handler under its name (what :func:`add_action` records)."""
    return {handler.__name__: handler for handler in handlers}


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
    client_settings_options(where)
    p.add_argument("--json", action="store_true", help=json_help)
    return p


def client_settings_options(where: Any) -> None:
    """Add ``--command-config FILE`` and ``--property/-X KEY=VALUE``: the settings of the
    clients a command opens (security, timeouts, ...), read by :func:`client_kwargs`."""
    where.add_argument(
        "--command-config",
        metavar="FILE",
        help="a .properties file of client settings with Kafka's keys (security.protocol, "
        "ssl.*, sasl.*, sasl.jaas.config, ...); each client takes the keys it knows",
    )
    where.add_argument(
        "--property",
        "-X",
        action="append",
        metavar="KEY=VALUE",
        help="a client setting with Kafka's key (repeatable; wins over --command-config), "
        "e.g. -X security.protocol=SASL_PLAINTEXT",
    )


#: The values ``--acks``, ``--compression`` and ``--isolation-level`` accept (Kafka's values of
#: ``acks``, ``compression.type`` and ``isolation.level``).
ACKS_CHOICES: Final = ("all", "-1", "0", "1")
COMPRESSION_CHOICES: Final = ("none", "gzip", "snappy", "lz4", "zstd")
ISOLATION_LEVELS: Final = ("read_committed", "read_uncommitted")


def producer_options(p: argparse.ArgumentParser, *, acks_help: str, compression_help: str) -> None:
    """Add ``--acks`` and ``--compression``, which :func:`producer_config` reads."""
    p.add_argument("--acks", choices=ACKS_CHOICES, help=acks_help)
    p.add_argument("--compression", choices=COMPRESSION_CHOICES, help=compression_help)


def consumer_options(p: argparse.ArgumentParser, *, isolation_help: str) -> None:
    """Add ``--isolation-level``, which :func:`consumer_config` reads."""
    p.add_argument("--isolation-level", choices=ISOLATION_LEVELS, help=isolation_help)


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


def client_kwargs(args: argparse.Namespace, config_class: type[ClientConfig]) -> dict[str, Any]:
    """The keyword arguments of a client of ``config_class``: the endpoint, the settings of
    ``--command-config`` this client takes, and ``--property`` (which wins over the file, as
    kafka-console-producer's ``--producer-property`` wins over ``--producer.config``).

    A ``--property`` key the client does not take is refused by the client, naming it: it was
    asked for on the command line. A key of the file for another client is left out, so one
    file serves every command."""
    config: dict[str, Any] = {}
    path = getattr(args, "command_config", None)
    if path:
        config.update(read_command_config(path).for_client(config_class))
    config.update(parse_key_values(getattr(args, "property", None), "--property"))
    config.update(endpoint(args))
    return config


def client_config(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`client_kwargs` of an admin client (what ``users`` and others open)."""
    return client_kwargs(args, AdminConfig)


def producer_config(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`client_kwargs` of a producer plus what :func:`producer_options` added: ``--acks``
    and ``--compression`` win over the same keys given with ``--property``."""
    config = client_kwargs(args, ProducerConfig)
    if args.acks is not None:
        config["acks"] = args.acks
    if args.compression is not None:
        config["compression.type"] = args.compression
    return config


def consumer_config(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`client_kwargs` of a consumer plus what :func:`consumer_options` added:
    ``--isolation-level`` wins over ``--property isolation.level=...``."""
    config = client_kwargs(args, ConsumerConfig)
    if args.isolation_level is not None:
        config["isolation.level"] = args.isolation_level
    return config


def admin_client(args: argparse.Namespace) -> Admin:
    """An :class:`~spark_mq.Admin` for the broker the command line names (close it: ``with``)."""
    return Admin(**client_config(args))


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
