"""Gauges read from the broker's state when Prometheus scrapes: partitions, replication,
connections, the produce purgatory, the controller, groups and transactions.

State that lives on the event loop (partition roles, groups, transactions) is read there: a
scrape (on the HTTP server's thread) asks the loop for a :class:`StateSnapshot` and waits
for it, so it never sees a dictionary change under it. A loop that does not answer within
:data:`SNAPSHOT_TIMEOUT_S` (a broker stuck or shutting down) gives a scrape with only the
counters, and ``spark_mq_state_scrape_success 0`` says so.

Names and labels (docs/operations.md says when to alert on each):

- per partition hosted here (``topic``, ``partition``): ``spark_mq_log_size_bytes``,
  ``spark_mq_log_start_offset``, ``spark_mq_log_end_offset``, ``spark_mq_high_watermark``,
  ``spark_mq_partition_is_leader``;
- per broker: ``spark_mq_partitions``, ``spark_mq_leader_partitions``,
  ``spark_mq_under_replicated_partitions`` (led here with fewer in-sync replicas than
  replicas), ``spark_mq_under_min_isr_partitions`` (led here with fewer in-sync replicas than
  ``min.insync.replicas``), ``spark_mq_active_connections``,
  ``spark_mq_produce_purgatory_size`` (acks=all produces waiting);
- ``spark_mq_active_controller`` (1 on the controller and on a single node, else 0: the
  sum over a cluster's brokers must be 1), ``spark_mq_offline_partitions`` (the
  controller's count; 0 elsewhere);
- ``spark_mq_groups{state}``, ``spark_mq_transactions{state}`` (coordinated here),
  ``spark_mq_oldest_open_transaction_seconds`` and
  ``spark_mq_oldest_prepared_transaction_seconds`` (0 when there is none).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from spark_mq.broker.group.state import GroupState
from spark_mq.broker.partition import ReplicaState
from spark_mq.broker.txn.state import TxnState

if TYPE_CHECKING:
    from spark_mq.broker.core import BrokerCore
    from spark_mq.storage.log import PartitionLog

#: How long a scrape waits for the event loop's snapshot.
SNAPSHOT_TIMEOUT_S: Final = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionSample:
    topic: str
    partition: int
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader: bool
    under_replicated: bool
    under_min_isr: bool


@dataclasses.dataclass(frozen=True, slots=True)
class StateSnapshot:
    """What the gauges show, taken on the event loop at one moment."""

    partitions: list[PartitionSample]
    connections: int
    purgatory: int
    active_controller: bool
    offline_partitions: int
    groups: dict[str, int]
    transactions: dict[str, int]
    oldest_open_s: float
    oldest_prepared_s: float


def _sample(log: PartitionLog, leader: bool, isr: int, replicas: int) -> PartitionSample:
    return PartitionSample(
        log.topic,
        log.partition,
        log.size_bytes,
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        leader,
        leader and isr < replicas,
        leader and replicas > 0 and isr < log.config.min_insync_replicas,
    )


def take_snapshot(core: BrokerCore, connections: int, wall_ms: int) -> StateSnapshot:
    """Read the state (on the event loop thread)."""
    samples: list[PartitionSample] = []
    for part in core.replicas.hosted():
        leader = part.state is ReplicaState.LEADER
        samples.append(_sample(part.log, leader, len(part.isr), len(part.replicas)))
    membership = core.membership
    if membership is None:
        # A single node makes a partition's object when a client first asks for it, but
        # opens every log at startup and leads each: after a restart, the logs no client
        # has asked for yet are read directly, so no partition drops off a dashboard.
        seen = {(s.topic, s.partition) for s in samples}
        for log in core.logs.logs():
            if (log.topic, log.partition) not in seen:
                samples.append(_sample(log, True, 1, 1))
    controller = None if membership is None else membership.controller
    offline = 0
    if controller is not None and controller.active:
        # The controller's context is its own thread's: read copies.
        live = set(list(controller.context.live_brokers))
        leaders = controller.context.snapshot_leadership()
        offline = sum(1 for state in leaders.values() if state.leader not in live)
    groups = {state.value: 0 for state in GroupState}
    for group in core.groups.coordinator.groups.values():
        groups[group.state.value] += 1
    txns = {state.value: 0 for state in TxnState}
    oldest_open = oldest_prepared = 0.0
    for meta in core.transactions.coordinator.txns.values():
        txns[meta.state.value] += 1
        if meta.txn_start_ms >= 0:
            age = max(0.0, (wall_ms - meta.txn_start_ms) / 1000)
            if meta.state is TxnState.ONGOING:
                oldest_open = max(oldest_open, age)
            elif meta.state is TxnState.PREPARED:
                oldest_prepared = max(oldest_prepared, age)
    return StateSnapshot(
        samples,
        connections,
        core.replicas.purgatory.waiting(),
        # A single node is its own controller (Metadata names it).
        membership is None or (controller is not None and controller.active),
        offline,
        groups,
        txns,
        oldest_open,
        oldest_prepared,
    )


class BrokerStateCollector(Collector):
    """A prometheus_client collector over one broker's state (see the module docstring)."""

    def __init__(self) -> None:
        self._snapshot: Callable[[], StateSnapshot] | None = None

    def attach(
        self, loop: asyncio.AbstractEventLoop, core: BrokerCore, connections: Callable[[], int]
    ) -> None:
        """Read ``core`` on ``loop`` from now on (the server calls this once it runs)."""

        def snapshot() -> StateSnapshot:
            async def on_loop() -> StateSnapshot:
                return take_snapshot(core, connections(), int(time.time() * 1000))

            future = asyncio.run_coroutine_threadsafe(on_loop(), loop)
            try:
                return future.result(SNAPSHOT_TIMEOUT_S)
            finally:
                future.cancel()

        self._snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
        success = GaugeMetricFamily(
            "spark_mq_state_scrape_success",
            "1 when this scrape read the broker's state, 0 when the broker did not answer.",
        )
        snap: StateSnapshot | None = None
        if self._snapshot is not None:
            try:
                snap = self._snapshot()
            except (concurrent.futures.TimeoutError, RuntimeError):
                snap = None  # a stuck or stopping loop: counters only
        success.add_metric([], 1 if snap is not None else 0)
        yield success
        if snap is not None:
            yield from _families(snap)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _families(snap: StateSnapshot) -> Iterator[GaugeMetricFamily]:
    labels = ["topic", "partition"]
    per_partition = {
        "size_bytes": GaugeMetricFamily(
            "spark_mq_log_size_bytes", "Bytes of the partition's log on disk.", labels=labels
        ),
        "log_start_offset": GaugeMetricFamily(
            "spark_mq_log_start_offset", "The partition's first offset.", labels=labels
        ),
        "log_end_offset": GaugeMetricFamily(
            "spark_mq_log_end_offset", "The offset the next record gets.", labels=labels
        ),
        "high_watermark": GaugeMetricFamily(
            "spark_mq_high_watermark",
            "The partition's high watermark (what consumers may read up to).",
            labels=labels,
        ),
        "leader": GaugeMetricFamily(
            "spark_mq_partition_is_leader",
            "1 when this broker leads the partition.",
            labels=labels,
        ),
    }
    for s in snap.partitions:
        key = [s.topic, str(s.partition)]
        per_partition["size_bytes"].add_metric(key, s.size_bytes)
        per_partition["log_start_offset"].add_metric(key, s.log_start_offset)
        per_partition["log_end_offset"].add_metric(key, s.log_end_offset)
        per_partition["high_watermark"].add_metric(key, s.high_watermark)
        per_partition["leader"].add_metric(key, 1 if s.leader else 0)
    yield from per_partition.values()
    yield _gauge("spark_mq_partitions", "Partitions hosted here.", len(snap.partitions))
    yield _gauge(
        "spark_mq_leader_partitions",
        "Partitions led here.",
        sum(1 for s in snap.partitions if s.leader),
    )
    yield _gauge(
        "spark_mq_under_replicated_partitions",
        "Partitions led here with fewer in-sync replicas than replicas.",
        sum(1 for s in snap.partitions if s.under_replicated),
    )
    yield _gauge(
        "spark_mq_under_min_isr_partitions",
        "Partitions led here with fewer in-sync replicas than min.insync.replicas "
        "(acks=all produce is refused).",
        sum(1 for s in snap.partitions if s.under_min_isr),
    )
    yield _gauge("spark_mq_active_connections", "Open client connections.", snap.connections)
    yield _gauge(
        "spark_mq_produce_purgatory_size",
        "acks=all produce requests waiting for their followers.",
        snap.purgatory,
    )
    yield _gauge(
        "spark_mq_active_controller",
        "1 when this broker is the cluster's controller (the sum over brokers must be 1).",
        1 if snap.active_controller else 0,
    )
    yield _gauge(
        "spark_mq_offline_partitions",
        "Partitions with no live leader (counted by the controller; 0 on other brokers).",
        snap.offline_partitions,
    )
    groups = GaugeMetricFamily(
        "spark_mq_groups", "Consumer groups coordinated here, by state.", labels=["state"]
    )
    for state, count in snap.groups.items():
        groups.add_metric([state], count)
    yield groups
    txns = GaugeMetricFamily(
        "spark_mq_transactions",
        "Transactional ids coordinated here, by state.",
        labels=["state"],
    )
    for state, count in snap.transactions.items():
        txns.add_metric([state], count)
    yield txns
    yield _gauge(
        "spark_mq_oldest_open_transaction_seconds",
        "Age of the oldest Ongoing transaction coordinated here (0: none).",
        snap.oldest_open_s,
    )
    yield _gauge(
        "spark_mq_oldest_prepared_transaction_seconds",
        "Age of the oldest Prepared (two-phase) transaction coordinated here (0: none).",
        snap.oldest_prepared_s,
    )
