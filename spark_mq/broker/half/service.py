"""The half-message service: stores half messages, ends them, schedules their check-backs.

State (on the event loop thread only): the pending messages with their check counts, the
outcome of every message that ended within ``transaction.half.op.retention.ms`` (for
idempotent ends), the discarded messages among them. It is rebuilt at startup from
``__half_messages`` and ``__half_ops`` (:mod:`~spark_mq.broker.half.records`): a message is
pending when it has a record and no final op.

Order of appends, and what a crash between two of them leaves:

- SendHalfMessage appends the record to ``__half_messages``. Before it: nothing is stored and
  the producer's request failed. A retried send of the same id stores nothing more.
- COMMIT appends the real record to its topic, then the COMMITTED op, then a tombstone of the
  half record. The real record is written with the message's own producer id (fresh, given
  out by SendHalfMessage and kept in the half record), epoch 0 and sequence 0, so the log's
  idempotence recognises a second append of it and returns the first offset. A crash after
  the real append and before the op leaves the message pending: its next COMMIT (the
  producer's retry, or a check-back after the restart) appends the record again, which the
  log answers as a duplicate, and only then is the op written. No loss, no double. This
  holds while the partition remembers that producer id (``producer.id.expiration.ms`` after
  its last write, Kafka's default one day), far longer than the restart it covers.
- ROLLBACK appends the ROLLED_BACK op, then the tombstone.
- A check is handed to a producer and remembered in memory only. It counts when its
  answer is due (``transaction.check.interval.ms`` later) and has not come: only then is a
  PENDING op with the count raised appended. A broker that dies with a check out loses
  that check with the connection its answer would have come on, and does not count it: the
  message is checked again after the restart, with as many checks left as before. (A crash
  after the deadline and before the service saw it, at most an interval, also leaves that
  check uncounted: a count errs low by at most one per crash, and never discards a message
  early.)
- A discard appends the record to ``__half_discarded`` (same producer id and sequence, so a
  repeat is again a duplicate), then the DISCARDED op.

A crash after the final op and before the tombstone leaves a record compaction does not
remove; the op decides, so loading ignores it.

Expiry: an outcome is forgotten ``transaction.half.op.retention.ms`` after the message
ended: the half record's tombstone, an fsync, then the op's tombstone, so that the rebuild
never finds a record without its op (:mod:`~spark_mq.broker.half.expiry`). Compaction then
removes both, so the two topics hold the live messages plus what ended within the
retention, and loading reads no more.

Check-backs: every ``transaction.check.interval.ms`` the service counts the checks whose
answer is overdue, discards the messages whose last allowed check went unanswered, wakes the
producers polling with CheckHalfMessages and forgets expired outcomes. A message is due for a
check ``check_immunity_ms`` after it was sent, then again an interval after each check. Only
a check handed to a live (polling) producer of the message's group can count: with none
connected, the message waits, so a broker restarted before its producers does not discard
everything.

The three topics are created with the first half message, not at startup, so a broker
that never sees one has none of them.

A cluster broker runs :class:`~spark_mq.broker.half.cluster_service.ClusterHalfMessageService`,
which serves the partitions of ``__half_messages`` it leads (docs/half_messages.md, "On a
cluster").

Threads: everything runs on the event loop except loading and topic creation (executor).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from spark_mq.broker.half.config import HalfMessageConfig
from spark_mq.broker.half.expiry import EXPIRE_STEP_RECORDS, tombstone_batches
from spark_mq.broker.half.half_log import (
    DISCARD_TOPIC,
    OP_KEY_PREFIX,
    HalfLog,
    LoadedHalfMessages,
)
from spark_mq.broker.half.pending import Outcome, PendingMessage, log_discard, to_message
from spark_mq.broker.half.real_record import real_batch
from spark_mq.broker.half.records import (
    VERSION,
    HalfOp,
    HalfRecord,
    encode_op,
    encode_record,
)
from spark_mq.broker.half.state import is_final, is_transition_valid
from spark_mq.broker.internal_topics import HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC
from spark_mq.broker.metadata_cache import MetadataSnapshot
from spark_mq.broker.replica_manager import ReplicaManager
from spark_mq.broker.retried_step import RetriedStep
from spark_mq.errors import (
    CoordinatorNotAvailableError,
    HalfMessageNotFoundError,
    InvalidRequestError,
    InvalidTxnStateError,
    LogClosedError,
)
from spark_mq.protocol.half_messages import (
    EndHalfMessageRequest,
    HalfAction,
    HalfMessage,
    HalfState,
    SendHalfMessageRequest,
)

logger = logging.getLogger("spark_mq.broker.half")

#: Longest a CheckHalfMessages request may wait (a bound on every poll, whatever it asks).
MAX_CHECK_WAIT_MS: Final = 30_000

RunBlocking = Callable[..., Awaitable[Any]]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class HalfMessageService:
    """The broker's half messages, bound to the running event loop (one node; a cluster
    broker's is :class:`~spark_mq.broker.half.cluster_service.ClusterHalfMessageService`)."""

    def __init__(
        self,
        config: HalfMessageConfig,
        replicas: ReplicaManager,
        run_blocking: RunBlocking,
        *,
        new_producer_id: Callable[[], int],
        clock: Callable[[], int] = wall_clock_ms,
        metadata: Callable[[], MetadataSnapshot] | None = None,
    ) -> None:
        self.config = config
        self.replicas = replicas
        self._run_blocking = run_blocking
        self._new_producer_id = new_producer_id
        self._clock = clock
        #: Where the records and ops go (one node's two topics, or a cluster's partitions).
        self.log = HalfLog(config, replicas, metadata)
        self.halves = self.log.halves
        self.ops = self.log.ops
        self.pending: dict[str, PendingMessage] = {}
        #: Ended messages (discarded ones too) in the order they ended, which is the order
        #: they expire in: the front is the next to be forgotten.
        self.ended: dict[str, Outcome] = {}
        #: The discarded messages among ``ended``, with their records, for the listing.
        self.discarded: dict[str, PendingMessage] = {}
        self._wakeups: dict[str, asyncio.Event] = {}
        self._ready = RetriedStep(self._load, what="loading half messages", owner="half messages")
        self._job: asyncio.Task[None] | None = None
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Load the two topics (creating them) and start the check job (on the loop)."""
        self._ready.start()
        self._start_job()

    def _start_job(self) -> None:
        if self._job is None:
            self._job = asyncio.create_task(self._check_job(), name="half-message-checks")

    def close(self) -> None:
        self._closed = True
        if self._job is not None:
            self._job.cancel()
        for event in self._wakeups.values():
            event.set()

    async def wait_closed(self) -> None:
        if self._job is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._job

    async def ready(self) -> HalfMessageService:
        if self._closed:
            raise CoordinatorNotAvailableError("the broker is shutting down; retry elsewhere")
        await self._ready.wait()
        return self

    async def serving(self, group: str) -> HalfMessageService:
        """The service once it serves ``group`` (one node: every group, once loaded)."""
        return await self.ready()

    async def _load(self) -> None:
        loaded = await self._run_blocking(self.log.load_blocking)
        self._install(loaded, 0)

    def _install(self, loaded: LoadedHalfMessages, index: int) -> None:
        """Make what was read of partition ``index`` the service's state."""
        now = self._clock()
        for message_id, op in loaded.ops.items():
            state = HalfState(op.state)
            if state is HalfState.PENDING:
                continue
            # An op written before ops carried their time expires a retention from now.
            ended_ms = op.time_ms if op.time_ms >= 0 else now
            self.ended[message_id] = Outcome(state, op.offset, ended_ms, index)
            record = loaded.records.get(message_id)
            if state is HalfState.DISCARDED and record is not None:
                # (Without its record, its expiry was under way: the next pass finishes it.)
                self.discarded[message_id] = PendingMessage(record, op.check_count)
        for message_id, record in loaded.records.items():
            op_loaded = loaded.ops.get(message_id)
            if op_loaded is None or op_loaded.state == HalfState.PENDING:
                count = 0 if op_loaded is None else op_loaded.check_count
                self.pending[message_id] = PendingMessage(record, count)
        logger.info(
            "half messages loaded from %s-%d: %d live records, %d outcomes",
            HALF_MESSAGES_TOPIC,
            index,
            len(loaded.records),
            len(loaded.ops),
        )

    # -- on a cluster: placement, storage, replication --------------------------------------

    def _wake(self, groups: set[str]) -> None:
        for group in groups:
            event = self._wakeups.pop(group, None)
            if event is not None:
                event.set()

    # -- SendHalfMessage --------------------------------------------------------------------

    async def send(self, request: SendHalfMessageRequest) -> int:
        """Store a half message; its partition. Idempotent per ``message_id``."""
        if not request.producer_group or not request.message_id:
            raise InvalidRequestError(
                "SendHalfMessage needs a producer_group and a message_id (a UUID the "
                "producer makes)"
            )
        if request.message_id.startswith(OP_KEY_PREFIX):
            raise InvalidRequestError(
                f"half message id {request.message_id!r}: an id may not start with "
                f"{OP_KEY_PREFIX!r} (the service keys its outcomes so); use a UUID"
            )
        await self.serving(request.producer_group)
        if request.topic in (HALF_MESSAGES_TOPIC, HALF_OPS_TOPIC, DISCARD_TOPIC):
            raise InvalidRequestError(
                f"a half message cannot go to {request.topic!r}: it is the half-message "
                "service's own topic; send to a topic of yours"
            )
        if request.partition < 0:
            raise InvalidRequestError(
                f"SendHalfMessage partition {request.partition}: give the partition (the "
                "producer's partitioner chooses it)"
            )
        known = self._known_partition(request.message_id)
        if known is not None:
            # A retried send is answered once the first one's record is replicated.
            await self.log.replicated(request.producer_group)
            return known
        await self._check_real_partition(request.topic, request.partition)
        producer_id = await self._run_blocking(self._new_producer_id)
        known = self._known_partition(request.message_id)  # a racing retry stored it
        if known is not None:
            return known
        immunity = request.check_immunity_ms
        record = HalfRecord(
            VERSION,
            request.message_id,
            request.producer_group,
            request.topic,
            request.partition,
            request.key,
            request.value,
            list(request.headers),
            self._clock(),
            self.config.transaction_half_timeout_ms if immunity < 0 else immunity,
            producer_id,
        )
        self.log.append_record(
            record.producer_group, record.message_id, encode_record(record), self._clock()
        )
        self.pending[record.message_id] = PendingMessage(record, 0)
        await self.log.replicated(record.producer_group)
        return record.partition

    async def _check_real_partition(self, topic: str, partition: int) -> None:
        """The topic must exist (created if auto-creation is on) and have the partition; the
        service's topics are created with the first half message."""
        await self._run_blocking(self.replicas.auto_create, topic)
        self.replicas.partition(topic, partition)
        if not (self.halves.ready and self.ops.ready):
            await self._run_blocking(self.log.create_blocking)

    def _known_partition(self, message_id: str) -> int | None:
        for table in (self.pending, self.discarded):
            entry = table.get(message_id)
            if entry is not None:
                return entry.record.partition
        if message_id in self.ended:
            return -1
        return None

    # -- EndHalfMessage ---------------------------------------------------------------------

    async def end(self, request: EndHalfMessageRequest) -> tuple[HalfState, int]:
        """End a half message; its outcome and the real record's offset (or -1)."""
        try:
            action = HalfAction(request.action)
        except ValueError:
            raise InvalidRequestError(
                f"EndHalfMessage action {request.action}: use 1 (COMMIT) or 2 (ROLLBACK)"
            ) from None
        wanted = HalfState.COMMITTED if action is HalfAction.COMMIT else HalfState.ROLLED_BACK
        await self.serving(request.producer_group)
        found = self._to_end(request, wanted)
        if not isinstance(found, PendingMessage):
            # A repeated end is answered once the first one's op is replicated.
            await self.log.replicated(request.producer_group)
            return found
        state, offset = await self._end_pending(found, request, wanted)
        if request.from_check:
            logger.info("half message %s %s by a check-back", request.message_id, state.name)
        return state, offset

    async def _end_pending(
        self, pending: PendingMessage, request: EndHalfMessageRequest, wanted: HalfState
    ) -> tuple[HalfState, int]:
        """End ``pending`` as ``wanted``. One node: no await from here on, so the appends
        and the state change are one step on the loop."""
        offset = self._write_real(pending.record) if wanted is HalfState.COMMITTED else -1
        self._finish(pending, wanted, offset)
        return wanted, offset

    def _to_end(
        self, request: EndHalfMessageRequest, wanted: HalfState
    ) -> PendingMessage | tuple[HalfState, int]:
        """The pending message ``request`` ends, or the outcome a repeated end answers;
        the typed error of an end that does not fit."""
        message_id = request.message_id
        outcome = self.ended.get(message_id)
        if outcome is not None and outcome.state is HalfState.DISCARDED:
            gone = self.discarded.get(message_id)
            raise _state_error(
                f"half message {message_id!r} was DISCARDED after "
                f"{'its' if gone is None else gone.check_count} unanswered checks; it is in "
                f"{DISCARD_TOPIC} for an operator to handle",
                -1 if gone is None else gone.record.producer_id,
            )
        if outcome is not None:
            if outcome.state is not wanted:
                raise _state_error(
                    f"half message {message_id!r} was already {outcome.state.name}; "
                    f"it cannot be {wanted.name} as well"
                )
            return outcome.state, outcome.offset
        pending = self.pending.get(message_id)
        if pending is None:
            retention_ms = self.config.transaction_half_op_retention_ms
            raise HalfMessageNotFoundError(
                f"no half message {message_id!r} on this broker: either it was never sent "
                f"here (send it first with SendHalfMessage), or it ended more than "
                f"transaction.half.op.retention.ms ({retention_ms} ms) ago and its outcome "
                "was forgotten; nothing was written, the first end is the one that counted"
            )
        if pending.record.producer_group != request.producer_group:
            raise InvalidRequestError(
                f"half message {message_id!r} belongs to producer group "
                f"{pending.record.producer_group!r}, not {request.producer_group!r}"
            )
        return pending

    def _write_real(self, record: HalfRecord, *, topic: str | None = None) -> int:
        """Append the message's record to ``topic`` (its own by default) idempotently
        (one node: the partition is this broker's)."""
        target, partition, batch = real_batch(record, topic, self._clock())
        part = self.replicas.partition(target, partition)
        info = part.append(batch)
        self.replicas.notify([part])
        return int(info.first_offset)

    def _finish(self, pending: PendingMessage, state: HalfState, offset: int) -> None:
        record = pending.record
        # Only a pending message is finished here (the callers found it in ``pending``);
        # a bug that finished one twice would rewrite a final outcome.
        if record.message_id not in self.pending or not is_final(state):
            raise AssertionError(f"half message {record.message_id} cannot become {state.name}")
        if not is_transition_valid(HalfState.PENDING, state):
            raise AssertionError(f"no transition from PENDING to {state.name}")
        now = self._clock()
        op = HalfOp(VERSION, record.message_id, state, pending.check_count, offset, now)
        group = record.producer_group
        self.log.append_op(group, record.message_id, encode_op(op), now)
        if state is HalfState.DISCARDED:
            self.discarded[record.message_id] = pending
        else:
            self.log.append_record(group, record.message_id, None, now)
        self.ended[record.message_id] = Outcome(state, offset, now, self.log.index_of(group))
        self.pending.pop(record.message_id, None)

    # -- CheckHalfMessages ------------------------------------------------------------------

    def _settle(self, pending: PendingMessage, now: int) -> None:
        """Count the check that is out if its answer is due and has not come (a COMMIT or
        ROLLBACK would have ended the message), and record the count in ``__half_ops``."""
        if pending.check_out_ms < 0:
            return
        if now - pending.check_out_ms < self.config.transaction_check_interval_ms:
            return
        pending.check_count += 1
        pending.check_out_ms = -1
        record = pending.record
        op = HalfOp(VERSION, record.message_id, HalfState.PENDING, pending.check_count, -1, now)
        self.log.append_op(record.producer_group, record.message_id, encode_op(op), now)

    def _due(self, pending: PendingMessage, now: int) -> bool:
        """Whether a check of ``pending`` may be handed out (after :meth:`_settle`)."""
        if pending.check_out_ms >= 0:
            return False  # its answer has until the interval ends
        if pending.check_count >= self.config.transaction_check_max:
            return False  # its last check went unanswered: the job discards it
        return now - pending.record.created_ms >= pending.record.check_immunity_ms

    async def poll_checks(
        self, group: str, max_wait_ms: int, max_messages: int
    ) -> list[HalfMessage]:
        """Half messages of ``group`` to check, waiting up to ``max_wait_ms`` for some. On a
        cluster only the group's coordinator answers (NOT_COORDINATOR elsewhere), so the
        producers of a group poll it there: check-back goes over their own connections."""
        if not group:
            raise InvalidRequestError("CheckHalfMessages needs the producer_group")
        await self.serving(group)
        wait_s = max(0, min(max_wait_ms, MAX_CHECK_WAIT_MS)) / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            self._still_serving(group)
            handed = self._hand_out(group, max(1, max_messages))
            remaining = deadline - loop.time()
            if handed or remaining <= 0 or self._closed:
                return handed
            event = self._wakeups.setdefault(group, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    def _still_serving(self, group: str) -> None:
        """Raise if a waiting poll of ``group`` must end (a cluster broker stopped serving
        it); one node always serves every group."""

    def _hand_out(self, group: str, limit: int) -> list[HalfMessage]:
        now = self._clock()
        out: list[HalfMessage] = []
        for pending in list(self.pending.values()):
            if len(out) >= limit:
                break
            if pending.record.producer_group != group:
                continue
            self._settle(pending, now)
            if not self._due(pending, now):
                continue
            # Not recorded: a check counts when its answer is overdue (see _settle).
            pending.check_out_ms = now
            out.append(to_message(pending, HalfState.PENDING))
        return out

    async def _check_job(self) -> None:
        interval_s = self.config.transaction_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            if not self._loaded():
                continue
            try:
                await self._run_checks_once()
                await self.expire_outcomes()
            except LogClosedError:
                return
            except Exception:
                logger.exception("half-message checks failed; retrying at the next interval")

    def _partitions_served(self) -> int:
        """How many partitions of ``__half_messages`` this service holds outcomes of."""
        return 1

    def _loaded(self) -> bool:
        """Whether the periodic job has a state to work on (one node: once loaded)."""
        return self._ready.succeeded

    async def _run_checks_once(self) -> None:
        self.run_checks()

    def run_checks(self) -> int:
        """Count the checks whose answer is overdue, discard the messages whose last check
        went unanswered and wake the pollers of every group with a message due; the number
        discarded (one node)."""
        to_discard = self._sweep(self._clock())
        for pending in to_discard:
            self._write_real(pending.record, topic=DISCARD_TOPIC)
            self._finish(pending, HalfState.DISCARDED, -1)
            log_discard(pending)
        return len(to_discard)

    def _sweep(self, now: int) -> list[PendingMessage]:
        """Count the overdue checks, wake the pollers of the groups with a message due; the
        messages whose last check went unanswered, to be discarded."""
        to_discard: list[PendingMessage] = []
        groups: set[str] = set()
        for pending in list(self.pending.values()):
            self._settle(pending, now)
            if pending.check_count >= self.config.transaction_check_max:
                to_discard.append(pending)
            elif self._due(pending, now):
                groups.add(pending.record.producer_group)
        self._wake(groups)
        return to_discard

    # -- expiry -----------------------------------------------------------------------------

    async def expire_outcomes(self) -> int:
        """Forget the outcomes older than ``transaction.half.op.retention.ms`` (the order
        of appends, and why, is :mod:`~spark_mq.broker.half.expiry`); how many were
        forgotten."""
        await self.ready()
        forgotten = 0
        while True:
            now = self._clock()
            retention_ms = self.config.transaction_half_op_retention_ms
            expired: list[str] = []
            # ``ended`` is in the order the messages ended within each partition (one node:
            # one partition), so a partition's first outcome kept ends its part of the pass.
            kept: set[int] = set()
            for message_id, outcome in self.ended.items():
                if len(expired) >= EXPIRE_STEP_RECORDS:
                    break
                if outcome.index in kept:
                    continue
                if now - outcome.ended_ms >= retention_ms:
                    expired.append(message_id)
                else:
                    kept.add(outcome.index)
                    if len(kept) >= self._partitions_served():
                        break
            if not expired:
                return forgotten
            await self._forget(expired, now)
            forgotten += len(expired)
            logger.info("forgot the outcomes of %d ended half messages", len(expired))

    async def _forget(self, expired: list[str], now: int) -> None:
        """Tombstone the records of ``expired``, fsync, tombstone their ops, then drop them
        from memory (the order, and why: :mod:`~spark_mq.broker.half.expiry`)."""
        halves_log = self.replicas.logs.get_log(HALF_MESSAGES_TOPIC, 0)
        ops_log = self.replicas.logs.get_log(HALF_OPS_TOPIC, 0)
        # The topics' own segment.bytes (an operator may have altered it since creation).
        segment_bytes = min(halves_log.config.segment_bytes, ops_log.config.segment_bytes)
        batches = tombstone_batches(expired, segment_bytes)
        for batch in batches:
            self.halves.append(HALF_MESSAGES_TOPIC, batch, now)
        # The records' tombstones on disk before the ops' go: after a power loss the ops
        # must not be gone while a record is back.
        await self._run_blocking(halves_log.flush)
        for batch in batches:
            self.ops.append(HALF_OPS_TOPIC, batch, now)
        for message_id in expired:
            # (An end that came during the flush found the outcome: it is still final.)
            self.ended.pop(message_id, None)
            self.discarded.pop(message_id, None)

    # -- ListHalfMessages -------------------------------------------------------------------

    def discarded_total(self) -> int:
        """Messages moved to the discard topic since it was created (its log end: each
        discard appends one record, and a repeat is a duplicate the log does not append)."""
        if not self.replicas.logs.topic_exists(DISCARD_TOPIC):
            return 0
        return int(self.replicas.logs.get_log(DISCARD_TOPIC, 0).log_end_offset)

    async def list(self, *, discarded: bool, group: str | None) -> list[HalfMessage]:
        """The pending (or discarded) messages of ``group``, or of every group this broker
        serves (on a cluster: the partitions of ``__half_messages`` it leads)."""
        if group is None:
            await self.ready()
        else:
            await self.serving(group)
        table = self.discarded if discarded else self.pending
        state = HalfState.DISCARDED if discarded else HalfState.PENDING
        return [
            to_message(p, state)
            for p in table.values()
            if group is None or p.record.producer_group == group
        ]


def _state_error(message: str, producer_id: int = -1) -> InvalidTxnStateError:
    """INVALID_TXN_STATE for an end that does not fit the message's state; the producer id
    is the message's own (its real record's), -1 when the broker does not have it."""
    return InvalidTxnStateError(message, producer_id=producer_id, producer_epoch=0)
