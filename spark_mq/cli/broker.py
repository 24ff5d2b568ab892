"""``spark-mq broker start|stop|status|config``: the broker that owns a log directory.

``start`` runs :mod:`spark_mq.broker.main` in this process (logs on stderr, Ctrl-C or
SIGTERM for a clean shutdown) or, with ``--detach``, starts the directory's local broker in
the background through :func:`~spark_mq.broker.local.ensure_broker` and returns once it
serves. Either way the settings it is given (``--config`` file, ``--override``) are first
kept in ``DIR/server.properties`` (:mod:`spark_mq.broker.persisted_config`), so every later
start, on demand by a client too, uses them; ``config`` shows and edits them. ``stop``
sends SIGTERM and waits for the directory's lock to be released; ``status`` reports the
broker of a directory, or checks that a broker answers at ``--bootstrap-server``.
"""

from __future__ import annotations

import argparse
import datetime
import os
from typing import Any, Final

from spark_mq.broker import broker_status as local_status
from spark_mq.broker import ensure_broker, stop_broker
from spark_mq.broker.log_dir import require_log_dir
from spark_mq.broker.main import EXIT_CONFIG
from spark_mq.broker.main import main as broker_main
from spark_mq.broker.persisted_config import (
    DIRECTORY_KEYS,
    persisted_path,
    read_persisted,
    update_persisted,
)
from spark_mq.broker.properties_file import read_properties_file
from spark_mq.cli.common import (
    ENV_PATH,
    EXIT_ERROR,
    EXIT_USAGE,
    CliUsageError,
    CommandGroup,
    Handler,
    admin_client,
    handler_table,
    parse_key_values,
    positive_int,
)
from spark_mq.cli.format import json_text, print_result, render_pairs
from spark_mq.errors import LogDirectoryLockedError

#: The background broker of ``start --detach`` serves until stopped, unless the user sets
#: ``broker.idle.exit.ms`` (the embedded default, 60 s, suits brokers that clients start).
#: Applied to that one start only, never kept in the directory.
DETACHED_DEFAULTS = {"broker.idle.exit.ms": "-1"}


def _directory(args: argparse.Namespace, command: str, *, optional: bool = False) -> str | None:
    if getattr(args, "bootstrap_server", None):
        if args.path:
            raise CliUsageError("give either --path or --bootstrap-server, not both")
        raise CliUsageError(
            f"broker {command} works on the broker of a log directory: give --path DIR "
            "(a broker's TCP address is set with --override listeners=PLAINTEXT://HOST:PORT)"
        )
    path = args.path or os.environ.get(ENV_PATH)
    if not path and not optional:
        raise CliUsageError(f"broker {command} needs --path DIR (or ${ENV_PATH})")
    return path


def _broker_props(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    if args.config:
        props.update(read_properties_file(args.config))
    props.update({k: v.strip() for k, v in parse_key_values(args.override, "--override").items()})
    return props


def _keep_settings(path: str, args: argparse.Namespace) -> dict[str, str]:
    """Merge the settings of this ``start`` into the directory's kept ones; returns the
    kept settings."""
    given = {k: v for k, v in _broker_props(args).items() if k not in DIRECTORY_KEYS}
    return update_persisted(path, given, args.delete_config or ())


def _ms_to_text(ms: int | None) -> str:
    if ms is None:
        return "-"
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).astimezone()
    return when.isoformat(timespec="seconds")


def _status_document(path: str, status: Any) -> dict[str, Any]:
    if status is None:
        return {"path": path, "state": "not running"}
    return {
        "path": path,
        "state": status.state,
        "pid": status.pid,
        "epoch": status.epoch,
        "addresses": [str(a) for a in status.addresses],
        "started": _ms_to_text(status.started_ms),
    }


def _print_status(args: argparse.Namespace, document: dict[str, Any]) -> None:
    rows = [(k, ", ".join(v) if isinstance(v, list) else v) for k, v in document.items()]
    print_result(args.json, document, render_pairs(rows))


def broker_start(args: argparse.Namespace) -> int:
    path = _directory(args, "start", optional=bool(args.config))
    if path is None and args.config:
        path = _directory_of(args.config)
    if path is not None:
        require_log_dir(path, create=True)  # start creates the directory; a file is refused
    if args.detach:
        if path is None:
            raise CliUsageError("broker start --detach needs --path DIR")
        running = local_status(path)
        kept = _keep_settings(path, args)
        # The detached defaults give way to a kept setting: the user chose it for this
        # directory, and the defaults only suit a broker nobody configured.
        once = {k: v for k, v in DETACHED_DEFAULTS.items() if k not in kept}
        ensure_broker(path, timeout_ms=args.timeout_ms, config=once)
        document = _status_document(path, local_status(path))
        document["started_now"] = running is None
        if running is not None and not args.json:
            print(
                f"A broker already serves {path}; it keeps its own settings until it restarts "
                f"(the kept ones, in {persisted_path(path)}, apply from then on)."
            )
        _print_status(args, document)
        return 0

    if path is not None:
        running = local_status(path)
        if running is not None:
            raise LogDirectoryLockedError(
                f"a broker (pid {running.pid}, {running.state}) already owns {path}; "
                f"stop it first with: spark-mq broker stop --path {path}",
                path=path,
                owner=str(running.pid),
            )
        _keep_settings(path, args)
    argv: list[str] = []
    if path is not None:
        argv += ["--log-dir", path]
    if args.config:
        argv += ["--config", args.config]
    for item in args.override or ():
        argv += ["--override", item]
    code = broker_main(argv)
    if code == EXIT_CONFIG:
        return EXIT_USAGE
    return EXIT_ERROR if code else 0


def _directory_of(config_file: str) -> str | None:
    """``log.dirs`` (or ``log.dir``) of a properties file: where ``start --config`` runs."""
    props = read_properties_file(config_file)
    value = props.get("log.dirs", props.get("log.dir"))
    return value.strip() if value and "," not in value else None


def broker_config(args: argparse.Namespace) -> int:
    """Show, and with --add-config / --delete-config change, the kept settings of DIR."""
    path = _directory(args, "config")
    assert path is not None
    add = {k: v.strip() for k, v in parse_key_values(args.add_config, "--add-config").items()}
    directory_keys = sorted(set(add) & DIRECTORY_KEYS)
    if directory_keys:
        raise CliUsageError(f"{directory_keys[0]} is where the settings are kept: use --path")
    # Setting something prepares the directory for its broker, as 'broker start' does;
    # only showing reads it, and a path that holds no log is then a mistake to report.
    require_log_dir(path, create=bool(add))
    if add or args.delete_config:
        kept = update_persisted(path, add, args.delete_config or ())
    else:
        kept = read_persisted(path)
    running = local_status(path)
    if args.json:
        print(json_text({"path": path, "file": str(persisted_path(path)), "settings": kept}))
        return 0
    if kept:
        print("\n".join(f"{k}={v}" for k, v in sorted(kept.items())))
    else:
        print(f"No settings kept for {path}: its broker starts with the defaults.")
    if running is not None and (add or args.delete_config):
        print(
            f"The running broker (pid {running.pid}) keeps its settings until it restarts: "
            f"spark-mq broker stop --path {path}"
        )
    return 0


def broker_stop(args: argparse.Namespace) -> int:
    path = _directory(args, "stop")
    assert path is not None  # _directory raises when it is missing
    before = local_status(path)
    stopped = stop_broker(path, timeout_ms=args.timeout_ms)
    print_result(
        args.json,
        {"path": path, "stopped": stopped, "pid": before.pid if before else None},
        f"Stopped the broker of {path} (pid {before.pid if before else '?'})."
        if stopped
        else f"No broker runs for {path}.",
    )
    return 0


def broker_status(args: argparse.Namespace) -> int:
    if getattr(args, "bootstrap_server", None) and not args.path:
        return _remote_status(args)
    path = _directory(args, "status")
    assert path is not None
    status = local_status(path)
    _print_status(args, _status_document(path, status))
    return 0 if status is not None and status.state == "serving" else EXIT_ERROR


def _remote_status(args: argparse.Namespace) -> int:
    """A broker at ``--bootstrap-server``: answer with what its metadata says."""
    with admin_client(args) as admin:
        topics = admin.list_topics()
    document = {
        "bootstrap_server": args.bootstrap_server,
        "state": "serving",
        "topics": len(topics),
    }
    _print_status(args, document)
    return 0


# ---------------------------------------------------------------------------------------------
# The parser


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``broker`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands, "broker", help="start, stop or inspect a broker", parents=[common]
    )
    start = actions.add(
        "start",
        broker_start,
        help="run a broker on a log directory (foreground unless --detach)",
    )
    start.add_argument(
        "--detach", action="store_true", help="start it in the background and return"
    )
    start.add_argument(
        "--config", metavar="FILE", help="broker properties file (e.g. conf/broker.properties)"
    )
    start.add_argument(
        "--override",
        action="append",
        metavar="KEY=VALUE",
        help="broker setting that wins over the file (repeatable), e.g. log.retention.hours=1; "
        "kept in DIR/server.properties for every later start",
    )
    start.add_argument(
        "--delete-config",
        action="append",
        metavar="KEY",
        help="remove a kept setting, so the default applies again (repeatable)",
    )
    _timeout_ms(start, "--detach: how long to wait for the broker to answer")
    stop = actions.add("stop", broker_stop, help="stop the broker of --path")
    _timeout_ms(stop, "how long to wait for a clean shutdown")
    actions.add("status", broker_status, help="is a broker running?")
    kept = actions.add(
        "config",
        broker_config,
        help="show or change the settings kept in DIR for every start of its broker",
        description="Show the broker settings kept in DIR/server.properties (read at every "
        "start of the directory's broker, on demand or by 'broker start'), after applying "
        "--add-config and --delete-config. A running broker keeps its settings until it "
        "restarts.",
    )
    kept.add_argument(
        "--add-config",
        action="append",
        metavar="KEY=VALUE",
        help="set a broker setting (repeatable), e.g. log.retention.ms=60000",
    )
    kept.add_argument(
        "--delete-config",
        action="append",
        metavar="KEY",
        help="remove a setting, so the default applies again (repeatable)",
    )


def _timeout_ms(parser: argparse.ArgumentParser, what: str) -> None:
    """``--timeout-ms``: how long ``start --detach`` and ``stop`` wait for the broker."""
    parser.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=30_000,
        help=f"{what} (default %(default)s)",
    )


HANDLERS: Final[dict[str, Handler]] = handler_table(
    broker_start, broker_stop, broker_status, broker_config
)
