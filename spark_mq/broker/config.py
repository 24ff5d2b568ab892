"""Broker configuration: Kafka's ``server.properties`` keys, typed and checked once.

Two objects come out of one properties mapping (a file, ``--override`` flags, a dict):

- :class:`BrokerConfig`: the broker's own settings (listeners, limits, background jobs);
- a :class:`~spark_mq.storage.log_config.LogConfig` of topic defaults, from the broker keys
  Kafka uses for them (``log.retention.ms`` is the default of the topic key ``retention.ms``,
  ``message.max.bytes`` of ``max.message.bytes``; the whole map is :data:`TOPIC_DEFAULT_KEYS`).

:class:`ServerConfig` holds both. Aliases accepted as Kafka does: ``log.dir`` for
``log.dirs``, ``broker.id`` for ``node.id``, ``log.retention.hours`` / ``.minutes`` and
``log.roll.hours`` for their ``.ms`` forms. An unknown key raises
:class:`~spark_mq.errors.ConfigError` naming the closest valid one.

    >>> cfg = ServerConfig.from_properties({"log.dirs": "/tmp/mq", "log.retention.hours": "1"})
    >>> cfg.broker.log_dir, cfg.log_defaults.retention_ms
    ('/tmp/mq', 3600000)
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
from collections.abc import Mapping
from typing import Any, Final

from spark_mq.broker.acl.config import AuthorizerConfig
from spark_mq.broker.connection_quotas import UNIX_PEER, normalize_host
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.half.config import HalfMessageConfig
from spark_mq.broker.leadership_config import LeadershipConfig
from spark_mq.broker.listeners import (
    DEFAULT_PROTOCOL_MAP,
    UNIX,
    Listener,
    _AnyName,
    check_listener_syntax,
    parse_protocol_map,
    protocol_map_of,
)
from spark_mq.broker.metrics.config import MetricsConfig
from spark_mq.broker.replication_config import ReplicationConfig
from spark_mq.broker.sasl.sasl_config import (
    SaslConfig,
    split_listener_jaas_key,
    split_listener_reauth_key,
)
from spark_mq.broker.tls_config import (
    LISTENER_PREFIX,
    BrokerTlsConfig,
    listener_configs,
    split_listener_key,
)
from spark_mq.broker.txn.config import TxnConfig
from spark_mq.config import (
    Config,
    at_least,
    parse_bool,
    parse_int,
    parse_list,
    parse_str,
    setting,
    unlimited_or_at_least,
)
from spark_mq.errors import ConfigError
from spark_mq.protocol.address import BrokerAddress
from spark_mq.storage.log_config import LogConfig

#: Broker key -> topic key of the LogConfig default it sets (Kafka's mapping).
TOPIC_DEFAULT_KEYS: Final[Mapping[str, str]] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "message.max.bytes": "max.message.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "compression.type": "compression.type",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "log.preallocate": "preallocate",
    "log.segment.drop.behind.bytes": "segment.drop.behind.bytes",
}

#: Alias -> (canonical key, factor applied to an integer value).
_ALIASES: Final[Mapping[str, tuple[str, int]]] = {
    "log.dir": ("log.dirs", 0),
    "broker.id": ("node.id", 0),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
}

#: Kafka's Integer.MAX_VALUE, its "no limit" for connection counts.
INT_MAX: Final = 2**31 - 1

#: Listener names accepted before the protocol map is known (syntax checks).
_ANY_NAME: Final = _AnyName()

#: Defaults of the embedded local broker (``--local``, what ensure_broker starts) unless the
#: configuration sets them: idle exit, and only a Unix socket (mode 0600, so only its owner
#: can connect). Any local user can connect to a loopback TCP port, and nothing on this
#: listener authenticates clients, so the embedded broker listens on TCP only when asked
#: (``listeners=UNIX://,PLAINTEXT://127.0.0.1:0``).
LOCAL_DEFAULTS: Final[Mapping[str, str]] = {
    "listeners": "UNIX://",
    "broker.idle.exit.ms": "60000",
}


def _parse_ip_override(item: str) -> tuple[str, int]:
    """``ADDRESS:COUNT`` (``[v6]:COUNT`` for IPv6) of max.connections.per.ip.overrides."""
    key = "max.connections.per.ip.overrides"
    host, colon, count_text = item.rpartition(":")
    host = host.strip().strip("[]")
    if not colon or not host or not (count_text.isascii() and count_text.strip().isdigit()):
        raise ConfigError(
            f"{key}: {item!r} must be ADDRESS:COUNT, e.g. 127.0.0.1:200 or unix:1000",
            key=key,
            value=item,
        )
    if host != UNIX_PEER:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(
                f"{key}: {host!r} is not an IP address (host names are not resolved; give "
                "the address, or 'unix' for Unix socket clients)",
                key=key,
                value=item,
            ) from None
    return normalize_host(host), int(count_text)


def parse_zookeeper_connect(key: str, value: object) -> str:
    """``host:port[,host:port...][/chroot]`` (Kafka's zookeeper.connect); '' means no
    ZooKeeper (a single-node broker)."""
    text = parse_str(key, value)
    if not text:
        return ""
    hosts, slash, chroot = text.partition("/")
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
            raise ConfigError(
                f"{key}: {item.strip()!r} must be host:port; the whole value is "
                "host:port[,host:port...][/chroot], e.g. 127.0.0.1:2181/spark_mq",
                key=key,
                value=text,
            )
    if slash and (not chroot or chroot.endswith("/") or "//" in chroot):
        raise ConfigError(
            f"{key}: the chroot /{chroot} must be a path such as /spark_mq, without a "
            "trailing slash",
            key=key,
            value=text,
        )
    return text


def _check_advertised(key: str, value: Any) -> None:
    for item in value:
        listener = Listener.parse(item, _ANY_NAME, key=key)
        if listener.scheme == UNIX:
            raise ConfigError(
                f"{key}: {item!r} cannot be advertised to other hosts; advertise "
                "NAME://host:port listeners only",
                key=key,
                value=item,
            )
        if listener.port == 0 or listener.host in ("0.0.0.0", "::"):
            raise ConfigError(
                f"{key}: {item!r} must name the host and port clients connect to (not port 0 "
                "and not the wildcard address, which cannot be connected to)",
                key=key,
                value=item,
            )


def _check_connection_timeout(key: str, value: Any) -> None:
    if value != -1 and value < 1:
        raise ConfigError(
            f"{key} must be -1 (zookeeper.session.timeout.ms) or at least 1, got {value}",
            key=key,
            value=value,
        )


def _check_ip_overrides(key: str, value: Any) -> None:
    hosts = [_parse_ip_override(item)[0] for item in value]
    repeated = sorted({host for host in hosts if hosts.count(host) > 1})
    if repeated:
        raise ConfigError(
            f"{key} names {', '.join(repeated)} more than once", key=key, value=",".join(value)
        )


def _check_fd_headroom(key: str, value: Any) -> None:
    if value < -1:
        raise ConfigError(
            f"{key} must be -1 (automatic) or a number of descriptors, got {value}",
            key=key,
            value=value,
        )


def _check_one_dir(key: str, value: Any) -> None:
    if len(value) > 1:
        raise ConfigError(
            f"{key} names {len(value)} directories; a spark_mq broker owns exactly one log "
            "directory: run one broker per directory",
            key=key,
            value=value,
        )


def _never_or_at_least(minimum: int) -> Any:
    """0 or -1 means never (idle exit off), otherwise at least ``minimum``."""

    def check(key: str, value: Any) -> None:
        if value not in (0, -1) and value < minimum:
            raise ConfigError(
                f"{key} must be -1 or 0 (never) or at least {minimum}, got {value}",
                key=key,
                value=value,
            )

    return check


@dataclasses.dataclass(frozen=True)
class BrokerConfig(Config):
    """The broker's own settings (topic defaults are the ``log_defaults`` of ServerConfig)."""

    component = "broker"

    log_dirs: tuple[str, ...] = setting(
        "log.dirs",
        (),
        "The log directory this broker owns (exactly one; log.dir is accepted too).",
        parse=parse_list,
        check=_check_one_dir,
    )
    listeners: tuple[str, ...] = setting(
        "listeners",
        ("PLAINTEXT://127.0.0.1:9092", "UNIX://"),
        "Where to accept connections: NAME://host:port, NAME a security protocol (PLAINTEXT, "
        "SSL, SASL_PLAINTEXT, SASL_SSL) or a name listener.security.protocol.map maps to one "
        "(port 0 picks a free port; an empty host binds every interface), and UNIX://path (a "
        "local socket; UNIX:// alone puts it in the log directory). The default listens on "
        "loopback only.",
        parse=parse_list,
        check=check_listener_syntax,
    )
    node_id: int = setting(
        "node.id",
        0,
        "This broker's id (broker.id is accepted too).",
        parse=parse_int,
        check=at_least(0),
    )
    broker_rack: str = setting(
        "broker.rack",
        "",
        "The rack (or availability zone) of this broker, for rack-aware replica assignment "
        "in a cluster. Empty: no rack.",
        parse=parse_str,
    )
    advertised_listeners: tuple[str, ...] = setting(
        "advertised.listeners",
        (),
        "The NAME://host:port addresses a cluster broker registers in ZooKeeper for clients "
        "and other brokers, one per listener name (each a name of listeners). Empty: its "
        "bound TCP listeners, with the real port of a port-0 listener and loopback for a "
        "wildcard host.",
        parse=parse_list,
        check=_check_advertised,
    )
    listener_security_protocol_map: tuple[str, ...] = setting(
        "listener.security.protocol.map",
        tuple(f"{name}:{protocol}" for name, protocol in DEFAULT_PROTOCOL_MAP.items()),
        "NAME:PROTOCOL,... the security protocol of each listener name (Kafka's default maps "
        "PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL to themselves), e.g. "
        "INTERNAL:SSL,EXTERNAL:SASL_SSL.",
        parse=parse_protocol_map,
    )
    inter_broker_listener_name: str = setting(
        "inter.broker.listener.name",
        "",
        "The listener brokers and the controller use between themselves (its advertised "
        "endpoint; TLS settings of the listener when it is SSL). Empty: the listener named "
        "PLAINTEXT (Kafka's security.inter.broker.protocol default).",
        parse=lambda key, value: parse_str(key, value).upper(),
    )
    zookeeper_connect: str = setting(
        "zookeeper.connect",
        "",
        "host:port[,host:port...][/chroot] of the ZooKeeper ensemble of the cluster this "
        "broker joins. Empty: a single-node broker, no ZooKeeper.",
        parse=parse_zookeeper_connect,
    )
    zookeeper_session_timeout_ms: int = setting(
        "zookeeper.session.timeout.ms",
        18_000,
        "How long ZooKeeper keeps the session of a broker it no longer hears from (and so its "
        "registration and, if it is controller, its controllership).",
        parse=parse_int,
        check=at_least(1),
    )
    zookeeper_connection_timeout_ms: int = setting(
        "zookeeper.connection.timeout.ms",
        -1,
        "How long a starting broker waits to connect to ZooKeeper before it gives up. -1: "
        "zookeeper.session.timeout.ms (Kafka's default).",
        parse=parse_int,
        check=_check_connection_timeout,
    )
    num_partitions: int = setting(
        "num.partitions",
        1,
        "Partitions of an auto-created topic, and of a CreateTopics request that gives -1.",
        parse=parse_int,
        check=at_least(1),
    )
    default_replication_factor: int = setting(
        "default.replication.factor",
        1,
        "Replication factor of auto-created topics and of CreateTopics requests that give "
        "-1 (a single-node broker: must be 1; a cluster: at most the live brokers).",
        parse=parse_int,
        check=at_least(1),
    )
    auto_create_topics_enable: bool = setting(
        "auto.create.topics.enable",
        True,
        "Create a topic when a producer writes to it or a Metadata request asks for it.",
        parse=parse_bool,
    )
    socket_request_max_bytes: int = setting(
        "socket.request.max.bytes",
        100 * 1024 * 1024,
        "Largest request frame accepted; a larger size prefix closes the connection.",
        parse=parse_int,
        check=at_least(1024),
    )
    connections_max_idle_ms: int = setting(
        "connections.max.idle.ms",
        600_000,
        "Close a connection that sent nothing for this long.",
        parse=parse_int,
        check=at_least(1),
    )
    socket_request_read_timeout_ms: int = setting(
        "socket.request.read.timeout.ms",
        10_000,
        "spark_mq only: close a connection when no byte of a request frame it has begun "
        "arrives for this long (time the broker itself does not read, waiting for "
        "queued.max.request.bytes, does not count).",
        parse=parse_int,
        check=at_least(1),
    )
    queued_max_request_bytes: int = setting(
        "queued.max.request.bytes",
        256 * 1024 * 1024,
        "Bytes of request frames the broker holds at once, being read, queued or served; a "
        "connection whose next frame does not fit stops being read until memory is "
        "released. A frame is admitted while any memory is free, so the bound can be "
        "overshot by one frame. -1: unbounded (Kafka's default).",
        parse=parse_int,
        check=unlimited_or_at_least(1),
    )
    max_connections: int = setting(
        "max.connections",
        INT_MAX,
        "Connections the broker keeps open at once; a new one beyond is closed at once.",
        parse=parse_int,
        check=at_least(1),
    )
    max_connections_per_ip: int = setting(
        "max.connections.per.ip",
        INT_MAX,
        "Connections from one IP address; a new one beyond is closed at once. Every Unix "
        "socket client counts under the one address 'unix'. 0 allows only the addresses of "
        "max.connections.per.ip.overrides.",
        parse=parse_int,
        check=at_least(0),
    )
    max_connections_per_ip_overrides: tuple[str, ...] = setting(
        "max.connections.per.ip.overrides",
        (),
        "Per-address exceptions to max.connections.per.ip: ADDRESS:COUNT,... where ADDRESS "
        "is an IP address or 'unix' (every Unix socket client), e.g. 127.0.0.1:200,unix:1000.",
        parse=parse_list,
        check=_check_ip_overrides,
    )
    quota_window_num: int = setting(
        "quota.window.num",
        11,
        "Samples a client's rate is measured over, for client quotas (Kafka's default).",
        parse=parse_int,
        check=at_least(2),
    )
    quota_window_size_seconds: int = setting(
        "quota.window.size.seconds",
        1,
        "Seconds each client quota sample covers (Kafka's default).",
        parse=parse_int,
        check=at_least(1),
    )
    broker_fd_headroom: int = setting(
        "broker.fd.headroom",
        -1,
        "spark_mq only: file descriptors kept free for the logs' new segments, indexes and "
        "topics: a connection is refused when accepting it would leave fewer than this many "
        "below RLIMIT_NOFILE (which the broker raises to its hard limit). -1: a tenth of "
        "the limit, at least 256 and at most half of it.",
        parse=parse_int,
        check=_check_fd_headroom,
    )
    log_retention_check_interval_ms: int = setting(
        "log.retention.check.interval.ms",
        300_000,
        "How often retention (retention.ms, retention.bytes, log start) is applied.",
        parse=parse_int,
        check=at_least(1),
    )
    log_cleaner_enable: bool = setting(
        "log.cleaner.enable",
        True,
        "Run the log cleaner (compaction of topics with cleanup.policy=compact).",
        parse=parse_bool,
    )
    log_cleaner_backoff_ms: int = setting(
        "log.cleaner.backoff.ms",
        15_000,
        "Pause between log cleaner passes.",
        parse=parse_int,
        check=at_least(1),
    )
    log_flush_scheduler_interval_ms: int = setting(
        "log.flush.scheduler.interval.ms",
        1_000,
        "How often logs are checked for a due flush.ms. Kafka's default is never "
        "(Long.MAX_VALUE), which lets an idle topic with flush.ms go unflushed; checking is "
        "cheap, so we check every second.",
        parse=parse_int,
        check=at_least(1),
    )
    log_flush_offset_checkpoint_interval_ms: int = setting(
        "log.flush.offset.checkpoint.interval.ms",
        60_000,
        "How often recovery points and log start offsets are checkpointed.",
        parse=parse_int,
        check=at_least(1),
    )
    producer_id_expiration_check_interval_ms: int = setting(
        "producer.id.expiration.check.interval.ms",
        600_000,
        "How often producers idle for producer.id.expiration.ms are forgotten.",
        parse=parse_int,
        check=at_least(1),
    )
    broker_idle_exit_ms: int = setting(
        "broker.idle.exit.ms",
        -1,
        "spark_mq only: exit after this long with no connection and no request (0 or -1: "
        "never), but not while prepared transactions with an owner prefix wait for their "
        "owner. The embedded local broker uses 60000 unless told otherwise.",
        parse=parse_int,
        check=_never_or_at_least(1),
    )
    shutdown_timeout_ms: int = setting(
        "broker.shutdown.timeout.ms",
        10_000,
        "spark_mq only: on shutdown, how long in-flight requests (and a running cleaner pass) "
        "may take before connections are cut.",
        parse=parse_int,
        check=at_least(0),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_connections_per_ip == 0 and not self.max_connections_per_ip_overrides:
            raise ConfigError(
                "max.connections.per.ip is 0, which refuses every connection: set "
                "max.connections.per.ip.overrides for the addresses that may connect, or "
                "raise max.connections.per.ip",
                key="max.connections.per.ip",
                value=0,
            )
        listeners = self.parsed_listeners()
        names = {listener.scheme for listener in listeners}
        advertised_names = [listener.scheme for listener in self.parsed_advertised()]
        for name in advertised_names:
            if name not in names:
                raise ConfigError(
                    f"advertised.listeners names listener {name}, which listeners does not "
                    f"have ({', '.join(sorted(names))}): advertise only listeners the broker "
                    "binds",
                    key="advertised.listeners",
                    value=",".join(self.advertised_listeners),
                )
        if len(set(advertised_names)) != len(advertised_names):
            raise ConfigError(
                "advertised.listeners names a listener twice",
                key="advertised.listeners",
                value=",".join(self.advertised_listeners),
            )
        if self.zookeeper_connect:
            name = self.inter_broker_listener
            key = "inter.broker.listener.name"
            if name not in names or name == UNIX:
                raise ConfigError(
                    f"{key} is {name} (empty means PLAINTEXT) but listeners has no TCP "
                    f"listener named {name} ({','.join(self.listeners)}): a cluster broker "
                    "must be reachable by other brokers; set inter.broker.listener.name to "
                    "one of its listeners",
                    key=key,
                    value=self.inter_broker_listener_name,
                )
            if advertised_names and name not in advertised_names:
                raise ConfigError(
                    f"advertised.listeners must advertise the inter-broker listener {name}",
                    key="advertised.listeners",
                    value=",".join(self.advertised_listeners),
                )

    @property
    def per_ip_overrides(self) -> dict[str, int]:
        """``max.connections.per.ip.overrides`` as address -> most connections."""
        return dict(_parse_ip_override(item) for item in self.max_connections_per_ip_overrides)

    @property
    def request_memory_bytes(self) -> int | None:
        """``queued.max.request.bytes``, None for unbounded."""
        return None if self.queued_max_request_bytes < 0 else self.queued_max_request_bytes

    @property
    def log_dir(self) -> str:
        """The one log directory (ConfigError if none was given)."""
        if not self.log_dirs:
            raise ConfigError(
                "no log directory: set log.dirs in the properties file or pass --log-dir DIR",
                key="log.dirs",
            )
        return self.log_dirs[0]

    @property
    def idle_exit_ms(self) -> int | None:
        """``broker.idle.exit.ms`` as a duration, None for never."""
        return None if self.broker_idle_exit_ms <= 0 else self.broker_idle_exit_ms

    @property
    def in_cluster(self) -> bool:
        """Whether this broker joins a cluster through ZooKeeper (zookeeper.connect set)."""
        return bool(self.zookeeper_connect)

    @property
    def protocol_map(self) -> dict[str, str]:
        """``listener.security.protocol.map`` as name -> security protocol."""
        return protocol_map_of(self.listener_security_protocol_map)

    @property
    def inter_broker_listener(self) -> str:
        """The listener name of broker-to-broker connections (PLAINTEXT unless set)."""
        return self.inter_broker_listener_name or "PLAINTEXT"

    def parsed_listeners(self) -> list[Listener]:
        protocols = self.protocol_map
        return [Listener.parse(item, protocols) for item in self.listeners]

    def parsed_advertised(self) -> list[Listener]:
        protocols = self.protocol_map
        return [
            Listener.parse(item, protocols, key="advertised.listeners")
            for item in self.advertised_listeners
        ]


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """A broker's whole configuration: its own settings, the topic defaults, and the group
    and transaction coordinators' settings."""

    broker: BrokerConfig
    log_defaults: LogConfig
    groups: GroupConfig = dataclasses.field(default_factory=GroupConfig)
    transactions: TxnConfig = dataclasses.field(default_factory=TxnConfig)
    half_messages: HalfMessageConfig = dataclasses.field(default_factory=HalfMessageConfig)
    replication: ReplicationConfig = dataclasses.field(default_factory=ReplicationConfig)
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)
    leadership: LeadershipConfig = dataclasses.field(default_factory=LeadershipConfig)
    sasl: SaslConfig = dataclasses.field(default_factory=SaslConfig)
    authorizer: AuthorizerConfig = dataclasses.field(default_factory=AuthorizerConfig)
    #: ``ssl.*``: the TLS of SSL and SASL_SSL listeners and of inter-broker connections.
    tls: BrokerTlsConfig = dataclasses.field(default_factory=BrokerTlsConfig)
    #: Listener name -> its TLS config, for listeners with ``listener.name.<name>.ssl.*``.
    listener_tls: Mapping[str, BrokerTlsConfig] = dataclasses.field(default_factory=dict)
    #: The per-listener keys as given (for to_properties), name -> {ssl key: value}.
    listener_tls_props: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    #: ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` as (LISTENER, MECHANISM) ->
    #: text: a broker's own SASL credentials on that listener (inter_broker.py reads them).
    #: They hold a password, so they are left out of repr and of to_properties.
    listener_sasl_jaas: Mapping[tuple[str, str], str] = dataclasses.field(
        default_factory=dict, repr=False
    )
    #: ``listener.name.<listener>.<mechanism>.connections.max.reauth.ms`` as (LISTENER,
    #: MECHANISM) -> ms: that listener's session lifetime for that mechanism, over
    #: ``connections.max.reauth.ms``.
    listener_max_reauth_ms: Mapping[tuple[str, str], int] = dataclasses.field(default_factory=dict)

    def max_reauth_ms_by_mechanism(self, listener_name: str) -> dict[str, int]:
        """Each enabled mechanism's session lifetime on listener ``listener_name``
        (0: sessions do not expire)."""
        default = self.sasl.connections_max_reauth_ms
        listener = listener_name.upper()
        return {
            mechanism: self.listener_max_reauth_ms.get((listener, mechanism), default)
            for mechanism in self.sasl.sasl_enabled_mechanisms
        }

    def tls_for(self, listener_name: str) -> BrokerTlsConfig:
        """The TLS config of listener ``listener_name`` (its overrides over ``ssl.*``)."""
        return self.listener_tls.get(listener_name.upper(), self.tls)

    @classmethod
    def from_properties(cls, props: Mapping[str, object] | None = None) -> ServerConfig:
        """Split ``props`` into broker keys and ``log.*`` topic defaults; resolve aliases."""
        broker_props: dict[str, object] = {}
        topic_props: dict[str, object] = {}
        group_props: dict[str, object] = {}
        txn_props: dict[str, object] = {}
        half_props: dict[str, object] = {}
        replication_props: dict[str, object] = {}
        metrics_props: dict[str, object] = {}
        leadership_props: dict[str, object] = {}
        sasl_props: dict[str, object] = {}
        authorizer_props: dict[str, object] = {}
        tls_props: dict[str, object] = {}
        listener_tls_props: dict[str, dict[str, object]] = {}
        listener_sasl_jaas: dict[tuple[str, str], str] = {}
        listener_max_reauth_ms: dict[tuple[str, str], int] = {}
        broker_keys = BrokerConfig.settings()
        for raw_key, raw_value in (props or {}).items():
            key, value = _resolve_alias(raw_key.strip(), raw_value)
            if key in TOPIC_DEFAULT_KEYS:
                topic_props[TOPIC_DEFAULT_KEYS[key]] = value
            elif key in broker_keys or key.replace("_", ".") in broker_keys:
                broker_props[key] = value
            elif GroupConfig.owns(key):
                group_props[key] = value
            elif TxnConfig.owns(key):
                txn_props[key] = value
            elif HalfMessageConfig.owns(key):
                half_props[key] = value
            elif ReplicationConfig.owns(key):
                replication_props[key] = value
            elif MetricsConfig.owns(key):
                metrics_props[key] = value
            elif LeadershipConfig.owns(key):
                leadership_props[key] = value
            elif SaslConfig.owns(key):
                sasl_props[key] = value
            elif AuthorizerConfig.owns(key):
                authorizer_props[key] = value
            elif BrokerTlsConfig.owns(key):
                tls_props[key] = value
            elif (jaas_key := split_listener_jaas_key(key)) is not None:
                listener_sasl_jaas[jaas_key] = _secret_text(key, value)
            elif (reauth := split_listener_reauth_key(key, value)) is not None:
                listener_max_reauth_ms[reauth[0]] = reauth[1]
            elif (per_listener := split_listener_key(key)) is not None:
                listener_tls_props.setdefault(per_listener[0], {})[per_listener[1]] = value
            else:
                valid = sorted(
                    [
                        *broker_keys,
                        *TOPIC_DEFAULT_KEYS,
                        *_ALIASES,
                        *GroupConfig.settings(),
                        *TxnConfig.settings(),
                        *HalfMessageConfig.settings(),
                        *ReplicationConfig.settings(),
                        *MetricsConfig.settings(),
                        *LeadershipConfig.settings(),
                        *SaslConfig.settings(),
                        *AuthorizerConfig.settings(),
                        *BrokerTlsConfig.settings(),
                    ]
                )
                close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(
                    f"unknown broker setting {raw_key!r}{hint} (topic settings such as "
                    "retention.ms take their log. form here, e.g. log.retention.ms; see "
                    "docs/broker.md for every key)",
                    key=raw_key,
                )
        broker = BrokerConfig.from_properties(broker_props)
        try:
            log_defaults = LogConfig.from_properties(topic_props)
        except ConfigError as exc:
            broker_key = _broker_key_for(exc.key)
            raise ConfigError(
                str(exc).replace(exc.key or "", broker_key, 1) if exc.key else str(exc),
                key=broker_key,
                value=exc.value,
            ) from exc
        return cls(
            broker,
            log_defaults,
            GroupConfig.from_properties(group_props),
            TxnConfig.from_properties(txn_props),
            HalfMessageConfig.from_properties(half_props),
            ReplicationConfig.from_properties(replication_props),
            MetricsConfig.from_properties(metrics_props),
            LeadershipConfig.from_properties(leadership_props),
            SaslConfig.from_properties(sasl_props),
            AuthorizerConfig.from_properties(authorizer_props),
            BrokerTlsConfig.from_properties(tls_props),
            listener_configs(tls_props, listener_tls_props),
            {
                name: {k: str(v) for k, v in props.items()}
                for name, props in listener_tls_props.items()
            },
            listener_sasl_jaas,
            listener_max_reauth_ms,
        )

    def with_overrides(self, props: Mapping[str, object]) -> ServerConfig:
        """A copy with ``props`` applied on top of this config's non-default settings."""
        # The JAAS configs are not among the described properties (they hold passwords),
        # so they are carried over here.
        jaas = {
            f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config": text
            for (listener, mechanism), text in self.listener_sasl_jaas.items()
        }
        return ServerConfig.from_properties({**self.to_properties(only_set=True), **jaas, **props})

    def to_properties(self, *, only_set: bool = False) -> dict[str, str]:
        """Every setting under its broker key (DescribeConfigs of the broker resource)."""
        broker = self.broker.overrides() if only_set else self.broker.to_properties()
        topic = self.log_defaults.overrides() if only_set else self.log_defaults.to_properties()
        by_topic_key = {v: k for k, v in TOPIC_DEFAULT_KEYS.items()}
        out = dict(broker)
        out.update(self.groups.overrides() if only_set else self.groups.to_properties())
        out.update(self.transactions.overrides() if only_set else self.transactions.to_properties())
        half = self.half_messages
        out.update(half.overrides() if only_set else half.to_properties())
        replication = self.replication
        out.update(replication.overrides() if only_set else replication.to_properties())
        metrics = self.metrics
        out.update(metrics.overrides() if only_set else metrics.to_properties())
        leadership = self.leadership
        out.update(leadership.overrides() if only_set else leadership.to_properties())
        out.update(self.sasl.overrides() if only_set else self.sasl.to_properties())
        authorizer = self.authorizer
        out.update(authorizer.overrides() if only_set else authorizer.to_properties())
        out.update(self.tls.overrides() if only_set else self.tls.to_properties())
        for name, props in self.listener_tls_props.items():
            for key, value in props.items():
                out[f"{LISTENER_PREFIX}{name.lower()}.{key}"] = value
        for (name, mechanism), reauth_ms in self.listener_max_reauth_ms.items():
            key = f"{LISTENER_PREFIX}{name.lower()}.{mechanism.lower()}.connections.max.reauth.ms"
            out[key] = str(reauth_ms)
        for key, value in topic.items():
            if key in by_topic_key:  # a topic key without a broker default stays topic-only
                out[by_topic_key[key]] = value
        return out

    @staticmethod
    def documentation(broker_key: str) -> str | None:
        """The doc string of a broker key (or of the topic default it sets)."""
        field = (
            BrokerConfig.settings().get(broker_key)
            or GroupConfig.settings().get(broker_key)
            or TxnConfig.settings().get(broker_key)
            or HalfMessageConfig.settings().get(broker_key)
            or ReplicationConfig.settings().get(broker_key)
            or MetricsConfig.settings().get(broker_key)
            or LeadershipConfig.settings().get(broker_key)
            or SaslConfig.settings().get(broker_key)
            or AuthorizerConfig.settings().get(broker_key)
            or BrokerTlsConfig.settings().get(broker_key)
        )
        if field is None and broker_key in TOPIC_DEFAULT_KEYS:
            field = LogConfig.settings().get(TOPIC_DEFAULT_KEYS[broker_key])
        return None if field is None else str(field.metadata["doc"])


def _secret_text(key: str, value: object) -> str:
    """A secret setting's text: a string, or anything with a string ``value`` (the client's
    Password), so that callers holding one need not unwrap it."""
    text = getattr(value, "value", value)
    if not isinstance(text, str):
        raise ConfigError(f"{key} must be a string", key=key)
    return text


def _resolve_alias(key: str, value: object) -> tuple[str, object]:
    alias = _ALIASES.get(key)
    if alias is None:
        return key, value
    canonical, factor = alias
    if factor:
        value = parse_int(key, value) * factor
    return canonical, value


def _broker_key_for(topic_key: str | None) -> str:
    for broker_key, key in TOPIC_DEFAULT_KEYS.items():
        if key == topic_key:
            return broker_key
    return topic_key or "?"


def advertised(listener: Listener, bound: BrokerAddress) -> BrokerAddress:
    """The address clients should use for ``listener`` once bound (``bound`` has the real
    port): a wildcard host is advertised as loopback, since that is what works locally."""
    if bound.unix_path is not None:
        return bound
    host = bound.host
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1" if host != "::" else "::1"
    return BrokerAddress(host=host, port=bound.port)
