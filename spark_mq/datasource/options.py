"""The options of ``.format("spark_mq")`` reads, parsed and checked once, up front.

Spark hands options over as strings with case-insensitive names; :func:`parse_source_options`
turns them into a frozen :class:`SourceOptions` or raises :class:`~spark_mq.errors.ConfigError`
naming the option, the value and what is accepted. The names and meanings are those of
Spark's Kafka source (``docs/spark_source.md`` has the table). ``kafka.<key>`` options are
passed to the consumer that ``read()`` uses (``kafka.max.partition.fetch.bytes``, ...) and
checked here, on the driver; keys the source itself controls (offsets, groups, commits) are
refused, and an unknown key is refused naming the closest key the source accepts.

Other names: Spark's Kafka options that mean nothing here (:data:`NO_EFFECT_OPTIONS`) are
checked, then ignored with a warning saying why; a sink option is ignored with a warning; a
typo of a known name is refused, anything else ignored with a warning
(:mod:`spark_mq.datasource.option_names`).

>>> opts = parse_source_options({"path": "/data/mq", "subscribe": "a,b"}, streaming=True)
>>> opts.subscription.topics, opts.starting.kind, opts.fail_on_data_loss
(('a', 'b'), 'latest', True)
>>> parse_source_options({"path": "/d"}, streaming=False)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
spark_mq.errors.ConfigError: spark_mq needs exactly one of the options assign, subscribe, ...
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from spark_mq.client.config import ConsumerConfig
from spark_mq.datasource.connection import client_endpoint, hidden, lookup
from spark_mq.datasource.executor_endpoint import (
    HOST_OPTION,
    MODE_OPTION,
    EndpointMode,
    parse_executor_endpoint,
)
from spark_mq.datasource.option_names import check_unknown_names, closest_name
from spark_mq.errors import ConfigError

log = logging.getLogger(__name__)

SubscriptionKind = Literal["assign", "subscribe", "subscribePattern"]
#: ``earliest``/``latest``; ``offsets``: JSON per partition (-2 earliest, -1 latest);
#: ``timestamp``: one time for every partition; ``timestamps``: JSON times per partition.
SpecKind = Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]

EARLIEST: Final = -2
LATEST: Final = -1
_ISOLATION_LEVELS: Final = ("read_committed", "read_uncommitted")
_STRATEGIES: Final = ("error", "latest")
#: Consumer keys the source sets itself; as ``kafka.<key>`` they are refused.
_CONTROLLED_KEYS: Final = frozenset(
    {
        "group.id",
        "group.instance.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "interceptors",
        "partition.assignment.strategy",
    }
)
_ALIASES: Final = {"kafka.isolation.level": "isolation.level", "kafka.bootstrap.servers": ""}
#: Consumer keys that name the broker; as ``kafka.<key>`` only ``bootstrap.servers`` is taken
#: (an alias of the option), ``path`` is the option ``path``.
_ENDPOINT_KEYS: Final = frozenset({"path", "bootstrap.servers", "isolation.level"})
#: Why some consumer keys are refused although the consumer has no such setting.
_REFUSED_UNKNOWN_KEYS: Final = {
    "path": "give the log directory as the option path",
    "key.deserializer": "keys are always read as bytes (cast them in Spark)",
    "value.deserializer": "values are always read as bytes (cast them in Spark)",
}
#: Every option name the source reads (canonical spelling; ``kafka.<key>`` aside).
SOURCE_OPTIONS: Final = (
    "path",
    "bootstrap.servers",
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "maxBytesPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "includeHeaders",
    "isolation.level",
    "kafka.isolation.level",
    "group.id",
    "kafkaConsumer.pollTimeoutMs",
    MODE_OPTION,
    HOST_OPTION,
)
#: Spark Kafka source options accepted so that queries port unchanged, with no effect here:
#: the value is still checked, and a warning says why it does nothing.
NO_EFFECT_OPTIONS: Final = {
    "groupIdPrefix": (
        "reader tasks never join a consumer group (they assign their partition and seek), "
        "so no group id is generated; use group.id to see the query's lag"
    ),
    "fetchOffset.numRetries": (
        "the driver's offset look-ups retry retriable errors with backoff until "
        "default.api.timeout.ms (60 s) passes, not a number of times"
    ),
    "fetchOffset.retryIntervalMs": (
        "the driver's offset look-ups retry retriable errors with an exponential backoff "
        "from retry.backoff.ms (100 ms) up to retry.backoff.max.ms (1 s)"
    ),
}
#: Options of the sink, ignored by the source with a warning that says so.
_SINK_ONLY_OPTIONS: Final = (
    "topic",
    "exactlyOnce",
    "sink.id",
    "checkpointLocation",
    "compression.type",
    "partitioner",
    "batch.size",
    "linger.ms",
)
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: named topics, a pattern, or fixed partitions."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the subscription (internal ``__`` topics never do)."""
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends. ``per_partition`` maps (topic, partition) to an offset
    (offsets; -2 earliest, -1 latest) or a timestamp in ms (timestamps)."""

    kind: SpecKind
    timestamp_ms: int = -1
    per_partition: tuple[tuple[tuple[str, int], int], ...] = ()

    def as_dict(self) -> dict[tuple[str, int], int]:
        return dict(self.per_partition)


@dataclass(frozen=True)
class SourceOptions:
    """Every option of a spark_mq read, typed (see the module docstring)."""

    endpoint: Mapping[str, object]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    #: What to do when a starting timestamp matches no record: ``error`` or ``latest``.
    timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    isolation_level: str = "read_committed"
    group_id: str | None = None
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    poll_timeout_ms: int = 120_000
    #: Split offset ranges so that there are at least this many input partitions.
    min_partitions: int | None = None
    #: Split offset ranges longer than this many offsets.
    max_records_per_partition: int | None = None
    consumer_config: Mapping[str, object] = field(default_factory=dict)
    #: How executors reach the embedded broker of ``path`` (executor.endpoint, .host).
    executor_endpoint: EndpointMode = "auto"
    executor_endpoint_host: str | None = None

    def consumer_properties(self) -> dict[str, object]:
        """Properties of the consumer a reader task uses (it assigns and seeks itself)."""
        props: dict[str, object] = dict(self.consumer_config)
        props.update(self.endpoint)
        props["isolation.level"] = self.isolation_level
        props["auto.offset.reset"] = "none"
        return props


def _bad(name: str, value: object, accepted: str) -> ConfigError:
    return ConfigError(f"option {name}={value!r} is not valid: {accepted}", key=name, value=value)


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(name, text, f"expected JSON ({exc.msg} at char {exc.pos})") from exc


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = lookup(options, name)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise _bad(name, text, "use true or false")
    return lowered == "true"


def _positive(options: Mapping[str, str], name: str) -> int | None:
    text = lookup(options, name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise _bad(name, text, "use a positive whole number")
    return value


def parse_duration_ms(name: str, text: str) -> int:
    """A Spark duration (``15m``, ``30s``, ``100ms``, ``1h``, ``2d``; a bare number is ms)."""
    match = _DURATION.match(text)
    if not match:
        raise _bad(name, text, "use a duration such as 100ms, 30s, 15m, 1h or 2d")
    unit = (match.group(2) or "ms").lower()
    return int(match.group(1)) * (86_400_000 if unit == "d" else _DURATION_MS[unit])


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {
        name: value
        for name in ("assign", "subscribe", "subscribePattern")
        if (value := lookup(options, name)) is not None
    }
    if len(given) != 1:
        raise ConfigError(
            "spark_mq needs exactly one of the options assign, subscribe, subscribePattern "
            f"(got {', '.join(sorted(given)) or 'none'}): subscribe='t1,t2', "
            "subscribePattern='events-.*', or assign='{\"t1\": [0, 1]}'",
            key="subscribe",
        )
    ((name, value),) = given.items()
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise _bad(name, value, "give one or more comma-separated topic names")
        return Subscription("subscribe", topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise _bad(name, value, f"not a regular expression ({exc})") from exc
        if not value.strip():
            raise _bad(name, value, "give a regular expression that topic names must match")
        return Subscription("subscribePattern", pattern=value)
    parsed = _json(name, value)
    accepted = 'use JSON such as {"topic": [0, 1]}'
    if not isinstance(parsed, dict) or not parsed:
        raise _bad(name, value, accepted)
    assigned: list[tuple[str, int]] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise _bad(name, value, accepted)
        assigned.extend((topic, p) for p in parts)
    return Subscription("assign", assigned=tuple(sorted(set(assigned))))


def _per_partition(name: str, text: str, *, what: str, minimum: int) -> OffsetSpec:
    parsed = _json(name, text)
    accepted = f'use JSON such as {{"topic": {{"0": 23, "1": -2}}}} mapping partitions to {what}'
    if not isinstance(parsed, dict):
        raise _bad(name, text, accepted)
    items: list[tuple[tuple[str, int], int]] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise _bad(name, text, accepted)
        for part, value in parts.items():
            if not (isinstance(part, str) and part.isdigit()):
                raise _bad(name, text, f"partition {part!r} of {topic!r} is not a number")
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise _bad(name, text, f"{topic}-{part}: {value!r} is not one of {what}")
            items.append(((topic, int(part)), value))
    kind: SpecKind = "timestamps" if what.startswith("timestamps") else "offsets"
    return OffsetSpec(kind, per_partition=tuple(sorted(items)))


def _offsets_spec(
    options: Mapping[str, str], prefix: str, *, default: SpecKind, streaming: bool
) -> OffsetSpec:
    """``startingX`` or ``endingX``: a global timestamp beats per-partition timestamps,
    which beat offsets (Spark's order)."""
    ts_name = f"{prefix}Timestamp"
    by_ts_name = f"{prefix}OffsetsByTimestamp"
    offsets_name = f"{prefix}Offsets"
    ts_text = lookup(options, ts_name)
    if ts_text is not None:
        try:
            ts = int(ts_text.strip())
        except ValueError:
            ts = -1
        if ts < 0:
            raise _bad(ts_name, ts_text, "use a time in milliseconds since the epoch")
        return OffsetSpec("timestamp", timestamp_ms=ts)
    by_ts = lookup(options, by_ts_name)
    if by_ts is not None:
        return _per_partition(by_ts_name, by_ts, what="timestamps in ms", minimum=0)
    text = lookup(options, offsets_name)
    if text is None:
        return OffsetSpec(default)
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        kind: SpecKind = "earliest" if lowered == "earliest" else "latest"
        if not streaming and prefix == "starting" and kind == "latest":
            raise _bad(offsets_name, text, "a batch read cannot start at latest; use earliest")
        if prefix == "ending" and kind == "earliest":
            raise _bad(offsets_name, text, "a batch read cannot end at earliest; use latest")
        return OffsetSpec(kind)
    spec = _per_partition(
        offsets_name, text, what="offsets, -2 (earliest) or -1 (latest)", minimum=-2
    )
    for (topic, part), value in spec.per_partition:
        if prefix == "ending" and value == EARLIEST:
            raise _bad(offsets_name, text, f"{topic}-{part} cannot end at -2 (earliest)")
        if not streaming and prefix == "starting" and value == LATEST:
            raise _bad(offsets_name, text, f"{topic}-{part}: a batch read cannot start at -1")
    return spec


def consumer_keys() -> tuple[str, ...]:
    """The consumer keys the source takes as ``kafka.<key>``, sorted."""
    return tuple(
        sorted(
            key
            for key in ConsumerConfig.settings()
            if key not in _CONTROLLED_KEYS and key not in _ENDPOINT_KEYS
        )
    )


def _consumer_config(options: Mapping[str, str]) -> dict[str, object]:
    props: dict[str, object] = {}
    accepted = consumer_keys()
    for raw_key, value in options.items():
        key = raw_key.lower()
        if not key.startswith("kafka.") or key in _ALIASES:
            continue
        name = key[len("kafka.") :]
        if name in _CONTROLLED_KEYS:
            hint = " (use the option group.id)" if name == "group.id" else ""
            raise ConfigError(
                f"option {raw_key} is not accepted: the spark_mq source sets {name} itself{hint}",
                key=raw_key,
                value=value,
            )
        if name not in accepted:
            # Checked here rather than by ConsumerConfig, whose message would list (and could
            # suggest) the keys refused above.
            why = _REFUSED_UNKNOWN_KEYS.get(name)
            close = closest_name(name, accepted, 0.6)
            hint = f"did you mean 'kafka.{close}'? " if close and why is None else ""
            raise ConfigError(
                f"option {raw_key} is not accepted: "
                + (why or f"the consumer has no setting {name!r}")
                + f"; {hint}the source takes as kafka.<key>: {', '.join(accepted)}",
                key=raw_key,
                value=value,
            )
        props[name] = hidden(name, value)
    if props:
        # Checked here, on the driver, so a bad value fails the query before any task runs.
        # The SASL credentials too (kafka.sasl.jaas.config parsed here).
        ConsumerConfig.from_properties({**props, "path": "/unused"}).sasl_credentials()
    return props


def _no_effect_options(options: Mapping[str, str]) -> None:
    """Check the values of Spark's Kafka options that mean nothing here, and warn."""
    for name, why in NO_EFFECT_OPTIONS.items():
        text = lookup(options, name)
        if text is None:
            continue
        if name == "groupIdPrefix":
            if not text.strip():
                raise _bad(name, text, "give a prefix (it has no effect here)")
        else:
            try:
                number = int(text.strip())
            except ValueError:
                number = -1
            if number < 0:
                raise _bad(name, text, "use a whole number, 0 or more (it has no effect here)")
        log.warning(
            "option %s is accepted for compatibility with Spark's Kafka source and has no "
            "effect: %s",
            name,
            why,
        )


def _check_names(options: Mapping[str, str]) -> None:
    elsewhere = {
        name.lower(): "it is an option of the spark_mq sink (df.write/writeStream); "
        for name in _SINK_ONLY_OPTIONS
    }
    check_unknown_names(
        options,
        (*SOURCE_OPTIONS, *NO_EFFECT_OPTIONS),
        component="spark_mq source",
        prefix="kafka.",
        elsewhere=elsewhere,
        log=log,
    )


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse Spark's option strings for a batch (``streaming=False``) or streaming read."""
    _check_names(options)
    endpoint = client_endpoint(options)
    executor_mode, executor_host = parse_executor_endpoint(options)
    subscription = _subscription(options)
    starting = _offsets_spec(
        options, "starting", default="latest" if streaming else "earliest", streaming=streaming
    )
    ending = _offsets_spec(options, "ending", default="latest", streaming=streaming)
    if streaming and any(
        lookup(options, n) is not None
        for n in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
    ):
        raise ConfigError(
            "endingOffsets, endingTimestamp and endingOffsetsByTimestamp are for batch reads "
            "(spark.read); a stream has no end (use Trigger.AvailableNow to stop at the "
            "offsets present when it starts)",
            key="endingOffsets",
        )
    strategy = (lookup(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in _STRATEGIES:
        raise _bad("startingOffsetsByTimestampStrategy", strategy, "use error or latest")
    isolation = lookup(options, "isolation.level") or lookup(options, "kafka.isolation.level")
    isolation = (isolation or "read_committed").strip().lower()
    if isolation not in _ISOLATION_LEVELS:
        raise _bad("isolation.level", isolation, "use read_committed or read_uncommitted")
    delay_text = lookup(options, "maxTriggerDelay")
    group_id = lookup(options, "group.id")
    if group_id is not None and not group_id.strip():
        raise _bad("group.id", group_id, "give a consumer group name")
    _no_effect_options(options)
    poll_text = lookup(options, "kafkaConsumer.pollTimeoutMs")
    poll_timeout_ms = 120_000
    if poll_text is not None:
        poll_timeout_ms = _positive(options, "kafkaConsumer.pollTimeoutMs") or poll_timeout_ms
    return SourceOptions(
        endpoint=endpoint,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        isolation_level=isolation,
        group_id=group_id,
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger"),
        max_bytes_per_trigger=_positive(options, "maxBytesPerTrigger"),
        min_offsets_per_trigger=_positive(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=(
            15 * 60_000 if delay_text is None else parse_duration_ms("maxTriggerDelay", delay_text)
        ),
        poll_timeout_ms=poll_timeout_ms,
        min_partitions=_positive(options, "minPartitions"),
        max_records_per_partition=_positive(options, "maxRecordsPerPartition"),
        consumer_config=_consumer_config(options),
        executor_endpoint=executor_mode,
        executor_endpoint_host=executor_host,
    )
