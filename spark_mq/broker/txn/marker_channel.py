"""Sending a transaction's markers to the partitions other brokers lead (Kafka's
TransactionMarkerChannelManager).

In a cluster the data partitions of a transaction, and the ``__consumer_offsets`` partition of
its offsets, are led by various brokers. The coordinator writes the markers of the partitions
it leads itself (:class:`~spark_mq.broker.txn.markers.MarkerWriter`) and hands the others to
this channel, which sends them to each partition's leader in WriteTxnMarkers (API 27) requests:

- **where**: the leader named by the broker's metadata cache (the controller's
  UpdateMetadata), reached at its first (inter-broker) endpoint on a connection authenticated
  with the cluster's secret (AuthenticateBroker), as the replica fetchers and the ISR
  proposals are. The leader is looked up again for every attempt, so a marker follows a
  partition that moves and a broker that restarts on another port.
- **batching**: every marker due for one broker, of any number of transactions, goes in one
  request (one marker entry per transaction, its partitions grouped by topic); one request
  is in flight per broker at a time, so markers queued meanwhile go together in the next.
- **retries**: a partition whose marker failed in a retriable way (NOT_LEADER_OR_FOLLOWER, an
  UNKNOWN_TOPIC_OR_PARTITION while the leader's metadata catches up, a timeout waiting for
  the in-sync replicas, a connection that failed, a broker that is dead or that no live
  broker leads) is queued again after a backoff that doubles from ``retry_backoff_ms`` to
  ``retry_backoff_max_ms``, and re-sent to whoever leads it then, until it is written. Errors
  that are not retriable are logged (rate-limited) and retried at the longest backoff: a
  decided transaction must be completed, never dropped.
- **deleted topics**: a partition the metadata cache no longer knows (its topic was deleted)
  needs no marker and counts as written, as Kafka skips it.
- **a newer coordinator**: a marker refused with TRANSACTION_COORDINATOR_FENCED (the partition
  saw a newer coordinator epoch: another broker coordinates this transactional id now) stops
  every retry of that transaction's markers; the transaction is left to the new coordinator.

The coordinator asks with :meth:`TransactionMarkerChannel.submit`, which queues what it has
not seen and answers, per partition, whether the marker is written (nothing), still on its
way (:class:`MarkerPendingError`) or refused for good (the fencing error). The coordinator
completes a transaction (CompleteCommit / CompleteAbort) only when nothing is pending, so
every partition has acknowledged its marker first; ``on_acknowledged`` is called (once per
event loop turn) when a transaction's last marker is acknowledged, so that the coordinator
completes it at once instead of at its next periodic retry. A transaction whose markers are
all written is forgotten by the channel when :meth:`submit` reports that (a later rewrite of
the same decision is sent again; the partition's leader skips a marker it already has).

Each (transaction, partition) marker is a small state machine, :class:`MarkerState`.

Threads: everything runs on the event loop except the blocking request, which runs on the
channel's own small thread pool (so a dead broker's timeouts never hold the broker's I/O
threads), one per destination at a time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from spark_mq.broker.metadata_cache import NO_LEADER, MetadataSnapshot
from spark_mq.broker.txn.broker_links import BrokerCredentials, BrokerLinks
from spark_mq.broker.txn.markers import MarkerKey, MarkerPendingError
from spark_mq.broker.txn.state import TopicPartition
from spark_mq.errors import SparkMQError, TransactionCoordinatorFencedError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.error_codes import ErrorCode, exception_class
from spark_mq.protocol.transactions import (
    TxnTopic,
    WritableTxnMarker,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from spark_mq.rate_limited_log import RateLimitedLog

logger = logging.getLogger("spark_mq.broker.txn")
_FAILURES: Final = RateLimitedLog(logger)


class MarkerState(enum.Enum):
    """One marker of one transaction, for one partition another broker leads."""

    #: Waiting to be sent (first time, or after a retriable failure and its backoff).
    QUEUED = "queued"
    #: In a WriteTxnMarkers request that has not been answered yet.
    IN_FLIGHT = "in_flight"
    #: Written by the leader (or needs none: the topic was deleted). Final.
    WRITTEN = "written"
    #: Refused: a newer coordinator wrote to the partition. Final; nothing is retried.
    FENCED = "fenced"


_TRANSITIONS: Final[Mapping[MarkerState, frozenset[MarkerState]]] = {
    MarkerState.QUEUED: frozenset({MarkerState.IN_FLIGHT, MarkerState.WRITTEN, MarkerState.FENCED}),
    MarkerState.IN_FLIGHT: frozenset({MarkerState.QUEUED, MarkerState.WRITTEN, MarkerState.FENCED}),
    MarkerState.WRITTEN: frozenset(),
    MarkerState.FENCED: frozenset(),
}


def is_transition_valid(old: MarkerState, new: MarkerState) -> bool:
    return new in _TRANSITIONS[old]


@dataclasses.dataclass(frozen=True)
class MarkerChannelConfig:
    """How the channel retries and waits (Kafka's client names for the same knobs)."""

    #: The first pause before a failed marker is sent again; it doubles on each failure.
    retry_backoff_ms: int = 100
    #: The longest pause between two attempts of one marker.
    retry_backoff_max_ms: int = 1000
    #: Connect and request timeout of one WriteTxnMarkers (the leader waits for its in-sync
    #: replicas within it).
    request_timeout_ms: int = 30_000
    #: Threads sending requests: destinations served at once.
    max_concurrent_destinations: int = 4

    def __post_init__(self) -> None:
        if not 0 < self.retry_backoff_ms <= self.retry_backoff_max_ms:
            raise ValueError(
                f"retry_backoff_ms ({self.retry_backoff_ms}) must be positive and at most "
                f"retry_backoff_max_ms ({self.retry_backoff_max_ms})"
            )
        if self.request_timeout_ms <= 0 or self.max_concurrent_destinations <= 0:
            raise ValueError("request_timeout_ms and max_concurrent_destinations must be > 0")


@dataclasses.dataclass
class _Marker:
    state: MarkerState = MarkerState.QUEUED
    #: When a queued marker may be sent (monotonic ms).
    due_ms: int = 0
    backoff_ms: int = 0
    #: Why the last attempt failed (reported by submit while the marker is pending).
    last_error: str = "not sent yet"

    def move(self, new: MarkerState) -> None:
        if not is_transition_valid(self.state, new):
            raise AssertionError(f"marker cannot go from {self.state.value} to {new.value}")
        self.state = new


#: The blocking request: ``(destination id, address, request)`` -> response.
Transport = Callable[[int, BrokerAddress, WriteTxnMarkersRequest], WriteTxnMarkersResponse]


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class TransactionMarkerChannel:
    """Markers for partitions other brokers lead, sent and retried (module docstring)."""

    def __init__(
        self,
        *,
        node_id: int,
        metadata: Callable[[], MetadataSnapshot],
        credentials: BrokerCredentials,
        config: MarkerChannelConfig = MarkerChannelConfig(),
        on_acknowledged: Callable[[], None] | None = None,
        transport: Transport | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self._node_id = node_id
        self._metadata = metadata
        self._credentials = credentials
        self.config = config
        self.on_acknowledged = on_acknowledged
        self._transport = transport or self._request
        self._clock_ms = clock_ms
        self._markers: dict[MarkerKey, dict[TopicPartition, _Marker]] = {}
        # Destinations with a request in flight: one at a time each.
        self._busy: set[int] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._ack_scheduled = False
        self._executor = concurrent.futures.ThreadPoolExecutor(
            config.max_concurrent_destinations, thread_name_prefix="txn-markers"
        )
        # Connections by destination (one request on each at a time).
        self._links = BrokerLinks(credentials, client_id=f"txn-marker-channel-{node_id}")

    # -----------------------------------------------------------------------------------------
    # The coordinator's side (event loop)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="txn-marker-channel")

    def submit(
        self,
        partitions: Iterable[TopicPartition],
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[TopicPartition, Exception]:
        """Queue the markers not queued yet; the partitions whose marker is not written, with
        why (empty: every one is written, and the channel forgets the transaction)."""
        key: MarkerKey = (producer_id, producer_epoch, commit, coordinator_epoch)
        markers = self._markers.setdefault(key, {})
        queued = False
        for tp in partitions:
            if tp not in markers:
                markers[tp] = _Marker(due_ms=self._clock_ms())
                queued = True
        if queued:
            self._wake.set()
        out: dict[TopicPartition, Exception] = {}
        for tp, marker in markers.items():
            if marker.state is MarkerState.FENCED:
                out[tp] = TransactionCoordinatorFencedError(
                    f"the {_kind(commit)} marker of producer {producer_id} for {tp[0]}-{tp[1]} "
                    f"was refused: a coordinator newer than epoch {coordinator_epoch} wrote "
                    "to that partition, so another broker coordinates this transaction now",
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                )
            elif marker.state is not MarkerState.WRITTEN:
                out[tp] = MarkerPendingError(
                    f"the {_kind(commit)} marker of producer {producer_id} for {tp[0]}-{tp[1]} "
                    f"is not acknowledged yet ({marker.last_error})"
                )
        if not out:
            del self._markers[key]
        return out

    def forget(self, producer_ids: Iterable[int]) -> int:
        """Stop sending the markers of these producers (their transactions moved to another
        coordinator); how many markers were dropped. In-flight answers are ignored."""
        gone = set(producer_ids)
        dropped = 0
        for key in [k for k in self._markers if k[0] in gone]:
            dropped += len(self._markers.pop(key))
        return dropped

    def pending(self) -> int:
        """Markers not written yet (queued, in flight or fenced)."""
        return sum(
            1
            for markers in self._markers.values()
            for m in markers.values()
            if m.state is not MarkerState.WRITTEN
        )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for send in list(self._sends):
            send.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._links.close)
        self._executor.shutdown(wait=False)

    # -----------------------------------------------------------------------------------------
    # Sending (event loop)

    async def _run(self) -> None:
        while True:
            wait_s = self._dispatch()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)
            self._wake.clear()

    def _dispatch(self) -> float | None:
        """Send every due marker to its leader, one request per idle destination; how long
        until the next marker is due (None: nothing waits)."""
        now = self._clock_ms()
        snapshot = self._metadata()
        batches: dict[int, dict[MarkerKey, list[TopicPartition]]] = {}
        next_due: int | None = None
        for key, markers in self._markers.items():
            for tp, marker in markers.items():
                if marker.state is not MarkerState.QUEUED:
                    continue
                if marker.due_ms > now:
                    next_due = marker.due_ms if next_due is None else min(next_due, marker.due_ms)
                    continue
                leader = self._leader(snapshot, tp, marker)
                if leader is None:
                    if marker.state is MarkerState.QUEUED:
                        self._back_off(marker, now)
                        next_due = (
                            marker.due_ms if next_due is None else min(next_due, marker.due_ms)
                        )
                    continue
                if leader in self._busy:
                    continue  # sent with the next request to that broker
                batch = batches.setdefault(leader, {})
                # One marker entry per producer id per request: the answer is keyed by it.
                if key not in batch and any(k[0] == key[0] for k in batch):
                    continue
                batch.setdefault(key, []).append(tp)
        for leader, batch in batches.items():
            broker = snapshot.brokers[leader]
            ep = (
                broker.endpoint(self._credentials.inter_broker.listener_name) or broker.endpoints[0]
            )
            for key, tps in batch.items():
                for tp in tps:
                    self._markers[key][tp].move(MarkerState.IN_FLIGHT)
            self._busy.add(leader)
            send = asyncio.create_task(
                self._send(leader, BrokerAddress(host=ep.host, port=ep.port), batch),
                name=f"txn-markers-to-{leader}",
            )
            self._sends.add(send)
            send.add_done_callback(self._sends.discard)
        if next_due is None:
            return None
        return max(0, next_due - now) / 1000

    def _leader(
        self, snapshot: MetadataSnapshot, tp: TopicPartition, marker: _Marker
    ) -> int | None:
        """The live leader to send ``tp``'s marker to; None if there is none now (the marker
        is marked written if the partition's topic is gone)."""
        if not snapshot.brokers:
            marker.last_error = "no UpdateMetadata received yet: the cluster is not known"
            return None
        cached = snapshot.partitions(tp[0]).get(tp[1])
        if cached is None:
            logger.info(
                "%s-%d no longer exists (its topic was deleted): its marker is not needed", *tp
            )
            marker.move(MarkerState.WRITTEN)
            self.acknowledged_soon()
            return None
        if cached.leader == NO_LEADER or not snapshot.is_live(cached.leader):
            marker.last_error = f"{tp[0]}-{tp[1]} has no live leader (leader {cached.leader})"
            return None
        if not snapshot.brokers[cached.leader].endpoints:
            marker.last_error = f"broker {cached.leader} registered no endpoint"
            return None
        return cached.leader

    def _back_off(self, marker: _Marker, now: int) -> None:
        cfg = self.config
        marker.backoff_ms = min(
            cfg.retry_backoff_max_ms,
            cfg.retry_backoff_ms if marker.backoff_ms == 0 else marker.backoff_ms * 2,
        )
        marker.due_ms = now + marker.backoff_ms

    async def _send(
        self,
        leader: int,
        address: BrokerAddress,
        batch: dict[MarkerKey, list[TopicPartition]],
    ) -> None:
        request = WriteTxnMarkersRequest(
            [
                WritableTxnMarker(
                    producer_id=key[0],
                    producer_epoch=key[1],
                    transaction_result=key[2],
                    topics=_by_topic(tps),
                    coordinator_epoch=key[3],
                )
                for key, tps in batch.items()
            ]
        )
        try:
            try:
                loop = asyncio.get_running_loop()
                response = await loop.run_in_executor(
                    self._executor, self._transport, leader, address, request
                )
            except (SparkMQError, OSError) as exc:
                _FAILURES.failure(
                    exc, "WriteTxnMarkers to broker %d failed (retried): %s", leader, exc
                )
                self._settle_all(batch, f"broker {leader} unreachable: {exc}")
                return
            self._settle(leader, batch, response)
        finally:
            self._busy.discard(leader)
            self._wake.set()

    def _settle_all(self, batch: dict[MarkerKey, list[TopicPartition]], why: str) -> None:
        now = self._clock_ms()
        for key, tps in batch.items():
            for tp in tps:
                marker = self._in_flight(key, tp)
                if marker is not None:
                    marker.move(MarkerState.QUEUED)
                    marker.last_error = why
                    self._back_off(marker, now)

    def _settle(
        self,
        leader: int,
        batch: dict[MarkerKey, list[TopicPartition]],
        response: WriteTxnMarkersResponse,
    ) -> None:
        answers: dict[tuple[int, str, int], tuple[int, str | None]] = {
            (m.producer_id, t.name, p.partition): (p.error_code, p.error_message)
            for m in response.markers
            for t in m.topics
            for p in t.partitions
        }
        now = self._clock_ms()
        for key, tps in batch.items():
            for tp in tps:
                marker = self._in_flight(key, tp)
                if marker is None:
                    continue  # forgotten meanwhile
                code, message = answers.get(
                    (key[0], *tp), (int(ErrorCode.UNKNOWN_SERVER_ERROR), "no answer")
                )
                if code == ErrorCode.NONE:
                    marker.move(MarkerState.WRITTEN)
                    continue
                if code == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                    self._fence(key, leader, tp, message)
                    continue
                marker.move(MarkerState.QUEUED)
                marker.last_error = f"broker {leader} answered {_code_name(code)}: {message}"
                if exception_class(code).retriable:
                    self._back_off(marker, now)
                else:
                    _FAILURES.failure(
                        exception_class(code)(message or _code_name(code)),
                        "broker %d refused the marker of producer %d for %s-%d (retried): %s",
                        leader,
                        key[0],
                        *tp,
                        marker.last_error,
                    )
                    marker.backoff_ms = self.config.retry_backoff_max_ms
                    marker.due_ms = now + marker.backoff_ms
        if any(
            key in self._markers
            and all(m.state is not MarkerState.QUEUED for m in self._markers[key].values())
            and all(m.state is not MarkerState.IN_FLIGHT for m in self._markers[key].values())
            for key in batch
        ):
            self.acknowledged_soon()

    def _fence(self, key: MarkerKey, leader: int, tp: TopicPartition, message: str | None) -> None:
        logger.warning(
            "broker %d refused the %s marker of producer %d for %s-%d with coordinator epoch "
            "%d: a newer coordinator wrote there (%s); this coordinator is stale for it and "
            "stops sending the transaction's markers",
            leader,
            _kind(key[2]),
            key[0],
            *tp,
            key[3],
            message,
        )
        for marker in self._markers.get(key, {}).values():
            if marker.state is not MarkerState.WRITTEN and marker.state is not MarkerState.FENCED:
                marker.move(MarkerState.FENCED)

    def _in_flight(self, key: MarkerKey, tp: TopicPartition) -> _Marker | None:
        marker = self._markers.get(key, {}).get(tp)
        return marker if marker is not None and marker.state is MarkerState.IN_FLIGHT else None

    def acknowledged_soon(self) -> None:
        """Call ``on_acknowledged`` at the next turn of the event loop (once, however many
        transactions finished meanwhile)."""
        if self.on_acknowledged is None or self._ack_scheduled:
            return
        self._ack_scheduled = True
        asyncio.get_running_loop().call_soon(self._acknowledged)

    def _acknowledged(self) -> None:
        self._ack_scheduled = False
        if self.on_acknowledged is None:
            return
        try:
            self.on_acknowledged()
        except Exception:
            # The periodic retry of the coordinator completes the transaction instead.
            logger.exception("completing transactions after their markers were written failed")

    # -----------------------------------------------------------------------------------------
    # The request (a channel thread)

    def _request(
        self, leader: int, address: BrokerAddress, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        response: WriteTxnMarkersResponse = self._links.request(
            leader, address, request, self.config.request_timeout_ms
        )
        return response


def _by_topic(tps: Iterable[TopicPartition]) -> list[TxnTopic]:
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(tps):
        topics.setdefault(topic, []).append(index)
    return [TxnTopic(name, parts) for name, parts in topics.items()]


def _kind(commit: bool) -> str:
    return "commit" if commit else "abort"


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
