"""``spark-mq produce`` and ``spark-mq consume``: records between a shell and a topic.

``produce`` sends each input line (without its line ending) as one record through a
:class:`~spark_mq.Producer`; ``consume`` assigns the topic's partitions (or one) to a
:class:`~spark_mq.Consumer` and prints what it polls with a
:class:`~spark_mq.cli_format.RecordWriter`. Both read and write bytes, never text, so binary
payloads and any encoding pass through unchanged.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import IO, Any, Final

from spark_mq import Consumer, Producer, TopicPartition
from spark_mq.cli_common import CliUsageError, client_config, parse_key_values, topic_partitions
from spark_mq.cli_format import RecordFormat, RecordWriter, json_text, render_table
from spark_mq.errors import UnknownTopicOrPartitionError

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
    config = client_config(args)
    if args.acks is not None:
        config["acks"] = args.acks
    if args.compression is not None:
        config["compression.type"] = args.compression
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
        else:
            source = sys.stdin.buffer
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
        producer.flush()
        settle()

    rows = tally.rows()
    if args.json:
        print(json_text({"topic": args.topic, "records": count, "partitions": rows}))
    else:
        print(f"Produced {count} record{'s' if count != 1 else ''} to {args.topic}.")
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
    config = client_config(args)
    if args.isolation_level is not None:
        config["isolation.level"] = args.isolation_level
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
    with Consumer(**config) as consumer:
        tps = _assign(consumer, args)
        try:
            # Without --follow, stop at the end as it is now: the last stable offset
            # (read_committed) or the high watermark of each partition.
            end = {} if args.follow else consumer.end_offsets(tps)
            remaining = {tp for tp in tps if args.follow or consumer.position(tp) < end[tp]}
            last_record_s = time.monotonic()
            while remaining:
                limit = POLL_MAX_RECORDS
                if args.max_messages is not None:
                    limit = min(limit, args.max_messages - count)
                polled = consumer.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=limit)
                got = 0
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
                    last_record_s = time.monotonic()
                if args.max_messages is not None and count >= args.max_messages:
                    break
                if not args.follow:
                    remaining = {tp for tp in remaining if consumer.position(tp) < end[tp]}
                idle_ms = (time.monotonic() - last_record_s) * 1000
                if args.timeout_ms is not None and not got and idle_ms >= args.timeout_ms:
                    break
        finally:
            print(f"Consumed {count} record{'s' if count != 1 else ''}.", file=sys.stderr)
    return 0


def _assign(consumer: Any, args: argparse.Namespace) -> list[TopicPartition]:
    """Assign the topic's partitions (or ``--partition``) and seek to the start position."""
    tps = topic_partitions(consumer, args.topic)
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
    return tps
