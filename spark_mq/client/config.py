"""Client configuration: one frozen, typed config class per client, with Kafka's keys.

Every key may be given in Kafka's dotted form or as a Python keyword with underscores, so
``Producer(path=d, linger_ms=5)`` and ``Producer(path=d, **{"linger.ms": 5})`` are the same;
an unknown key raises :class:`~spark_mq.errors.ConfigError` naming the closest valid one.
Exactly one of ``path`` (the local broker that owns a directory) and ``bootstrap.servers``
must be given. Every key, its default and meaning is listed in ``docs/clients.md``.

>>> ProducerConfig.from_properties({"linger.ms": "7"}, batch_size=1024).linger_ms
7
>>> ProducerConfig.from_properties(lingr_ms=5)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
spark_mq.errors.ConfigError: unknown producer setting 'lingr_ms'; did you mean 'linger.ms'? ...
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import ssl
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Final

from spark_mq.client.assignors.assignor import Assignor
from spark_mq.client.assignors.registry import parse_assignment_strategy
from spark_mq.client.sasl import (
    MECHANISMS as SASL_MECHANISMS,
)
from spark_mq.client.sasl import (
    Password,
    SaslCredentials,
    parse_jaas_config,
    parse_password,
)
from spark_mq.config import (
    Config,
    at_least,
    between,
    one_of,
    parse_bool,
    parse_int,
    parse_str,
    setting,
    unlimited_or_at_least,
)
from spark_mq.errors import ConfigError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from spark_mq.storage.codecs import CODEC_NAMES
from spark_mq.tls import (
    HTTPS,
    SECURITY_PROTOCOLS,
    TLS_PROTOCOLS,
    TlsSettings,
    check_endpoint_identification,
    client_context,
)

#: The partitioner names ``partitioner`` accepts (or a callable).
PARTITIONERS: Final = ("murmur3", "murmur2", "sticky", "round_robin")

PartitionerFn = Callable[[str, bytes | None, int], int]


# ---------------------------------------------------------------------------------------------
# Parsers for the client-only types


def parse_path(key: str, value: object) -> str:
    if isinstance(value, str | os.PathLike):
        text = os.fspath(value)
        return (text.decode() if isinstance(text, bytes) else text).strip()
    raise ConfigError(f"{key} must be a directory path, got {value!r}", key=key, value=value)


def parse_servers(key: str, value: object) -> str:
    """A comma-separated ``host:port`` list, or a list of them, kept as one string."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return ",".join(item.strip() for item in value)
    raise ConfigError(
        f"{key} must be 'host:port,host:port' or a list of host:port strings, got {value!r}",
        key=key,
        value=value,
    )


def parse_acks(key: str, value: object) -> int:
    """``all`` and ``-1`` are the same; also 0 and 1."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return -1
    acks = parse_int(key, value)
    if acks not in (-1, 0, 1):
        raise ConfigError(f"{key} must be all, -1, 0 or 1; got {value!r}", key=key, value=value)
    return acks


def parse_partitioner(key: str, value: object) -> str | PartitionerFn:
    if isinstance(value, str):
        name = value.strip().lower().replace("-", "_")
        if name not in PARTITIONERS:
            raise ConfigError(
                f"{key} must be one of {', '.join(PARTITIONERS)} or a callable "
                f"(topic, key, partition_count) -> int; got {value!r}",
                key=key,
                value=value,
            )
        return name
    if callable(value):
        return value
    raise ConfigError(
        f"{key} must be a partitioner name or a callable, got {value!r}", key=key, value=value
    )


def parse_interceptors(key: str, value: object) -> tuple[object, ...]:
    """Interceptor objects, classes (instantiated with no arguments) or ``module.Class`` names,
    as a list or a comma-separated string."""
    if value is None:
        return ()
    items: Iterable[object]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = value
    else:
        items = [value]
    out: list[object] = []
    for item in items:
        obj = item
        if isinstance(obj, str):
            module_name, _, class_name = obj.rpartition(".")
            try:
                obj = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError, ValueError) as exc:
                raise ConfigError(
                    f"{key}: cannot import interceptor class {item!r}: {exc}", key=key, value=item
                ) from exc
        if isinstance(obj, type):
            obj = obj()
        out.append(obj)
    return tuple(out)


def parse_strategy(key: str, value: object) -> tuple[Assignor, ...]:
    """``partition.assignment.strategy``: names, Kafka class names, ``module:Class`` or
    Assignor objects (see :func:`~spark_mq.client.assignors.parse_assignment_strategy`)."""
    if not isinstance(value, str) and not isinstance(value, list | tuple):
        value = [value]
    try:
        return parse_assignment_strategy(value)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(str(exc), key=key, value=value) from exc


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ClientConfig(Config):
    """Settings every client shares: where the broker is and how to talk to it."""

    component: ClassVar[str] = "client"

    path: str = setting(
        "path",
        "",
        "Log directory whose local broker to use (started if none runs). A producer and "
        "Admin.create_topic create it; other clients require one that holds a log. "
        "Exclusive with bootstrap.servers.",
        parse=parse_path,
    )
    bootstrap_servers: str = setting(
        "bootstrap.servers",
        "",
        "Comma-separated host:port (or unix:/socket) list of brokers to bootstrap from.",
        parse=parse_servers,
    )
    client_id: str = setting(
        "client.id", "", "Name sent with every request, shown in broker logs.", parse=parse_str
    )
    request_timeout_ms: int = setting(
        "request.timeout.ms",
        30_000,
        "How long to wait for a response before failing the request (and retrying it).",
        parse=parse_int,
        check=at_least(1),
    )
    retry_backoff_ms: int = setting(
        "retry.backoff.ms",
        100,
        "Wait before the first retry of a failed request; doubles up to retry.backoff.max.ms.",
        parse=parse_int,
        check=at_least(0),
    )
    retry_backoff_max_ms: int = setting(
        "retry.backoff.max.ms",
        1_000,
        "Upper bound of the exponential retry backoff.",
        parse=parse_int,
        check=at_least(0),
    )
    metadata_max_age_ms: int = setting(
        "metadata.max.age.ms",
        300_000,
        "Refresh cached topic metadata at least this often.",
        parse=parse_int,
        check=at_least(0),
    )
    socket_connection_setup_timeout_ms: int = setting(
        "socket.connection.setup.timeout.ms",
        10_000,
        "How long to wait for a connection to a broker to open.",
        parse=parse_int,
        check=at_least(1),
    )
    send_buffer_bytes: int = setting(
        "send.buffer.bytes",
        4 * 1024 * 1024,
        "SO_SNDBUF of broker connections (-1: the OS default); larger than Kafka's 128 KiB "
        "so pipelined requests do not wait for the broker to read. Capped by the kernel.",
        parse=parse_int,
        check=unlimited_or_at_least(1),
    )
    receive_buffer_bytes: int = setting(
        "receive.buffer.bytes",
        4 * 1024 * 1024,
        "SO_RCVBUF of broker connections (-1: the OS default). Capped by the kernel.",
        parse=parse_int,
        check=unlimited_or_at_least(1),
    )
    receive_message_max_bytes: int = setting(
        "receive.message.max.bytes",
        DEFAULT_MAX_FRAME_BYTES,
        "Largest response frame accepted; a larger one closes the connection.",
        parse=parse_int,
        check=at_least(1024),
    )

    security_protocol: str = setting(
        "security.protocol",
        "PLAINTEXT",
        "How connections to brokers are made: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or "
        "SASL_SSL (SASL over TLS). It must match the broker's listener.",
        parse=lambda key, value: parse_str(key, value).upper(),
        check=one_of(*SECURITY_PROTOCOLS),
    )
    ssl_ca_location: str = setting(
        "ssl.ca.location",
        "",
        "CA certificates (PEM) the brokers' certificates must chain to. Empty: the system's "
        "default CAs.",
        parse=parse_str,
    )
    ssl_certificate_location: str = setting(
        "ssl.certificate.location",
        "",
        "This client's certificate (PEM), for brokers with ssl.client.auth; the principal "
        "is User:<its subject DN>.",
        parse=parse_str,
    )
    ssl_key_location: str = setting(
        "ssl.key.location",
        "",
        "The private key (PEM) of ssl.certificate.location. Empty: the key is in that file.",
        parse=parse_str,
    )
    ssl_key_password: Password = setting(  # noqa: RUF009 (a hidden string)
        "ssl.key.password",
        "",
        "The password of an encrypted ssl.key.location; never printed.",
        parse=parse_password,
    )
    ssl_endpoint_identification_algorithm: str = setting(
        "ssl.endpoint.identification.algorithm",
        HTTPS,
        "https: the broker's certificate must name the host connected to (its address in "
        "bootstrap.servers or the metadata); empty: no host name check (the CA still is).",
        parse=parse_str,
        check=check_endpoint_identification,
    )

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of this client's connections (None unless security.protocol is
        SSL or SASL_SSL); ConfigError names a missing or bad file."""
        if self.security_protocol not in TLS_PROTOCOLS:
            return None
        return client_context(
            TlsSettings(
                certificate_location=self.ssl_certificate_location,
                key_location=self.ssl_key_location,
                key_password=self.ssl_key_password.value,
                ca_location=self.ssl_ca_location,
                endpoint_identification_algorithm=self.ssl_endpoint_identification_algorithm,
            )
        )

    # SASL (client/sasl.py): Kafka's keys, librdkafka's sasl.username / sasl.password.
    sasl_mechanism: str = setting(
        "sasl.mechanism",
        "SCRAM-SHA-512",
        "The SASL mechanism: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (sends the password).",
        parse=lambda key, value: parse_str(key, value).upper(),
        check=one_of(*SASL_MECHANISMS),
    )
    sasl_username: str = setting(
        "sasl.username", "", "The SASL user (librdkafka's key).", parse=parse_str
    )
    sasl_password: Password = setting(  # noqa: RUF009 (a hidden string)
        "sasl.password",
        "",
        "The SASL user's password (librdkafka's key); never printed.",
        parse=parse_password,
    )
    sasl_jaas_config: Password = setting(  # noqa: RUF009 (a hidden string)
        "sasl.jaas.config",
        "",
        "The Java client's form of the credentials instead of sasl.username/password: "
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
        'password="p"; (PlainLoginModule for PLAIN); never printed.',
        parse=parse_jaas_config,
    )

    def sasl_credentials(self) -> SaslCredentials | None:
        """The credentials to authenticate with (None: security.protocol=PLAINTEXT)."""
        return SaslCredentials.from_settings(
            self.security_protocol,
            self.sasl_mechanism,
            self.sasl_username,
            self.sasl_password,
            self.sasl_jaas_config,
        )

    def bootstrap_addresses(self) -> list[BrokerAddress]:
        """The parsed ``bootstrap.servers`` (empty when ``path`` is used)."""
        return BrokerAddress.parse_list(self.bootstrap_servers) if self.bootstrap_servers else []

    def check_endpoint(self) -> None:
        """Exactly one of ``path`` and ``bootstrap.servers``; raise ConfigError otherwise."""
        if bool(self.path) == bool(self.bootstrap_servers):
            given = "both" if self.path else "neither"
            raise ConfigError(
                f"{self.component}: give exactly one of path=DIR (the local broker for a log "
                f"directory) or bootstrap_servers='host:port,...'; got {given}",
                key="path" if self.path else "bootstrap.servers",
            )
        if self.path and self.security_protocol != "PLAINTEXT":
            raise ConfigError(
                f"{self.component}: security.protocol={self.security_protocol} applies to "
                "bootstrap.servers; the local broker of path= is reached over its owner-only "
                "Unix socket",
                key="security.protocol",
                value=self.security_protocol,
            )
        self.bootstrap_addresses()
        self.sasl_credentials()


@dataclasses.dataclass(frozen=True)
class ProducerConfig(ClientConfig):
    """Settings of a :class:`~spark_mq.Producer` (Kafka's names and defaults, Kafka 4)."""

    component: ClassVar[str] = "producer"

    acks: int = setting(
        "acks",
        -1,
        "Acknowledgement: 0 none, 1 the leader appended, all (-1) every in-sync replica.",
        parse=parse_acks,
    )
    batch_size: int = setting(
        "batch.size",
        16_384,
        "Target size in bytes of one partition's batch; a full batch is sent at once.",
        parse=parse_int,
        check=at_least(0),
    )
    linger_ms: int = setting(
        "linger.ms",
        5,
        "How long a batch that is not full waits for more records before it is sent.",
        parse=parse_int,
        check=at_least(0),
    )
    buffer_memory: int = setting(
        "buffer.memory",
        33_554_432,
        "Bytes of records buffered before send() blocks (back-pressure).",
        parse=parse_int,
        check=at_least(1),
    )
    max_block_ms: int = setting(
        "max.block.ms",
        60_000,
        "How long send() may block for buffer space or topic metadata before it raises.",
        parse=parse_int,
        check=at_least(0),
    )
    compression_type: str = setting(
        "compression.type",
        "none",
        "Codec for whole batches: none, gzip, snappy, lz4 or zstd.",
        parse=parse_str,
        check=one_of(*CODEC_NAMES),
    )
    retries: int = setting(
        "retries",
        2_147_483_647,
        "How often a batch failing with a retriable error is resent (delivery.timeout.ms "
        "bounds the total time).",
        parse=parse_int,
        check=at_least(0),
    )
    delivery_timeout_ms: int = setting(
        "delivery.timeout.ms",
        120_000,
        "Upper bound on the time from send() to success or failure, retries included.",
        parse=parse_int,
        check=at_least(1),
    )
    max_in_flight_requests_per_connection: int = setting(
        "max.in.flight.requests.per.connection",
        5,
        "Unacknowledged requests per broker connection (at most 5 with idempotence).",
        parse=parse_int,
        check=at_least(1),
    )
    enable_idempotence: bool = setting(
        "enable.idempotence",
        True,
        "Producer id and sequence numbers: retries never duplicate or reorder records.",
        parse=parse_bool,
    )
    max_request_size: int = setting(
        "max.request.size",
        1_048_576,
        "Largest record (and request) in bytes; a larger record is refused by send().",
        parse=parse_int,
        check=at_least(1),
    )
    partitioner: str | PartitionerFn = setting(  # noqa: RUF009 (a name or a callable)
        "partitioner",
        "murmur3",
        "murmur3, murmur2 (Kafka-compatible), sticky, round_robin, or a callable "
        "(topic, key, partition_count) -> partition.",
        parse=parse_partitioner,
    )
    interceptors: tuple[object, ...] = setting(
        "interceptors",
        (),
        "Objects with on_send(record) and on_acknowledgement(metadata, exception).",
        parse=parse_interceptors,
    )
    transactional_id: str = setting(
        "transactional.id",
        "",
        "Makes the producer transactional (init_transactions(), begin/commit/abort); a new "
        "producer with the same id fences the older one. Implies enable.idempotence=true and "
        "acks=all.",
        parse=parse_str,
    )
    transaction_timeout_ms: int = setting(
        "transaction.timeout.ms",
        60_000,
        "The coordinator aborts an open transaction older than this (and fences its "
        "producer); capped by the broker's transaction.max.timeout.ms. Prepared "
        "transactions have their own, longer limit on the broker.",
        parse=parse_int,
        check=at_least(1),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.transactional_id and not self.enable_idempotence:
            raise ConfigError(
                "transactional.id needs enable.idempotence=true (and acks=all); remove the "
                "conflicting setting or the transactional.id",
                key="enable.idempotence",
                value=self.enable_idempotence,
            )
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError(
                f"delivery.timeout.ms ({self.delivery_timeout_ms}) must be at least linger.ms + "
                f"request.timeout.ms ({self.linger_ms + self.request_timeout_ms})",
                key="delivery.timeout.ms",
                value=self.delivery_timeout_ms,
            )
        if self.enable_idempotence:
            for key, ok, need in (
                ("acks", self.acks == -1, "all"),
                (
                    "max.in.flight.requests.per.connection",
                    self.max_in_flight_requests_per_connection <= 5,
                    "at most 5",
                ),
                ("retries", self.retries > 0, "more than 0"),
            ):
                if not ok and self.transactional_id:
                    raise ConfigError(
                        f"transactional.id needs {key} {need} (a transactional producer is "
                        "idempotent); remove the conflicting setting",
                        key=key,
                    )
                if not ok:
                    raise ConfigError(
                        f"enable.idempotence=true needs {key} {need}; set "
                        "enable.idempotence=false to use this setting",
                        key=key,
                    )

    @classmethod
    def from_user(cls, props: Mapping[str, object]) -> ProducerConfig:
        """Like :meth:`from_properties`, with Kafka's rule for idempotence: when the user
        sets ``acks`` to 0 or 1 (or retries to 0, or more than 5 in-flight requests) and does
        not set ``enable.idempotence``, idempotence is turned off instead of refused (but not
        with a ``transactional.id``, which needs it: ConfigError)."""
        values = cls._parse_all(props, {})
        if (
            "enable_idempotence" not in values
            and not values.get("transactional_id")
            and (
                values.get("acks", -1) != -1
                or values.get("retries", 1) == 0
                or values.get("max_in_flight_requests_per_connection", 5) > 5
            )
        ):
            values["enable_idempotence"] = False
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class ConsumerConfig(ClientConfig):
    """Settings of a :class:`~spark_mq.Consumer`. Unlike Kafka, ``isolation.level`` defaults
    to ``read_committed``."""

    component: ClassVar[str] = "consumer"

    auto_offset_reset: str = setting(
        "auto.offset.reset",
        "latest",
        "Where to start without a position or after an out-of-range one: earliest, latest, "
        "or none (raise NoOffsetForPartitionError / OffsetOutOfRangeError).",
        parse=parse_str,
        check=one_of("earliest", "latest", "none"),
    )
    isolation_level: str = setting(
        "isolation.level",
        "read_committed",
        "read_committed (default here, unlike Kafka) hides open and aborted transactions; "
        "read_uncommitted reads everything up to the high watermark.",
        parse=parse_str,
        check=one_of("read_committed", "read_uncommitted"),
    )
    fetch_min_bytes: int = setting(
        "fetch.min.bytes",
        1,
        "The broker answers a fetch once this many bytes are available (or the wait ends).",
        parse=parse_int,
        check=at_least(0),
    )
    fetch_max_bytes: int = setting(
        "fetch.max.bytes",
        52_428_800,
        "Upper bound of one fetch response (the first batch is returned whole regardless).",
        parse=parse_int,
        check=at_least(1),
    )
    fetch_max_wait_ms: int = setting(
        "fetch.max.wait.ms",
        500,
        "How long the broker may hold a fetch waiting for fetch.min.bytes.",
        parse=parse_int,
        check=at_least(0),
    )
    max_partition_fetch_bytes: int = setting(
        "max.partition.fetch.bytes",
        1_048_576,
        "Bytes per partition per fetch (the first batch is returned whole regardless).",
        parse=parse_int,
        check=at_least(1),
    )
    max_poll_records: int = setting(
        "max.poll.records",
        500,
        "Default max_records of poll(); poll_batch() is bounded by the fetch sizes instead.",
        parse=parse_int,
        check=at_least(1),
    )
    check_crcs: bool = setting(
        "check.crcs",
        True,
        "Verify the CRC-32C of every fetched batch.",
        parse=parse_bool,
    )
    default_api_timeout_ms: int = setting(
        "default.api.timeout.ms",
        60_000,
        "How long position(), seek_to_*(), *_offsets() and offsets_for_times() may take.",
        parse=parse_int,
        check=at_least(1),
    )
    interceptors: tuple[object, ...] = setting(
        "interceptors",
        (),
        "Objects with on_consume(records) returning the records (or None to keep them).",
        parse=parse_interceptors,
    )
    # -- consumer groups (docs/groups.md, "Consumers in a group") -------------------------
    group_id: str = setting(
        "group.id",
        "",
        "The consumer group to join with subscribe() and to commit offsets to; none: no "
        "group (assign() only, no commits).",
        parse=parse_str,
    )
    group_instance_id: str = setting(
        "group.instance.id",
        "",
        "Makes the member static: a restart within session.timeout.ms gets its partitions "
        "back without a rebalance, and close() does not leave the group.",
        parse=parse_str,
    )
    session_timeout_ms: int = setting(
        "session.timeout.ms",
        45_000,
        "The coordinator removes a member it has not heard a heartbeat from for this long.",
        parse=parse_int,
        check=at_least(1),
    )
    heartbeat_interval_ms: int = setting(
        "heartbeat.interval.ms",
        3_000,
        "How often the background thread sends heartbeats; below session.timeout.ms "
        "(a third of it or less is usual). Also how soon a member learns of a rebalance.",
        parse=parse_int,
        check=at_least(1),
    )
    max_poll_interval_ms: int = setting(
        "max.poll.interval.ms",
        300_000,
        "Longest time between poll() calls; past it the heartbeat thread leaves the group "
        "and the next poll() rejoins (the partitions count as lost).",
        parse=parse_int,
        check=at_least(1),
    )
    rebalance_timeout_ms: int = setting(
        "rebalance.timeout.ms",
        -1,
        "How long the coordinator waits for every member to rejoin during a rebalance; "
        "-1: max.poll.interval.ms, as in Kafka.",
        parse=parse_int,
        check=unlimited_or_at_least(1),
    )
    partition_assignment_strategy: tuple[Assignor, ...] = setting(
        "partition.assignment.strategy",
        "range,cooperative-sticky",
        "Assignors in order of preference: range, roundrobin, sticky, cooperative-sticky, "
        "a Kafka class name, package.module:Class, or Assignor objects.",
        parse=parse_strategy,
    )
    enable_auto_commit: bool = setting(
        "enable.auto.commit",
        True,
        "With a group.id: commit the positions every auto.commit.interval.ms from poll(), "
        "before partitions are revoked, and on close().",
        parse=parse_bool,
    )
    auto_commit_interval_ms: int = setting(
        "auto.commit.interval.ms",
        5_000,
        "How often poll() commits the positions when enable.auto.commit is on.",
        parse=parse_int,
        check=at_least(0),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        between(0, self.request_timeout_ms)("fetch.max.wait.ms", self.fetch_max_wait_ms)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session.timeout.ms ({self.session_timeout_ms}); a third of it is usual",
                key="heartbeat.interval.ms",
                value=self.heartbeat_interval_ms,
            )

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        """``rebalance.timeout.ms``, or ``max.poll.interval.ms`` when it is -1 (Kafka's rule)."""
        if self.rebalance_timeout_ms == -1:
            return self.max_poll_interval_ms
        return self.rebalance_timeout_ms

    @property
    def auto_commit(self) -> bool:
        """Whether offsets are committed automatically: ``enable.auto.commit`` and a group."""
        return self.enable_auto_commit and bool(self.group_id)

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


@dataclasses.dataclass(frozen=True)
class AdminConfig(ClientConfig):
    """Settings of an :class:`~spark_mq.Admin` client."""

    component: ClassVar[str] = "admin"

    default_api_timeout_ms: int = setting(
        "default.api.timeout.ms",
        60_000,
        "How long an admin call may take, retries included.",
        parse=parse_int,
        check=at_least(1),
    )


def client_config_props(
    path: object, bootstrap_servers: object, config: Mapping[str, object] | None, kwargs: Any
) -> dict[str, object]:
    """Merge a client constructor's arguments into one properties mapping."""
    props: dict[str, object] = dict(config or {})
    if path is not None:
        props["path"] = path
    if bootstrap_servers is not None:
        props["bootstrap.servers"] = bootstrap_servers
    props.update(kwargs)
    return props
