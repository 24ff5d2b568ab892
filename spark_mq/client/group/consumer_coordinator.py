"""The consumer's side of group membership: subscriptions in, partitions out.

:class:`ConsumerCoordinator` is Kafka's ``ConsumerCoordinator``: it fills in the hooks of
:class:`~spark_mq.client.group.membership.GroupMembership` with what a consumer means by a
member, and runs inside the consumer's ``poll()``:

- **Joining**: each assignor of ``partition.assignment.strategy`` is offered with the
  member's subscription bytes (topics, the partitions it owns, their generation, the
  assignor's user data; see ``docs/groups.md``).
- **Leading**: the leader decodes every member's subscription, looks up the partition counts
  of all their topics (Metadata), runs the assignor the group chose and remembers those counts
  (the *assignment snapshot*). When later metadata shows different counts (a topic created,
  deleted or grown) it asks for a rebalance.
- **Before a rebalance** (``on_join_prepare``): auto-commit commits the positions (an
  asynchronous commit that later polls go on waiting for, so that no ``poll()`` outlasts its
  timeout, as in Kafka since KIP-266; given up after ``default.api.timeout.ms``); an eager
  member revokes everything; a cooperative member revokes only partitions of topics it no
  longer subscribes to; a member that lost its generation declares everything lost.
- **After a rebalance** (``on_join_complete``): the new assignment replaces the old one.
  Partitions that stay keep their positions and buffered data; a cooperative member revokes
  what the new assignment dropped and, if that was anything, rejoins at once so the leader can
  hand those partitions on (KIP-429). Newly assigned partitions start from the group's
  committed offsets (looked up by the consumer before it fetches), else
  ``auto.offset.reset``.
- **Subscriptions**: a pattern is matched against the topic list every
  ``metadata.max.age.ms``; a changed subscription means a rebalance.
- **Auto-commit**: every ``auto.commit.interval.ms`` from ``poll()`` (asynchronously), and
  synchronously before a rebalance and on ``close()``.

Threads: the consumer's thread, except what :class:`GroupMembership` documents.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Set

from spark_mq.client.assignors import (
    DEFAULT_GENERATION,
    Assignor,
    RebalanceProtocol,
    Subscription,
    common_rebalance_protocol,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ConsumerConfig
from spark_mq.client.group.committer import CommitCallback, OffsetCommitter
from spark_mq.client.group.listener import RebalanceCallbacks
from spark_mq.client.group.member_state import Generation
from spark_mq.client.group.membership import GroupMembership
from spark_mq.client.group.offsets import OffsetAndMetadata
from spark_mq.client.records import TopicPartition
from spark_mq.client.subscription_state import SubscriptionState, SubscriptionType
from spark_mq.errors import InconsistentGroupProtocolError, SparkMQError
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.groups import JoinGroupMember, JoinGroupProtocol

log = logging.getLogger(__name__)

#: The least time a metadata refresh from poll() is given, whatever is left of the poll's
#: timeout (a broker answers Metadata in about a millisecond).
_METADATA_FLOOR_MS = 100


class _PendingCommit:
    """An asynchronous commit the rebalance waits for, across polls."""

    __slots__ = ("done", "error", "give_up_at")

    def __init__(self, give_up_at: float) -> None:
        self.give_up_at = give_up_at
        self.done = False
        self.error: SparkMQError | None = None

    def answered(self, offsets: object, error: SparkMQError | None) -> None:
        self.done = True
        self.error = error


class ConsumerCoordinator(GroupMembership):
    """Group membership for one :class:`~spark_mq.Consumer` (see the module docstring)."""

    def __init__(
        self,
        config: ConsumerConfig,
        cluster: Cluster,
        subscriptions: SubscriptionState,
        *,
        on_partitions_removed: Callable[[TopicPartition], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(config, cluster, clock=clock, sleep=sleep)
        self._subs = subscriptions
        self._removed = on_partitions_removed
        self._assignors: tuple[Assignor, ...] = config.partition_assignment_strategy
        self.protocol = common_rebalance_protocol(self._assignors)
        self.callbacks = RebalanceCallbacks(None)
        self.committer = OffsetCommitter(
            self,
            group_managed=lambda: subscriptions.is_auto_subscribed,
            clock=clock,
            sleep=sleep,
        )
        self._next_auto_commit_at = clock() + config.auto_commit_interval_ms / 1000
        self._metadata_checked_at = -1e18
        self._joined_subscription: frozenset[str] = frozenset()
        #: Leader only: the partition counts the last assignment was computed from, and the
        #: topics of the whole group.
        self._assignment_snapshot: dict[str, int] | None = None
        self._group_topics: frozenset[str] = frozenset()
        #: What this member held after its last completed rebalance, and that generation
        #: (the sticky assignors' memory).
        self._last_assignment: tuple[TopicPartition, ...] = ()
        self._last_generation = DEFAULT_GENERATION
        #: The auto-commit before a rebalance, while it waits for its answer.
        self._prepare_commit: _PendingCommit | None = None

    # -- the application's calls ----------------------------------------------------------

    def subscription_changed(self, listener: object | None) -> None:
        """``subscribe()`` was called: use ``listener``, read metadata, rejoin."""
        self.callbacks = RebalanceCallbacks(listener)
        self._metadata_checked_at = -1e18
        self.request_rejoin("the subscription changed")

    def poll(self, deadline: float, *, wait_for_join: bool) -> None:
        """What ``poll()`` does for the group: keep the membership (rejoining when needed,
        waiting for it until ``deadline`` only if ``wait_for_join``), run the callbacks of
        finished async commits, auto-commit when due. Raises what a listener raised."""
        now = self._clock()
        self.record_poll(now)
        self.raise_errors()
        self.committer.complete_async()
        try:
            if self._subs.is_auto_subscribed:
                self._check_metadata(now, deadline)
                if self.rejoin_needed_or_pending():
                    self.join_step(deadline if wait_for_join else now)
                elif self.coordinator() is None:
                    # Lost while Stable (a heartbeat failed): find it again, so that the
                    # heartbeat thread can go on before the session runs out.
                    self.ensure_coordinator_ready(now)
            self._maybe_auto_commit(self._clock())
        finally:
            error = self.callbacks.take_error()
        if error is not None:
            raise error

    def positions(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """What a commit of "everything consumed" commits: each position."""
        out = {}
        for tp in self._subs.partitions():
            position = self._subs.position(tp)
            if position is not None:
                out[tp] = OffsetAndMetadata(position)
        return out

    def commit_sync(
        self, offsets: dict[TopicPartition, OffsetAndMetadata] | None, *, timeout_ms: int
    ) -> None:
        self.committer.complete_async()
        self.committer.commit_sync(
            self.positions() if offsets is None else offsets, timeout_ms=timeout_ms
        )

    def commit_async(
        self,
        offsets: dict[TopicPartition, OffsetAndMetadata] | None,
        callback: CommitCallback | None,
    ) -> None:
        self.committer.commit_async(self.positions() if offsets is None else offsets, callback)
        self.committer.complete_async()

    def _commit_quietly(self, why: str, *, timeout_ms: int) -> None:
        """Auto-commit synchronously; a failure is logged (the records will be redelivered)."""
        try:
            self.committer.commit_sync(self.positions(), timeout_ms=timeout_ms)
        except SparkMQError as exc:
            log.warning("group %s: auto-commit %s failed: %s", self.group_id, why, exc)

    def _maybe_auto_commit(self, now: float) -> None:
        if not self.config.auto_commit or now < self._next_auto_commit_at:
            return
        self._next_auto_commit_at = now + self.config.auto_commit_interval_ms / 1000
        if self._subs.is_auto_subscribed and not self.generation().is_valid:
            return  # out of the group: the commit could only fail
        positions = self.positions()
        if positions:
            self.committer.commit_async(positions, None)

    def leave(self, reason: str, *, closing: bool) -> None:
        """``close()`` or ``unsubscribe()``: commit (auto-commit), revoke (or declare lost)
        every partition, and leave the group; a static member sends no LeaveGroup (Kafka's
        behaviour), so it stays a member until its session times out."""
        # Closing waits at most a request timeout per step, not the whole API timeout.
        timeout_ms = self.config.request_timeout_ms if closing else self._api_timeout_ms()
        if self._subs.is_auto_subscribed:
            owned = set(self._subs.assignment())
            if self.config.auto_commit and owned and self.generation().is_valid:
                self._commit_quietly("before leaving the group", timeout_ms=timeout_ms)
            if self.generation().is_valid and not self.rejoin_needed_or_pending():
                self.callbacks.revoked(owned)
            else:
                self.callbacks.lost(owned)
            for tp in owned:
                self._removed(tp)
            self._subs.assign_from_group(())
            self.leave_group(reason)
        elif self.config.auto_commit and closing:
            self._commit_quietly("on close", timeout_ms=timeout_ms)
        self.committer.complete_async(self.config.request_timeout_ms / 1000 if closing else 0.0)
        error = self.callbacks.take_error()
        if error is not None and not closing:
            raise error

    def _api_timeout_ms(self) -> int:
        return min(self.config.default_api_timeout_ms, self.config.effective_rebalance_timeout_ms)

    # -- metadata -------------------------------------------------------------------------

    def _check_metadata(self, now: float, deadline: float) -> None:
        """Refresh metadata every ``metadata.max.age.ms`` (waiting at most until
        ``deadline``); ask for a rebalance when the pattern matches other topics, or
        (leader) partition counts changed."""
        subs = self._subs
        max_age_s = self.config.metadata_max_age_ms / 1000
        if now - self._metadata_checked_at >= max_age_s:
            self._metadata_checked_at = now
            pattern = subs.subscription_type is SubscriptionType.AUTO_PATTERN
            wanted = sorted(subs.subscription | self._group_topics)
            if pattern or wanted:
                # Bounded by the poll's timeout, but never below a floor a live broker
                # easily meets: a poll(0) loop must still see new topics.
                timeout_ms = max(int((deadline - now) * 1000), _METADATA_FLOOR_MS)
                try:
                    response = self.cluster.refresh(
                        None if pattern else wanted, timeout_ms=timeout_ms
                    )
                except SparkMQError as exc:
                    log.warning("group %s: metadata refresh failed: %s", self.group_id, exc)
                    retry_s = self.config.retry_backoff_max_ms / 1000
                    self._metadata_checked_at = now - max_age_s + retry_s
                    return
                if pattern:
                    names = [t.name for t in response.topics if t.error_code == ErrorCode.NONE]
                    if subs.match_topics(names):
                        log.info(
                            "group %s: the pattern now matches %s",
                            self.group_id,
                            sorted(subs.subscription),
                        )
        if subs.subscription != self._joined_subscription:
            self.request_rejoin("the subscribed topics changed")
        snapshot = self._assignment_snapshot
        if snapshot is not None and self._partition_counts(self._group_topics) != snapshot:
            self.request_rejoin("the partitions of the group's topics changed")

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        counts = {}
        for topic in topics:
            count = self.cluster.partition_count(topic)
            if count:
                counts[topic] = count
        return counts

    # -- the membership hooks -------------------------------------------------------------

    def join_protocols(self) -> list[JoinGroupProtocol]:
        topics = sorted(self._subs.subscription)
        self._joined_subscription = frozenset(topics)
        owned = sorted(self._subs.assignment())
        generation = self._last_generation if owned else DEFAULT_GENERATION
        protocols = []
        for assignor in self._assignors:
            user_data = assignor.subscription_user_data(
                topics, self._last_assignment, self._last_generation
            )
            subscription = Subscription(topics, owned, generation, None, user_data)
            protocols.append(JoinGroupProtocol(assignor.name, encode_subscription(subscription)))
        return protocols

    def on_join_prepare(self, generation: Generation, deadline: float) -> bool:
        owned = set(self._subs.assignment())
        if self.config.auto_commit and owned and generation.is_valid:
            if not self._commit_before_rebalance(deadline):
                return False
            generation = self.generation()
        if not generation.is_valid:
            self._give_up(owned, lost=True)
        elif self.protocol is RebalanceProtocol.EAGER:
            self._give_up(owned, lost=False)
        else:
            gone = {tp for tp in owned if tp.topic not in self._subs.subscription}
            self._give_up(gone, lost=False)
        self._assignment_snapshot = None
        return True

    def _commit_before_rebalance(self, deadline: float) -> bool:
        """Auto-commit the positions before a rebalance without waiting past ``deadline``:
        the commit is sent once and the next polls wait for its answer. True once it is
        answered (a failure is logged: the records will be delivered again) or given up
        after the API timeout."""
        pending = self._prepare_commit
        if pending is None:
            pending = self._prepare_commit = _PendingCommit(
                self._clock() + self._api_timeout_ms() / 1000
            )
            self.committer.commit_async(self.positions(), pending.answered)
        while not pending.done:
            now = self._clock()
            until = min(deadline, pending.give_up_at)
            if now >= until:
                break
            self.committer.complete_async(until - now)
        if not pending.done and self._clock() < pending.give_up_at:
            return False
        self._prepare_commit = None
        if pending.error is not None or not pending.done:
            log.warning(
                "group %s: auto-commit before the rebalance failed (%s); the records since "
                "the last commit will be delivered again",
                self.group_id,
                pending.error or "no answer within default.api.timeout.ms",
            )
        return True

    def _give_up(self, partitions: Set[TopicPartition], *, lost: bool) -> None:
        """Tell the listener, then drop the partitions (the listener may still commit them)."""
        if not partitions:
            return
        if lost:
            self.callbacks.lost(partitions)
        else:
            self.callbacks.revoked(partitions)
        self._subs.assign_from_group(tp for tp in self._subs.partitions() if tp not in partitions)
        for tp in partitions:
            self._removed(tp)

    def perform_assignment(
        self, leader_id: str, protocol: str, members: list[JoinGroupMember]
    ) -> dict[str, bytes]:
        assignor = next((a for a in self._assignors if a.name == protocol), None)
        if assignor is None:
            raise InconsistentGroupProtocolError(
                f"group {self.group_id}: the coordinator chose assignor {protocol!r}, which "
                f"this leader does not have ({', '.join(a.name for a in self._assignors)})"
            )
        subscriptions = {
            m.member_id: decode_subscription(m.metadata, m.group_instance_id) for m in members
        }
        topics = frozenset(t for s in subscriptions.values() for t in s.topics)
        if topics:
            self.cluster.refresh(sorted(topics))
        counts = self._partition_counts(topics)
        result = assignor.assign(counts, subscriptions)
        self._group_topics = topics
        self._assignment_snapshot = counts
        log.info(
            "group %s: leader %s assigned %d partitions of %d topics to %d members with %s",
            self.group_id,
            leader_id,
            sum(counts.values()),
            len(counts),
            len(members),
            protocol,
        )
        return {member: encode_assignment(a) for member, a in result.items()}

    def on_join_complete(self, generation: Generation, assignment: bytes) -> None:
        partitions = decode_assignment(assignment).partitions
        new = set(partitions)
        owned = set(self._subs.assignment())
        added, revoked = new - owned, owned - new
        if revoked:
            self.callbacks.revoked(revoked)
        self._subs.assign_from_group(partitions)
        for tp in revoked:
            self._removed(tp)
        self._last_assignment = partitions
        self._last_generation = generation.generation_id
        if self._assignment_snapshot is None:
            self._group_topics = frozenset()
        self.callbacks.assigned(added)
        if revoked and self.protocol is RebalanceProtocol.COOPERATIVE:
            self.request_rejoin("partitions were revoked; rejoining so they can move")
        self._next_auto_commit_at = self._clock() + self.config.auto_commit_interval_ms / 1000

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the heartbeat thread and close the coordinator connections (call
        :meth:`leave` first)."""
        super().close()
