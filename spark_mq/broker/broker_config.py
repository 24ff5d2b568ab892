"""A broker's own settings (:class:`BrokerConfig`): Kafka's ``server.properties`` keys of
its log directory, listeners and their advertised addresses, ZooKeeper, connection limits
and background jobs, typed and checked once, with the checks that relate one key to another
(an advertised listener must be bound, a cluster broker needs its inter-broker listener).

The whole configuration, which routes each key of a properties mapping to the component
that owns it (this one, the topic defaults, the coordinators, security), is
:class:`~spark_mq.broker.config.ServerConfig`.

    >>> BrokerConfig.from_properties({"log.dirs": "/tmp/mq", "node.id": "3"}).node_id
    3
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Any, Final

from spark_mq.broker.connection_quotas import UNIX_PEER, normalize_host
from spark_mq.broker.listeners import (
    DEFAULT_PROTOCOL_MAP,
    UNIX,
    Listener,
    _AnyName,
    check_listener_syntax,
    parse_protocol_map,
    protocol_map_of,
)
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

#: Kafka's Integer.MAX_VALUE, its "no limit" for connection counts.
INT_MAX: Final = 2**31 - 1

#: Listener names accepted before the protocol map is known (syntax checks).
_ANY_NAME: Final = _AnyName()


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


def advertised(listener: Listener, bound: BrokerAddress) -> BrokerAddress:
    """The address clients should use for ``listener`` once bound (``bound`` has the real
    port): a wildcard host is advertised as loopback, since that is what works locally."""
    if bound.unix_path is not None:
        return bound
    host = bound.host
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1" if host != "::" else "::1"
    return BrokerAddress(host=host, port=bound.port)
