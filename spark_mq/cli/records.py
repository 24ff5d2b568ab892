"""``spark-mq produce`` and ``spark-mq consume``: records between a shell and a topic.

``produce`` sends each input line (without its line ending) as one record through a
:class:`~spark_mq.Producer`; ``consume`` assigns the topic's partitions (or one) to a
:class:`~spark_mq.Consumer`, or with ``--group`` subscribes it through the group, and prints
what it polls with a :class:`~spark_mq.cli.format.RecordWriter`. In a group it resumes at
the committed offsets and commits only what it printed. Both read and write bytes, never
text, so binary payloads and any encoding pass through unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence, Set
from contextlib import ExitStack
from typing import IO, Any, Final, cast

from spark_mq import (
    Consumer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    Producer,
    TopicPartition,
)
from spark_mq.cli.common import (
    CliUsageError,
    Handler,
    add_action,
    broker_options,
    consumer_config,
    consumer_options,
    handler_table,
    non_negative_int,
    parse_key_values,
    positive_int,
    producer_config,
    producer_options,
    topic_partitions,
)
from spark_mq.cli.format import (
    RECORD_FORMATS,
    ProgressBar,
    RecordFormat,
    RecordWriter,
    json_text,
    plural,
    progress_wanted,
    render_table,
)
from spark_mq.client.group.offsets import OffsetsArg
from spark_mq.config import parse_bool
from spark_mq.errors import SparkMQError, UnknownTopicOrPartitionError

#: Resolve this many send() futures at a time, so memory stays bounded for any input size.
PRODUCE_WINDOW: Final = 10_000
#: max_records of each poll() of consume.
POLL_MAX_RECORDS: Final = 500
#: poll() timeout of consume: short enough that Ctrl-C and the end check are prompt.
POLL_TIMEOUT_MS: Final = 500


def _stdout_bytes() -> IO[bytes]:
    sys.stdout.flush()
    return sys.stdout.buffer


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        yield line[:-1] if line.endswith(b"\r") else line


# ---------------------------------------------------------------------------------------------
# produce


class _PartitionTally:
    """Records and first/last offset per partition, from acknowledged metadata."""

    def __init__(self) -> None:
        self.by_partition: dict[int, list[int]] = {}  # partition -> [records, first, last]

    def add(self, partition: int, offset: int) -> None:
        entry = self.by_partition.get(partition)
        if entry is None:
            self.by_partition[partition] = [1, offset, offset]
        else:
            entry[0] += 1
            entry[1] = min(entry[1], offset)
            entry[2] = max(entry[2], offset)

    def rows(self) -> list[dict[str, int]]:
        return [
            {"partition": p, "records": n, "first_offset": first, "last_offset": last}
            for p, (n, first, last) in sorted(self.by_partition.items())
        ]


def produce(args: argparse.Namespace) -> int:
    config = producer_config(args)
    headers = [(k, v.encode("utf-8")) for k, v in parse_key_values(args.header, "--header").items()]
    sep = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    if sep == b"":
        raise CliUsageError("--key-separator must not be empty")

    tally = _PartitionTally()
    pending: list[Any] = []
    count = 0

    def settle() -> None:
        for future in pending:
            md = future.get()
            tally.add(md.partition, md.offset)
        pending.clear()

    with ExitStack() as stack:
        source: IO[bytes]
        if args.file is not None:
            source = stack.enter_context(open(args.file, "rb"))
            # A file's size is known: the bar counts its bytes, with an ETA.
            progress = ProgressBar(
                os.fstat(source.fileno()).st_size, enabled=progress_wanted(args), unit="B"
            )
        else:
            source = sys.stdin.buffer
            progress = ProgressBar(None, enabled=progress_wanted(args))
        stack.callback(lambda: progress.finish(source.tell() if args.file else count))
        producer = stack.enter_context(Producer(**config))
        for lineno, line in enumerate(_lines(source), start=1):
            key: bytes | None = None
            value = line
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    settle()
                    raise CliUsageError(
                        f"line {lineno} has no key separator {args.key_separator!r} "
                        f"({count} records before it were sent)"
                    )
            pending.append(
                producer.send(
                    args.topic,
                    value=value,
                    key=key,
                    partition=args.partition,
                    headers=headers or None,
                )
            )
            count += 1
            if len(pending) >= PRODUCE_WINDOW:
                settle()
                progress.update(source.tell() if args.file else count)
        producer.flush()
        settle()

    rows = tally.rows()
    if args.json:
        print(json_text({"topic": args.topic, "records": count, "partitions": rows}))
    else:
        print(f"Produced {plural(count, 'record')} to {args.topic}.")
        if rows:
            print(
                render_table(
                    ["partition", "records", "first offset", "last offset"],
                    [
                        [r["partition"], r["records"], r["first_offset"], r["last_offset"]]
                        for r in rows
                    ],
                )
            )
    return 0


# ---------------------------------------------------------------------------------------------
# consume


def consume(args: argparse.Namespace) -> int:
    fmt: RecordFormat = args.format or ("json" if args.json else "text")
    if args.json and fmt != "json":
        raise CliUsageError(f"--json prints JSON lines; it cannot be combined with --format {fmt}")
    if args.offset is not None and args.partition is None:
        raise CliUsageError("--offset needs --partition (an offset belongs to one partition)")
    config = consumer_config(args)
    group = _group_settings(args, config)
    writer = RecordWriter(
        _stdout_bytes(),
        fmt,
        print_key=args.print_key,
        print_offset=args.print_offset,
        print_timestamp=args.print_timestamp,
        print_headers=args.print_headers,
        separator=args.separator.encode("utf-8"),
    )
    count = 0
    # Records go to stdout: the bar shows only when they go elsewhere (a file, a pipe).
    progress = ProgressBar(args.max_messages, enabled=progress_wanted(args, output_is_data=True))
    with Consumer(**config) as consumer:
        printed = _PrintedOffsets(consumer, commit=group is not None and group.commit)
        tps = topic_partitions(consumer, args.topic)
        if group is None:
            _assign(consumer, args, tps)
        else:
            consumer.subscribe([args.topic], listener=printed)
        try:
            # Without --follow, stop at the end as it is now: the last stable offset
            # (read_committed) or the high watermark of each partition.
            end = {} if args.follow else consumer.end_offsets(tps)
            last_record_s = time.monotonic()
            while args.follow or not _at_end(consumer, end, in_group=group is not None):
                limit = POLL_MAX_RECORDS
                if args.max_messages is not None:
                    limit = min(limit, args.max_messages - count)
                polled = consumer.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=limit)
                got = 0
                printed.writing = True
                for tp in sorted(polled):
                    for record in polled[tp]:
                        # Counted before it is written: once its line is out, a signal (a
                        # reader stopping us after the last line) must not drop it from
                        # the total printed below.
                        count += 1
                        got += 1
                        writer.write(record)
                if got:
                    writer.flush()
                    # Only once flushed are they shown (and committable).
                    printed.add(polled)
                    last_record_s = time.monotonic()
                    progress.update(count)
                printed.writing = False
                # Also while idle: the last records printed before the topic went quiet are
                # committed once the interval passes (Kafka's auto-commit runs in every
                # poll), so the group's lag does not stay stale until more records come.
                if got or printed.pending:
                    printed.commit_if_due()
                if args.max_messages is not None and count >= args.max_messages:
                    break
                idle_ms = (time.monotonic() - last_record_s) * 1000
                if args.timeout_ms is not None and not got and idle_ms >= args.timeout_ms:
                    break
        except BaseException:
            printed.commit_quietly()
            raise
        else:
            printed.commit()
        finally:
            progress.finish(count)
            print(f"Consumed {plural(count, 'record')}.", file=sys.stderr)
    return 0


@dataclasses.dataclass(frozen=True)
class _GroupSettings:
    group_id: str
    #: Commit what was printed (False when the user set enable.auto.commit=false).
    commit: bool


def _group_settings(args: argparse.Namespace, config: dict[str, Any]) -> _GroupSettings | None:
    """Fold ``--group`` and ``--from-beginning`` into the consumer's settings, as Kafka's
    console consumer does: with a group, reading resumes at the committed offsets, and
    ``--from-beginning`` is ``auto.offset.reset=earliest`` (for partitions the group has no
    offset of). The consumer never auto-commits: :class:`_PrintedOffsets` commits what was
    printed, so a record is never marked consumed without having been shown."""
    given = config.get("group.id")
    if args.group is not None and given not in (None, args.group):
        raise CliUsageError(f"--group {args.group} and -X group.id={given} disagree; give one")
    group_id = args.group if args.group is not None else given
    if not group_id:
        return None
    if args.partition is not None:
        raise CliUsageError(
            "--partition (and --offset) read one partition without a group; with --group the "
            "group shares the topic's partitions out among its members"
        )
    reset = config.get("auto.offset.reset")
    if args.from_beginning:
        if reset not in (None, "earliest"):
            raise CliUsageError(
                f"--from-beginning is auto.offset.reset=earliest; it cannot be combined with "
                f"-X auto.offset.reset={reset}"
            )
        config["auto.offset.reset"] = "earliest"
    commit = parse_bool("enable.auto.commit", config.get("enable.auto.commit", True))
    config["group.id"] = group_id
    config["enable.auto.commit"] = "false"
    return _GroupSettings(group_id, commit)


class _PrintedOffsets(ConsumerRebalanceListener):
    """Commits to the group what the command has shown: every ``auto.commit.interval.ms``
    while records arrive, when partitions are revoked, and on exit.

    Between writes, a partition's position is committed: every record before it was printed
    or skipped on purpose (the start chosen by ``auto.offset.reset``, transaction markers),
    so a group that started at the end keeps that place as Kafka's console consumer does.
    While records are being written (a broken pipe or a signal can stop the command between
    two of them) only the offset after the last printed record is committed. Inside a
    rebalance, too, only printed offsets are committed: looking positions up there could
    start requests in the middle of the rebalance."""

    def __init__(self, consumer: Consumer, *, commit: bool) -> None:
        self._consumer = consumer
        self._enabled = commit
        #: Offset after the last printed record, per partition, not yet committed.
        self._pending: dict[TopicPartition, int] = {}
        self._interval_s = consumer.config.auto_commit_interval_ms / 1000
        self._last_commit_s = time.monotonic()
        #: True while polled records are being written: positions run ahead of the output.
        self.writing = False

    def add(self, polled: Mapping[TopicPartition, Sequence[ConsumerRecord]]) -> None:
        if self._enabled:
            for tp, records in polled.items():
                if records:
                    self._pending[tp] = records[-1].offset + 1

    @property
    def pending(self) -> bool:
        """Whether records were printed since the last commit."""
        return bool(self._pending)

    def commit(self) -> None:
        """Commit the positions (or, while writing, what was printed)."""
        if not self._enabled:
            return
        offsets: dict[TopicPartition, int] = dict(self._pending)
        if not self.writing:
            for tp in self._consumer.assignment():
                offsets[tp] = self._consumer.position(tp)
        self._commit(offsets)

    def _commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            self._consumer.commit(cast("OffsetsArg", offsets))
            for tp in offsets:
                self._pending.pop(tp, None)
        self._last_commit_s = time.monotonic()

    def commit_if_due(self) -> None:
        if time.monotonic() - self._last_commit_s >= self._interval_s:
            self.commit()

    def commit_quietly(self) -> None:
        """On the way out after an error or a signal: commit, warning (not raising) if that
        fails, so that the error that stopped the command is the one reported."""
        try:
            self.commit()
        except SparkMQError as exc:
            print(
                f"spark-mq: warning: what was printed was not committed ({exc}); the group "
                "will read those records again",
                file=sys.stderr,
            )

    def on_partitions_revoked(self, partitions: Set[TopicPartition]) -> None:
        # Committed before another member gets them, so it starts after what we printed.
        if self._enabled:
            self._commit({tp: o for tp, o in self._pending.items() if tp in partitions})

    def on_partitions_lost(self, partitions: Set[TopicPartition]) -> None:
        # This member left the group's generation (it was too slow or cut off): the group
        # refuses its commits, and another member may be reading these partitions already,
        # which reads what was printed of them since the last commit again.
        for tp in partitions:
            self._pending.pop(tp, None)


def _at_end(consumer: Consumer, end: dict[TopicPartition, int], *, in_group: bool) -> bool:
    """Whether every partition read has reached the end it had when the command started. In
    a group: once this member has joined (before that it has no partitions to check)."""
    if in_group and consumer.group_metadata().generation_id < 0:
        return False
    return all(consumer.position(tp) >= end[tp] for tp in consumer.assignment())


def _assign(consumer: Any, args: argparse.Namespace, tps: list[TopicPartition]) -> None:
    """Assign the topic's partitions (or ``--partition``) and seek to the start position."""
    if args.partition is not None:
        if args.partition >= len(tps):
            raise UnknownTopicOrPartitionError(
                f"topic {args.topic!r} has no partition {args.partition} (it has {len(tps)}: "
                f"0-{len(tps) - 1})",
                topic=args.topic,
                partition=args.partition,
            )
        tps = [tps[args.partition]]
    consumer.assign(tps)
    if args.offset is not None:
        consumer.seek(tps[0], args.offset)
    elif args.from_beginning:
        consumer.seek_to_beginning(tps)
    else:
        consumer.seek_to_end(tps)


# ---------------------------------------------------------------------------------------------
# The parser


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``produce`` and ``consume`` on the ``spark-mq`` command parser."""
    produce_cmd = add_action(
        commands,
        "produce",
        produce,
        parents=[common],
        help="send lines of stdin (or --file) as records",
        description="Send every input line as one record (the line without its newline).",
    )
    produce_cmd.add_argument("topic")
    produce_cmd.add_argument("--file", "-f", metavar="FILE", help="read lines from FILE, not stdin")
    produce_cmd.add_argument(
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (a line without it fails)",
    )
    produce_cmd.add_argument(
        "--header",
        action="append",
        metavar="KEY=VALUE",
        help="header added to every record (repeatable)",
    )
    produce_cmd.add_argument(
        "--partition", type=non_negative_int, help="send every record to this partition"
    )
    produce_cmd.add_argument(
        "--progress",
        action="store_true",
        help="draw a progress bar on stderr even when it is not a terminal",
    )
    producer_options(
        produce_cmd,
        acks_help="acknowledgement (default: all)",
        compression_help="batch codec (default: none)",
    )

    consume_cmd = add_action(
        commands,
        "consume",
        consume,
        parents=[broker_options("JSON lines, one record each (same as --format json)")],
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
    consume_cmd.add_argument("topic")
    consume_cmd.add_argument(
        "--group",
        metavar="GROUP",
        help="read as a member of consumer group GROUP (group.id): resume at its committed "
        "offsets, commit what was printed",
    )
    start_at = consume_cmd.add_mutually_exclusive_group()
    start_at.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (with --group: where the group has no offset)",
    )
    start_at.add_argument(
        "--offset", type=non_negative_int, help="start at this offset (needs --partition)"
    )
    consume_cmd.add_argument(
        "--partition", type=non_negative_int, help="read only this partition (default: all)"
    )
    consume_cmd.add_argument(
        "--max-messages", type=positive_int, help="exit after this many records"
    )
    consume_cmd.add_argument(
        "--follow", action="store_true", help="keep waiting for new records (Ctrl-C to stop)"
    )
    consume_cmd.add_argument(
        "--timeout-ms",
        type=positive_int,
        help="exit when no record arrived for this long (default: never with --follow)",
    )
    consume_cmd.add_argument(
        "--format", choices=RECORD_FORMATS, help="text (default), json (lines) or csv"
    )
    consume_cmd.add_argument("--print-key", action="store_true", help="text: key before the value")
    consume_cmd.add_argument(
        "--print-offset", action="store_true", help="text: partition:offset first"
    )
    consume_cmd.add_argument("--print-timestamp", action="store_true", help="text: timestamp (ms)")
    consume_cmd.add_argument("--print-headers", action="store_true", help="text: k=v,k=v headers")
    consume_cmd.add_argument(
        "--separator", default="\t", help="text: between the printed fields (default: tab)"
    )
    consume_cmd.add_argument(
        "--progress",
        action="store_true",
        help="draw a progress bar on stderr even when it is not a terminal",
    )
    consumer_options(
        consume_cmd, isolation_help="read_committed (default) hides open and aborted transactions"
    )


HANDLERS: Final[dict[str, Handler]] = handler_table(produce, consume)
