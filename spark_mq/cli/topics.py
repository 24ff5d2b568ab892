"""``spark-mq topics create|list|describe|alter|delete``: topic administration through
:class:`~spark_mq.Admin`.

``describe`` prints kafka-topics.sh --describe's layout (a topic line, then a line per
partition with its leader, replicas and ISR) and joins to it, per partition, the leader epoch,
the offline replicas, the log start offset and high watermark (ListOffsets earliest / latest,
read_uncommitted) and the last stable offset (latest, read_committed) from the partition's
leader. ``--under-replicated-partitions`` and ``--unavailable-partitions`` keep only the
partitions with fewer in-sync replicas than replicas, or with no live leader, as
kafka-topics does (then without the topic lines).
"""

from __future__ import annotations

import argparse
import time
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
from spark_mq.cli.format import plural, print_listing, print_result


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
        partitions = _partition_count_once_known(admin, args.topic)
    print_result(
        args.json,
        {"topic": args.topic, "partitions": partitions, "created": created},
        f"Created topic {args.topic} with {plural(partitions, 'partition')}."
        if created
        else f"Topic {args.topic} already exists ({plural(partitions, 'partition')}).",
    )
    return 0


#: How long ``topics create`` waits for the broker to know the topic it created.
CREATED_TOPIC_WAIT_S: Final = 30.0


def _partition_count_once_known(admin: Admin, topic: str) -> int:
    """The partition count of a topic just created. In a cluster the broker that created it
    learns it when the controller's UpdateMetadata arrives, a moment after CreateTopics
    answered; until then it does not know it (as in Kafka, where clients retry)."""
    deadline = time.monotonic() + CREATED_TOPIC_WAIT_S
    while True:
        try:
            return admin.describe_topic(topic).partition_count
        except UnknownTopicOrPartitionError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


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


def describe_document(admin: Admin, topic: str, live: frozenset[int]) -> dict[str, Any]:
    """Everything ``topics describe`` shows of ``topic``, as one JSON-ready document.
    ``live``: the live brokers, to tell a partition whose leader is down."""
    description = admin.describe_topic(topic)
    # Offsets come from each partition's leader: a partition without one has none to give
    # (asking would wait for a leader until default.api.timeout.ms).
    led = [
        TopicPartition(topic, p.partition)
        for p in description.partitions
        if not _unavailable(p.leader, live)
    ]
    starts = admin.list_offsets(dict.fromkeys(led, "earliest"), isolation_level="read_uncommitted")
    ends = admin.list_offsets(dict.fromkeys(led, "latest"), isolation_level="read_uncommitted")
    stable = admin.list_offsets(dict.fromkeys(led, "latest"), isolation_level="read_committed")
    moving = admin.list_partition_reassignments(
        [TopicPartition(topic, p.partition) for p in description.partitions]
    )
    partitions = []
    for p in description.partitions:
        tp = TopicPartition(topic, p.partition)
        partitions.append(
            {
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "offline_replicas": list(p.offline_replicas),
                "log_start_offset": starts[tp].offset if tp in starts else None,
                "high_watermark": ends[tp].offset if tp in ends else None,
                "last_stable_offset": stable[tp].offset if tp in stable else None,
                # A reassignment in progress (kafka-topics prints them too).
                "adding_replicas": list(moving[tp].adding_replicas) if tp in moving else [],
                "removing_replicas": list(moving[tp].removing_replicas) if tp in moving else [],
            }
        )
    return {
        "topic": topic,
        "topic_id": description.topic_id,
        "partition_count": description.partition_count,
        "replication_factor": description.replication_factor,
        "partitions": partitions,
        "configs": dict(description.configs),
    }


def _unavailable(leader: int, live: frozenset[int]) -> bool:
    """No leader, or a leader that is not a live broker (kafka-topics'
    ``--unavailable-partitions``)."""
    return leader < 0 or leader not in live


def _keep(partition: dict[str, Any], args: argparse.Namespace, live: frozenset[int]) -> bool:
    """Whether ``--under-replicated-partitions`` / ``--unavailable-partitions`` keep it
    (both given: either)."""
    if not (args.under_replicated_partitions or args.unavailable_partitions):
        return True
    under = len(partition["isr"]) < len(partition["replicas"])
    return (args.under_replicated_partitions and under) or (
        args.unavailable_partitions and _unavailable(partition["leader"], live)
    )


def topics_describe(args: argparse.Namespace) -> int:
    filtered = args.under_replicated_partitions or args.unavailable_partitions
    with admin_client(args) as admin:
        live = admin.describe_cluster().broker_ids
        names = [args.topic] if args.topic else admin.list_topics()
        documents = []
        for name in names:
            try:
                document = describe_document(admin, name, live)
            except UnknownTopicOrPartitionError:
                if args.topic:
                    raise
                continue  # deleted since it was listed
            document["partitions"] = [p for p in document["partitions"] if _keep(p, args, live)]
            if not filtered or document["partitions"]:
                documents.append(document)
    if args.topic and not filtered:
        print_result(args.json, documents[0], describe_text(documents[0], summary=True))
        return 0
    text = "\n".join(describe_text(d, summary=not filtered) for d in documents)
    if args.json or text:  # kafka-topics prints nothing when no partition matches
        print_result(args.json, documents, text)
    return 0


def describe_text(document: dict[str, Any], *, summary: bool) -> str:
    """kafka-topics.sh --describe's layout: a topic line (with ``summary``; the filters of
    kafka-topics print only partition lines), then one tab-separated line per partition.
    Kafka's fields come first, as Kafka prints them; spark_mq's follow (leader epoch, the
    offline replicas when there are any, and the leader's offsets)."""
    topic = document["topic"]
    lines = []
    if summary:
        configs = ",".join(f"{k}={v}" for k, v in sorted(document["configs"].items()))
        lines.append(
            f"Topic: {topic}\tTopicId: {document['topic_id'] or 'none'}\t"
            f"PartitionCount: {document['partition_count']}\t"
            f"ReplicationFactor: {document['replication_factor']}\tConfigs: {configs}"
        )
    for p in document["partitions"]:
        fields = [
            f"Topic: {topic}",
            f"Partition: {p['partition']}",
            f"Leader: {p['leader'] if p['leader'] >= 0 else 'none'}",
            f"Replicas: {','.join(map(str, p['replicas']))}",
            f"Isr: {','.join(map(str, p['isr']))}",
        ]
        # Kafka's next fields, while the partition is being reassigned.
        if p.get("adding_replicas"):
            fields.append(f"Adding Replicas: {','.join(map(str, p['adding_replicas']))}")
        if p.get("removing_replicas"):
            fields.append(f"Removing Replicas: {','.join(map(str, p['removing_replicas']))}")
        fields.append(f"LeaderEpoch: {p['leader_epoch']}")
        if p["offline_replicas"]:
            fields.append(f"Offline: {','.join(map(str, p['offline_replicas']))}")
        if p["high_watermark"] is not None:
            fields += [
                f"LogStartOffset: {p['log_start_offset']}",
                f"HighWatermark: {p['high_watermark']}",
                f"LastStableOffset: {p['last_stable_offset']}",
            ]
        lines.append("\t" + "\t".join(fields))
    return "\n".join(lines)


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
        "--replication-factor",
        type=positive_int,
        help="replicas of each partition (default: the brokers' default.replication.factor)",
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
        help="partitions, leaders, replicas, offsets and settings of a topic (or of all)",
    )
    describe.add_argument("topic", nargs="?", help="the topic (default: every topic)")
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose in-sync replicas are fewer than their replicas",
    )
    describe.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="only partitions without a leader, or whose leader is not a live broker",
    )
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
