"""The sink's options, parsed once on the driver into a frozen, picklable :class:`SinkOptions`.

Spark hands a writer its options as strings, with names matched without regard to case. The
sink accepts:

====================== ==================================================================
option                 meaning
====================== ==================================================================
``path``               the log directory (embedded broker, started on demand), or
``bootstrap.servers``  running brokers (``kafka.bootstrap.servers`` is an alias)
``topic``              the topic of every row; overrides a ``topic`` column
``compression.type``   none, gzip, snappy, lz4, zstd (producer default: none)
``partitioner``        murmur3 (default), murmur2, sticky, round_robin: for rows without a
                       ``partition``
``batch.size``         producer ``batch.size`` in bytes
``linger.ms``          producer ``linger.ms``
``kafka.<setting>``    any other producer setting, as Spark's Kafka sink passes them through
                       (``kafka.transaction.timeout.ms``: 900000 unless set)
``exactlyOnce``        true (default): transactions and one commit per micro-batch; false:
                       an idempotent producer, at least once (like Spark's Kafka sink)
``sink.id``            the owner of the sink's commits (default: see docs/spark_sink.md)
``checkpointLocation`` Spark's own; accepted and otherwise unused
``executor.endpoint``  with ``path``: auto (default), unix or tcp, how executors reach the
                       broker; ``executor.endpoint.host``: the address they dial
                       (:mod:`spark_mq.datasource.executor_endpoint`)
====================== ==================================================================

Other option names get the same rule as in the ``spark_mq`` source
(:mod:`spark_mq.datasource.option_names`): a name that looks like a typo of an accepted one
(``compresion.type``) raises :class:`~spark_mq.errors.ConfigError` naming it, and any other is
ignored, as by Spark's Kafka sink (a query's options often serve several purposes), with a
warning in the driver log. Bad values of accepted options, and unknown or reserved
``kafka.<setting>`` names, raise :class:`~spark_mq.errors.ConfigError` naming the option and
what is accepted.

>>> opts = parse_sink_options({"path": "/data/mq", "topic": "out", "linger.ms": "10"})
>>> (opts.topic, opts.exactly_once, opts.producer_settings["linger.ms"])
('out', True, '10')
>>> parse_sink_options({"path": "/d", "kafka.lingerms": "5"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
spark_mq.errors.ConfigError: unknown producer setting 'lingerms'; did you mean 'linger.ms'? ...
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from spark_mq.client.config import PARTITIONERS, ProducerConfig
from spark_mq.datasource.connection import client_endpoint, hidden
from spark_mq.datasource.executor_endpoint import (
    HOST_OPTION,
    MODE_OPTION,
    EndpointMode,
    parse_executor_endpoint,
)
from spark_mq.datasource.option_names import check_unknown_names
from spark_mq.errors import ConfigError

#: Producer settings the sink takes by their plain names (as the issue lists them).
PRODUCER_OPTIONS: Final = ("compression.type", "partitioner", "batch.size", "linger.ms")
#: Prefix of producer settings passed through unchanged (Spark's Kafka sink convention).
KAFKA_PREFIX: Final = "kafka."
#: Producer settings the sink owns: a user value would break its delivery guarantee.
RESERVED_PRODUCER_SETTINGS: Final = ("transactional.id", "enable.idempotence", "acks", "path")
#: Every option name the sink accepts besides ``kafka.*`` (canonical spelling).
SINK_OPTIONS: Final = (
    "path",
    "bootstrap.servers",
    "kafka.bootstrap.servers",
    "topic",
    *PRODUCER_OPTIONS,
    "exactlyOnce",
    "sink.id",
    "checkpointLocation",
    MODE_OPTION,
    HOST_OPTION,
)
#: Options of the source, ignored by the sink with a warning that says so (never taken for
#: typos of a sink option).
_SOURCE_ONLY_OPTIONS: Final = {
    name.lower(): "it is an option of the spark_mq source (spark.read/readStream); "
    for name in (
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "failOnDataLoss",
        "includeHeaders",
        "isolation.level",
        "group.id",
        "maxOffsetsPerTrigger",
        "minPartitions",
        "maxRecordsPerPartition",
    )
}
#: The sink's ``transaction.timeout.ms`` unless ``kafka.transaction.timeout.ms`` sets one:
#: 15 minutes, the broker's default ``transaction.max.timeout.ms``, instead of the producer's
#: 60 s. A write task's transaction stays open while the task writes, and the coordinator
#: aborts an open one this long after it began (a task writing its partition for longer
#: fails), and a prepared one once no task of its job or micro-batch has been active this
#: long (a dead driver's batch stops holding back readers); docs/spark_sink.md.
SINK_TRANSACTION_TIMEOUT_MS: Final = 900_000
#: The sink id of batch jobs that set none (their ids are ``spark-batch/{job}/...``).
RESERVED_SINK_ID: Final = "spark-batch"
#: Characters a sink id may hold: it becomes a transactional id prefix and a commit owner.
_SINK_ID_MAX_CHARS: Final = 200

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SinkOptions:
    """What a sink writer needs, parsed and checked on the driver; travels to executors.

    ``endpoint`` is ``{"path": DIR}`` or ``{"bootstrap.servers": "h:p,..."}``;
    ``producer_settings`` holds Kafka producer keys with string values (secrets as
    :class:`~spark_mq.client.sasl.Password`, never printed), already validated
    against :class:`~spark_mq.client.config.ProducerConfig`.
    """

    endpoint: dict[str, object]
    topic: str | None
    exactly_once: bool
    sink_id: str | None
    checkpoint_location: str | None
    producer_settings: dict[str, object] = field(default_factory=dict)
    #: How executors reach the embedded broker of ``path`` (executor.endpoint, .host).
    executor_endpoint: EndpointMode = "auto"
    executor_endpoint_host: str | None = None

    def producer_props(self) -> dict[str, object]:
        """Keyword settings for :class:`~spark_mq.Producer` (endpoint included)."""
        props: dict[str, object] = dict(self.producer_settings)
        props.update(self.endpoint)
        return props


def _canonical(name: str) -> str | None:
    lowered = name.lower()
    for known in SINK_OPTIONS:
        if known.lower() == lowered:
            return known
    return None


def _parse_bool(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {key} must be true or false, got {text!r}", key=key, value=text)


def check_sink_id(key: str, value: str) -> str:
    """A sink id: non-empty, printable, at most 200 characters, no ``/`` (it prefixes
    transactional ids, whose parts ``/`` separates)."""
    text = value.strip()
    if not text or len(text) > _SINK_ID_MAX_CHARS or not text.isprintable():
        raise ConfigError(
            f"option {key} must be 1-{_SINK_ID_MAX_CHARS} printable characters, got {value!r}",
            key=key,
            value=value,
        )
    if text == RESERVED_SINK_ID:
        raise ConfigError(
            f"option {key} must not be {RESERVED_SINK_ID!r}: batch jobs without a sink.id "
            "write under it, and a stream's commit would abort their transactions as its own "
            "leftovers; choose another name",
            key=key,
            value=value,
        )
    if "/" in text:
        raise ConfigError(
            f"option {key} must not contain '/', got {value!r}: the sink's transactional ids "
            f"are {{sink.id}}/{{run or job}}/{{partition}}, and a sink id 'a' would take the "
            "transactions of a sink id 'a/b' for its own leftovers and abort them. Use another "
            "separator, such as '-' or '.'",
            key=key,
            value=value,
        )
    return text


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Parse and validate Spark options for the sink (raises ConfigError naming the option)."""
    check_unknown_names(
        options,
        SINK_OPTIONS,
        component="spark_mq sink",
        prefix=KAFKA_PREFIX,
        elsewhere=_SOURCE_ONLY_OPTIONS,
        log=_log,
    )
    endpoint = client_endpoint(options)
    executor_mode, executor_host = parse_executor_endpoint(options)
    values: dict[str, str] = {}
    producer: dict[str, object] = {}
    for name, value in options.items():
        canonical = _canonical(name)
        if canonical is not None:
            values[canonical] = value
            continue
        if name.lower().startswith(KAFKA_PREFIX):
            setting = name[len(KAFKA_PREFIX) :].lower()
            if setting in RESERVED_PRODUCER_SETTINGS:
                raise ConfigError(
                    f"option {name} is set by the spark_mq sink itself (exactlyOnce decides "
                    "transactions and idempotence); remove it",
                    key=name,
                    value=value,
                )
            producer[setting] = hidden(setting, value)
    for key in PRODUCER_OPTIONS:
        if key in values:
            producer[key] = values[key]
    producer.setdefault("transaction.timeout.ms", str(SINK_TRANSACTION_TIMEOUT_MS))
    partitioner = producer.get("partitioner")
    if partitioner is not None and partitioner not in PARTITIONERS:
        raise ConfigError(
            f"option partitioner must be one of {', '.join(PARTITIONERS)}, got {partitioner!r}",
            key="partitioner",
            value=partitioner,
        )
    # Validate the producer settings now, on the driver, so that a bad value fails the query
    # at start rather than every task on the executors. Building the config connects nothing.
    ProducerConfig.from_user({**producer, **endpoint}).sasl_credentials()
    topic = values.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError("option topic must not be empty", key="topic", value=topic)
    sink_id = values.get("sink.id")
    return SinkOptions(
        endpoint=endpoint,
        topic=topic,
        exactly_once=_parse_bool("exactlyOnce", values.get("exactlyOnce", "true")),
        sink_id=None if sink_id is None else check_sink_id("sink.id", sink_id),
        checkpoint_location=values.get("checkpointLocation"),
        producer_settings=producer,
        executor_endpoint=executor_mode,
        executor_endpoint_host=executor_host,
    )
