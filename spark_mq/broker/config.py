"""Broker configuration: Kafka's ``server.properties`` keys, typed and checked once.

Two objects come out of one properties mapping (a file, ``--override`` flags, a dict):

- :class:`~spark_mq.broker.broker_config.BrokerConfig`: the broker's own settings
  (listeners, limits, background jobs; :mod:`spark_mq.broker.broker_config`, re-exported
  here);
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
from collections.abc import Mapping
from typing import Final

from spark_mq.broker.acl.config import AuthorizerConfig
from spark_mq.broker.broker_config import (
    INT_MAX,
    BrokerConfig,
    advertised,
    parse_zookeeper_connect,
)
from spark_mq.broker.group.config import GroupConfig
from spark_mq.broker.half.config import HalfMessageConfig
from spark_mq.broker.leadership_config import LeadershipConfig
from spark_mq.broker.listeners import Listener
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
from spark_mq.config import parse_int
from spark_mq.errors import ConfigError
from spark_mq.storage.log_config import LogConfig

# Re-exported: callers import the broker's own settings and these helpers from here too.
__all__ = [
    "INT_MAX",
    "LOCAL_DEFAULTS",
    "TOPIC_DEFAULT_KEYS",
    "BrokerConfig",
    "Listener",
    "ServerConfig",
    "advertised",
    "parse_zookeeper_connect",
]

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

#: Defaults of the embedded local broker (``--local``, what ensure_broker starts) unless the
#: configuration sets them: idle exit, and only a Unix socket (mode 0600, so only its owner
#: can connect). Any local user can connect to a loopback TCP port, and nothing on this
#: listener authenticates clients, so the embedded broker listens on TCP only when asked
#: (``listeners=UNIX://,PLAINTEXT://127.0.0.1:0``).
LOCAL_DEFAULTS: Final[Mapping[str, str]] = {
    "listeners": "UNIX://",
    "broker.idle.exit.ms": "60000",
}


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
