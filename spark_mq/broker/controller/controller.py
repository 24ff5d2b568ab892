"""The controller (Kafka's ZooKeeper-mode KafkaController and ControllerEventManager): one
thread that processes a queue of events, keeps the controller context, writes partition
states to ZooKeeper behind the controller-epoch check, and tells the brokers through the
channel manager.

Events, in the order they arrive:

- **Startup** (once, when this broker is elected): watch ``/brokers/ids``,
  ``/brokers/topics``, each topic's assignment and ``/admin/delete_topics``; read live
  brokers, assignments, partition states and deletion requests into a fresh context; send
  UpdateMetadata with every partition and live broker to every live broker *first*; then
  start the replica state machine (a FULL LeaderAndIsr to every live broker) and the
  partition state machine (New and Offline partitions come online by election); then take
  replicas on dead brokers out of the ISRs; then carry out pending deletions.
- **BrokerChange** (``/brokers/ids`` changed): a broker that left, or came back with a new
  broker epoch, fails: partitions it led are elected anew from their ISR (unclean only with
  ``unclean.leader.election.enable``), it leaves the ISR of the others (leader epoch + 1),
  their live replicas get LeaderAndIsr and every broker UpdateMetadata. A broker that
  arrived gets UpdateMetadata with every partition, a FULL LeaderAndIsr for its replicas,
  the others an UpdateMetadata naming it, and partitions offline for want of it come online.
- **TopicChange** (``/brokers/topics`` changed): new topics' partitions go New -> Online.
- **PartitionModifications** (a topic's assignment changed): new partitions go New -> Online.
- **TopicDeletion** (``/admin/delete_topics`` changed): see :mod:`.topic_deletion`.
- **AlterPartition** (a leader's proposed ISR, from the broker's handler): see
  :mod:`.alter_partition`; the handler awaits the answer the event computes. A partition
  being reassigned whose target replicas are now all in the ISR finishes moving.
- **AlterPartitionReassignments** / **ListPartitionReassignments** (KIP-455, from the
  broker's handlers): see :mod:`.reassignment`. Startup carries on the reassignments
  ZooKeeper holds.
- **ControlledShutdown** (a stopping broker, from the handler): see
  :mod:`.controlled_shutdown`; a broker that leaves the cluster stops being "shutting down".
- **ElectLeaders** (from the handler) and **AutoPreferredReplicaLeaderElection** (every
  ``leader.imbalance.check.interval.seconds`` with ``auto.leader.rebalance.enable``): see
  :mod:`.preferred_election`.

Failures: a write refused by the epoch check (:class:`~spark_mq.errors.ControllerMovedError`)
or a broker's STALE_CONTROLLER_EPOCH means another broker is controller: this one stops at
once (queued events and pending requests dropped) and tells its elector
(``on_controller_moved``). An event that found no usable ZooKeeper session (SUSPENDED: kazoo
refuses writes then) waits for the connection and runs again; a LOST session makes the
elector resign, which stops the controller. Anything else is logged and the next event runs,
as in Kafka. A request the broker answered with an error is logged and not resent: the next
event (or the FULL LeaderAndIsr a broker gets when it comes back) carries the state again.

Threads: watch callbacks run on kazoo's threads and only enqueue; channel callbacks run on
the sender threads and only record and log; everything else runs on the event thread
(``controller-event-thread-<id>``). :meth:`Controller.shutdown` never blocks, so it may be
called from the ZooKeeper event thread when the elector resigns.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import queue
import threading
from collections.abc import Callable
from typing import Final, TypeVar

import msgspec

from spark_mq.broker.inter_broker import PLAINTEXT_TRANSPORT, InterBrokerTransport
from spark_mq.errors import ControllerMovedError, ZooKeeperConnectionError
from spark_mq.protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from spark_mq.protocol.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.reassignment import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from spark_mq.rate_limited_log import RateLimitedLog

from ..zk import znodes
from ..zk.broker_registration import read_live_brokers
from ..zk.client import ZkClient, translate_errors
from ..zk.controller_election import ControllerEpoch
from ..zk.partition_states import (
    list_topics,
    read_partition_state,
    read_topic_assignment,
    read_topic_config,
)
from . import reassignment
from .alter_partition import alter_partition
from .channel import BrokerResponse, ChannelConfig, ControllerChannelManager
from .context import ControllerContext, TopicPartition
from .controlled_shutdown import controlled_shutdown
from .partition_leadership import (
    elect_leaders,
    initialize_leadership,
    remove_replicas_from_isr,
    unclean_setting,
)
from .preferred_election import (
    AutoRebalanceTimer,
    elect_leaders_request,
    elect_preferred,
    imbalanced_partitions,
)
from .request_batch import RequestBatch
from .state_machines import PartitionState as Phase
from .state_machines import ReplicaState
from .topic_deletion import delete_topics, delete_unknown_requests

log = logging.getLogger(__name__)
_RESPONSES = RateLimitedLog(log)

T = TypeVar("T")

#: Answers kept for :attr:`Controller.responses` (tests and status read them).
RESPONSES_KEPT: Final = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig:
    """What the controller needs to know besides ZooKeeper."""

    broker_id: int
    #: The cluster's inter-broker secret, for AuthenticateBroker.
    inter_broker_secret: str
    #: The broker default of ``unclean.leader.election.enable`` (a topic may override it).
    unclean_leader_election_enable: bool = False
    #: The controller's own broker epoch, read when a connection authenticates.
    own_broker_epoch: Callable[[], int | None] = lambda: None
    #: Told of every partition leader elected (True: an unclean election), on the event
    #: thread; must not block (the broker's metrics count them).
    on_leader_elected: Callable[[bool], None] = lambda _unclean: None
    reconnect_backoff_ms: int = 100
    reconnect_backoff_max_ms: int = 1_000
    request_timeout_ms: int = 30_000
    #: Kafka's auto.leader.rebalance.enable, leader.imbalance.per.broker.percentage and
    #: leader.imbalance.check.interval.seconds (see :mod:`.preferred_election`).
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: float = 300
    #: How the controller reaches the brokers (inter.broker.listener.name, its TLS).
    inter_broker: InterBrokerTransport = PLAINTEXT_TRANSPORT


class Controller:
    """The active controller of one election (see the module docstring). One object per
    epoch won: a broker elected again makes a new one."""

    def __init__(
        self,
        zk: ZkClient,
        epoch: ControllerEpoch,
        config: ControllerConfig,
        *,
        on_controller_moved: Callable[[ControllerEpoch, str], None] = lambda _e, _r: None,
    ) -> None:
        self._zk = zk
        self.epoch = epoch
        self.config = config
        self.broker_id = config.broker_id
        self._on_controller_moved = on_controller_moved
        self.context = self._fresh_context()
        self._queue: queue.Queue[tuple[str, Callable[[], None]] | None] = queue.Queue()
        self._active = threading.Event()
        self._watched: set[str] = set()
        self._thread = threading.Thread(
            target=self._run, name=f"controller-event-thread-{self.broker_id}", daemon=True
        )
        self.channel = ControllerChannelManager(
            ChannelConfig(
                controller_id=self.broker_id,
                secret=config.inter_broker_secret,
                inter_broker=config.inter_broker,
                own_broker_epoch=config.own_broker_epoch,
                request_timeout_ms=config.request_timeout_ms,
                reconnect_backoff_ms=config.reconnect_backoff_ms,
                reconnect_backoff_max_ms=config.reconnect_backoff_max_ms,
            ),
            self.on_response,
        )
        #: The newest answers of the brokers to this controller's requests, oldest first.
        self.responses: collections.deque[BrokerResponse] = collections.deque(maxlen=RESPONSES_KEPT)
        #: Requests handed to the channel, per broker (counts, for tests and status).
        self.sent: collections.Counter[int] = collections.Counter()
        self._rebalance_timer = AutoRebalanceTimer(
            config.leader_imbalance_check_interval_seconds,
            lambda: self._enqueue("AutoPreferredReplicaLeaderElection", self._auto_rebalance),
            f"auto-leader-rebalance-task-{self.broker_id}",
        )

    # -----------------------------------------------------------------------------------------
    # Lifecycle

    @property
    def active(self) -> bool:
        return self._active.is_set()

    def start(self) -> None:
        """Start the event thread with Startup as its first event (never blocks)."""
        self._active.set()
        self._enqueue("Startup", self._startup)
        self._thread.start()
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_timer.start()

    def shutdown(self) -> None:
        """Stop at once: drop queued events, stop the senders, stop watching. Never blocks
        (it may run on the ZooKeeper event thread); :meth:`join` waits for the threads."""
        if not self._active.is_set():
            return
        self._active.clear()
        self._rebalance_timer.stop()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(None)
        self.channel.shutdown()
        log.info("controller %d (epoch %d) stopped", self.broker_id, self.epoch.epoch)

    def join(self, timeout_s: float = 10.0) -> None:
        if threading.current_thread() is not self._thread and self._thread.is_alive():
            self._thread.join(timeout_s)
        self.channel.join(timeout_s)

    def wait_for_events(self, timeout_s: float = 30.0) -> bool:
        """Wait until every event queued before this call has been processed (for tests
        and for callers that need the controller's reaction to a change)."""
        done = threading.Event()
        self._enqueue("Barrier", done.set)
        return self._active.is_set() and done.wait(timeout_s)

    def alter_partition(
        self, request: AlterPartitionRequest
    ) -> concurrent.futures.Future[AlterPartitionResponse]:
        """Queue a leader's AlterPartition as an event; the future gets the answer, or the
        error that stopped the event (ControllerMovedError if this controller stopped)."""

        def compute() -> AlterPartitionResponse:
            answer = alter_partition(self._zk, self.context, request, self._batch())
            # A partition being reassigned may now have all its target replicas in sync.
            changed = [(p.topic, p.partition) for p in request.partitions]
            reassignment.on_isr_change(self._zk, self.context, changed, self._batch())
            return answer

        return self._submit("AlterPartition", compute)

    def controlled_shutdown(
        self, request: ControlledShutdownRequest
    ) -> concurrent.futures.Future[ControlledShutdownResponse]:
        """Queue a broker's ControlledShutdown as an event (see :meth:`alter_partition`)."""
        return self._submit(
            "ControlledShutdown",
            lambda: controlled_shutdown(self._zk, self.context, request, self._batch()),
        )

    def elect_leaders(
        self, request: ElectLeadersRequest
    ) -> concurrent.futures.Future[ElectLeadersResponse]:
        """Queue an ElectLeaders as an event (see :meth:`alter_partition`)."""
        return self._submit(
            "ElectLeaders",
            lambda: elect_leaders_request(self._zk, self.context, request, self._batch()),
        )

    def _submit(self, name: str, compute: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run ``compute`` as event ``name``; the future gets its result, or the error that
        stopped it (ControllerMovedError if this controller stopped)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def process() -> None:
            try:
                future.set_result(compute())
            except BaseException as exc:
                if not future.done():
                    future.set_exception(exc)
                raise

        if not self._active.is_set():
            future.set_exception(
                ControllerMovedError(f"broker {self.broker_id} is no longer the controller")
            )
        else:
            self._enqueue(name, process)
        return future

    def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> concurrent.futures.Future[AlterPartitionReassignmentsResponse]:
        """Start (or cancel) reassignments as an event; the answer once they are started."""
        return self._submit(
            "AlterPartitionReassignments",
            lambda: reassignment.alter_partition_reassignments(
                self._zk, self.context, request, self._batch()
            ),
        )

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> concurrent.futures.Future[ListPartitionReassignmentsResponse]:
        return self._submit(
            "ListPartitionReassignments",
            lambda: reassignment.list_partition_reassignments(self.context, request),
        )

    def _enqueue(self, name: str, process: Callable[[], None]) -> None:
        if self._active.is_set():
            self._queue.put((name, process))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None and self._active.is_set():
            self._process(*item)

    def _process(self, name: str, process: Callable[[], None]) -> None:
        while self._active.is_set():
            try:
                process()
                return
            except ControllerMovedError as exc:
                self._moved(str(exc))
                return
            except ZooKeeperConnectionError as exc:
                # The event may have changed the context before its write failed, and a
                # write cut off by a dropped connection may or may not have happened: once
                # connected again, read everything anew (Startup) rather than resume.
                log.warning("controller event %s waits for ZooKeeper: %s", name, exc)
                while self._active.is_set() and not self._zk.wait_connected(500):
                    pass
                name, process = "Startup (resync after a ZooKeeper disconnection)", self._startup
            except Exception:
                # Kafka's controller logs a failed event and goes on with the next one.
                log.exception("controller event %s failed", name)
                return

    def _moved(self, reason: str) -> None:
        log.warning(
            "controller %d (epoch %d) resigns: %s", self.broker_id, self.epoch.epoch, reason
        )
        self.shutdown()
        self._on_controller_moved(self.epoch, reason)

    # -----------------------------------------------------------------------------------------
    # Watches: callbacks run on kazoo's threads and only enqueue. Returning False ends a watch.

    def _watch_children(self, path: str, name: str, process: Callable[[], None]) -> None:
        if path in self._watched:
            return

        def on_change(_children: list[str]) -> bool | None:
            if not self._active.is_set():
                return False
            self._enqueue(name, process)
            return None

        with translate_errors(f"watching {path}"):
            self._zk.kazoo.ChildrenWatch(path, on_change, send_event=False)
        self._watched.add(path)

    def _watch_topic(self, topic: str) -> None:
        path = znodes.topic_path(topic)
        if path in self._watched:
            return

        def on_change(data: bytes | None, _stat: object) -> bool | None:
            if not self._active.is_set() or data is None:
                self._watched.discard(path)
                return False
            self._enqueue("PartitionModifications", lambda: self._partition_modifications(topic))
            return None

        with translate_errors(f"watching {path}"):
            self._zk.kazoo.DataWatch(path, on_change)
        self._watched.add(path)

    # -----------------------------------------------------------------------------------------
    # Sending

    def _batch(self) -> RequestBatch:
        return RequestBatch(self.context, self.broker_id, self._send)

    def _send(self, broker_id: int, request: msgspec.Struct) -> None:
        if self.channel.send(broker_id, request):
            self.sent[broker_id] += 1

    def on_response(self, answer: BrokerResponse) -> None:
        """The channel's callback for every answered request (on a sender thread): record
        it, log errors, and resign if the broker has seen a newer controller."""
        self.responses.append(answer)
        code = getattr(answer.response, "error_code", 0) if answer.error is None else None
        if code == ErrorCode.STALE_CONTROLLER_EPOCH:
            self._moved(
                f"broker {answer.broker_id} refused {answer.api} with STALE_CONTROLLER_EPOCH: "
                "it has seen a newer controller"
            )
            return
        if answer.error is not None or code:
            detail = answer.error or getattr(answer.response, "error_message", None) or code
            _RESPONSES.log(
                ("broker answered with an error", answer.broker_id, answer.api),
                logging.WARNING,
                "broker %d answered %s of controller %d with an error (the state is sent "
                "again with the next change): %s",
                answer.broker_id,
                answer.api,
                self.broker_id,
                detail,
            )
        for part in getattr(answer.response, "partition_errors", None) or []:
            if part.error_code:
                _RESPONSES.log(
                    ("partition error", answer.broker_id, answer.api, part.error_code),
                    logging.WARNING,
                    "broker %d: %s of %s-%d failed: %s",
                    answer.broker_id,
                    answer.api,
                    part.topic,
                    part.partition,
                    part.error_message or part.error_code,
                )

    # -----------------------------------------------------------------------------------------
    # Reading ZooKeeper into the context

    def _add_live_broker(self, broker_id: int, registration: znodes.BrokerRegistration) -> None:
        self.context.live_brokers[broker_id] = registration
        self.channel.add_broker(broker_id, self.config.inter_broker.address(registration))

    def _read_topic(self, topic: str) -> bool:
        assignment = read_topic_assignment(self._zk, topic)
        if assignment is None:
            return False
        self.context.assignments[topic] = dict(assignment.partitions)
        reassignment.record_reassignments(self.context, topic, assignment)
        self._watch_topic(topic)
        return True

    def _unclean_allowed(self, topic: str) -> bool:
        return unclean_setting(
            read_topic_config(self._zk, topic), self.config.unclean_leader_election_enable
        )

    # -----------------------------------------------------------------------------------------
    # Events

    def _fresh_context(self) -> ControllerContext:
        """An empty view of the cluster for this controller epoch (startup reads it all)."""
        return ControllerContext(self.epoch, on_leader_elected=self.config.on_leader_elected)

    def _startup(self) -> None:
        ctx = self.context = self._fresh_context()
        self._watch_children(znodes.BROKER_IDS, "BrokerChange", self._broker_change)
        self._watch_children(znodes.TOPICS, "TopicChange", self._topic_change)
        self._watch_children(znodes.DELETE_TOPICS, "TopicDeletion", self._topic_deletion)
        for broker_id, (registration, broker_epoch) in read_live_brokers(self._zk).items():
            ctx.broker_epochs[broker_id] = broker_epoch
            self._add_live_broker(broker_id, registration)
        for topic in list_topics(self._zk):
            self._read_topic(topic)
        for tp in ctx.all_partitions():
            current = read_partition_state(self._zk, *tp)
            if current is not None:
                ctx.leadership[tp] = current
        ctx.topics_to_delete = set(self._zk.children(znodes.DELETE_TOPICS)) & set(ctx.assignments)
        log.info(
            "controller %d (epoch %d) starts: live brokers %s, %d topics, %d partitions",
            self.broker_id,
            self.epoch.epoch,
            sorted(ctx.live_brokers),
            len(ctx.assignments),
            len(ctx.all_partitions()),
        )
        batch = self._batch()
        # Kafka's order: every broker learns the cluster before any state machine acts.
        batch.add_update_metadata(ctx.live_ids, ctx.all_partitions())
        batch.send()
        for tp in ctx.all_partitions():
            self._initialize_states(tp)
        for broker in sorted(ctx.live_brokers):
            batch.add_full_leader_and_isr(broker)
        batch.send()
        self._trigger_online_partition_state_change()
        # Replicas on dead brokers go OfflineReplica, which takes them out of the ISR (Kafka's
        # ReplicaStateMachine.startup). After the elections, as for a broker that dies
        # under a running controller, so a partition whose leader died gets one new leader
        # epoch, not one for losing its leader and another for its election.
        hosted = [tp for tp in ctx.all_partitions() if not ctx.is_being_deleted(tp)]
        dead = {b for tp in hosted for b in ctx.replicas(tp)} - ctx.live_ids
        if dead:
            on_dead = [tp for tp in hosted if dead & set(ctx.replicas(tp))]
            remove_replicas_from_isr(self._zk, ctx, dead, on_dead, batch)
            batch.add_update_metadata(ctx.live_ids)
            batch.send()
        reassignment.resume(self._zk, ctx, batch)
        self._topic_deletion()

    def _initialize_states(self, tp: TopicPartition) -> None:
        """Kafka's initializePartitionState / initializeReplicaState at startup."""
        ctx = self.context
        ctx.partition_states.move(tp, Phase.NEW)
        current = ctx.leadership.get(tp)
        if current is not None and not ctx.is_being_deleted(tp):
            live = current.value.leader in ctx.live_brokers
            ctx.partition_states.move(tp, Phase.ONLINE if live else Phase.OFFLINE)
        for broker in ctx.replicas(tp):
            key = (tp[0], tp[1], broker)
            ctx.replica_states.move(key, ReplicaState.NEW)
            live = broker in ctx.live_brokers
            ctx.replica_states.move(key, ReplicaState.ONLINE if live else ReplicaState.OFFLINE)

    def _trigger_online_partition_state_change(self, batch: RequestBatch | None = None) -> None:
        """New and Offline partitions (not being deleted) -> Online."""
        ctx = self.context
        batch = batch or self._batch()
        new = [tp for tp in ctx.partition_states.keys_in(Phase.NEW) if not ctx.is_being_deleted(tp)]
        offline = [
            tp for tp in ctx.partition_states.keys_in(Phase.OFFLINE) if not ctx.is_being_deleted(tp)
        ]
        initialize_leadership(self._zk, ctx, sorted(new), batch)
        elect_leaders(
            self._zk,
            ctx,
            sorted(offline),
            batch,
            self._unclean_allowed,
        )
        batch.send()

    def _broker_change(self) -> None:
        ctx = self.context
        found = read_live_brokers(self._zk)
        known = dict(ctx.broker_epochs)
        arrived = sorted(found.keys() - known.keys())
        left = sorted(known.keys() - found.keys())
        bounced = sorted(b for b in found.keys() & known.keys() if found[b][1] != known[b])
        if not (arrived or left or bounced):
            return
        log.info(
            "controller %d: brokers arrived %s, left %s, restarted %s",
            self.broker_id,
            arrived,
            left,
            bounced,
        )
        failed = [*left, *bounced]
        for broker in failed:
            ctx.live_brokers.pop(broker, None)
            ctx.broker_epochs.pop(broker, None)
            ctx.shutting_down_brokers.discard(broker)
            self.channel.remove_broker(broker)
        if failed:
            self._on_brokers_failure(failed)
        started = sorted([*arrived, *bounced])
        for broker in started:
            registration, broker_epoch = found[broker]
            ctx.broker_epochs[broker] = broker_epoch
            self._add_live_broker(broker, registration)
        if started:
            self._on_brokers_startup(started)

    def _on_brokers_failure(self, dead: list[int]) -> None:
        ctx = self.context
        batch = self._batch()
        led = [tp for tp in ctx.partitions_led_by(dead) if not ctx.is_being_deleted(tp)]
        for tp in led:
            ctx.partition_states.move_all([tp], Phase.OFFLINE)
        self._trigger_online_partition_state_change(batch)
        hosted = [tp for tp in ctx.partitions_on(dead) if not ctx.is_being_deleted(tp)]
        for tp in hosted:
            for broker in set(ctx.replicas(tp)) & set(dead):
                ctx.replica_states.move_all([(tp[0], tp[1], broker)], ReplicaState.OFFLINE)
        remove_replicas_from_isr(self._zk, ctx, dead, hosted, batch)
        # Every broker learns the new list of live brokers (and the partitions changed).
        batch.add_update_metadata(ctx.live_ids)
        batch.send()

    def _on_brokers_startup(self, started: list[int]) -> None:
        ctx = self.context
        batch = self._batch()
        batch.add_update_metadata(ctx.live_ids - set(started))
        batch.send()
        batch.add_update_metadata(started, ctx.all_partitions())
        batch.send()
        for tp in ctx.partitions_on(started):
            for broker in set(ctx.replicas(tp)) & set(started):
                key = (tp[0], tp[1], broker)
                if ctx.replica_states.state(key) is ReplicaState.NON_EXISTENT:
                    ctx.replica_states.move(key, ReplicaState.NEW)
                ctx.replica_states.move_all([key], ReplicaState.ONLINE)
        for broker in started:
            batch.add_full_leader_and_isr(broker)
        batch.send()
        self._trigger_online_partition_state_change()

    def _auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance (see :mod:`.preferred_election`)."""
        ctx = self.context
        partitions = imbalanced_partitions(ctx, self.config.leader_imbalance_per_broker_percentage)
        if partitions:
            batch = self._batch()
            elect_preferred(self._zk, ctx, partitions, batch)
            batch.send()

    def _topic_change(self) -> None:
        ctx = self.context
        topics = set(list_topics(self._zk))
        for topic in sorted(ctx.assignments.keys() - topics):
            ctx.remove_topic(topic)
        new = sorted(topics - ctx.assignments.keys())
        created = [topic for topic in new if self._read_topic(topic)]
        if created:
            log.info("controller %d: new topics %s", self.broker_id, created)
            self._on_new_partitions([tp for t in created for tp in ctx.partitions_of(t)])

    def _partition_modifications(self, topic: str) -> None:
        ctx = self.context
        if topic in ctx.topics_to_delete or topic not in ctx.assignments:
            return
        assignment = read_topic_assignment(self._zk, topic)
        if assignment is None:
            return
        known = ctx.assignments[topic]
        added = {p: r for p, r in assignment.partitions.items() if p not in known}
        if added:
            known.update(added)
            log.info("controller %d: topic %s grew by partitions %s", self.broker_id, topic, added)
            self._on_new_partitions([(topic, p) for p in sorted(added)])

    def _on_new_partitions(self, partitions: list[TopicPartition]) -> None:
        """Kafka's onNewPartitionCreation: New, then Online with a first leader."""
        ctx = self.context
        for tp in partitions:
            ctx.partition_states.move_all([tp], Phase.NEW)
            for broker in ctx.replicas(tp):
                ctx.replica_states.move_all([(tp[0], tp[1], broker)], ReplicaState.NEW)
        batch = self._batch()
        initialize_leadership(self._zk, ctx, partitions, batch)
        for tp in partitions:
            for broker in ctx.replicas(tp):
                live = broker in ctx.live_brokers
                target = ReplicaState.ONLINE if live else ReplicaState.OFFLINE
                ctx.replica_states.move_all([(tp[0], tp[1], broker)], target)
        batch.send()

    def _topic_deletion(self) -> None:
        ctx = self.context
        requested = set(self._zk.children(znodes.DELETE_TOPICS))
        unknown = requested - ctx.assignments.keys()
        if unknown:
            delete_unknown_requests(self._zk, ctx, unknown)
        wanted = (requested & ctx.assignments.keys()) | ctx.topics_to_delete
        if wanted:
            ctx.topics_to_delete |= wanted
            delete_topics(self._zk, ctx, wanted, self._batch())
