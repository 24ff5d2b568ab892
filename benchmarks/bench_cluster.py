"""The replicated cluster of the Spark benchmarks' cluster case (``bench_source.py``,
``bench_sink.py``): a real :class:`~spark_mq.cluster.local_cluster.LocalCluster` of three
broker processes with its own ZooKeeper (Debian's zookeeper package, as the cluster tests
use), topics with replication factor 3 and ``min.insync.replicas`` 2, written with
``acks=all``.

Not a benchmark itself. Without Java or the zookeeper package, :func:`replicated_cluster`
raises ``ZooKeeperNotInstalledError`` saying how to install it; the benchmarks then tell the
user to install it or pass ``--no-cluster``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

# Importing the report scaffolding makes spark_mq importable from the repository.
import bench_report  # noqa: F401

from spark_mq import Admin
from spark_mq.cluster.local_cluster import LocalCluster

BROKERS: Final = 3
REPLICATION_FACTOR: Final = 3
MIN_INSYNC_REPLICAS: Final = 2
#: How the cluster case is named in the benchmarks' tables.
LABEL: Final = f"{BROKERS}-broker cluster, RF {REPLICATION_FACTOR}"
#: The method line both benchmarks print for it.
METHOD: Final = (
    f"a `LocalCluster` on this machine (its own ZooKeeper and {BROKERS} broker processes, "
    f"`bootstrap.servers` over TCP loopback), topics of replication factor "
    f"{REPLICATION_FACTOR} with `min.insync.replicas` {MIN_INSYNC_REPLICAS}"
)


@contextmanager
def replicated_cluster(directory: Path) -> Iterator[LocalCluster]:
    """A started cluster under ``directory``, stopped on exit."""
    cluster = LocalCluster(
        directory,
        BROKERS,
        broker_properties={"min.insync.replicas": str(MIN_INSYNC_REPLICAS)},
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def create_topic(cluster: LocalCluster, topic: str, partitions: int) -> None:
    """``topic`` with every partition on all three brokers."""
    with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        admin.create_topic(topic, partitions=partitions, replication_factor=REPLICATION_FACTOR)
