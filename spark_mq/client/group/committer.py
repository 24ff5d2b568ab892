"""Committing offsets and reading them back, for one consumer.

``commit_sync`` sends OffsetCommit and waits, retrying what may succeed (a coordinator that
moved, is loading, or did not answer) until ``default.api.timeout.ms``; ``commit_async``
sends it and returns, and the callback runs from a later ``poll()``, ``commit()`` or
``close()`` of the same consumer (in that thread), in commit order: the offsets channel is
answered in order, so an earlier commit never completes after a later one. Async commits are
not retried (a retry could overwrite a later commit). ``fetch_committed`` reads offsets with
OffsetFetch.

A subscribed consumer commits with its generation; the coordinator refuses a stale one, and
the member learns it is out of the group: :class:`~spark_mq.client.errors.CommitFailedError`
is raised (or passed to the callback), the generation is forgotten and the next ``poll()``
rejoins. A consumer that uses ``assign`` commits outside the group protocol (generation -1,
no member id), which a coordinator accepts only while the group has no members.

Threads: the consumer's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from spark_mq.client.errors import CommitFailedError
from spark_mq.client.group.member_state import Generation
from spark_mq.client.group.offsets import (
    CommitOutcome,
    OffsetAndMetadata,
    commit_errors,
    commit_outcome,
    commit_request,
    fetch_request,
    fetched_offsets,
)
from spark_mq.client.records import TopicPartition
from spark_mq.client.retry import Again, Retry, sent
from spark_mq.errors import (
    FencedInstanceIdError,
    RequestTimedOutError,
    SparkMQError,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.group_offsets import OffsetCommitResponse, OffsetFetchResponse

if TYPE_CHECKING:
    from spark_mq.client.group.membership import GroupMembership

log = logging.getLogger(__name__)

T = TypeVar("T")

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], SparkMQError | None], None]

#: The generation a commit from outside the group protocol (``assign``) carries.
_OUTSIDE_GROUP = Generation(-1, "", None)
#: Async commits in flight at most; ``commit_async`` first takes in answers (running their
#: callbacks) beyond this, so that neither side's socket buffer fills with unread data.
MAX_ASYNC_COMMITS_IN_FLIGHT = 64


class OffsetCommitter:
    """Commits and committed-offset lookups of one consumer (see the module docstring)."""

    def __init__(
        self,
        membership: GroupMembership,
        *,
        group_managed: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._membership = membership
        self._group_managed = group_managed
        self._clock = clock
        self._sleep = sleep
        self._config = membership.config

    # -- the generation -------------------------------------------------------------------

    def _generation(self) -> tuple[Generation, str | None]:
        """The generation and instance id a commit carries; raises CommitFailedError for a
        subscribed member that has no generation (it was removed and has not rejoined)."""
        if not self._group_managed():
            return _OUTSIDE_GROUP, None
        generation = self._membership.generation()
        if not generation.is_valid:
            raise CommitFailedError(
                f"cannot commit for group {self._membership.group_id!r}: this member is not "
                "part of an active generation (it was removed from the group or is "
                "rejoining); call poll() to rejoin, then commit what you process next",
                group_id=self._membership.group_id,
                generation_id=-1,
                member_id=generation.member_id,
                reason="NOT_IN_GROUP",
            )
        return generation, self._membership.instance_id

    def _failure(
        self, generation: Generation, code: int, message: str | None, tp: TopicPartition
    ) -> SparkMQError:
        """The error a refused commit raises, after updating the membership."""
        outcome = commit_outcome(code)
        membership = self._membership
        if outcome in (CommitOutcome.STALE_GENERATION, CommitOutcome.REBALANCING):
            membership.commit_refused(generation, code, message)
            name = ErrorCode(code).name
            what = (
                "the group is rebalancing"
                if outcome is CommitOutcome.REBALANCING
                else "this member is no longer in the generation that owns the partitions"
            )
            return CommitFailedError(
                f"commit to group {membership.group_id!r} refused ({name}): {what}; the "
                "records since the last successful commit will be delivered again. Call "
                "poll() to rejoin (if processing takes long, lower max.poll.records or raise "
                "max.poll.interval.ms)",
                group_id=membership.group_id,
                generation_id=generation.generation_id,
                member_id=generation.member_id,
                reason=name,
            )
        if outcome is CommitOutcome.FENCED:
            membership.commit_refused(generation, code, message)
            return FencedInstanceIdError(
                f"group {membership.group_id!r}: another consumer uses group.instance.id "
                f"{membership.instance_id!r}; this one is fenced"
            )
        return error_from_code(code, message, topic=tp.topic, partition=tp.partition)

    def _call(
        self,
        timeout_ms: int,
        request: Callable[[], msgspec.Struct],
        judge: Callable[[Any], T | Again],
        timeout_error: Callable[[SparkMQError], SparkMQError],
    ) -> T:
        """Send ``request()`` (built anew for each attempt) to the group coordinator and
        wait for the answer, until ``judge(response)`` takes it (anything but Again);
        retried every ``retry.backoff.ms`` for ``timeout_ms``."""
        membership = self._membership
        retry = Retry.within_ms(
            timeout_ms,
            backoff_s=self._config.retry_backoff_ms / 1000,
            clock=self._clock,
            sleep=self._sleep,
        )

        def attempt() -> T | Again:
            built = request()
            coordinator = membership.ensure_coordinator_ready(retry.deadline)
            if coordinator is None:
                return Again(membership.coordinator_not_found())
            response = sent(
                lambda: membership.offset_channel.call(
                    built, coordinator=coordinator, timeout_ms=self._config.request_timeout_ms
                )
            )
            return response if isinstance(response, Again) else judge(response)

        return retry.until(attempt, timeout_error)

    # -- commits --------------------------------------------------------------------------

    def commit_sync(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *, timeout_ms: int
    ) -> None:
        """Commit and wait; retries what may succeed until ``timeout_ms``."""
        if not offsets:
            return
        membership = self._membership
        generation = _OUTSIDE_GROUP

        def request() -> msgspec.Struct:
            nonlocal generation
            generation, instance_id = self._generation()
            return commit_request(membership.group_id, offsets, generation, instance_id)

        def judge(response: OffsetCommitResponse) -> Again | None:
            errors = commit_errors(response)
            if not errors:
                return None
            tp, (code, message) = next(iter(errors.items()))
            outcome = commit_outcome(code)
            if outcome is CommitOutcome.COORDINATOR_GONE:
                membership.mark_coordinator_unknown(message or ErrorCode(code).name)
            if outcome not in (CommitOutcome.RETRY, CommitOutcome.COORDINATOR_GONE):
                raise self._failure(generation, code, message, tp)
            return Again(error_from_code(code, message, topic=tp.topic))

        self._call(
            timeout_ms,
            request,
            judge,
            lambda error: RequestTimedOutError(
                f"offset commit to group {membership.group_id!r} did not complete within "
                f"{timeout_ms} ms (last error: {error}); nothing may have been committed"
            ),
        )

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        callback: CommitCallback | None,
    ) -> None:
        """Send a commit; ``callback(offsets, error)`` runs from a later poll/commit/close."""
        membership = self._membership
        offsets = dict(offsets)

        def done(error: SparkMQError | None) -> None:
            if error is not None:
                log.info("async commit to group %s failed: %s", membership.group_id, error)
            if callback is not None:
                try:
                    callback(offsets, error)
                except Exception:
                    log.exception("offset commit callback raised")

        if not offsets:
            done(None)
            return
        try:
            generation, instance_id = self._generation()
        except CommitFailedError as exc:
            done(exc)
            return
        coordinator = membership.ensure_coordinator_ready(self._clock())
        if coordinator is None:
            done(membership.coordinator_not_found())
            return

        def handler(body: OffsetCommitResponse | None, error: SparkMQError | None) -> None:
            if error is not None or body is None:
                done(error)
                return
            errors = commit_errors(body)
            if not errors:
                done(None)
                return
            tp, (code, message) = next(iter(errors.items()))
            if commit_outcome(code) is CommitOutcome.COORDINATOR_GONE:
                membership.mark_coordinator_unknown(message or ErrorCode(code).name)
            done(self._failure(generation, code, message, tp))

        request = commit_request(membership.group_id, offsets, generation, instance_id)
        channel = membership.offset_channel
        while channel.in_flight >= MAX_ASYNC_COMMITS_IN_FLIGHT:
            channel.poll(self._config.request_timeout_ms / 1000)
        channel.send(
            request, handler, coordinator=coordinator, timeout_ms=self._config.request_timeout_ms
        )

    def complete_async(self, timeout_s: float = 0.0) -> None:
        """Run the callbacks of async commits answered so far (waiting up to ``timeout_s``
        for more while some are pending)."""
        channel = self._membership.offset_channel
        deadline = self._clock() + timeout_s
        while True:
            channel.poll(max(deadline - self._clock(), 0.0))
            if not channel.in_flight or self._clock() >= deadline:
                return

    # -- committed offsets ----------------------------------------------------------------

    def fetch_committed(
        self, partitions: Iterable[TopicPartition] | None, *, timeout_ms: int
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None: all); None where nothing
        is committed. Retries retriable errors until ``timeout_ms``."""
        membership = self._membership
        wanted = None if partitions is None else list(partitions)

        def judge(
            response: OffsetFetchResponse,
        ) -> dict[TopicPartition, OffsetAndMetadata | None] | Again:
            retry_error = self._fetch_error(response)
            if retry_error is not None:
                return Again(retry_error)
            offsets, _ = fetched_offsets(response)
            if wanted is not None:
                return {tp: offsets.get(tp) for tp in wanted}
            return offsets

        return self._call(
            timeout_ms,
            lambda: fetch_request(membership.group_id, wanted),
            judge,
            lambda error: RequestTimedOutError(
                f"committed offsets of group {membership.group_id!r} not read within "
                f"{timeout_ms} ms (last error: {error})"
            ),
        )

    def fetch_committed_async(
        self, partitions: list[TopicPartition], deadline: float
    ) -> CommittedLookup | None:
        """Start reading the group's committed offsets of ``partitions`` without waiting
        (``poll()`` must not outlast its timeout); None when the coordinator is not known by
        ``deadline``. Later calls of :meth:`CommittedLookup.wait` take the answer in."""
        membership = self._membership
        coordinator = membership.ensure_coordinator_ready(deadline)
        if coordinator is None:
            return None
        lookup = CommittedLookup(self, list(partitions))
        membership.offset_channel.send(
            fetch_request(membership.group_id, lookup.partitions),
            lookup.answered,
            coordinator=coordinator,
            timeout_ms=self._config.request_timeout_ms,
        )
        return lookup

    def _fetch_error(self, response: OffsetFetchResponse) -> SparkMQError | None:
        """None when the answer is usable; a retriable error to retry; raises the rest."""
        codes: list[tuple[int, str | None, TopicPartition | None]] = []
        if response.error_code != ErrorCode.NONE:
            codes.append((response.error_code, None, None))
        _, errors = fetched_offsets(response)
        codes.extend((code, message, tp) for tp, (code, message) in errors.items())
        for code, message, tp in codes:
            error = error_from_code(
                code,
                message,
                topic=tp.topic if tp else None,
                partition=tp.partition if tp else None,
            )
            if commit_outcome(code) is CommitOutcome.COORDINATOR_GONE:
                self._membership.mark_coordinator_unknown(message or ErrorCode(code).name)
            if not error.retriable:
                raise error
            return error
        return None


class CommittedLookup:
    """One OffsetFetch in flight for ``poll()`` (see
    :meth:`OffsetCommitter.fetch_committed_async`): ``offsets`` once answered, or ``error``
    (retriable ones mean: look again later)."""

    def __init__(self, committer: OffsetCommitter, partitions: list[TopicPartition]) -> None:
        self._committer = committer
        self.partitions = partitions
        self.done = False
        self.offsets: dict[TopicPartition, OffsetAndMetadata | None] = {}
        self.error: SparkMQError | None = None

    def answered(self, body: OffsetFetchResponse | None, error: SparkMQError | None) -> None:
        self.done = True
        if error is not None or body is None:
            self.error = error or RequestTimedOutError("no answer to OffsetFetch")
            return
        try:
            self.error = self._committer._fetch_error(body)
        except SparkMQError as exc:
            self.error = exc
        if self.error is None:
            offsets, _ = fetched_offsets(body)
            self.offsets = {tp: offsets.get(tp) for tp in self.partitions}

    def wait(self, deadline: float) -> bool:
        """Take in answers until this one is answered or ``deadline`` passes; whether it is."""
        channel = self._committer._membership.offset_channel
        clock = self._committer._clock
        while not self.done:
            remaining = deadline - clock()
            if remaining <= 0 or not channel.in_flight:
                break
            channel.poll(remaining)
        return self.done
