"""``spark-mq cluster``: a cluster on this machine, ZooKeeper and N broker processes under one
directory (:class:`~spark_mq.cluster.local_cluster.LocalCluster`), for trying and testing a
cluster before deploying one.

    spark-mq cluster start --dir DIR --brokers 3 [--zookeeper HOST:PORT[/chroot]]
    spark-mq cluster status --dir DIR
    spark-mq cluster stop-broker --dir DIR --id 2
    spark-mq cluster start-broker --dir DIR --id 2
    spark-mq cluster stop --dir DIR
    spark-mq cluster reassign-partitions --bootstrap-server H:P --reassignment-json-file F \
        (--execute | --verify | --cancel)          (see :mod:`.reassign_partitions`)

Every process keeps running after the command returns; ``DIR/cluster.json`` says what runs
and is what the later commands read. These commands talk to no broker (they start, signal
and watch processes, and read ZooKeeper), so they take ``--dir`` instead of ``--path`` or
``--bootstrap-server``.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from typing import Any, Final

from spark_mq.cli.common import EXIT_OK, CommandGroup, Handler, handler_table, positive_int
from spark_mq.cli.format import json_text, render_pairs, render_table
from spark_mq.cli.reassign_partitions import add_arguments as add_reassign_arguments
from spark_mq.cli.reassign_partitions import cluster_reassign_partitions
from spark_mq.cluster.local_cluster import DEFAULT_SESSION_TIMEOUT_MS, LocalCluster, PartitionView
from spark_mq.errors import ZooKeeperConnectionError


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register ``cluster`` and its actions. Like ``log verify`` it leaves out ``common``
    (the broker options): it manages processes, it asks no broker."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--dir", required=True, metavar="DIR", help="the cluster directory")
    actions = CommandGroup(
        commands,
        "cluster",
        help="run a local cluster: ZooKeeper and N brokers on this machine",
        parents=(where,),
    )
    start = actions.add(
        "start",
        cluster_start,
        help="start ZooKeeper and N brokers; return once all are registered and a controller "
        "elected",
    )
    start.add_argument("--brokers", type=positive_int, default=3, metavar="N", help="default 3")
    start.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="use this running ZooKeeper instead of starting one in DIR/zookeeper",
    )
    start.add_argument(
        "--session-timeout-ms",
        type=positive_int,
        default=DEFAULT_SESSION_TIMEOUT_MS,
        metavar="MS",
        help="the brokers' zookeeper.session.timeout.ms: how long a killed broker stays "
        "registered (default %(default)s, Kafka's)",
    )
    for handler, name, help_text in (
        (
            cluster_start_broker,
            "start-broker",
            "start broker ID again with its settings (after a stop or a kill)",
        ),
        (cluster_stop_broker, "stop-broker", "stop broker ID cleanly"),
    ):
        one = actions.add(name, handler, help=help_text)
        one.add_argument("--id", type=positive_int, required=True, metavar="ID")
    actions.add("stop", cluster_stop, help="stop every broker, then ZooKeeper")
    status = actions.add(
        "status",
        cluster_status,
        help="show brokers, their ports, the controller and unhealthy partitions",
    )
    status.add_argument("--json", action="store_true", help="print one JSON document")
    # This one asks the cluster's controller, through a broker, as Kafka's tool does.
    reassign = actions.add(
        "reassign-partitions",
        cluster_reassign_partitions,
        parents=(common,),
        help="move partitions to other brokers (kafka-reassign-partitions.sh)",
    )
    add_reassign_arguments(reassign)


def cluster_start(args: argparse.Namespace) -> int:
    cluster = LocalCluster(
        args.dir,
        args.brokers,
        zookeeper=args.zookeeper,
        session_timeout_ms=args.session_timeout_ms,
    )
    try:
        cluster.start()
        print(
            f"cluster in {cluster.directory}: {len(cluster.broker_ids)} brokers up, "
            f"controller {cluster.controller_id()}"
        )
        print(f"bootstrap.servers={cluster.bootstrap_servers}")
        print(f"zookeeper.connect={cluster.zookeeper_connect}")
    finally:
        cluster.close()
    return EXIT_OK


def cluster_start_broker(args: argparse.Namespace) -> int:
    cluster = LocalCluster.open(args.dir)
    try:
        cluster.start_broker(args.id)
        entry = cluster.state["brokers"][str(args.id)]
        print(f"broker {args.id} running (pid {entry['pid']}) on {entry['host']}:{entry['port']}")
    finally:
        cluster.close()
    return EXIT_OK


def cluster_stop_broker(args: argparse.Namespace) -> int:
    cluster = LocalCluster.open(args.dir)
    try:
        cluster.stop_broker(args.id)
        print(f"broker {args.id} stopped")
    finally:
        cluster.close()
    return EXIT_OK


def cluster_stop(args: argparse.Namespace) -> int:
    cluster = LocalCluster.open(args.dir)
    cluster.stop()
    print(f"cluster in {cluster.directory} stopped")
    return EXIT_OK


def cluster_status(args: argparse.Namespace) -> int:
    cluster = LocalCluster.open(args.dir)
    try:
        document = _status(cluster)
    finally:
        cluster.close()
    if args.json:
        print(json_text(document))
        return EXIT_OK
    print(
        render_pairs(
            [
                ("zookeeper", document["zookeeper"] or "not running"),
                ("controller", document["controller"]),
                ("bootstrap.servers", document["bootstrap_servers"] or "-"),
            ]
        )
    )
    print()
    rows = [
        (b["id"], b["state"], b["pid"], b["host"], b["port"], b["log_dir"], b["metrics"] or "-")
        for b in document["brokers"]
    ]
    print(render_table(["ID", "STATE", "PID", "HOST", "PORT", "LOG DIR", "METRICS"], rows))
    for title, key in (
        ("offline partitions", "offline_partitions"),
        ("under-replicated partitions", "under_replicated_partitions"),
    ):
        entries = document[key]
        print()
        if entries is None:
            print(f"{title}: unknown (ZooKeeper is not reachable)")
        elif not entries:
            print(f"{title}: none")
        else:
            print(f"{title}: {len(entries)}")
            print(
                render_table(
                    ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"],
                    [
                        (
                            e["topic"],
                            e["partition"],
                            "none" if e["leader"] is None else e["leader"],
                            ",".join(map(str, e["replicas"])),
                            ",".join(map(str, e["isr"])),
                        )
                        for e in entries
                    ],
                )
            )
    return EXIT_OK


def _partition_entry(view: PartitionView) -> dict[str, Any]:
    state = view.state
    return {
        "topic": view.topic,
        "partition": view.partition,
        "leader": None if state is None or state.leader < 0 else state.leader,
        "replicas": list(view.replicas),
        "isr": [] if state is None else list(state.isr),
    }


def _partition_health(
    cluster: LocalCluster, live: Collection[int]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(offline partitions, under-replicated partitions), as Kafka's describe filters
    ``--unavailable-partitions`` and ``--under-replicated-partitions`` see them."""
    views = cluster.partitions()
    offline = [_partition_entry(v) for v in views if v.is_offline(live)]
    under = [_partition_entry(v) for v in views if not v.is_offline(live) and v.is_under_replicated]
    return offline, under


def _status(cluster: LocalCluster) -> dict[str, Any]:
    """What runs: each broker's process and registration, the controller, and the
    partitions that are offline (no live leader) or under-replicated (ISR smaller than
    the replicas)."""
    zookeeper_up = bool(cluster.state.get("zookeeper")) and (
        cluster.state.get("zookeeper_pid") is None or cluster.zookeeper_running()
    )
    registered: dict[int, Any] = {}
    controller: int | None = None
    offline: list[dict[str, Any]] | None = None
    under: list[dict[str, Any]] | None = None
    if zookeeper_up:
        try:
            registered = cluster.registered_brokers()
            controller = cluster.controller_id()
            offline, under = _partition_health(cluster, registered)
        except ZooKeeperConnectionError:
            zookeeper_up = False
    brokers = []
    for broker_id in cluster.broker_ids:
        entry = cluster.state["brokers"][str(broker_id)]
        running = cluster.broker_running(broker_id)
        if running and broker_id in registered:
            state = "running"
        elif running:
            state = "not registered"
        elif broker_id in registered:
            state = "dead, still registered"  # killed; its session has not expired yet
        else:
            state = "stopped"
        brokers.append(
            {
                "id": broker_id,
                "state": state,
                "pid": entry["pid"] if running else None,
                "host": entry["host"],
                "port": entry["port"] if running else None,
                "log_dir": entry["log_dir"],
                "metrics": cluster.metrics_url(broker_id),
            }
        )
    return {
        "dir": str(cluster.directory),
        "zookeeper": cluster.state.get("zookeeper") if zookeeper_up else None,
        "controller": controller,
        "bootstrap_servers": cluster.bootstrap_servers,
        "brokers": brokers,
        # None when ZooKeeper cannot be asked.
        "offline_partitions": offline,
        "under_replicated_partitions": under,
    }


HANDLERS: Final[dict[str, Handler]] = handler_table(
    cluster_start,
    cluster_start_broker,
    cluster_stop_broker,
    cluster_stop,
    cluster_status,
    cluster_reassign_partitions,
)
