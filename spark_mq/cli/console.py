"""``spark-mq console``: the web console (``docs/operations.md``, Console).

Serves the pages of :mod:`spark_mq.console` with waitress until interrupted: brokers and the
controller, topics and partitions, the topic browser, consumer groups with their lag over
time, and transactions. Read-only unless ``--allow-admin`` is given. Needs the optional
extra ``spark-mq[console]`` (Flask, waitress, plotly).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final

from spark_mq.cli.common import (
    ENV_PATH,
    CliUsageError,
    Handler,
    add_action,
    client_kwargs,
    client_settings_options,
    endpoint,
    handler_table,
    non_negative_int,
    positive_int,
)
from spark_mq.client.config import AdminConfig, ConsumerConfig


def console_config(args: argparse.Namespace, config_class: Any) -> Any:
    """The :class:`~spark_mq.console.config.ConsoleConfig` the command line asks for. The
    console opens an Admin and consumers: from ``--command-config`` it takes the settings
    both of them take (security, timeouts), and every ``-X`` setting (asked for explicitly, a
    key either client refuses is an error)."""
    where = endpoint(args)
    admin = client_kwargs(args, AdminConfig)
    consumer = client_kwargs(args, ConsumerConfig)
    settings = {
        key: value
        for key, value in admin.items()
        if key in consumer and key not in where and key not in ("path", "bootstrap.servers")
    }
    return config_class(
        path=where.get("path"),
        bootstrap_servers=where.get("bootstrap_servers"),
        allow_admin=args.allow_admin,
        sample_interval_ms=args.interval_ms,
        client_settings=settings,
    )


def console(args: argparse.Namespace) -> int:
    """Serve the console until interrupted (SIGINT, SIGTERM)."""
    try:
        # Imported here: the optional extra; every other command runs without it.
        from spark_mq.console.config import ConsoleConfig  # noqa: PLC0415
        from spark_mq.console.server import ConsoleServer  # noqa: PLC0415
    except ImportError as exc:
        raise CliUsageError(
            f"spark-mq console needs Flask, waitress and plotly ({exc}); install them with: "
            "pip install 'spark-mq[console]'"
        ) from None
    config = console_config(args, ConsoleConfig)
    try:
        server = ConsoleServer(config, host=args.host, port=args.port)
    except OSError as exc:
        raise CliUsageError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
        ) from None
    mode = "admin actions enabled" if args.allow_admin else "read-only"
    print(
        f"spark_mq console for {config.endpoint_text} on {server.url}/ ({mode}; Ctrl-C stops)",
        file=sys.stderr,
        flush=True,
    )
    server.serve_forever()
    return 0


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``console`` on the ``spark-mq`` command parser. It takes ``--path`` and
    ``--bootstrap-server`` but not ``common``'s ``--json``: it prints no result."""
    parser = add_action(
        commands,
        "console",
        console,
        help="serve a web console: brokers, topics, records, groups, lag, transactions",
        description=(
            "Serve a web console over the cluster: brokers and the controller, topics and "
            "partitions, a record browser, consumer groups with their lag over time, and "
            "open transactions. Read-only unless --allow-admin (reset a group's offsets, "
            "abort a transaction, delete a topic, each after a confirmation page)."
        ),
    )
    where = parser.add_argument_group("broker")
    where.add_argument(
        "--path",
        metavar="DIR",
        help=f"log directory of the local broker (started if none runs; default ${ENV_PATH})",
    )
    where.add_argument(
        "--bootstrap-server", metavar="HOST:PORT", help="address of a running broker"
    )
    client_settings_options(where)
    parser.add_argument("--port", type=non_negative_int, default=8080, help="HTTP port (8080)")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: this machine only)"
    )
    parser.add_argument(
        "--allow-admin",
        action="store_true",
        help="enable the actions that change the cluster (each asks for confirmation)",
    )
    parser.add_argument(
        "--interval-ms",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="time between two samples of every group's lag and the end offsets (5000)",
    )


HANDLERS: Final[dict[str, Handler]] = handler_table(console)
