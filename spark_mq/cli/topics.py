"""``spark-mq topics create|list|describe|alter|delete``: topic administration through
:class:`~spark_mq.Admin`.

``describe`` joins three answers of the broker per partition: the metadata (leader, leader
epoch, replicas, in-sync replicas), the log start offset and high watermark (ListOffsets
earliest / latest, read_uncommitted) and the last stable offset (latest, read_committed);
plus the topic's configuration overrides.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from spark_mq import Admin, TopicExistsError, TopicPartition, UnknownTopicOrPartitionError
from spark_mq.cli.common import (
    CliUsageError,
    CommandGroup,
    Handler,
    admin_client,
    handler_table,
    parse_key_values,
    positive_int,
)
from spark_mq.cli.format import plural, print_listing, print_result, render_table


def topics_create(args: argparse.Namespace) -> int:
    configs = parse_key_values(args.config, "--config")
    created = True
    with admin_client(args) as admin:
        try:
            admin.create_topic(
                args.topic,
                # -1 asks for the broker's num.partitions, as kafka-topics does.
                partitions=args.partitions if args.partitions is not None else -1,
                replication_factor=args.replication_factor,
                config=configs or None,
            )
        except TopicExistsError:
            if not args.if_not_exists:
                raise
            created = False
        partitions = admin.describe_topic(args.topic).partition_count
    print_result(
        args.json,
        {"topic": args.topic, "partitions": partitions, "created": created},
        f"Created topic {args.topic} with {plural(partitions, 'partition')}."
        if created
        else f"Topic {args.topic} already exists ({plural(partitions, 'partition')}).",
    )
    return 0


def topics_list(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        rows = []
        for name in admin.list_topics():
            try:
                rows.append((name, admin.describe_topic(name).partition_count))
            except UnknownTopicOrPartitionError:
                continue  # deleted between the two calls
    documents = [{"topic": name, "partitions": n} for name, n in rows]
    print_listing(args.json, documents, ["topic", "partitions"], rows, empty="No topics.")
    return 0


def describe_document(admin: Admin, topic: str) -> dict[str, Any]:
    """Everything ``topics describe`` shows, as one JSON-ready document."""
    description = admin.describe_topic(topic)
    tps = [TopicPartition(topic, p.partition) for p in description.partitions]
    starts = admin.list_offsets(dict.fromkeys(tps, "earliest"), isolation_level="read_uncommitted")
    ends = admin.list_offsets(dict.fromkeys(tps, "latest"), isolation_level="read_uncommitted")
    stable = admin.list_offsets(dict.fromkeys(tps, "latest"), isolation_level="read_committed")
    partitions = [
        {
            "partition": p.partition,
            "leader": p.leader,
            "leader_epoch": p.leader_epoch,
            "replicas": list(p.replicas),
            "isr": list(p.isr),
            "log_start_offset": starts[tp].offset,
            "high_watermark": ends[tp].offset,
            "last_stable_offset": stable[tp].offset,
        }
        for p, tp in zip(description.partitions, tps, strict=True)
    ]
    return {"topic": topic, "partitions": partitions, "configs": dict(description.configs)}


def topics_describe(args: argparse.Namespace) -> int:
    with admin_client(args) as admin:
        document = describe_document(admin, args.topic)
    print_result(args.json, document, _describe_text(args.topic, document))
    return 0


def _describe_text(topic: str, document: dict[str, Any]) -> str:
    """What ``topics describe`` prints for people: a summary line, the configs, a table."""
    parts = document["partitions"]
    records = sum(p["high_watermark"] - p["log_start_offset"] for p in parts)
    configs = document["configs"]
    overrides = ", ".join(f"{k}={v}" for k, v in sorted(configs.items()))
    table = render_table(
        [
            "partition",
            "leader",
            "epoch",
            "replicas",
            "isr",
            "start offset",
            "end offset",
            "stable offset",
        ],
        [
            [
                p["partition"],
                p["leader"],
                p["leader_epoch"],
                ",".join(map(str, p["replicas"])),
                ",".join(map(str, p["isr"])),
                p["log_start_offset"],
                p["high_watermark"],
                p["last_stable_offset"],
            ]
            for p in parts
        ],
    )
    return "\n".join(
        [
            f"Topic {topic}: {plural(len(parts), 'partition')}, {plural(records, 'record')}",
            f"Configs: {overrides or '(broker defaults)'}",
            "",
            table,
        ]
    )


def topics_alter(args: argparse.Namespace) -> int:
    configs: dict[str, str | None] = dict(parse_key_values(args.config, "--config"))
    for key in args.delete_config or ():
        if key in configs:
            raise CliUsageError(f"{key} is both set (--config) and removed (--delete-config)")
        configs[key] = None
    if args.partitions is None and not configs:
        raise CliUsageError("say what to change: --partitions N, --config K=V or --delete-config K")
    changes: list[str] = []
    with admin_client(args) as admin:
        if args.partitions is not None:
            before = admin.describe_topic(args.topic).partition_count
            if args.partitions != before:
                admin.create_partitions(args.topic, args.partitions)
                changes.append(f"partitions {before} -> {args.partitions}")
        if configs:
            admin.alter_configs(args.topic, configs)
            changes.extend(
                f"{k}={v}" if v is not None else f"{k} removed" for k, v in configs.items()
            )
        description = admin.describe_topic(args.topic)
    document = {
        "topic": args.topic,
        "partitions": description.partition_count,
        "configs": dict(description.configs),
    }
    if changes:
        text = f"Altered topic {args.topic}: {'; '.join(changes)}."
    else:  # only --partitions can change nothing: it was the count the topic has
        text = f"Topic {args.topic} already has {plural(args.partitions, 'partition')}."
    print_result(args.json, document, text)
    return 0


def topics_delete(args: argparse.Namespace) -> int:
    deleted = True
    with admin_client(args) as admin:
        try:
            admin.delete_topic(args.topic)
        except UnknownTopicOrPartitionError:
            if not args.if_exists:
                raise
            deleted = False
    print_result(
        args.json,
        {"topic": args.topic, "deleted": deleted},
        f"Deleted topic {args.topic}." if deleted else f"Topic {args.topic} does not exist.",
    )
    return 0


# ---------------------------------------------------------------------------------------------
# The parser


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``topics`` and its actions on the ``spark-mq`` command parser."""
    actions = CommandGroup(
        commands,
        "topics",
        help="create, list, describe, alter, delete topics",
        parents=[common],
    )
    create = actions.add("create", topics_create, help="create a topic")
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
    actions.add("list", topics_list, help="list topics")
    describe = actions.add(
        "describe",
        topics_describe,
        help="partitions, offsets and settings of a topic",
    )
    describe.add_argument("topic")
    alter = actions.add("alter", topics_alter, help="add partitions or change settings")
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
    delete = actions.add("delete", topics_delete, help="delete a topic")
    delete.add_argument("topic")
    delete.add_argument("--if-exists", action="store_true", help="succeed if there is none")


HANDLERS: Final[dict[str, Handler]] = handler_table(
    topics_create, topics_list, topics_describe, topics_alter, topics_delete
)
