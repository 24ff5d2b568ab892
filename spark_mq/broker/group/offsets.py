"""Committed offsets: OffsetCommit, OffsetFetch, expiry, and the transactional hook.

A commit is checked against the group first, as in Kafka: a member of the current generation
may commit (Stable, or PreparingRebalance: a consumer commits while it revokes partitions);
CompletingRebalance answers REBALANCE_IN_PROGRESS; a stale generation ILLEGAL_GENERATION; an
unknown member UNKNOWN_MEMBER_ID; a replaced static member FENCED_INSTANCE_ID. Generation -1
with no member id is a commit from outside the group protocol (a consumer using ``assign``),
accepted only while the group has no members (a group that does not exist is created for
it). The offsets are written to ``__consumer_offsets`` as one batch and become visible (to
OffsetFetch) only once that append succeeded.

Expiry (Kafka >= 2.1, KIP-211), every ``offsets.retention.check.interval.ms``: the offsets of
an Empty group are removed ``offsets.retention.minutes`` after the group became empty; those
of a group that only ever committed (no protocol type), that long after each offset's
commit. A Stable consumer group (KIP-496) loses, that long after their commit, the offsets of
topics none of its members subscribes to any more (read from the members' JoinGroup metadata,
:mod:`~spark_mq.broker.group.subscriptions`); its other offsets, and every offset of a group
that is rebalancing or whose subscriptions do not decode, never expire. Removed offsets are
written as tombstones; an Empty group left without offsets goes Dead and its metadata record
gets a tombstone too.

Transactional offset commits (TxnOffsetCommit, :meth:`OffsetManager.commit_transactional`)
are checked against the group as a commit is, then appended to the group's partition of
``__consumer_offsets`` as a *transactional* batch of the producer (its id and epoch, the
transactional attribute), as Kafka does, and kept in ``Group.pending_txn_offsets`` (by
producer id): invisible to OffsetFetch, which answers UNSTABLE_OFFSET_COMMIT for such a
partition when asked for stable offsets. The transaction coordinator writes the
transaction's marker to that partition and then calls
:meth:`OffsetManager.complete_transaction`, which publishes the offsets (commit) or drops them
(abort); nothing more is written, the marker is the decision. Loading the topic replays the
same: transactional offset records wait for their producer's marker
(``LoadedGroups.apply_marker``), and those still without one come back pending, to be
completed by the transaction coordinator's recovery. A committed transaction's offset for a
partition replaces the partition's current one only if its record was written after it
(Kafka's rule): a plain commit made while the transaction was pending stays, in memory as
after a reload of the compacted topic.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

from spark_mq.broker.coordinator_topic import Record
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.group.group import Group
from spark_mq.broker.group.offsets_topic import GroupStore
from spark_mq.broker.group.records import (
    OffsetEntry,
    TopicPartitionKey,
    encode_offset_value,
    group_key,
    next_position,
    offset_key,
    publish_committed,
)
from spark_mq.broker.group.replication import APPEND_ERRORS, coordinator_error
from spark_mq.broker.group.state import GroupState
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    SparkMQError,
    StorageError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)

logger = logging.getLogger("spark_mq.broker.group")


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition of an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class FetchedOffset:
    """One partition of an OffsetFetch answer: the entry (None: nothing committed) or why
    it cannot be given."""

    topic: str
    partition: int
    entry: OffsetEntry | None
    error: SparkMQError | None = None


class OffsetManager:
    """The offsets half of the coordinator; shares ``groups`` with it."""

    def __init__(
        self,
        config: GroupConfig,
        groups: dict[str, Group],
        store: GroupStore,
        *,
        create_group: Callable[[str, int], Group],
        touch_member: Callable[[Group, str, int], None],
        check_coordinator: Callable[[str], None] = lambda group_id: None,
    ) -> None:
        self.config = config
        self.groups = groups
        self.store = store
        self._create_group = create_group
        self._touch_member = touch_member
        #: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for a group whose partition this
        #: coordinator does not own (checked here for TxnOffsetCommit).
        self._check_coordinator = check_coordinator

    # -----------------------------------------------------------------------------------------
    # OffsetCommit

    def commit(
        self,
        group_id: str,
        commits: Sequence[OffsetCommit],
        *,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
        staged: dict[TopicPartitionKey, OffsetEntry] | None = None,
    ) -> list[SparkMQError | None]:
        """Commit ``commits``; each one's error (None: committed). A check of the group that
        fails is raised instead (it applies to every partition).

        With ``staged`` (a cluster coordinator, whose commits count once replicated), the
        written offsets go there instead of into the group: the caller publishes them
        (:meth:`publish`) once every in-sync replica has them, as Kafka's cache takes a
        commit only in its append callback."""
        group = self._group_for_commit(group_id, generation_id, member_id, group_instance_id)
        if group is None:
            group = self._create_group(group_id, now_ms)
        else:
            self._touch_member(group, member_id, now_ms)
        errors, records, accepted = self._encode_commits(group_id, commits, now_ms)
        if records:
            try:
                self.store.append(group_id, records, now_ms)
            except APPEND_ERRORS as exc:
                # A cluster's: the partition moved, or its ISR is below min.insync.replicas.
                logger.warning("group %s: offsets not written: %s", group_id, exc)
                refused = coordinator_error(exc, f"group {group_id!r}: the offset commit")
                return [refused if e is None else e for e in errors]
            except (OSError, StorageError) as exc:  # the disk's; a bug is raised as it is
                logger.error("group %s: writing offsets failed: %s", group_id, exc, exc_info=exc)
                failed = CoordinatorNotAvailableError(
                    f"group {group_id!r}: the offsets could not be written to "
                    f"__consumer_offsets ({type(exc).__name__}: {exc}); retry the commit"
                )
                return [failed if e is None else e for e in errors]
            if staged is None:
                group.offsets.update(accepted)
            else:
                staged.update(accepted)
        return errors

    def publish(self, group_id: str, staged: Mapping[TopicPartitionKey, OffsetEntry]) -> int:
        """Offsets :meth:`commit` staged are replicated: the group takes each one written
        after its current offset of the partition (a later commit may have been published
        first). Nothing when the group went meanwhile (unloaded, deleted). How many."""
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return 0
        return publish_committed(group.offsets, dict(staged))

    def _group_for_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> Group | None:
        """The group the commit goes to (None: create one), or the error for the commit."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                return None
            raise IllegalGenerationError(
                f"group {group_id!r} does not exist, so generation {generation_id} is over; "
                "rejoin the group (or commit with generation -1 and no member id outside it)"
            )
        if group.is_in(GroupState.DEAD):
            raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed; retry")
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return group
        if group.is_static_member_fenced(group_instance_id, member_id):
            raise FencedInstanceIdError(
                f"group.instance.id {group_instance_id!r} of group {group_id!r} belongs to a "
                f"newer member; member {member_id} was replaced and may not commit"
            )
        if not group.has(member_id):
            if not member_id and generation_id < 0:
                raise UnknownMemberIdError(
                    f"group {group_id!r} has {len(group.members)} active members: a commit "
                    "with generation -1 and no member id is only accepted while a group has "
                    "no members; commit as a member of the group, or use another group.id"
                )
            raise UnknownMemberIdError(
                f"member {member_id!r} is not in group {group_id!r} (its session expired or it "
                "left); rejoin before committing"
            )
        if generation_id != group.generation_id:
            raise IllegalGenerationError(
                f"generation {generation_id} of group {group_id!r} is over (it is at "
                f"{group.generation_id}); the partitions may belong to another member now: "
                "rejoin"
            )
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            raise RebalanceInProgressError(
                f"group {group_id!r} is completing a rebalance; commit after SyncGroup"
            )
        return group

    # -----------------------------------------------------------------------------------------
    # OffsetFetch

    def fetch(
        self,
        group_id: str,
        partitions: Sequence[TopicPartitionKey] | None,
        *,
        require_stable: bool,
    ) -> list[FetchedOffset]:
        """The committed offsets of ``partitions`` (None: every partition with one)."""
        group = self.groups.get(group_id)
        offsets: Mapping[TopicPartitionKey, OffsetEntry] = {} if group is None else group.offsets
        if partitions is None:
            partitions = sorted(offsets)
        pending: set[TopicPartitionKey] = set()
        if group is not None and require_stable:
            for staged in group.pending_txn_offsets.values():
                pending.update(staged)
        out = []
        for topic, partition in partitions:
            if (topic, partition) in pending:
                unstable = UnstableOffsetCommitError(
                    f"{topic}-{partition}: a transactional offset commit of group {group_id!r} "
                    "is pending; retry once the transaction completes"
                )
                out.append(FetchedOffset(topic, partition, None, unstable))
            else:
                out.append(FetchedOffset(topic, partition, offsets.get((topic, partition))))
        return out

    # -----------------------------------------------------------------------------------------
    # Expiry

    def expire(self, now_ms: int) -> int:
        """Remove expired offsets and empty groups left without offsets; how many offsets
        were removed. A group whose tombstones cannot be written is retried next time."""
        removed = 0
        retention_ms = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if group.is_in(GroupState.EMPTY) and group.protocol_type is not None:
                # A consumer group: everything expires together, counted from when it emptied.
                expired = (
                    list(group.offsets) if now_ms - group.state_timestamp_ms >= retention_ms else []
                )
            elif group.is_in(GroupState.EMPTY):
                # A group that only commits: each offset from its own commit.
                expired = [
                    tp
                    for tp, entry in group.offsets.items()
                    if now_ms - entry.commit_timestamp_ms >= retention_ms
                ]
            elif group.is_in(GroupState.STABLE):
                expired = _unsubscribed_expired(group, now_ms, retention_ms)
                if not expired:
                    continue
            else:
                continue
            dies = (
                group.is_in(GroupState.EMPTY)
                and len(expired) == len(group.offsets)
                and not group.pending_members
                and not group.pending_txn_offsets
            )
            records: list[Record] = [
                (offset_key(group.group_id, topic, partition), None) for topic, partition in expired
            ]
            if dies and (group.protocol_type is not None or group.generation_id > 0):
                records.append((group_key(group.group_id), None))
            try:
                self.store.append(group.group_id, records, now_ms)
            except Exception as exc:
                logger.error(
                    "group %s: writing expired offsets failed (retried at the next check): %s",
                    group.group_id,
                    exc,
                    exc_info=exc,
                )
                continue
            for tp in expired:
                del group.offsets[tp]
            removed += len(expired)
            if expired:
                logger.info("group %s: %d offsets expired", group.group_id, len(expired))
            if dies:
                group.transition_to(GroupState.DEAD, now_ms)
                del self.groups[group.group_id]
                logger.info("group %s: removed (empty, no offsets left)", group.group_id)
        return removed

    # -----------------------------------------------------------------------------------------
    # The transactional hook (issue 6)

    def commit_transactional(
        self,
        group_id: str,
        commits: Sequence[OffsetCommit],
        *,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now_ms: int,
    ) -> list[SparkMQError | None]:
        """Offsets committed inside producer ``producer_id``'s open transaction: checked as
        :meth:`commit` checks them, written as one transactional batch, pending until
        :meth:`complete_transaction`. The caller has checked the transaction itself."""
        self._check_coordinator(group_id)
        group = self._group_for_commit(group_id, generation_id, member_id, group_instance_id)
        if group is None:
            group = self._create_group(group_id, now_ms)
        else:
            self._touch_member(group, member_id, now_ms)
        errors, records, accepted = self._encode_commits(group_id, commits, now_ms)
        if records:
            try:
                self.store.append_transactional(
                    group_id,
                    records,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    now_ms=now_ms,
                )
            except APPEND_ERRORS as exc:
                logger.warning("group %s: transactional offsets not written: %s", group_id, exc)
                refused = coordinator_error(exc, f"group {group_id!r}: the offset commit")
                return [refused if e is None else e for e in errors]
            except (OSError, SparkMQError) as exc:  # a bug is raised as it is
                # Storage's refusals (a fenced epoch, ...) go back as they are.
                if isinstance(exc, SparkMQError) and exc.error_code != -1:
                    return [exc if e is None else e for e in errors]
                logger.error("group %s: writing offsets failed: %s", group_id, exc, exc_info=exc)
                failed = CoordinatorNotAvailableError(
                    f"group {group_id!r}: the transactional offsets could not be written to "
                    f"__consumer_offsets ({type(exc).__name__}: {exc}); retry the commit"
                )
                return [failed if e is None else e for e in errors]
            group.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
        return errors

    def _encode_commits(
        self, group_id: str, commits: Sequence[OffsetCommit], now_ms: int
    ) -> tuple[
        list[SparkMQError | None], list[Record], list[tuple[TopicPartitionKey, OffsetEntry]]
    ]:
        """Each commit's record and entry, or OffsetMetadataTooLargeError in its place."""
        errors: list[SparkMQError | None] = []
        records: list[Record] = []
        accepted: list[tuple[TopicPartitionKey, OffsetEntry]] = []
        limit = self.config.offset_metadata_max_bytes
        for c in commits:
            metadata_bytes = len((c.metadata or "").encode("utf-8"))
            if metadata_bytes > limit:
                errors.append(
                    OffsetMetadataTooLargeError(
                        f"{c.topic}-{c.partition}: the commit's metadata is {metadata_bytes} "
                        f"bytes, over offset.metadata.max.bytes={limit}; commit less metadata"
                    )
                )
                continue
            entry = OffsetEntry(c.offset, c.leader_epoch, c.metadata, now_ms, next_position())
            records.append((offset_key(group_id, c.topic, c.partition), encode_offset_value(entry)))
            accepted.append(((c.topic, c.partition), entry))
            errors.append(None)
        return errors, records, accepted

    def complete_transaction(
        self, producer_id: int, *, committed: bool, partition: int | None = None
    ) -> int:
        """The marker of ``producer_id``'s transaction was written to ``partition`` of
        ``__consumer_offsets`` (None: to every partition): publish the offsets it committed
        to the groups of that partition (each only over an offset written before it), or
        drop them. How many offsets were published."""
        published = 0
        for group in list(self.groups.values()):
            if producer_id not in group.pending_txn_offsets:
                continue
            if partition is not None and self.store.partition_for(group.group_id) != partition:
                continue
            staged = group.pending_txn_offsets.pop(producer_id)
            if committed:
                published += publish_committed(group.offsets, staged)
        return published


def _unsubscribed_expired(group: Group, now_ms: int, retention_ms: int) -> list[TopicPartitionKey]:
    """KIP-496: the offsets of a Stable consumer group's topics that no member subscribes to
    any more, ``retention_ms`` after their own commit. Nothing when the subscriptions are not
    known (another protocol type, metadata that does not decode), and never a partition with
    a transactional commit pending."""
    subscribed = group.subscribed_topics()
    if subscribed is None:
        return []
    staged: set[TopicPartitionKey] = set()
    for entries in group.pending_txn_offsets.values():
        staged.update(entries)
    return [
        tp
        for tp, entry in group.offsets.items()
        if tp[0] not in subscribed
        and tp not in staged
        and now_ms - entry.commit_timestamp_ms >= retention_ms
    ]
