"""``spark-mq``: the command line of spark_mq (broker, cluster, topics, groups, transactions,
produce, consume, perf, log verify, console).

Every command but ``log verify`` (which reads a log directory's files itself, read-only) and
``cluster`` (which runs a local cluster's processes, under ``--dir``) talks to a broker:
``--path DIR`` uses the local broker that owns DIR (started if none runs),
``--bootstrap-server HOST:PORT`` a running one; exactly one of them, or the environment
variable ``SPARK_MQ_PATH``. ``--json`` turns the human-readable output into one
JSON document (JSON lines for ``consume``). ``docs/cli.md`` describes every command.

Exit status, so scripts can tell a typo from an outage::

    0    success
    1    the operation failed (unknown topic, broker unreachable, I/O error, ...)
    2    the command line is wrong (bad option, conflicting flags, bad key=value, bad config)
    130  interrupted by Ctrl-C (SIGINT); 143 by SIGTERM
    141  the reader of stdout went away (``spark-mq consume ... | head``)

Errors print one line, ``spark-mq: error: ...``, to stderr; tracebacks are only for bugs.

>>> main(["--version"])  # doctest: +ELLIPSIS
spark-mq ...
0
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Final, NoReturn

from spark_mq import __version__
from spark_mq.cli import (
    acls,
    broker,
    cluster,
    console,
    groups,
    half_messages,
    log,
    perf,
    quotas,
    records,
    topics,
    transactions,
    users,
)
from spark_mq.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    ArgumentParser,
    CliUsageError,
    Handler,
    broker_options,
)
from spark_mq.errors import ConfigError, InvalidTopicError, SparkMQError

PROG: Final = "spark-mq"

#: One module per command group, each with ``add_parser(commands, common)`` and ``HANDLERS``,
#: in the order ``spark-mq --help`` lists them.
COMMAND_GROUPS: Final = (
    broker,
    cluster,
    topics,
    groups,
    transactions,
    half_messages,
    acls,
    log,
    records,
    perf,
    console,
    users,
    quotas,
)


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler, so ``finally`` blocks still run."""


# ---------------------------------------------------------------------------------------------
# The parser


def build_parser() -> ArgumentParser:
    common = broker_options()
    parser = ArgumentParser(
        prog=PROG,
        description="Run a spark_mq broker, manage topics, produce, consume and measure.",
        epilog="Every command takes --path DIR or --bootstrap-server HOST:PORT, and --json.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in COMMAND_GROUPS:
        group.add_parser(commands, common)
    return parser


# ---------------------------------------------------------------------------------------------
# Running a command


def _handlers() -> dict[str, Handler]:
    handlers: dict[str, Handler] = {}
    for group in COMMAND_GROUPS:
        handlers.update(group.HANDLERS)
    return handlers


def error(message: str) -> None:
    """Print ``spark-mq: error: message`` (one line) to stderr."""
    text = " ".join(message.split())  # one line, whatever the exception's message held
    print(f"{PROG}: error: {text}", file=sys.stderr, flush=True)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the final flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``spark-mq`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    previous_sigterm = None
    try:
        try:
            args = build_parser().parse_args(args_list)
        except SystemExit as exc:  # --help and --version
            return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
        handler = _handlers()[args.handler]
        try:
            previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread: leave SIGTERM alone
            previous_sigterm = None
        return handler(args)
    except CliUsageError as exc:
        error(str(exc))
        return EXIT_USAGE
    except (ConfigError, InvalidTopicError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except SparkMQError as exc:
        error(str(exc))
        return EXIT_ERROR
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        error(f"{where}{exc.strerror or exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        return EXIT_TERMINATED
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def run() -> NoReturn:
    """Console-script entry point: exit with :func:`main`'s status."""
    sys.exit(main())
