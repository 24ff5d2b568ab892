"""``spark-mq cluster elect-leaders``: Kafka's ``kafka-leader-election.sh`` for a local
cluster (:meth:`spark_mq.Admin.elect_leaders` against its brokers).

    spark-mq cluster elect-leaders --dir DIR --election-type preferred --all-topic-partitions
    spark-mq cluster elect-leaders --dir DIR --election-type unclean --topic T --partition 0
    spark-mq cluster elect-leaders --dir DIR --election-type preferred --path-to-json-file F

The JSON file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``. Output
is Kafka's too: the partitions elected, those that already had the leader asked for, and
one line per failure. Exit status 1 if any partition failed (an election not needed is no
failure).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from spark_mq.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    CliUsageError,
    client_kwargs,
    client_settings_options,
    non_negative_int,
)
from spark_mq.client.admin import Admin
from spark_mq.client.config import AdminConfig
from spark_mq.client.records import TopicPartition
from spark_mq.cluster.local_cluster import LocalCluster
from spark_mq.errors import ElectionNotNeededError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--election-type",
        required=True,
        choices=("preferred", "unclean"),
        help="preferred: move leadership to each partition's first replica if it is in sync; "
        "unclean: elect a leader for partitions without one, out-of-sync replicas allowed",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="T", help="the topic (with --partition)")
    which.add_argument(
        "--all-topic-partitions", action="store_true", help="every partition of the cluster"
    )
    which.add_argument(
        "--path-to-json-file",
        metavar="F",
        help='Kafka\'s JSON: {"partitions": [{"topic": "t", "partition": 0}, ...]}',
    )
    parser.add_argument("--partition", type=non_negative_int, metavar="P")
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        help="ask these brokers (default: the cluster's running brokers)",
    )
    client_settings_options(parser)


def _partitions_from_json(path: str) -> list[TopicPartition]:
    try:
        document: Any = json.loads(Path(path).read_text(encoding="utf-8"))
        entries = document["partitions"]
        return [TopicPartition(str(e["topic"]), int(e["partition"])) for e in entries]
    except OSError as exc:
        raise CliUsageError(f"cannot read --path-to-json-file {path}: {exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise CliUsageError(
            f"--path-to-json-file {path} is not Kafka's election JSON "
            '({"partitions": [{"topic": "t", "partition": 0}, ...]}): '
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _asked(args: argparse.Namespace) -> list[TopicPartition] | None:
    if args.all_topic_partitions:
        if args.partition is not None:
            raise CliUsageError("--partition goes with --topic, not --all-topic-partitions")
        return None
    if args.path_to_json_file:
        if args.partition is not None:
            raise CliUsageError("--partition goes with --topic, not --path-to-json-file")
        return _partitions_from_json(args.path_to_json_file)
    if args.partition is None:
        raise CliUsageError("--topic needs --partition P")
    return [TopicPartition(args.topic, args.partition)]


def cluster_elect_leaders(args: argparse.Namespace) -> int:
    asked = _asked(args)
    servers = args.bootstrap_server
    if not servers:
        cluster = LocalCluster.open(args.dir)
        try:
            servers = cluster.bootstrap_servers
        finally:
            cluster.close()
    if not servers:
        raise CliUsageError(f"no broker of the cluster in {args.dir} runs")
    # The client settings (--command-config, -X) apply to the brokers found in --dir too.
    located = argparse.Namespace(**{**vars(args), "bootstrap_server": servers, "path": None})
    with Admin(**client_kwargs(located, AdminConfig)) as admin:
        results = admin.elect_leaders(args.election_type, asked)
    kind = args.election_type.upper()
    elected = sorted(tp for tp, error in results.items() if error is None)
    not_needed = sorted(
        tp for tp, error in results.items() if isinstance(error, ElectionNotNeededError)
    )
    failed = sorted(
        (tp, error)
        for tp, error in results.items()
        if error is not None and not isinstance(error, ElectionNotNeededError)
    )
    if elected:
        print(
            f"Successfully completed leader election ({kind}) for partitions "
            + ", ".join(map(str, elected))
        )
    if not_needed:
        print("Valid replica already elected for partitions " + ", ".join(map(str, not_needed)))
    for tp, error in failed:
        print(f"Error completing leader election ({kind}) for partition: {tp}: {error}")
    return EXIT_ERROR if failed else EXIT_OK
