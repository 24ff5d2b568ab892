"""The partitions this broker hosts, over the storage's LogManager.

It hands out :class:`~spark_mq.broker.partition.Partition` objects (one per live partition
log, made on first use), creates topics on demand when ``auto.create.topics.enable`` allows,
and lets fetches wait for appends to any of a set of partitions without polling.

A cluster broker's (``cluster=True``) partitions are what the controller says, as in Kafka's
ZooKeeper mode: it never creates a topic by itself (the controller does, through
LeaderAndIsr), a partition log without a role from the controller serves nothing, and the
controller's requests are applied here:

- :meth:`ReplicaManager.become_leader_or_follower` (LeaderAndIsr): for each partition whose
  ``replicas`` include this broker, a leader epoch newer than the local one is applied (the
  log is created if missing, the topic's partition count grown as needed, and the partition
  made leader or follower); the same leader epoch and the same state is a resend (after a
  controller failover): answered NONE, nothing changed; the same leader epoch with a newer
  partition epoch and the same leader is an ISR change, applied without a role change; an
  older leader epoch (or the same one with another state) is FENCED_LEADER_EPOCH. A FULL
  request lists every partition the broker should host: the ones it hosts and the request
  does not list are stray (their topic was deleted, or the replica moved, while this broker
  was away) and are stopped, logged at WARNING, their directories set aside as ``*.stray``:
  out of the log for good but kept, so that a controller's mistake loses no data (Kafka's
  stray logs since KIP-516).
- :meth:`ReplicaManager.stop_replica` (StopReplica): the partition stops serving, and its log
  is deleted when asked. A leader epoch older than the local one is FENCED_LEADER_EPOCH;
  -1 and -2 (Kafka's ``EpochDuringDelete``) skip that check.

Both return the partitions they changed, whose waiting fetches the caller wakes (on the event
loop), so a fetch parked on a replica that is no longer the leader answers at once.

Replication: a partition made follower is handed to the replica fetchers
(:class:`~spark_mq.broker.replica_fetcher.ReplicaFetcherManager`, attached by the broker once
it knows the cluster's secret: :meth:`ReplicaManager.attach_fetchers`) with its leader's
address from the request's ``live_leaders``; a partition made leader, stopped or deleted is
taken from them. The followed partitions are recorded even before the fetchers are attached,
which then pick them all up.

Threads: :meth:`partition` and the topic operations may run on any thread (LogManager and
PartitionLog are thread-safe; the partition table has its own lock). The controller's
requests run on executor threads, one at a time. :meth:`wait_for_append` and :meth:`notify`
run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from spark_mq.broker.coordinator_leadership import LeadershipListener, leadership_change
from spark_mq.broker.delayed_produce import ProducePurgatory
from spark_mq.broker.partition import LeaderAndIsr, Partition, ReplicaState, monotonic_ms
from spark_mq.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    SparkMQError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    UsageError,
)
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.controller import (
    LEADER_AND_ISR_FULL,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    StopReplicaRequest,
)
from spark_mq.storage.log_manager import LogManager
from spark_mq.storage.topic_metadata import TopicInfo
from spark_mq.storage.topic_names import validate_topic_name

if TYPE_CHECKING:
    from spark_mq.broker.replica_fetcher import ReplicaFetcherManager
    from spark_mq.storage.log import PartitionLog

logger = logging.getLogger(__name__)

#: The replica states the controller gave: a LeaderAndIsr is compared with what they hold.
_HAS_ROLE = frozenset({ReplicaState.LEADER, ReplicaState.FENCED_LEADER, ReplicaState.FOLLOWER})

#: StopReplica's leader epoch for a partition being deleted (Kafka's ``EpochDuringDelete``),
#: and for none known: neither is checked against the local leader epoch.
EPOCH_DURING_DELETE = -2
NO_EPOCH = -1

#: What a follower fetches: (leader id, leader address, log, leader epoch), as
#: :meth:`ReplicaFetcherManager.add_partitions` takes it.
FollowTarget = tuple[int, BrokerAddress, "PartitionLog", int]

#: ``topic_config(topic)``: the topic's config overrides (Kafka key to string), read where
#: the cluster keeps them (``/config/topics/<t>``) when a replica of a topic new to this
#: broker is created.
TopicConfigSource = Callable[[str], Mapping[str, str]]


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaChanges:
    """What a controller request did: for each partition of the request, in its order,
    ``(topic, partition, error)`` (None: done, or nothing to do); and the partitions whose
    role changed or that stopped, whose waiting fetches are to be woken."""

    results: list[tuple[str, int, Exception | None]]
    touched: list[Partition]


class ReplicaManager:
    """Partitions of one log directory, led by this broker."""

    def __init__(
        self,
        logs: LogManager,
        *,
        node_id: int,
        leader_epoch: int,
        num_partitions: int,
        auto_create_topics: bool,
        cluster: bool = False,
        clock_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.logs = logs
        self._clock_ms = clock_ms
        #: acks=all produce requests waiting for the high watermark (event loop only).
        self.purgatory = ProducePurgatory()
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.num_partitions = num_partitions
        self.auto_create_topics = auto_create_topics
        #: A cluster broker: roles come from the controller, topics are never auto-created.
        self.cluster = cluster
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._lock = threading.Lock()
        # One controller request at a time, as Kafka's replicaStateChangeLock.
        self._controller_lock = threading.Lock()
        self._waiting: set[asyncio.Future[None]] = set()
        self._closing = False
        #: The replica fetchers of a cluster broker (None until attached; a single node has
        #: none).
        self.fetchers: ReplicaFetcherManager | None = None
        # The partitions this broker follows and whom from (guarded by _controller_lock).
        self._following: dict[tuple[str, int], FollowTarget] = {}
        #: The coordinators told about leadership changes of their internal topic (event
        #: loop only).
        self._leadership_listeners: dict[str, list[LeadershipListener]] = {}

    def partition(self, topic: str, index: int) -> Partition:
        """The partition, or UnknownTopicOrPartitionError naming what does not exist, or
        PartitionOfflineError for one whose log could not be opened at startup."""
        log = self.logs.get_log(topic, index)
        key = (topic, index)
        part = self._partitions.get(key)
        if part is not None and part.log is log:
            return part
        with self._lock:
            part = self._partitions.get(key)
            # A different log object means the topic was deleted and made again.
            if part is None or part.log is not log:
                if part is not None:
                    part.stop()
                if self.cluster:
                    part = Partition.for_cluster(log, node_id=self.node_id, clock_ms=self._clock_ms)
                else:
                    part = Partition(
                        log,
                        leader_epoch=self.leader_epoch,
                        node_id=self.node_id,
                        clock_ms=self._clock_ms,
                    )
                self._partitions[key] = part
            return part

    def hosted(self) -> list[Partition]:
        """Every partition object this broker holds now (any role)."""
        return list(self._partitions.values())

    def leaders(self) -> list[Partition]:
        """The partitions this broker leads now."""
        return [p for p in list(self._partitions.values()) if p.state is ReplicaState.LEADER]

    def cached(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    # -----------------------------------------------------------------------------------------
    # Topics (blocking: call from an executor thread)

    def ensure_topic(self, topic: str, *, allow_create: bool) -> bool:
        """Whether ``topic`` exists, creating it with the defaults when allowed.

        Creation needs both ``allow_create`` (the request asks for it) and the broker's
        ``auto.create.topics.enable``. An invalid name raises InvalidTopicError.
        """
        if self.logs.topic_exists(topic):
            return True
        if not (allow_create and self.auto_create_topics) or self.cluster:
            # In a cluster only the controller creates topics (with their replica assignment).
            return False
        validate_topic_name(topic)
        # Another request may create it first, which is just as good.
        with contextlib.suppress(TopicExistsError):
            self.logs.create_topic(topic, self.num_partitions)
        return True

    def require_topic(self, topic: str, *, allow_create: bool) -> None:
        if not self.ensure_topic(topic, allow_create=allow_create):
            hint = (
                "create it first (spark-mq topics create, or Admin.create_topic)"
                if not self.auto_create_topics or self.cluster
                else "create it first, or produce to it (auto.create.topics.enable is on)"
            )
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist; {hint}", topic=topic
            )

    def auto_create(self, topic: str) -> None:
        """:meth:`require_topic` with creation allowed (for producers)."""
        self.require_topic(topic, allow_create=True)

    def delete_topic(self, topic: str) -> list[Partition]:
        """Delete ``topic``; returns its partitions (now offline) so waiters can be woken."""
        gone = [p for (t, _), p in list(self._partitions.items()) if t == topic]
        with self._controller_lock:
            self._unfollow([(topic, p.index) for p in gone])
        self.logs.delete_topic(topic)
        with self._lock:
            for part in gone:
                if self._partitions.get((topic, part.index)) is part:
                    del self._partitions[(topic, part.index)]
                part.stop()
        return gone

    def describe(self, topic: str) -> TopicInfo:
        return self.logs.describe_topic(topic)

    # -----------------------------------------------------------------------------------------
    # The controller's requests (blocking: call from an executor thread)

    def become_leader_or_follower(
        self, request: LeaderAndIsrRequest, *, topic_config: TopicConfigSource
    ) -> ReplicaChanges:
        """Apply a LeaderAndIsr request's partition states (rules in the module docstring).
        The caller has checked the controller and broker epochs."""
        self._require_cluster("LeaderAndIsr")
        with self._controller_lock:
            states = request.partition_states
            results: list[Exception | None] = [None] * len(states)
            apply: dict[str, list[tuple[int, LeaderAndIsr]]] = {}
            for i, ps in enumerate(states):
                decided = self._decide(ps)
                if isinstance(decided, LeaderAndIsr):
                    apply.setdefault(ps.topic, []).append((i, decided))
                else:
                    results[i] = decided
            touched: list[Partition] = []
            leaders = {
                live.broker_id: BrokerAddress(host=live.host, port=live.port)
                for live in request.live_leaders
            }
            for topic, items in apply.items():
                # Every partition the request names gives a lower bound on the topic's count.
                count = 1 + max(ps.partition for ps in states if ps.topic == topic)
                try:
                    config = None if self.logs.topic_exists(topic) else topic_config(topic)
                    self.logs.host_partitions(
                        topic,
                        [states[i].partition for i, _ in items],
                        partition_count=count,
                        config=config,
                    )
                except Exception as exc:
                    # A boundary: a topic whose logs cannot be made (a full disk, a bad
                    # config in ZooKeeper) fails its own partitions, not the request.
                    for i, _ in items:
                        results[i] = exc
                    continue
                for i, state in items:
                    try:
                        touched.append(self._take_role(topic, states[i].partition, state, leaders))
                    except Exception as exc:
                        results[i] = exc
            if request.type == LEADER_AND_ISR_FULL:
                listed = {(ps.topic, ps.partition) for ps in states}
                touched.extend(self._stop_strays(listed))
        return ReplicaChanges(
            [(ps.topic, ps.partition, results[i]) for i, ps in enumerate(states)], touched
        )

    def stop_replica(self, request: StopReplicaRequest) -> ReplicaChanges:
        """Stop serving each partition of a StopReplica request, deleting its log when asked
        (rules in the module docstring). A partition not hosted here is no error: with
        ``delete_partition`` a directory kept for it is still removed."""
        self._require_cluster("StopReplica")
        with self._controller_lock:
            results: list[tuple[str, int, Exception | None]] = []
            touched: list[Partition] = []
            for ps in request.partition_states:
                error: Exception | None = None
                current = self._current(ps.topic, ps.partition)
                checked = ps.leader_epoch not in (EPOCH_DURING_DELETE, NO_EPOCH)
                if checked and current is not None and ps.leader_epoch < current.leader_epoch:
                    error = self._fenced(
                        ps.topic, ps.partition, ps.leader_epoch, current.leader_epoch, "StopReplica"
                    )
                else:
                    try:
                        part = self._stop(ps.topic, ps.partition, delete=ps.delete_partition)
                    except Exception as exc:
                        # A boundary, as in become_leader_or_follower: one partition's failure
                        # (a full disk) is its own answer.
                        error = exc
                    else:
                        touched.extend([] if part is None else [part])
                results.append((ps.topic, ps.partition, error))
        return ReplicaChanges(results, touched)

    def _require_cluster(self, api: str) -> None:
        if not self.cluster:
            raise UsageError(
                f"{api} is the controller's request to the brokers of a cluster, and this "
                "broker is a single node (zookeeper.connect is not set); nothing was changed"
            )

    def _current(self, topic: str, index: int) -> Partition | None:
        """The partition object of the hosted log, if one was made (a partition object of a
        log since stopped, or of a deleted topic, does not count)."""
        part = self._partitions.get((topic, index))
        if part is None:
            return None
        try:
            log = self.logs.get_log(topic, index)
        except SparkMQError:
            return None
        return part if part.log is log else None

    def _decide(self, ps: LeaderAndIsrPartitionState) -> LeaderAndIsr | Exception | None:
        """What to do with one partition state: the state to apply, the error to answer, or
        None (a resend of what this broker already has: nothing to do)."""
        where = f"{ps.topic}-{ps.partition}"
        if self.node_id not in ps.replicas:
            return UnknownTopicOrPartitionError(
                f"LeaderAndIsr for {where} names replicas {ps.replicas}, which do not include "
                f"this broker ({self.node_id}); nothing was changed (the controller sends a "
                "partition state only to the partition's replicas)",
                topic=ps.topic,
                partition=ps.partition,
            )
        state = LeaderAndIsr(
            ps.leader, ps.leader_epoch, tuple(ps.isr), tuple(ps.replicas), ps.partition_epoch
        )
        current = self._current(ps.topic, ps.partition)
        if current is None or current.state not in _HAS_ROLE:
            return state
        local = current.state_from_controller
        if state.leader_epoch > local.leader_epoch:
            return state
        if state.leader_epoch == local.leader_epoch:
            if state == local:
                # A resend, except to a fenced leader: the controller, which refused its ISR
                # change, still names it leader of exactly this state, so it leads again.
                return state if current.state is ReplicaState.FENCED_LEADER else None
            if state.leader == local.leader and state.partition_epoch > local.partition_epoch:
                return state
        return self._fenced(
            ps.topic,
            ps.partition,
            state.leader_epoch,
            local.leader_epoch,
            "LeaderAndIsr",
            detail=""
            if state.leader_epoch < local.leader_epoch
            else (
                f" (same leader epoch, but leader {state.leader} and partition epoch "
                f"{state.partition_epoch} where this broker has leader {local.leader} and "
                f"partition epoch {local.partition_epoch}: a new leader needs a new epoch)"
            ),
        )

    @staticmethod
    def _fenced(
        topic: str, index: int, sent: int, local: int, api: str, *, detail: str = ""
    ) -> FencedLeaderEpochError:
        return FencedLeaderEpochError(
            f"{api} for {topic}-{index} carries leader epoch {sent}, not newer than this "
            f"broker's {local}{detail}; nothing was changed for it (the request is older than "
            "what the broker was told since)"
        )

    def _take_role(
        self,
        topic: str,
        index: int,
        state: LeaderAndIsr,
        leaders: Mapping[int, BrokerAddress],
    ) -> Partition:
        part = self.partition(topic, index)
        same_epoch = part.state in _HAS_ROLE and part.leader_epoch == state.leader_epoch
        was_fenced = part.state is ReplicaState.FENCED_LEADER
        if same_epoch:
            # A fenced leader named leader again in its epoch leads again (update_isr).
            part.update_isr(state)
        elif state.leader == self.node_id:
            self._unfollow([(topic, index)])
            part.make_leader(state)
        else:
            part.make_follower(state)
            self._follow(part, state, leaders.get(state.leader))
        logger.info(
            "%s-%d: %s in leader epoch %d (leader %d, isr %s, replicas %s, partition epoch %d)",
            topic,
            index,
            ("leader again after a fence" if was_fenced else "isr changed")
            if same_epoch
            else part.state.value,
            state.leader_epoch,
            state.leader,
            list(state.isr),
            list(state.replicas),
            state.partition_epoch,
        )
        return part

    def _stop(
        self, topic: str, index: int, *, delete: bool, stray: bool = False
    ) -> Partition | None:
        """Stop the replica (its partition object goes offline first, so an append racing
        with this gets NOT_LEADER_OR_FOLLOWER, not a closed log) and stop hosting its log."""
        with self._lock:
            part = self._partitions.pop((topic, index), None)
        self._unfollow([(topic, index)])
        if part is not None:
            part.stop()
        self.logs.stop_hosting(topic, index, delete=delete, stray=stray)
        return part

    def _stop_strays(self, listed: set[tuple[str, int]]) -> list[Partition]:
        stopped: list[Partition] = []
        for topic in self.logs.list_topics():
            for index in self.logs.hosted_partitions(topic):
                if (topic, index) in listed:
                    continue
                logger.warning(
                    "stray replica %s-%d: the controller's full LeaderAndIsr does not list it "
                    "(its topic was deleted, or the replica moved, while this broker was "
                    "away); stopping it and setting its directory aside as *.stray (kept, "
                    "never served)",
                    topic,
                    index,
                )
                try:
                    part = self._stop(topic, index, delete=True, stray=True)
                except SparkMQError as exc:
                    logger.error("could not remove stray replica %s-%d: %s", topic, index, exc)
                    continue
                if part is not None:
                    stopped.append(part)
        return stopped

    # -----------------------------------------------------------------------------------------
    # Replica fetchers (blocking: call from an executor thread)

    def attach_fetchers(self, fetchers: ReplicaFetcherManager) -> None:
        """Use ``fetchers`` from now on, starting with every partition followed so far."""
        with self._controller_lock:
            self.fetchers = fetchers
            if self._following:
                fetchers.add_partitions(dict(self._following))

    def close_fetchers(self) -> None:
        """Shutdown: stop every replica fetcher (before the logs close)."""
        with self._controller_lock:
            fetchers, self.fetchers = self.fetchers, None
        if fetchers is not None:
            fetchers.close()

    def _follow(self, part: Partition, state: LeaderAndIsr, leader: BrokerAddress | None) -> None:
        tp = (part.topic, part.index)
        if leader is None:
            # Kafka does the same: the partition follows, but nothing is fetched until a
            # LeaderAndIsr names a live leader.
            logger.warning(
                "%s-%d: the leader %d is not among the request's live leaders; not fetching "
                "until the controller names a live one",
                *tp,
                state.leader,
            )
            self._unfollow([tp])
            return
        target: FollowTarget = (state.leader, leader, part.log, state.leader_epoch)
        self._following[tp] = target
        if self.fetchers is not None:
            self.fetchers.add_partitions({tp: target})

    def _unfollow(self, partitions: list[tuple[str, int]]) -> None:
        gone = [tp for tp in partitions if self._following.pop(tp, None) is not None]
        if gone and self.fetchers is not None:
            self.fetchers.remove_partitions(gone)
            self.fetchers.shutdown_idle()

    # -----------------------------------------------------------------------------------------
    # Waiting for appends (event loop thread)

    async def wait_for_append(self, partitions: Iterable[Partition], timeout_s: float) -> None:
        """Return when any of ``partitions`` is appended to (or goes away), when the broker
        starts shutting down (:meth:`wake_all`), or after ``timeout_s``: whichever is first."""
        if timeout_s <= 0 or self._closing:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        parts = list(partitions)
        for part in parts:
            part.add_waiter(waiter)
        self._waiting.add(waiter)
        handle = loop.call_later(timeout_s, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self._waiting.discard(waiter)
            for part in parts:
                part.remove_waiter(waiter)

    @property
    def closing(self) -> bool:
        """Whether :meth:`wake_all` was called: waits return at once from then on."""
        return self._closing

    def wake_all(self) -> None:
        """Shutdown: end every wait now and make later waits return at once."""
        self._closing = True
        for waiter in list(self._waiting):
            _resolve(waiter)
        self.purgatory.abort_all(
            NotLeaderOrFollowerError(
                f"broker {self.node_id} is shutting down; the records were appended by the "
                "leader but may not be on every in-sync replica: retry with the new leader"
            )
        )

    def add_leadership_listener(self, topic: str, listener: LeadershipListener) -> None:
        """Tell ``listener`` which partitions of ``topic`` this broker starts or stops
        leading (see :mod:`spark_mq.broker.coordinator_leadership`)."""
        self._leadership_listeners.setdefault(topic, []).append(listener)

    def announce_leadership(self, touched: Iterable[Partition]) -> None:
        """After a controller request was applied (event loop): hand each listener the
        change to its topic's partitions, if any."""
        touched = list(touched)
        for topic, listeners in self._leadership_listeners.items():
            change = leadership_change(touched, topic)
            if change:
                for listener in listeners:
                    listener.on_leadership_change(change)

    def notify(self, partitions: Iterable[Partition]) -> None:
        """Partitions were appended to, changed role or moved their high watermark: wake
        their waiting fetches, complete the acks=all waits their high watermark allows, and
        end those of partitions this broker no longer leads."""
        for part in partitions:
            part.notify_waiters()
            key = (part.topic, part.index)
            if part.state is ReplicaState.LEADER:
                self.purgatory.advance(key, part.high_watermark)
            elif self.purgatory.waiting(key):
                self.purgatory.abort(
                    key,
                    NotLeaderOrFollowerError(
                        f"broker {self.node_id} no longer leads {part.topic}-{part.index} "
                        f"({part.role_description}); the records were appended but may not "
                        "be on every in-sync replica: refresh metadata and retry with the new "
                        "leader (an idempotent producer's retry is recognised as a duplicate)"
                    ),
                )


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
