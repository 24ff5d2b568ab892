"""``spark-mq log verify``: check a log directory's segments offline, without a broker.

Unlike every other command this one reads the files of a log directory itself, read-only
(:mod:`spark_mq.storage.log_verify`): no broker is started or asked, no lock is taken and
nothing is written, so it works on a stopped broker's directory, on a read-only copy, and
beside a running broker. It prints one line per segment, then each bad batch with its byte
position, the offset its header claims, what is wrong, and the offset where intact batches
resume (where a consumer can ``seek`` to skip the damage). Exit status 1 when anything is bad.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Final

from spark_mq.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    CliUsageError,
    CommandGroup,
    Handler,
    handler_table,
    non_negative_int,
)
from spark_mq.cli.format import plural, print_result, render_table
from spark_mq.storage.log_verify import BadBatch, PartitionReport, SegmentReport, verify_log_dir


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``log`` and its actions on the ``spark-mq`` command parser. It leaves out
    ``common``, the broker options every other command takes: this one reads files, it asks
    no broker."""
    actions = CommandGroup(
        commands, "log", help="inspect a log directory's files (no broker needed)", parents=()
    )
    verify = actions.add(
        "verify",
        log_verify,
        help="check every batch of every segment (header, CRC, body), read-only",
        description=(
            "Read every segment file of a log directory and check each record batch as a "
            "consumer does (header, CRC-32C, body), and that offsets only grow. Read-only: "
            "no broker is started, no lock taken, nothing written, so it works on a "
            "read-only copy and beside a running broker. Exit status 1 if anything is bad."
        ),
    )
    verify.add_argument(
        "--dir",
        required=True,
        metavar="DIR",
        help="the log directory (or one <topic>-<partition> directory in it)",
    )
    verify.add_argument("--topic", help="only this topic's partitions")
    verify.add_argument(
        "--partition", type=non_negative_int, metavar="P", help="only this partition (with --topic)"
    )
    verify.add_argument(
        "--verify-index",
        action="store_true",
        help="also check the offset and time indexes against the batches (best on a stopped "
        "broker's directory: a running one resizes its active segment's indexes)",
    )
    verify.add_argument("--json", action="store_true", help="print one JSON document")


def log_verify(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise CliUsageError("--partition needs --topic")
    reports = verify_log_dir(
        Path(args.dir),
        topic=args.topic,
        partition=args.partition,
        verify_index=args.verify_index,
    )
    document = {
        "dir": args.dir,
        "ok": all(r.ok for r in reports),
        "partitions": [_partition_json(r) for r in reports],
    }
    print_result(args.json, document, _reports_text(reports))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_ERROR


def _name(report: PartitionReport) -> str:
    if report.partition < 0:
        return str(report.directory)
    return f"{report.topic}-{report.partition}"


def _offsets(segment: SegmentReport) -> str:
    if segment.first_offset is None:
        return "-"
    return f"{segment.first_offset}-{segment.last_offset}"


def _reports_text(reports: list[PartitionReport]) -> str:
    """What ``log verify`` prints for people: per partition a table of its segments and a
    line per problem, then the verdict."""
    lines: list[str] = []
    segments = bad_segments = batches = records = bad_batches = 0
    for report in reports:
        lines.append(f"{_name(report)}  ({report.directory})")
        rows = []
        for segment in report.segments:
            segments += 1
            batches += segment.batches
            records += segment.records
            bad_batches += len(segment.bad_batches)
            if not segment.ok:
                bad_segments += 1
            problems = []
            if segment.bad_batches:
                problems.append(plural(len(segment.bad_batches), "bad batch", "es"))
            if segment.index_problems:
                problems.append("index problems")
            status = "BAD: " + ", ".join(problems) if problems else "ok"
            rows.append(
                [
                    segment.path.name,
                    segment.size_bytes,
                    segment.batches,
                    segment.records,
                    _offsets(segment),
                    status,
                ]
            )
        if rows:
            table = render_table(
                ["segment", "bytes", "batches", "records", "offsets", "status"], rows
            )
            lines.extend("  " + line for line in table.splitlines())
        else:
            lines.append("  (no segment files)")
        for segment in report.segments:
            for bad in segment.bad_batches:
                lines.append(f"  {segment.path.name}: {_describe(report, bad)}")
            for problem in segment.index_problems:
                lines.append(f"  {segment.path.name}: {problem}")
    verdict = (
        "all intact"
        if not bad_segments
        else f"{plural(bad_batches, 'bad batch', 'es')} in {plural(bad_segments, 'segment')}"
    )
    lines.append(
        f"Checked {plural(len(reports), 'partition')}, {plural(segments, 'segment')}, "
        f"{batches} batches, {records} records: {verdict}."
    )
    return "\n".join(lines)


def _describe(report: PartitionReport, bad: BadBatch) -> str:
    where = f"position {bad.position}"
    if bad.offset is not None:
        where += f", offset {bad.offset} (per its header)"
    text = f"{where}: {bad.reason}"
    if bad.resume_position is None:
        return text + "; no intact batch follows in this segment"
    text += f"; intact batches resume at position {bad.resume_position}, offset {bad.resume_offset}"
    if report.partition >= 0:
        text += (
            f" (a consumer skips the damage with seek(TopicPartition({report.topic!r}, "
            f"{report.partition}), {bad.resume_offset}))"
        )
    return text


def _partition_json(report: PartitionReport) -> dict[str, Any]:
    return {
        "topic": report.topic,
        "partition": report.partition,
        "directory": str(report.directory),
        "ok": report.ok,
        "segments": [
            {
                "file": segment.path.name,
                "base_offset": segment.base_offset,
                "size_bytes": segment.size_bytes,
                "batches": segment.batches,
                "records": segment.records,
                "first_offset": segment.first_offset,
                "last_offset": segment.last_offset,
                "ok": segment.ok,
                "bad_batches": [
                    {
                        "position": bad.position,
                        "offset": bad.offset,
                        "reason": bad.reason,
                        "resume_position": bad.resume_position,
                        "resume_offset": bad.resume_offset,
                    }
                    for bad in segment.bad_batches
                ],
                "index_problems": segment.index_problems,
            }
            for segment in report.segments
        ],
    }


#: The handlers ``spark_mq.cli`` dispatches to, by the names set above.
HANDLERS: Final[dict[str, Handler]] = handler_table(log_verify)
