"""The driver's view of the broker: which partitions a subscription covers and where their
logs start and end, offsets by timestamp, byte-limited range ends, and group commits.

Only the driver uses it (the batch reader's ``partitions()``, the stream reader's offset
calls); reader tasks open their own consumer in ``read()``. Offsets it returns honour
``isolation.level``: with ``read_committed`` the latest offset of a partition is its last
stable offset, so no range handed to a task passes a transaction that is still open.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Literal

from spark_mq.client.admin import Admin
from spark_mq.client.cluster import Cluster
from spark_mq.client.config import AdminConfig
from spark_mq.client.fetcher import end_of_last_batch
from spark_mq.client.offset_lookup import list_offsets
from spark_mq.client.records import TopicPartition
from spark_mq.client.retry import Retry, sent
from spark_mq.datasource.offsets import PartitionOffsets, split_by_backlog
from spark_mq.datasource.option_names import closest_name
from spark_mq.datasource.options import EARLIEST, LATEST, OffsetSpec, SourceOptions
from spark_mq.errors import (
    ConfigError,
    RequestTimedOutError,
    SparkMQError,
    UnknownTopicOrPartitionError,
)
from spark_mq.protocol.error_codes import ErrorCode, error_from_code
from spark_mq.protocol.fetch import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from spark_mq.protocol.framing import split_records
from spark_mq.protocol.metadata import MetadataResponse
from spark_mq.protocol.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

log = logging.getLogger(__name__)

#: What :meth:`BrokerView.partitions` does about topics that do not exist.
MissingTopics = Literal["error", "wait"]


class BrokerView:
    """Metadata and offset look-ups for one source (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        config = AdminConfig.from_properties(dict(options.endpoint))
        self._cluster = Cluster(config)
        self._timeout_ms = config.default_api_timeout_ms
        self._isolation = (
            READ_COMMITTED if options.isolation_level == "read_committed" else READ_UNCOMMITTED
        )
        self._admin: Admin | None = None
        #: Missing topics and partitions the last warning named (streams warn once).
        self._waiting: set[str] = set()

    # -- partitions -----------------------------------------------------------------------

    def _metadata(self, topics: list[str] | None) -> MetadataResponse:
        """Metadata of ``topics`` (None: all) from any broker, retrying a lost connection or
        a timeout until ``default.api.timeout.ms``: on a cluster the broker this view last
        asked may be the one that just died, and a query must not fail for it."""
        config = self._cluster.config
        retry = Retry.within_ms(
            self._timeout_ms,
            backoff_s=max(config.retry_backoff_ms, 1) / 1000,
            max_backoff_s=max(config.retry_backoff_max_ms, config.retry_backoff_ms) / 1000,
            clock=self._cluster.clock,
            sleep=self._cluster.sleep,
        )
        return retry.until(
            lambda: sent(lambda: self._cluster.refresh(topics)),
            lambda error: RequestTimedOutError(
                f"no broker answered a Metadata request within default.api.timeout.ms="
                f"{self._timeout_ms} (last error: {error}); check that the brokers are "
                "running and reachable"
            ),
            what="source metadata",
        )

    def partitions(self, *, missing: MissingTopics = "wait") -> list[TopicPartition]:
        """The partitions the subscription covers now, sorted. Named topics (``subscribe``)
        and assigned partitions that do not exist raise UnknownTopicOrPartitionError naming
        them with ``missing="error"`` (a batch read); with ``"wait"`` (a stream) they
        contribute none until they exist, and a warning says so once per topic or
        partition. A pattern matches the topics that exist."""
        sub = self.options.subscription
        if sub.kind == "subscribe":
            response = self._metadata(list(sub.topics))
        elif sub.kind == "assign":
            response = self._metadata(sorted({t for t, _ in sub.assigned}))
        else:
            response = self._metadata(None)
        counts = {
            t.name: len(t.partitions)
            for t in response.topics
            if t.error_code == ErrorCode.NONE and not t.is_internal
        }
        # A named topic the principal may not describe is refused, not taken as missing: a
        # stream would otherwise wait for it forever and read nothing, without a word.
        refused = next(
            (t for t in response.topics if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED),
            None,
        )
        if refused is not None and sub.kind != "subscribePattern":
            raise error_from_code(refused.error_code, refused.error_message, topic=refused.name)
        if sub.kind == "subscribePattern":
            pattern = re.compile(sub.pattern)
            names = [n for n in counts if not n.startswith("__") and pattern.fullmatch(n)]
            return sorted(TopicPartition(n, p) for n in names for p in range(counts[n]))
        if sub.kind == "assign":
            wanted = [TopicPartition(t, p) for t, p in sub.assigned]
            named = list(dict.fromkeys(t for t, _ in sub.assigned))
        else:
            wanted = [TopicPartition(n, p) for n in sub.topics for p in range(counts.get(n, 0))]
            named = list(sub.topics)
        absent = [t for t in named if t not in counts]
        short = [tp for tp in wanted if tp.topic in counts and tp.partition >= counts[tp.topic]]
        if absent or short:
            self._missing(absent, short, missing)
        self._waiting = {*absent, *(str(tp) for tp in short)}
        return sorted(tp for tp in wanted if tp.partition < counts.get(tp.topic, 0))

    def _missing(
        self, topics: list[str], partitions: list[TopicPartition], missing: MissingTopics
    ) -> None:
        """Raise, or warn once, about subscribed topics and assigned partitions that do not
        exist (see :meth:`partitions`)."""
        what = []
        if topics:
            what.append(("topic " if len(topics) == 1 else "topics ") + ", ".join(topics))
        if partitions:
            what.append(
                ("partition " if len(partitions) == 1 else "partitions ")
                + ", ".join(f"{tp.topic}-{tp.partition}" for tp in partitions)
            )
        one = len(topics) + len(partitions) == 1
        subject = f"{' and '.join(what)} of the option {self.options.subscription.kind}"
        verb = "does not exist" if one else "do not exist"
        if missing == "error":
            raise UnknownTopicOrPartitionError(
                f"{subject} {verb}{self._suggestions(topics)}: a batch read reads what exists "
                "when it starts; create them first or change the option",
                topic=topics[0] if topics else partitions[0].topic,
                partition=None if topics else partitions[0].partition,
            )
        if not {*topics, *(str(tp) for tp in partitions)} <= self._waiting:
            log.warning(
                "%s %s yet%s; the stream reads them from their first offset once they are created",
                subject,
                verb,
                self._suggestions(topics),
            )

    def _suggestions(self, topics: list[str]) -> str:
        """`` (did you mean ...?)`` naming existing topics close to the missing ones."""
        if not topics:
            return ""
        existing = sorted(
            t.name
            for t in self._metadata(None).topics
            if t.error_code == ErrorCode.NONE and not t.is_internal
        )
        close = [c for t in topics if (c := closest_name(t, existing, 0.6)) is not None]
        return f" (did you mean {', '.join(dict.fromkeys(close))}?)" if close else ""

    # -- offsets --------------------------------------------------------------------------

    def _list(self, specs: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        answers = list_offsets(
            self._cluster, specs, isolation_level=self._isolation, timeout_ms=self._timeout_ms
        )
        return {tp: offset for tp, (offset, _) in answers.items()}

    def earliest(self, tps: list[TopicPartition]) -> PartitionOffsets:
        """Log start offsets."""
        return self._list(dict.fromkeys(tps, EARLIEST_TIMESTAMP))

    def latest(self, tps: list[TopicPartition]) -> PartitionOffsets:
        """Last stable offsets (read_committed) or high watermarks (read_uncommitted)."""
        return self._list(dict.fromkeys(tps, LATEST_TIMESTAMP))

    def resolve(
        self, spec: OffsetSpec, tps: list[TopicPartition], *, starting: bool
    ) -> PartitionOffsets:
        """Absolute offsets of ``spec`` for every partition of ``tps``."""
        if spec.kind in ("earliest", "latest"):
            return self.earliest(tps) if spec.kind == "earliest" else self.latest(tps)
        given = {TopicPartition(t, p): v for (t, p), v in spec.per_partition}
        name = ("starting" if starting else "ending") + (
            "OffsetsByTimestamp" if spec.kind == "timestamps" else "Offsets"
        )
        if spec.kind in ("offsets", "timestamps"):
            unknown = sorted(set(given) - set(tps))
            missing = sorted(set(tps) - set(given))
            if unknown or missing:
                problem = (
                    f"names partitions the subscription does not have: {unknown}"
                    if unknown
                    else f"lacks partitions of the subscription: {missing}"
                )
                raise ConfigError(
                    f"option {name} {problem}; list every partition exactly once", key=name
                )
        if spec.kind == "offsets":
            out = dict(given)
            specials = {tp: v for tp, v in given.items() if v in (EARLIEST, LATEST)}
            out.update(self._list(specials))
            return out
        times = dict.fromkeys(tps, spec.timestamp_ms) if spec.kind == "timestamp" else given
        found = self._list(times)
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched:
            if starting and self.options.timestamp_strategy == "error":
                raise ConfigError(
                    f"no record at or after the starting timestamp in {unmatched}; use an "
                    "earlier time, or startingOffsetsByTimestampStrategy=latest to start "
                    "those partitions at the latest offset",
                    key="startingOffsetsByTimestampStrategy",
                )
            found.update(self.latest(unmatched))
        return found

    def byte_limited_ends(
        self,
        begin: Mapping[TopicPartition, int],
        upper: Mapping[TopicPartition, int],
        budget_bytes: int,
    ) -> PartitionOffsets:
        """Ends at or below ``upper`` such that the stored batches read from ``begin`` add
        up to at most ``budget_bytes`` (shared by backlog), found from the batch headers of
        one Fetch per leader. A partition whose first batch alone is larger than its share
        still gets that batch, so a query always makes progress."""
        backlog = {tp: upper[tp] - begin[tp] for tp in begin if upper[tp] > begin[tp]}
        shares = split_by_backlog(backlog, budget_bytes)
        ends = dict(begin)
        by_node: dict[int, list[TopicPartition]] = {}
        for tp in backlog:
            node = self._cluster.leader(tp.topic, tp.partition)
            by_node.setdefault(-1 if node is None else node, []).append(tp)
        for node, tps in by_node.items():
            topics: dict[str, list[FetchPartition]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(
                    FetchPartition(tp.partition, begin[tp], max(shares[tp], 1))
                )
            request = FetchRequest(
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=max(budget_bytes, 1),
                topics=[FetchTopic(name, parts) for name, parts in topics.items()],
                isolation_level=self._isolation,
            )
            conn = self._cluster.new_connection(node)
            try:
                self._cluster.connect(conn)
                conn.send(request)
                response = conn.receive()
            finally:
                conn.close()
            if response is None:
                continue  # no answer in time: these partitions do not advance this trigger
            body: FetchResponse = response.result()
            sizes = [p.records_size for t in body.topics for p in t.partitions]
            views = iter(split_records(response.records, sizes))
            for topic in body.topics:
                for part in topic.partitions:
                    data = next(views)
                    tp = TopicPartition(topic.name, part.partition)
                    last = end_of_last_batch(data) if part.error_code == ErrorCode.NONE else None
                    if tp in upper and last is not None:
                        ends[tp] = max(min(last, upper[tp]), begin[tp])
        return ends

    # -- groups ---------------------------------------------------------------------------

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` (next offsets to read) to ``group_id``, outside any group
        generation, so ``spark-mq groups describe`` shows the query's lag. A failure is
        logged, not raised: the query's progress lives in its checkpoint, not the group."""
        if self._admin is None:
            self._admin = Admin(config=dict(self.options.endpoint))
        try:
            self._admin.alter_group_offsets(group_id, {tp: int(o) for tp, o in offsets.items()})
        except SparkMQError as exc:
            log.warning("could not commit offsets to consumer group %r: %s", group_id, exc)

    def close(self) -> None:
        """Release connections."""
        self._cluster.close()
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def monotonic_ms() -> int:
    """The default clock of the stream reader's ``maxTriggerDelay``."""
    return int(time.monotonic() * 1000)
