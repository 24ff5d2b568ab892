"""``spark-mq``: the command line of spark_mq (broker, topics, groups, transactions,
produce, consume, perf, log verify).

Every command but ``log verify`` (which reads a log directory's files itself, read-only) talks
to a broker: ``--path DIR`` uses the local broker that owns DIR (started
if none runs), ``--bootstrap-server HOST:PORT`` a running one; exactly one of them, or the
environment variable ``SPARK_MQ_PATH``. ``--json`` turns the human-readable output into one
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

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Final, NoReturn

from spark_mq import (
    __version__,
    cli_broker,
    cli_groups,
    cli_log,
    cli_perf,
    cli_records,
    cli_topics,
    cli_transactions,
)
from spark_mq.cli_common import (
    ENV_PATH,
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    CliUsageError,
    any_int,
    non_negative_int,
    positive_int,
)
from spark_mq.cli_format import RECORD_FORMATS
from spark_mq.errors import ConfigError, InvalidTopicError, SparkMQError

PROG: Final = "spark-mq"


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler, so ``finally`` blocks still run."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse with our exit status and message prefix for usage errors."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise CliUsageError(message)


def _common(json_help: str = "print one JSON document instead of a table") -> _ArgumentParser:
    """Options every command accepts (after the command name)."""
    p = _ArgumentParser(add_help=False)
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


def _client_props(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--property",
        "-X",
        action="append",
        metavar="KEY=VALUE",
        help=f"{what} setting with Kafka's key (repeatable), e.g. {_PROPERTY_EXAMPLES[what]}",
    )


# ---------------------------------------------------------------------------------------------
# The parser


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _ArgumentParser(
        prog=PROG,
        description="Run a spark_mq broker, manage topics, produce, consume and measure.",
        epilog="Every command takes --path DIR or --bootstrap-server HOST:PORT, and --json.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # broker ------------------------------------------------------------------------------
    broker = commands.add_parser("broker", help="start, stop or inspect a broker")
    broker_cmds = broker.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = broker_cmds.add_parser(
        "start",
        parents=[common],
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
    start.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=30_000,
        help="--detach: how long to wait for the broker to answer (default %(default)s)",
    )
    start.set_defaults(handler="broker_start")
    stop = broker_cmds.add_parser("stop", parents=[common], help="stop the broker of --path")
    stop.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=30_000,
        help="how long to wait for a clean shutdown (default %(default)s)",
    )
    stop.set_defaults(handler="broker_stop")
    status = broker_cmds.add_parser("status", parents=[common], help="is a broker running?")
    status.set_defaults(handler="broker_status")
    kept = broker_cmds.add_parser(
        "config",
        parents=[common],
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
    kept.set_defaults(handler="broker_config")

    # topics ------------------------------------------------------------------------------
    topics = commands.add_parser("topics", help="create, list, describe, alter, delete topics")
    topic_cmds = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = topic_cmds.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument(
        "--partitions",
        type=positive_int,
        help="number of partitions (default: the broker's num.partitions, 1 unless set)",
    )
    create.add_argument(
        "--replication-factor", type=positive_int, default=1, help="(default %(default)s)"
    )
    create.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="topic setting (repeatable), e.g. retention.ms=86400000",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )
    create.set_defaults(handler="topics_create")
    lst = topic_cmds.add_parser("list", parents=[common], help="list topics")
    lst.set_defaults(handler="topics_list")
    describe = topic_cmds.add_parser(
        "describe", parents=[common], help="partitions, offsets and settings of a topic"
    )
    describe.add_argument("topic")
    describe.set_defaults(handler="topics_describe")
    alter = topic_cmds.add_parser(
        "alter", parents=[common], help="add partitions or change settings"
    )
    alter.add_argument("topic")
    alter.add_argument(
        "--partitions", type=positive_int, help="new total number of partitions (only grows)"
    )
    alter.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="set a topic setting (repeatable)"
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        metavar="KEY",
        help="remove a topic setting so the broker default applies again (repeatable)",
    )
    alter.set_defaults(handler="topics_alter")
    delete = topic_cmds.add_parser("delete", parents=[common], help="delete a topic")
    delete.add_argument("topic")
    delete.add_argument("--if-exists", action="store_true", help="succeed if there is none")
    delete.set_defaults(handler="topics_delete")

    # groups ------------------------------------------------------------------------------
    cli_groups.add_parser(commands, common)
    cli_transactions.add_parser(commands, common)
    cli_log.add_parser(commands)

    # produce -----------------------------------------------------------------------------
    produce = commands.add_parser(
        "produce",
        parents=[common],
        help="send lines of stdin (or --file) as records",
        description="Send every input line as one record (the line without its newline).",
    )
    produce.add_argument("topic")
    produce.add_argument("--file", "-f", metavar="FILE", help="read lines from FILE, not stdin")
    produce.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (a line without it fails)",
    )
    produce.add_argument(
        "--header",
        action="append",
        metavar="KEY=VALUE",
        help="header added to every record (repeatable)",
    )
    produce.add_argument(
        "--partition", type=non_negative_int, help="send every record to this partition"
    )
    produce.add_argument(
        "--acks", choices=("all", "-1", "0", "1"), help="acknowledgement (default: all)"
    )
    produce.add_argument(
        "--compression",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        help="batch codec (default: none)",
    )
    _client_props(produce, "producer")
    produce.set_defaults(handler="produce")

    # consume -----------------------------------------------------------------------------
    consume = commands.add_parser(
        "consume",
        parents=[_common("JSON lines, one record each (same as --format json)")],
        help="print records of a topic",
        description=(
            "Print records, then exit at the end of the log (as it was at the start) or after "
            "--max-messages; --follow keeps waiting for new ones until Ctrl-C or SIGTERM. "
            "Without --from-beginning or --offset, reading starts at the end (as Kafka's "
            "console consumer does), which is mostly useful with --follow. With --group, "
            "reading resumes at the group's committed offsets, and what was printed is "
            "committed."
        ),
    )
    consume.add_argument("topic")
    consume.add_argument(
        "--group",
        metavar="GROUP",
        help="read as a member of consumer group GROUP (group.id): resume at its committed "
        "offsets, commit what was printed",
    )
    start_at = consume.add_mutually_exclusive_group()
    start_at.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (with --group: where the group has no offset)",
    )
    start_at.add_argument(
        "--offset", type=non_negative_int, help="start at this offset (needs --partition)"
    )
    consume.add_argument(
        "--partition", type=non_negative_int, help="read only this partition (default: all)"
    )
    consume.add_argument("--max-messages", type=positive_int, help="exit after this many records")
    consume.add_argument(
        "--follow", action="store_true", help="keep waiting for new records (Ctrl-C to stop)"
    )
    consume.add_argument(
        "--timeout-ms",
        type=positive_int,
        help="exit when no record arrived for this long (default: never with --follow)",
    )
    consume.add_argument(
        "--format", choices=RECORD_FORMATS, help="text (default), json (lines) or csv"
    )
    consume.add_argument("--print-key", action="store_true", help="text: key before the value")
    consume.add_argument("--print-offset", action="store_true", help="text: partition:offset first")
    consume.add_argument("--print-timestamp", action="store_true", help="text: timestamp (ms)")
    consume.add_argument("--print-headers", action="store_true", help="text: k=v,k=v headers")
    consume.add_argument(
        "--separator", default="\t", help="text: between the printed fields (default: tab)"
    )
    consume.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        help="read_committed (default) hides open and aborted transactions",
    )
    _client_props(consume, "consumer")
    consume.set_defaults(handler="consume")

    # perf --------------------------------------------------------------------------------
    perf = commands.add_parser("perf", help="measure produce or consume throughput")
    perf_cmds = perf.add_subparsers(dest="action", metavar="ACTION", required=True)
    perf_common = _ArgumentParser(add_help=False)
    perf_common.add_argument("topic")
    perf_common.add_argument(
        "--num-records", type=positive_int, required=True, help="records to send or read"
    )
    perf_common.add_argument(
        "--batch",
        action="store_true",
        help="use the columnar API (send_batch / poll_batch) instead of send / poll",
    )
    perf_common.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )
    pp = perf_cmds.add_parser(
        "produce",
        parents=[common, perf_common],
        help="send records as fast as allowed (like kafka-producer-perf-test)",
    )
    pp.add_argument(
        "--record-size", type=positive_int, default=100, help="value bytes (default 100)"
    )
    pp.add_argument(
        "--throughput",
        type=any_int,
        default=-1,
        help="records/s to aim for; -1 for as fast as possible (default)",
    )
    pp.add_argument(
        "--batch-records",
        type=positive_int,
        default=10_000,
        help="--batch: records per send_batch call (default %(default)s)",
    )
    pp.add_argument("--acks", choices=("all", "-1", "0", "1"), help="(default: all)")
    pp.add_argument(
        "--compression", choices=("none", "gzip", "snappy", "lz4", "zstd"), help="batch codec"
    )
    _client_props(pp, "producer")
    pp.set_defaults(handler="perf_produce")
    pc = perf_cmds.add_parser(
        "consume",
        parents=[common, perf_common],
        help="read records from the beginning (like kafka-consumer-perf-test)",
    )
    pc.add_argument(
        "--timeout-ms",
        type=positive_int,
        default=10_000,
        help="give up when no record arrives for this long (default %(default)s)",
    )
    pc.add_argument(
        "--max-records",
        type=positive_int,
        default=10_000,
        help="max_records of each poll() (default %(default)s; poll_batch is bounded by "
        "the fetch sizes)",
    )
    pc.add_argument(
        "--isolation-level", choices=("read_committed", "read_uncommitted"), help="see consume"
    )
    _client_props(pc, "consumer")
    pc.set_defaults(handler="perf_consume")
    return parser


# ---------------------------------------------------------------------------------------------
# Running a command


def _handlers() -> dict[str, Callable[[argparse.Namespace], int]]:
    return {
        "broker_start": cli_broker.broker_start,
        "broker_stop": cli_broker.broker_stop,
        "broker_status": cli_broker.broker_status,
        "broker_config": cli_broker.broker_config,
        "topics_create": cli_topics.topics_create,
        "topics_list": cli_topics.topics_list,
        "topics_describe": cli_topics.topics_describe,
        "topics_alter": cli_topics.topics_alter,
        "topics_delete": cli_topics.topics_delete,
        "produce": cli_records.produce,
        "consume": cli_records.consume,
        "perf_produce": cli_perf.perf_produce,
        "perf_consume": cli_perf.perf_consume,
        **cli_groups.HANDLERS,
        **cli_transactions.HANDLERS,
        **cli_log.HANDLERS,
    }


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


if __name__ == "__main__":
    run()
