"""``spark-mq groups list|describe|reset-offsets|delete``: consumer groups through
:class:`~spark_mq.Admin`, like Kafka's ``kafka-consumer-groups``.

``describe`` joins the group's description (state, members, assignment) with its committed
offsets and each partition's end offset (the last stable offset: the end a ``read_committed``
consumer reads to), giving the lag per partition. ``reset-offsets`` computes new committed
offsets for one topic (all its partitions, or one) and, like Kafka, only prints the plan
unless ``--execute`` is given; it refuses a group that has members, because their next
commit would overwrite the reset.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any, Final

from spark_mq import Admin, TopicPartition
from spark_mq.cli.common import (
    CliUsageError,
    CommandGroup,
    Handler,
    admin_client,
    any_int,
    handler_table,
    non_negative_int,
    positive_int,
)
from spark_mq.cli.format import plural, print_listing, print_result, render_table
from spark_mq.client.group.admin_groups import ALTERABLE_STATES
from spark_mq.errors import GroupIdNotFoundError, NonEmptyGroupError, UsageError

# ---------------------------------------------------------------------------------------------
# list


def groups_list(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        listings = admin.list_groups(args.state or ())
    print_listing(
        args.json,
        [
            {"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type}
            for g in listings
        ],
        ["group", "state", "protocol type"],
        [(g.group_id, g.state, g.protocol_type or "-") for g in listings],
        empty="No groups.",
    )
    return 0


# ---------------------------------------------------------------------------------------------
# describe


def describe_document(admin: Admin, group_id: str) -> dict[str, Any]:
    """Everything ``groups describe`` shows, as one JSON-ready document."""
    description = admin.describe_group(group_id)
    lag = admin.group_lag(group_id)
    if description.state == "Dead" and not lag:
        raise GroupIdNotFoundError(
            f"group {group_id!r} does not exist (no members, no committed offsets); "
            "list the groups with: spark-mq groups list"
        )
    return {
        "group": group_id,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "generation": description.generation_id,
        "coordinator": description.coordinator_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [
                    {"topic": tp.topic, "partition": tp.partition} for tp in m.assignment
                ],
            }
            for m in description.members
        ],
        "partitions": [
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "member_id": p.member_id,
                "committed_offset": p.committed,
                "end_offset": p.end_offset,
                "lag": p.lag,
            }
            for tp, p in lag.items()
        ],
    }


def _dash(value: int | None) -> int | None:
    """None (printed as ``-``) for an unknown offset (None or -1)."""
    return None if value is None or value < 0 else value


def groups_describe(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        document = describe_document(admin, args.group)
    print_result(args.json, document, _describe_text(args.group, document))
    return 0


def _describe_text(group_id: str, document: dict[str, Any]) -> str:
    """What ``groups describe`` prints for people: a summary line, then the members and the
    partitions (each table only when there is something in it)."""
    members = document["members"]
    parts = document["partitions"]
    total_lag = sum(p["lag"] or 0 for p in parts)
    protocol = f", assignor {document['protocol']}" if document["protocol"] else ""
    lines = [
        f"Group {group_id}: {document['state']}{protocol}, generation "
        f"{document['generation']}, {plural(len(members), 'member')}, "
        f"total lag {total_lag} (coordinator {document['coordinator']})"
    ]
    if members:
        rows = [
            [
                m["member_id"],
                m["group_instance_id"] or "-",
                m["client_id"] or "-",
                m["host"] or "-",
                ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]) or "-",
            ]
            for m in members
        ]
        lines += ["", render_table(["member", "instance", "client id", "host", "partitions"], rows)]
    if parts:
        rows = [
            [
                p["topic"],
                p["partition"],
                _dash(p["committed_offset"]),
                _dash(p["end_offset"]),
                _dash(p["lag"]),
                p["member_id"] or "-",
            ]
            for p in parts
        ]
        headers = ["topic", "partition", "committed", "end offset", "lag", "member"]
        lines += ["", render_table(headers, rows)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# reset-offsets


def parse_datetime_ms(text: str) -> int:
    """An ISO 8601 date-time as ms since the epoch. ``Z`` or an offset (``+02:00``) says
    which zone; without one it is local time (the ``TZ`` of this process), as Kafka's
    ``kafka-consumer-groups --to-datetime`` reads it. A date alone is local midnight.

    >>> parse_datetime_ms("1970-01-01T00:00:01.5Z"), parse_datetime_ms("1970-01-01T02:00+02:00")
    (1500, 0)
    """
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise CliUsageError(
            f"--to-datetime {text!r} is not an ISO 8601 date-time, e.g. 2026-11-21T14:00:00 "
            "(local time), 2026-11-21T14:00:00Z (UTC) or 2026-11-21T14:00:00+02:00"
        ) from None
    if moment.tzinfo is None:
        # The local zone's offset at that moment (daylight saving included); a time that a
        # clock change repeats is read as its first occurrence.
        moment = moment.astimezone()
    return round(moment.timestamp() * 1000)


def reset_plan(
    admin: Admin, group_id: str, args: argparse.Namespace
) -> list[tuple[TopicPartition, int | None, int]]:
    """(partition, committed offset now, new offset) for every partition to reset."""
    description = admin.describe_group(group_id)
    # The rule Admin.alter_group_offsets applies, checked here too so a dry run is refused
    # as --execute would be.
    if description.state not in ALTERABLE_STATES:
        raise NonEmptyGroupError(
            f"group {group_id!r} is {description.state} with "
            f"{plural(len(description.members), 'member')}: offsets can only be reset while "
            "the group is Empty; stop its consumers first"
        )
    count = admin.describe_topic(args.topic).partition_count
    if args.partition is not None:
        if args.partition >= count:
            raise UsageError(
                f"topic {args.topic!r} has no partition {args.partition} (it has {count})"
            )
        tps = [TopicPartition(args.topic, args.partition)]
    else:
        tps = [TopicPartition(args.topic, p) for p in range(count)]
    current = admin.list_group_offsets(group_id, tps)
    earliest = admin.list_offsets(dict.fromkeys(tps, "earliest"))
    latest = admin.list_offsets(dict.fromkeys(tps, "latest"))
    if args.to_datetime is not None:
        at = admin.list_offsets(dict.fromkeys(tps, parse_datetime_ms(args.to_datetime)))
    plan = []
    for tp in tps:
        low, high = earliest[tp].offset, latest[tp].offset
        now = current[tp].offset if tp in current else None
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.to_datetime is not None:
            found = at[tp].offset
            target = high if found < 0 else found  # every record is older: the end
        else:
            if now is None:
                raise UsageError(
                    f"--shift-by: group {group_id!r} has no committed offset for {tp}; "
                    "reset it with --to-earliest, --to-latest or --to-offset first"
                )
            target = now + args.shift_by
        # Kafka's rule: a target outside the log is moved to its nearest end.
        plan.append((tp, now, min(max(target, low), high)))
    return plan


def groups_reset_offsets(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        plan = reset_plan(admin, args.group, args)
        if args.execute:
            admin.alter_group_offsets(args.group, {tp: new for tp, _, new in plan})
    document = {
        "group": args.group,
        "executed": bool(args.execute),
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "current_offset": now, "new_offset": new}
            for tp, now, new in plan
        ],
    }
    rows = [[tp.topic, tp.partition, _dash(now), new] for tp, now, new in plan]
    table = render_table(["topic", "partition", "current offset", "new offset"], rows)
    print_result(args.json, document, table)
    if args.execute:
        print(
            f"Reset the offsets of group {args.group} for {plural(len(plan), 'partition')}.",
            file=sys.stderr,
        )
    else:
        print("Dry run: nothing was changed; add --execute to apply.", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# delete


def groups_delete(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        admin.delete_groups([args.group])
    print_result(args.json, {"group": args.group, "deleted": True}, f"Deleted group {args.group}.")
    return 0


# ---------------------------------------------------------------------------------------------
# lag-exporter


def groups_lag_exporter(args: argparse.Namespace) -> int:
    """Serve every group's lag as Prometheus metrics until interrupted (SIGINT, SIGTERM)."""
    # Imported here: only this command needs the HTTP server.
    from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415

    from spark_mq.monitoring.lag_exporter import LagExporter  # noqa: PLC0415

    with admin_client(args) as admin:
        exporter = LagExporter(admin)
        registry = CollectorRegistry(auto_describe=True)
        registry.register(exporter)
        server, _ = start_http_server(args.port, addr=args.host, registry=registry)
        port = server.server_address[1]
        print(
            f"serving consumer lag on http://{args.host}:{port}/metrics every "
            f"{args.interval_ms} ms (Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )
        try:
            exporter.run(args.interval_ms / 1000)
        finally:
            exporter.stop()
            server.shutdown()
            server.server_close()
    return 0


# ---------------------------------------------------------------------------------------------
# The parser


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``groups`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands,
        "groups",
        help="list, describe, reset offsets of, delete consumer groups",
        parents=[common],
    )
    lst = actions.add("list", groups_list, help="list consumer groups")
    lst.add_argument(
        "--state",
        action="append",
        metavar="STATE",
        help="only groups in this state (Empty, Stable, PreparingRebalance, ...; repeatable)",
    )

    describe = actions.add(
        "describe",
        groups_describe,
        help="state, members, assignment, committed offsets and lag of a group",
    )
    describe.add_argument("group")

    reset = actions.add(
        "reset-offsets",
        groups_reset_offsets,
        help="set a group's committed offsets (only while it has no members)",
        description=(
            "Compute new committed offsets for one topic of a group with no active members "
            "and print them; --execute applies them (the default is a dry run, as with "
            "kafka-consumer-groups). Targets outside the log move to its nearest end."
        ),
    )
    reset.add_argument("group")
    reset.add_argument("--topic", required=True, help="the topic whose offsets to reset")
    reset.add_argument("--partition", type=non_negative_int, help="only this partition")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start")
    target.add_argument("--to-latest", action="store_true", help="the end (the last stable offset)")
    target.add_argument("--to-offset", type=non_negative_int, metavar="N", help="offset N")
    target.add_argument(
        "--to-datetime",
        metavar="ISO8601",
        help="the first record at or after this time (local time without a zone), e.g. "
        "2026-11-21T14:00:00, 2026-11-21T14:00:00Z (UTC), 2026-11-21T14:00:00+02:00",
    )
    target.add_argument(
        "--shift-by", type=any_int, metavar="N", help="the committed offset plus N (N < 0: back)"
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="only print the new offsets (the default)"
    )
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")

    delete = actions.add(
        "delete",
        groups_delete,
        help="delete a group with no members, and its offsets",
    )
    delete.add_argument("group")

    exporter = actions.add(
        "lag-exporter",
        groups_lag_exporter,
        help="serve every group's lag (records and seconds) as Prometheus metrics",
        description=(
            "Poll every consumer group's committed offsets and the partitions' end offsets, "
            "and serve the lag in records and in estimated seconds at /metrics "
            "(docs/operations.md). Runs until interrupted."
        ),
    )
    exporter.add_argument("--port", type=non_negative_int, default=9405, help="HTTP port")
    exporter.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: this machine only)"
    )
    exporter.add_argument(
        "--interval-ms",
        type=positive_int,
        default=5000,
        metavar="MS",
        help="time between polls (default 5000)",
    )


HANDLERS: Final[dict[str, Handler]] = handler_table(
    groups_list, groups_describe, groups_reset_offsets, groups_delete, groups_lag_exporter
)
