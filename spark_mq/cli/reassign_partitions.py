"""``spark-mq cluster reassign-partitions``: Kafka's kafka-reassign-partitions.sh, through the
admin client's AlterPartitionReassignments / ListPartitionReassignments (KIP-455).

    spark-mq cluster reassign-partitions --bootstrap-server H:P \\
        --reassignment-json-file plan.json (--execute | --verify | --cancel)
    spark-mq cluster reassign-partitions --bootstrap-server H:P --generate \\
        --topics-to-move-json-file topics.json --broker-list 1,2,3

The plan is Kafka's JSON: ``{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[2,3]}]}``. ``--execute`` prints the current assignment of the plan's partitions
(keep it: it is the plan that moves them back) and starts the moves; ``--verify`` says of
each partition whether it is still moving, done, or done but not as planned (exit status 1);
``--verify --wait`` first waits until none of the plan's partitions is moving, showing on a
terminal (or with ``--progress``) a progress bar of the bytes the new replicas have copied,
with rate and ETA; piped or with ``--json`` it waits quietly. ``--timeout-ms`` bounds the wait:
past it the command fails naming the partitions still moving and the brokers adding them.
``--cancel`` cancels the plan's partitions still moving, which go back to their replicas
before the move. ``--generate`` proposes a plan that spreads the topics' partitions over the
given brokers with the replica assignment of topic creation (racks are not considered).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

from spark_mq import Admin, TopicPartition
from spark_mq.broker.controller.replica_assignment import (
    BrokerMetadata,
    assign_replicas_to_brokers,
)
from spark_mq.cli.common import EXIT_ERROR, EXIT_OK, CliUsageError, admin_client
from spark_mq.cli.format import ProgressBar, print_result, progress_wanted
from spark_mq.client.reassignments import (
    ReassignmentPlan,
    parse_plan_json,
    parse_topics_to_move_json,
    plan_json,
)
from spark_mq.errors import RequestTimedOutError, SparkMQError, UsageError

#: How long ``--verify --wait`` waits for one broker's replica sizes in a poll.
SIZE_POLL_TIMEOUT_MS = 2000
#: How often ``--verify --wait`` looks at the moves.
WAIT_POLL_S = 0.5


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``cluster reassign-partitions`` (the broker options come from the
    parent parser)."""
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--execute", action="store_true", help="start the plan's moves")
    mode.add_argument("--verify", action="store_true", help="say how far the plan's moves are")
    mode.add_argument("--cancel", action="store_true", help="cancel the plan's moves in progress")
    mode.add_argument(
        "--generate", action="store_true", help="propose a plan for --topics-to-move-json-file"
    )
    p.add_argument("--reassignment-json-file", metavar="FILE", help="the plan (Kafka's JSON)")
    p.add_argument(
        "--topics-to-move-json-file",
        metavar="FILE",
        help='for --generate: {"topics":[{"topic":"t"}],"version":1}',
    )
    p.add_argument(
        "--broker-list", metavar="1,2,3", help="for --generate: the brokers to spread over"
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="with --verify: wait until no partition of the plan is moving, then verify",
    )
    p.add_argument(
        "--timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="with --wait: give up after this long if partitions are still moving, naming them "
        "and the brokers that must copy them (default: wait as long as it takes)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="with --wait: draw the progress bar on stderr even when it is not a terminal",
    )


def _read(path: str | None, option: str) -> tuple[str, str]:
    if not path:
        raise CliUsageError(f"{option} FILE is needed with this action")
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except OSError as exc:
        raise UsageError(f"cannot read {option} {path}: {exc.strerror}") from exc


def _current(admin: Admin, partitions: list[TopicPartition]) -> dict[TopicPartition, list[int]]:
    """The replicas of ``partitions`` now (their targets while moving)."""
    out: dict[TopicPartition, list[int]] = {}
    for topic in sorted({tp.topic for tp in partitions}):
        described = {p.partition: p for p in admin.describe_topic(topic).partitions}
        for tp in partitions:
            if tp.topic == topic and tp.partition in described:
                out[tp] = list(described[tp.partition].replicas)
    return out


def cluster_reassign_partitions(args: argparse.Namespace) -> int:
    if args.generate:
        return _generate(args)
    if args.wait and not args.verify:
        raise CliUsageError("--wait goes with --verify (start the moves with --execute first)")
    if args.timeout_ms is not None and (not args.wait or args.timeout_ms <= 0):
        raise CliUsageError("--timeout-ms goes with --verify --wait and must be above 0")
    text, source = _read(args.reassignment_json_file, "--reassignment-json-file")
    plan = parse_plan_json(text, source)
    with admin_client(args) as admin:
        if args.execute:
            return _execute(admin, args, plan)
        if args.verify:
            if args.wait:
                _wait(admin, plan, enabled=progress_wanted(args), timeout_ms=args.timeout_ms)
            return _verify(admin, args, plan)
        return _cancel(admin, args, plan)


def _names(partitions: Any) -> str:
    return ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions))


def _execute(admin: Admin, args: argparse.Namespace, plan: dict[TopicPartition, list[int]]) -> int:
    ongoing = admin.list_partition_reassignments(list(plan))
    current = _current(admin, list(plan))
    # While a partition moves, its rollback is to the replicas it had before the move.
    rollback = {
        tp: [b for b in replicas if b not in ongoing[tp].adding_replicas]
        if tp in ongoing
        else replicas
        for tp, replicas in current.items()
    }
    wanted: ReassignmentPlan = {tp: replicas for tp, replicas in plan.items()}
    admin.alter_partition_reassignments(wanted)
    print_result(
        args.json,
        {
            "current": json.loads(plan_json(rollback)),
            "started": [f"{tp.topic}-{tp.partition}" for tp in sorted(plan)],
        },
        "Current partition replica assignment\n\n"
        f"{plan_json(rollback)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback\n"
        f"Successfully started partition reassignments for {_names(plan)}",
    )
    return EXIT_OK


def _verify(admin: Admin, args: argparse.Namespace, plan: dict[TopicPartition, list[int]]) -> int:
    ongoing = admin.list_partition_reassignments(list(plan))
    current = _current(admin, list(plan))
    lines, documents, status = ["Status of partition reassignment:"], [], EXIT_OK
    for tp, target in sorted(plan.items()):
        name = f"{tp.topic}-{tp.partition}"
        if tp in ongoing:
            state = "in_progress"
            lines.append(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == target:
            state = "completed"
            lines.append(f"Reassignment of partition {name} is completed.")
        else:
            state, status = "mismatch", EXIT_ERROR
            lines.append(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{current.get(tp)} rather than {target}."
            )
        documents.append({"partition": name, "state": state, "replicas": current.get(tp)})
    print_result(args.json, documents, "\n".join(lines))
    return status


def _replica_sizes(admin: Admin, brokers: set[int]) -> dict[tuple[int, TopicPartition], int]:
    """(broker, partition) to the bytes of that replica, from each broker's DescribeLogDirs;
    a broker that does not answer (down: its move waits for it) has copied nothing yet. Each
    broker gets :data:`SIZE_POLL_TIMEOUT_MS` to answer, so that a stopped (paused) one does
    not hold the progress, or --timeout-ms, for a whole request timeout."""
    sizes: dict[tuple[int, TopicPartition], int] = {}
    for broker in sorted(brokers):
        try:
            described = admin.describe_log_dirs([broker], timeout_ms=SIZE_POLL_TIMEOUT_MS)
        except SparkMQError:
            continue
        for directory in described.get(broker, []):
            for tp, size in directory.replica_sizes.items():
                sizes[(broker, tp)] = size
    return sizes


def _wait(
    admin: Admin,
    plan: dict[TopicPartition, list[int]],
    *,
    enabled: bool,
    timeout_ms: int | None = None,
) -> None:
    """Wait until no partition of ``plan`` is moving; RequestTimedOutError naming those
    still moving (and the brokers adding them) after ``timeout_ms`` (None: no limit). The
    bar's total is what the new replicas had to copy when the wait began (each moving
    partition's leader size, once per replica it adds); a replica counts up to that size, a
    finished move as all of it."""
    deadline = math.inf if timeout_ms is None else time.monotonic() + timeout_ms / 1000
    ongoing = admin.list_partition_reassignments(list(plan))
    leaders: dict[TopicPartition, int] = {}
    for topic in sorted({tp.topic for tp in ongoing}):
        for p in admin.describe_topic(topic).partitions:
            leaders[TopicPartition(topic, p.partition)] = p.leader
    adding = {b for move in ongoing.values() for b in move.adding_replicas}
    sizes = _replica_sizes(admin, {*leaders.values(), *adding})
    per_replica = {tp: sizes.get((leaders.get(tp, -1), tp), 0) for tp in ongoing}
    counts = {tp: len(move.adding_replicas) for tp, move in ongoing.items()}
    bar = ProgressBar(
        sum(per_replica[tp] * counts[tp] for tp in ongoing), enabled=enabled, unit="B"
    )
    copied = 0
    try:
        while True:
            copied = 0
            for tp, size in per_replica.items():
                move = ongoing.get(tp)
                if move is None:
                    copied += size * counts[tp]
                else:
                    copied += sum(min(sizes.get((b, tp), 0), size) for b in move.adding_replicas)
            bar.update(copied)
            if not ongoing:
                return
            if time.monotonic() >= deadline:
                moving = ", ".join(
                    f"{tp} (adding replicas on brokers {sorted(move.adding_replicas)})"
                    for tp, move in sorted(ongoing.items())
                )
                raise RequestTimedOutError(
                    f"after {timeout_ms} ms (--timeout-ms) still moving: {moving}. "
                    "Each broker adding a replica must be running to copy it; run --verify "
                    "--wait again to go on waiting, or --cancel to go back"
                )
            time.sleep(WAIT_POLL_S)
            ongoing = admin.list_partition_reassignments(list(plan))
            sizes = _replica_sizes(admin, {b for m in ongoing.values() for b in m.adding_replicas})
    finally:
        bar.finish(copied)


def _cancel(admin: Admin, args: argparse.Namespace, plan: dict[TopicPartition, list[int]]) -> int:
    ongoing = admin.list_partition_reassignments(list(plan))
    moving = sorted(tp for tp in plan if tp in ongoing)
    if moving:
        admin.alter_partition_reassignments(dict.fromkeys(moving))
    text = (
        f"Successfully cancelled partition reassignments for: {_names(moving)}"
        if moving
        else "None of the plan's partitions is being reassigned: nothing to cancel."
    )
    print_result(args.json, {"cancelled": [f"{t.topic}-{t.partition}" for t in moving]}, text)
    return EXIT_OK


def _generate(args: argparse.Namespace) -> int:
    text, source = _read(args.topics_to_move_json_file, "--topics-to-move-json-file")
    topics = parse_topics_to_move_json(text, source)
    if not args.broker_list:
        raise CliUsageError("--generate needs --broker-list, e.g. --broker-list 1,2,3")
    try:
        brokers = sorted({int(b) for b in args.broker_list.split(",")})
    except ValueError:
        raise CliUsageError(
            f"--broker-list must be broker ids separated by commas, got {args.broker_list!r}"
        ) from None
    with admin_client(args) as admin:
        current: dict[TopicPartition, list[int]] = {}
        proposed: dict[TopicPartition, list[int]] = {}
        for topic in topics:
            described = admin.describe_topic(topic)
            for p in described.partitions:
                current[TopicPartition(topic, p.partition)] = list(p.replicas)
            assignment = assign_replicas_to_brokers(
                described.partition_count,
                described.replication_factor,
                [BrokerMetadata(b) for b in brokers],
                rng=random.Random(),
                rack_aware_mode="disabled",
                topic=topic,
            )
            for partition, replicas in assignment.items():
                proposed[TopicPartition(topic, partition)] = list(replicas)
    print_result(
        args.json,
        {"current": json.loads(plan_json(current)), "proposed": json.loads(plan_json(proposed))},
        f"Current partition replica assignment\n{plan_json(current)}\n\n"
        f"Proposed partition reassignment configuration\n{plan_json(proposed)}",
    )
    return EXIT_OK
