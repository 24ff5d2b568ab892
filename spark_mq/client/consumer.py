"""The consumer: reads partitions, as Python records or as Arrow tables.

Partitions come from ``assign`` (chosen by the application) or ``subscribe`` (shared out by a
consumer group, :mod:`spark_mq.client.group`). ``poll_batch()`` is the fast path: the
buffered fetch data of each partition decoded into Arrow with no Python per record,
concatenated into one table. ``poll()`` builds :class:`~spark_mq.ConsumerRecord` tuples from
those columns (one ``to_pylist`` per column, then ``zip``). Both advance positions the same
way, share one fetch pipeline, and run the group's rebalances and auto-commits, so mixing them
is fine. See ``docs/clients.md`` for settings, positions and ``read_committed``, and
``docs/groups.md`` for groups.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from typing import TypeVar

import numpy as np
import pyarrow as pa

from spark_mq.client.cluster import Cluster
from spark_mq.client.config import ConsumerConfig, client_config_props
from spark_mq.client.errors import NoOffsetForPartitionError
from spark_mq.client.fetcher import Fetcher
from spark_mq.client.group.committer import CommitCallback, CommittedLookup
from spark_mq.client.group.consumer_coordinator import ConsumerCoordinator
from spark_mq.client.group.member_state import ConsumerGroupMetadata
from spark_mq.client.group.offsets import OffsetAndMetadata, OffsetsArg, normalize_offsets
from spark_mq.client.interceptors import ConsumerInterceptors
from spark_mq.client.offset_lookup import list_offsets
from spark_mq.client.records import (
    CONSUMER_SCHEMA,
    ConsumerRecord,
    OffsetAndTimestamp,
    TopicPartition,
)
from spark_mq.client.subscription_state import SubscriptionState
from spark_mq.errors import SparkMQError, UnknownTopicOrPartitionError, UsageError
from spark_mq.protocol.fetch import READ_COMMITTED, READ_UNCOMMITTED
from spark_mq.protocol.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from spark_mq.storage.arrow_arrays import constant_string, from_numpy

log = logging.getLogger(__name__)

PartitionsArg = Iterable[TopicPartition | tuple[str, int]]
#: While in a group, poll() waits for fetch responses in slices this long, so that a
#: rebalance the heartbeat thread learned of is taken up promptly.
_GROUP_WAIT_SLICE_S = 0.1
#: What one poll hands out per partition: a table (poll_batch) or records (poll).
_Taken = TypeVar("_Taken")


def _tp(item: TopicPartition | tuple[str, int]) -> TopicPartition:
    if isinstance(item, TopicPartition):
        return item
    topic, partition = item
    if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
        raise UsageError(f"{item!r} is not a (topic, partition) pair")
    return TopicPartition(topic, partition)


class Consumer:
    """Reads records from partitions assigned with :meth:`assign`, or shared out by a
    consumer group with :meth:`subscribe`.

    Give exactly one of ``path`` or ``bootstrap_servers``; other settings are Kafka keys,
    as keywords with underscores or dotted. ``isolation.level`` is ``read_committed`` by
    default (unlike Kafka): records of open or aborted transactions are never returned.

    Example (assumes a broker for the directory and a topic ``events``)::

        with Consumer(path="/data/mq", auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("events", 0)])
            table = consumer.poll_batch(timeout_ms=1000)        # pyarrow.Table
            for tp, records in consumer.poll(timeout_ms=1000).items():
                for record in records:
                    print(record.offset, record.value)

        # In a group: the members share the partitions; commit after processing.
        with Consumer(path="/data/mq", group_id="billing", enable_auto_commit=False) as c:
            c.subscribe(["events"])
            while True:
                for tp, records in c.poll(timeout_ms=1000).items():
                    handle(records)
                c.commit()

    >>> Consumer(path="/tmp/mq", auto_offset_reset="smallest")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_mq.errors.ConfigError: auto.offset.reset must be one of earliest, latest, none; ...
    """

    def __init__(
        self,
        path: str | PathLike[str] | None = None,
        *,
        bootstrap_servers: str | Sequence[str] | None = None,
        config: Mapping[str, object] | None = None,
        **configs: object,
    ) -> None:
        self.config = ConsumerConfig.from_properties(
            client_config_props(path, bootstrap_servers, config, configs)
        )
        self.config.check_endpoint()
        self._cluster = Cluster(self.config)
        self._subs = SubscriptionState()
        self._fetcher = Fetcher(self.config, self._cluster, self._subs)
        self._interceptors = ConsumerInterceptors(self.config.interceptors)
        self._isolation = READ_COMMITTED if self.config.read_committed else READ_UNCOMMITTED
        self._closed = False
        self._reset_retry_at = 0.0
        #: The committed-offset lookup poll() waits for across calls, while one is pending.
        self._committed_lookup: CommittedLookup | None = None
        #: The group membership; None without a group.id (no subscribe, no commits).
        self._coordinator: ConsumerCoordinator | None = None
        if self.config.group_id:
            self._coordinator = ConsumerCoordinator(
                self.config,
                self._cluster,
                self._subs,
                on_partitions_removed=self._fetcher.drop,
            )

    # -- assignment -----------------------------------------------------------------------

    def assign(self, partitions: PartitionsArg) -> None:
        """Read exactly these partitions (replacing any earlier assignment). Partitions that
        stay assigned keep their positions; new ones start from the group's committed offset
        (with a ``group.id``), else per ``auto.offset.reset``, unless you ``seek``. Raises
        UsageError on a consumer that subscribed (call :meth:`unsubscribe` first)."""
        self._check_open()
        tps = [_tp(p) for p in partitions]
        if self._subs.is_auto_subscribed:
            if tps:
                raise UsageError(
                    "assign() on a consumer that subscribed: assign() and subscribe() cannot "
                    "be mixed; call unsubscribe() first"
                )
            self.unsubscribe()
            return
        for tp in self._subs.partitions():
            if tp not in tps:
                self._fetcher.drop(tp)
        self._subs.assign_from_user(tps)

    def assignment(self) -> set[TopicPartition]:
        return self._subs.assignment()

    # -- consumer groups ------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str],
        listener: object | None = None,
    ) -> None:
        """Join the consumer group ``group.id`` and read the partitions it assigns this
        member, of ``topics`` (a list of names) or of every topic whose whole name matches a
        regular expression (a ``str`` or compiled pattern; re-evaluated every
        ``metadata.max.age.ms``). Replaces an earlier subscription.

        ``listener`` is told when partitions are revoked, assigned or lost: a
        :class:`~spark_mq.ConsumerRebalanceListener` subclass or any object with some of its
        methods. The group is joined, and listeners called, inside :meth:`poll`. Raises
        UsageError without a ``group.id`` or after :meth:`assign`.
        """
        self._check_open()
        coordinator = self._require_group("subscribe()")
        if isinstance(topics, str | re.Pattern):
            try:
                pattern = re.compile(topics) if isinstance(topics, str) else topics
            except re.error as exc:
                raise UsageError(f"subscribe(): {topics!r} is not a valid regex: {exc}") from exc
            self._subs.subscribe_pattern(pattern)
        else:
            names = list(topics)
            if not names:
                self.unsubscribe()
                return
            self._subs.subscribe(names)
        coordinator.subscription_changed(listener)

    def unsubscribe(self) -> None:
        """Leave the group (after committing, with auto-commit, and revoking the partitions)
        and drop the subscription, or the partitions given to :meth:`assign`."""
        self._check_open()
        if self._coordinator is not None and self._subs.is_auto_subscribed:
            self._coordinator.leave("the consumer unsubscribed", closing=False)
        for tp in self._subs.partitions():
            self._fetcher.drop(tp)
        self._subs.unsubscribe()

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matched when last checked)."""
        return set(self._subs.subscription)

    def commit(self, offsets: OffsetsArg | None = None, asynchronous: bool = False) -> None:
        """Commit offsets to the group: ``offsets`` maps partitions to the *next* offset to
        read (an int or :class:`~spark_mq.OffsetAndMetadata`); None commits every position
        (what :meth:`poll` has returned so far). Waits for the answer and retries what may
        succeed within ``default.api.timeout.ms``, unless ``asynchronous``.

        Raises :class:`~spark_mq.CommitFailedError` when the group refused the commit
        because this member's generation is stale (it was removed or the group rebalanced):
        the partitions may already belong to another member; call :meth:`poll` to rejoin.
        """
        if asynchronous:
            self.commit_async(offsets)
            return
        self._check_open()
        coordinator = self._require_group("commit()")
        coordinator.commit_sync(
            None if offsets is None else normalize_offsets(offsets),
            timeout_ms=self.config.default_api_timeout_ms,
        )

    def commit_async(
        self, offsets: OffsetsArg | None = None, callback: CommitCallback | None = None
    ) -> None:
        """Send a commit (like :meth:`commit`) without waiting. ``callback(offsets, error)``
        runs in this consumer's thread from a later :meth:`poll`, :meth:`commit` or
        :meth:`close`, in commit order; ``error`` is None on success. Not retried."""
        self._check_open()
        coordinator = self._require_group("commit_async()")
        coordinator.commit_async(None if offsets is None else normalize_offsets(offsets), callback)

    def committed(
        self, partitions: PartitionsArg, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (assigned or not): an
        :class:`~spark_mq.OffsetAndMetadata`, or None where nothing is committed."""
        self._check_open()
        coordinator = self._require_group("committed()")
        return coordinator.committer.fetch_committed(
            [_tp(p) for p in partitions],
            timeout_ms=self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms,
        )

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This consumer's group, generation and member id (generation -1 while it is not
        in one)."""
        coordinator = self._require_group("group_metadata()")
        generation = coordinator.generation()
        return ConsumerGroupMetadata(
            coordinator.group_id,
            generation.generation_id,
            generation.member_id,
            coordinator.instance_id,
        )

    def _require_group(self, what: str) -> ConsumerCoordinator:
        if self._coordinator is None:
            raise UsageError(
                f"{what} needs a consumer group: set group.id (Consumer(..., group_id='name'))"
            )
        return self._coordinator

    # -- polling --------------------------------------------------------------------------

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records of the assigned partitions, waiting up to ``timeout_ms`` for some;
        at most ``max_records`` (default ``max.poll.records``)."""
        limit = self.config.max_poll_records if max_records is None else max_records
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, records in self._poll(timeout_ms, limit, self._fetcher.collect_records):
            out.setdefault(tp, []).extend(records)
        if self._interceptors and out:
            out = self._interceptors.on_consume(out)
        return out

    def poll_batch(self, timeout_ms: int = 0, max_records: int | None = None) -> pa.Table:
        """Records as one Arrow table (columns ``topic``, ``partition``, ``offset``,
        ``timestamp``, ``timestamp_type``, ``key``, ``value``, ``headers``; see
        ``CONSUMER_SCHEMA``), rows of a partition in offset order. Waits up to
        ``timeout_ms`` for some; ``max_records`` None returns everything buffered."""
        pieces = []
        for tp, table in self._poll(timeout_ms, max_records, self._fetcher.collect):
            n = table.num_rows
            columns = [
                constant_string(tp.topic, n),
                from_numpy(np.full(n, tp.partition, dtype=np.int32)),
                *table.columns,
            ]
            pieces.append(pa.Table.from_arrays(columns, schema=CONSUMER_SCHEMA))
        if not pieces:
            result = CONSUMER_SCHEMA.empty_table()
        elif len(pieces) == 1:
            result = pieces[0]
        else:
            result = pa.concat_tables(pieces)
        if self._interceptors and result.num_rows:
            result = self._interceptors.on_consume(result)
        return result

    def _poll(
        self,
        timeout_ms: int,
        max_records: int | None,
        collect: Callable[[int | None], list[tuple[TopicPartition, _Taken]]],
    ) -> list[tuple[TopicPartition, _Taken]]:
        """The poll loop; ``collect`` hands out what was fetched: tables
        (``Fetcher.collect``, for poll_batch) or records (``Fetcher.collect_records``)."""
        self._check_open()
        subscribed = self._subs.is_auto_subscribed
        if not subscribed and not self._subs.partitions():
            raise UsageError(
                "poll() with no assigned partitions; call assign() or subscribe() first"
            )
        if max_records is not None and max_records < 1:
            raise UsageError(f"max_records must be at least 1, got {max_records}")
        coordinator = self._coordinator
        deadline = self._cluster.clock() + max(timeout_ms, 0) / 1000
        while True:
            if coordinator is not None:
                # Rebalances, listener callbacks and auto-commits run here, in the caller's
                # thread. A member with partitions keeps reading them while it rejoins.
                coordinator.poll(deadline, wait_for_join=not self._subs.partitions())
            if not self._subs.partitions():
                remaining = deadline - self._cluster.clock()
                if remaining <= 0:
                    return []
                # In the group with nothing assigned (more members than partitions).
                self._cluster.sleep(min(remaining, _GROUP_WAIT_SLICE_S))
                continue
            self._update_positions(raise_unknown=False, deadline=deadline)
            if self._fetcher.has_in_flight:
                # Take in responses that already arrived, without waiting, so that the next
                # fetch goes out now rather than after the caller is done with this data.
                self._fetcher.poll_network(0.0)
            self._fetcher.send_fetches()
            taken = collect(max_records)
            # Keep the pipeline full: fetch the next data while the caller processes this.
            self._fetcher.send_fetches()
            if taken:
                return taken
            remaining = deadline - self._cluster.clock()
            if self._fetcher.has_in_flight:
                wait_s = remaining if coordinator is None else min(remaining, _GROUP_WAIT_SLICE_S)
                if self._fetcher.poll_network(max(wait_s, 0.0)):
                    self._fetcher.send_fetches()
                    continue
            elif remaining > 0:
                # Nothing can be fetched now (no leader, no position, a backoff): wait a bit.
                self._cluster.sleep(min(remaining, self.config.retry_backoff_ms / 1000))
            if self._cluster.clock() >= deadline:
                return collect(max_records)

    # -- positions ------------------------------------------------------------------------

    def _update_positions(self, *, raise_unknown: bool, deadline: float | None = None) -> None:
        """Look up the positions of partitions that have none: the group's committed offset,
        else ``auto.offset.reset``. With ``deadline`` (``poll()``), waits no longer than that:
        what is not answered by then is taken up by the next poll."""
        missing = self._subs.missing_positions()
        if not missing or (not raise_unknown and self._cluster.clock() < self._reset_retry_at):
            return
        if deadline is None:
            if not self._positions_from_committed(missing, raise_unknown=raise_unknown):
                return
        elif not self._positions_from_committed_async(missing, deadline):
            return
        missing = self._subs.missing_positions()
        if not missing:
            return
        strategy = self.config.auto_offset_reset
        if strategy == "none":
            tp = missing[0]
            raise NoOffsetForPartitionError(
                f"{tp} has no position and auto.offset.reset=none; seek() to an offset, or "
                "use seek_to_beginning() / seek_to_end()",
                topic=tp.topic,
                partition=tp.partition,
            )
        spec = EARLIEST_TIMESTAMP if strategy == "earliest" else LATEST_TIMESTAMP
        timeout_ms = None
        if deadline is not None:
            timeout_ms = max(int((deadline - self._cluster.clock()) * 1000), 1)
        try:
            answers = self._list_offsets(dict.fromkeys(missing, spec), timeout_ms=timeout_ms)
        except SparkMQError as exc:
            if raise_unknown or not (
                isinstance(exc, UnknownTopicOrPartitionError) or exc.retriable
            ):
                raise
            log.warning("cannot reset positions of %s yet: %s", missing, exc)
            self._reset_retry_at = self._cluster.clock() + self.config.retry_backoff_max_ms / 1000
            return
        for tp, (offset, _) in answers.items():
            if self._subs.is_assigned(tp) and self._subs.position(tp) is None:
                self._subs.seek(tp, offset)

    def _positions_from_committed(
        self, missing: list[TopicPartition], *, raise_unknown: bool
    ) -> bool:
        """Position newly assigned partitions at the group's committed offsets; the rest are
        left to ``auto.offset.reset``. Returns False when the lookup failed and will be
        retried (those partitions must not be reset meanwhile)."""
        awaiting = [tp for tp in missing if self._subs.state(tp).awaiting_committed]
        if not awaiting:
            return True
        if self._coordinator is None:
            for tp in awaiting:
                self._subs.state(tp).awaiting_committed = False
            return True
        try:
            committed = self._coordinator.committer.fetch_committed(
                awaiting,
                timeout_ms=self.config.default_api_timeout_ms
                if raise_unknown
                else self.config.request_timeout_ms,
            )
        except SparkMQError as exc:
            if raise_unknown or not exc.retriable:
                raise
            log.warning("cannot read committed offsets of %s yet: %s", awaiting, exc)
            self._reset_retry_at = self._cluster.clock() + self.config.retry_backoff_max_ms / 1000
            return False
        for tp in awaiting:
            if not self._subs.is_assigned(tp):
                continue
            self._subs.state(tp).awaiting_committed = False
            found = committed.get(tp)
            if found is not None and self._subs.position(tp) is None:
                self._subs.seek(tp, found.offset)
        return True

    def _positions_from_committed_async(
        self, missing: list[TopicPartition], deadline: float
    ) -> bool:
        """:meth:`_positions_from_committed` for ``poll()``: the OffsetFetch is sent once and
        waited for until ``deadline`` at most, across polls (Kafka's consumer does the same
        since KIP-266). Returns False while it is unanswered or failed for now."""
        awaiting = [tp for tp in missing if self._subs.state(tp).awaiting_committed]
        if not awaiting:
            return True
        coordinator = self._coordinator
        if coordinator is None:
            return self._positions_from_committed(missing, raise_unknown=False)
        lookup = self._committed_lookup
        if lookup is None:
            lookup = coordinator.committer.fetch_committed_async(awaiting, deadline)
            if lookup is None:
                return False  # the coordinator is not known yet; the next poll looks again
            self._committed_lookup = lookup
        if not lookup.wait(deadline):
            return False
        self._committed_lookup = None
        if lookup.error is not None:
            if not lookup.error.retriable:
                raise lookup.error
            log.warning("cannot read committed offsets of %s yet: %s", awaiting, lookup.error)
            self._reset_retry_at = self._cluster.clock() + self.config.retry_backoff_max_ms / 1000
            return False
        for tp in lookup.partitions:
            if not self._subs.is_assigned(tp) or not self._subs.state(tp).awaiting_committed:
                continue
            self._subs.state(tp).awaiting_committed = False
            found = lookup.offsets.get(tp)
            if found is not None and self._subs.position(tp) is None:
                self._subs.seek(tp, found.offset)
        # Partitions assigned since the lookup was sent wait for the next one.
        return not any(self._subs.state(tp).awaiting_committed for tp in awaiting)

    def _list_offsets(
        self,
        specs: Mapping[TopicPartition, int],
        *,
        isolation_level: int | None = None,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, tuple[int, int]]:
        return list_offsets(
            self._cluster,
            specs,
            isolation_level=self._isolation if isolation_level is None else isolation_level,
            timeout_ms=self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms,
        )

    def metrics(self) -> dict[str, dict[str, float]]:
        """Kafka's consumer fetch metrics over the last 30 s, as kafka-python shapes them:
        ``{"consumer-fetch-manager-metrics": {"records-lag-max": ..., ...}}`` and one
        ``consumer-fetch-manager-metrics.topic.<t>.partition.<p>`` group with ``records-lag``
        per assigned partition (names and meaning in docs/clients.md)."""
        assigned = {(tp.topic, tp.partition) for tp in self._subs.assignment()}
        return self._fetcher.metrics.snapshot(assigned)

    def position(self, partition: TopicPartition | tuple[str, int]) -> int:
        """The offset of the next record :meth:`poll` returns for ``partition`` (looked up
        per ``auto.offset.reset`` if it has none yet)."""
        self._check_open()
        tp = _tp(partition)
        if self._subs.position(tp) is None:
            self._update_positions(raise_unknown=True)
        position = self._subs.position(tp)
        assert position is not None
        return position

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Make ``offset`` the next offset :meth:`poll` returns for ``partition``."""
        self._check_open()
        tp = _tp(partition)
        self._subs.seek(tp, offset)
        self._fetcher.drop(tp)

    def seek_to_beginning(self, partitions: PartitionsArg | None = None) -> None:
        """Seek to the log start offset (all assigned partitions by default)."""
        self._seek_to(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, partitions: PartitionsArg | None = None) -> None:
        """Seek to the end: the last stable offset with read_committed, else the high
        watermark (all assigned partitions by default)."""
        self._seek_to(partitions, LATEST_TIMESTAMP)

    def _seek_to(self, partitions: PartitionsArg | None, spec: int) -> None:
        self._check_open()
        tps = self._subs.partitions() if partitions is None else [_tp(p) for p in partitions]
        for tp in tps:
            self._subs.state(tp)  # raises for a partition not assigned
        for tp, (offset, _) in self._list_offsets(dict.fromkeys(tps, spec)).items():
            self.seek(tp, offset)

    def beginning_offsets(self, partitions: PartitionsArg) -> dict[TopicPartition, int]:
        """The log start offset of each partition (assigned or not)."""
        self._check_open()
        specs = dict.fromkeys((_tp(p) for p in partitions), EARLIEST_TIMESTAMP)
        return {tp: offset for tp, (offset, _) in self._list_offsets(specs).items()}

    def end_offsets(self, partitions: PartitionsArg) -> dict[TopicPartition, int]:
        """The offset after the last readable record of each partition: the last stable
        offset with read_committed, the high watermark with read_uncommitted."""
        self._check_open()
        specs = dict.fromkeys((_tp(p) for p in partitions), LATEST_TIMESTAMP)
        return {tp: offset for tp, (offset, _) in self._list_offsets(specs).items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition | tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first offset whose timestamp is at or after the given
        time in ms, with that timestamp; None where every record is older."""
        self._check_open()
        specs = {}
        for partition, ts in timestamps.items():
            if ts < 0:
                raise UsageError(f"offsets_for_times: timestamp {ts} for {partition} is negative")
            specs[_tp(partition)] = ts
        answers = self._list_offsets(specs)
        return {
            tp: None if offset < 0 else OffsetAndTimestamp(offset, timestamp)
            for tp, (offset, timestamp) in answers.items()
        }

    # -- pause and resume -----------------------------------------------------------------

    def pause(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        """Stop returning (and fetching) records of these partitions until resumed."""
        for p in partitions:
            tp = _tp(p)
            self._subs.pause(tp)
            self._fetcher.drop(tp)

    def resume(self, *partitions: TopicPartition | tuple[str, int]) -> None:
        for p in partitions:
            self._subs.resume(_tp(p))

    def paused(self) -> set[TopicPartition]:
        return self._subs.paused()

    # -- lifecycle ------------------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        """Every topic the broker has, with its partition count."""
        self._check_open()
        response = self._cluster.refresh(None)
        return {t.name: len(t.partitions) for t in response.topics if not t.error_code}

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the consumer is closed")

    def close(self) -> None:
        """Close the consumer. In a group: commit the positions (with auto-commit), revoke
        the partitions (listener), and leave the group, except for a static member
        (``group.instance.id``), which stays a member until its session times out, so a
        restart within ``session.timeout.ms`` gets its partitions back without a
        rebalance, as in Kafka."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._coordinator is not None:
                self._coordinator.leave("the consumer is closing", closing=True)
        finally:
            if self._coordinator is not None:
                self._coordinator.close()
            self._fetcher.close()
            self._cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.config.path or self.config.bootstrap_servers
        group = f", group_id={self.config.group_id!r}" if self.config.group_id else ""
        return f"Consumer({where!r}{group}, assignment={sorted(self._subs.assignment())})"
