"""Kafka's ZooKeeper layout: znode paths and the JSON Kafka (2.x, ZooKeeper mode) writes in them.

Every value class has ``encode() -> bytes`` and ``decode(..., data) -> instance``; decode
validates every field and raises :class:`CorruptZnodeError` naming the znode, so a znode
written by hand or by a broken tool cannot make a broker act on garbage. JSON is compact
UTF-8, as Jackson writes it; keys Kafka writes that we do not use (``jmx_port``,
``features``) are written with Kafka's values and ignored on read, so Kafka's own tools can
read our znodes and we can read theirs::

    /brokers/ids/<id>        ephemeral  {"version":5,"host":H,"port":P,"endpoints":["PLAINTEXT://H:P"],
                                         "listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},
                                         "jmx_port":-1,"timestamp":"<ms>","features":{},"rack":R?}
                                         broker epoch = the znode's czxid
    /controller              ephemeral  {"version":1,"brokerid":ID,"timestamp":"<ms>"}
    /controller_epoch        persistent  "<epoch>" (a decimal integer, not JSON-quoted);
                                         its znode version guards every controller write
    /brokers/topics/<t>      persistent  {"version":2,"partitions":{"0":[1,2,3],...},
                                         "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<t>/partitions/<p>/state
                             persistent  {"version":1,"leader":L,"leader_epoch":E,"isr":[...],
                                         "controller_epoch":C}; znode version = partition epoch
    /admin/delete_topics/<t> persistent  empty: a request to delete topic t
    /config/topics/<t>       persistent  {"version":1,"config":{"retention.ms":"...",...}}
    /config/changes/config_change_<10 digits>
                             persistent  {"version":2,"entity_path":"topics/<t>"}: sequential,
                                         a notification that /config/topics/<t> changed
    /cluster/id              persistent  {"version":"1","id":"<22 url-safe chars>"} (Kafka quotes
                                         this version); created once, by the first broker

Who writes what: a broker writes only its own ``/brokers/ids/<id>``; the controller writes
``/controller*`` (by election) and partition states (epoch-checked); an admin writes
``/brokers/topics/<t>``, ``/config/topics/<t>`` and ``/admin/delete_topics/<t>``, which the
controller watches, and ``/config/changes/config_change_*``, which every broker watches.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar, overload

from spark_mq.errors import CorruptZnodeError

BROKERS: Final = "/brokers"
BROKER_IDS: Final = "/brokers/ids"
TOPICS: Final = "/brokers/topics"
CONTROLLER: Final = "/controller"
CONTROLLER_EPOCH: Final = "/controller_epoch"
ADMIN: Final = "/admin"
DELETE_TOPICS: Final = "/admin/delete_topics"
CONFIG: Final = "/config"
CONFIG_TOPICS: Final = "/config/topics"
CONFIG_CHANGES: Final = "/config/changes"
#: SCRAM credentials of users (broker/zk/user_credentials.py), Kafka's path.
CONFIG_USERS: Final = "/config/users"
#: The name of a config change notification before ZooKeeper's 10-digit sequence number.
CONFIG_CHANGE_PREFIX: Final = "config_change_"
CLUSTER_ID: Final = "/cluster/id"
#: spark_mq's own: the secret brokers show each other with AuthenticateBroker
#: (protocol/controller.py). Made once, by the first broker, like /cluster/id.
INTER_BROKER_SECRET: Final = "/spark_mq/inter_broker_secret"

#: Persistent parents every broker makes sure exist at start-up (Kafka's PersistentZkPaths,
#: the part of it we use).
PERSISTENT_PATHS: Final = (
    BROKER_IDS,
    TOPICS,
    DELETE_TOPICS,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    CONFIG_USERS,
)

#: Kafka's first controller epoch: /controller_epoch is created with it, so the first elected
#: controller has epoch 1.
INITIAL_CONTROLLER_EPOCH: Final = 0
#: A partition with no leader has leader -1 (Kafka's LeaderAndIsr.NoLeader).
NO_LEADER: Final = -1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def config_change_path(name: str) -> str:
    """The path of notification ``name`` (a child of ``/config/changes``)."""
    return f"{CONFIG_CHANGES}/{name}"


def sequence_number(prefix: str, name: str) -> int | None:
    """The number of sequential znode ``name`` made as ``<prefix>`` (``config_change_`` and
    ``config_change_0000000012``: 12); None for a name that is not ``<prefix><digits>``."""
    digits = name.removeprefix(prefix)
    if digits == name or not digits.isdigit():
        return None
    return int(digits)


def config_change_sequence(name: str) -> int | None:
    """The sequence number of notification ``name`` (``config_change_0000000012``: 12);
    None for a child that is not a notification."""
    return sequence_number(CONFIG_CHANGE_PREFIX, name)


T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    """A decoded znode value with the znode's data version, for compare-and-set writes."""

    value: T
    version: int


# ---------------------------------------------------------------------------------------------
# JSON helpers: every failure names the znode and the field.


def _encode(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _parse(path: str, data: bytes | None) -> dict[str, Any]:
    if not data:
        raise CorruptZnodeError(f"znode {path} is empty; expected Kafka's JSON", path=path)
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptZnodeError(
            f"znode {path} does not hold JSON ({exc}): {data[:200]!r}", path=path
        ) from exc
    if not isinstance(obj, dict):
        raise CorruptZnodeError(
            f"znode {path} holds {type(obj).__name__} JSON, expected an object", path=path
        )
    return obj


def _int(path: str, obj: Mapping[str, Any], key: str, *, minimum: int | None = None) -> int:
    value = obj.get(key)
    # bool is an int in Python but not in JSON: true is not a broker id.
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptZnodeError(
            f"znode {path}: field {key!r} must be an integer, got {value!r}", path=path
        )
    if minimum is not None and value < minimum:
        raise CorruptZnodeError(
            f"znode {path}: field {key!r} must be at least {minimum}, got {value}", path=path
        )
    return value


@overload
def _str(path: str, obj: Mapping[str, Any], key: str) -> str: ...
@overload
def _str(path: str, obj: Mapping[str, Any], key: str, *, optional: bool) -> str | None: ...
def _str(path: str, obj: Mapping[str, Any], key: str, *, optional: bool = False) -> str | None:
    """The string field ``key``; with ``optional``, None when it is absent or null."""
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise CorruptZnodeError(
            f"znode {path}: field {key!r} must be a string, got {value!r}", path=path
        )
    return value


def _timestamp_ms(path: str, obj: Mapping[str, Any]) -> int:
    # Kafka writes timestamps as decimal strings ("timestamp":"1700000000000").
    text = _str(path, obj, "timestamp")
    if not text.isdigit():
        raise CorruptZnodeError(
            f"znode {path}: field 'timestamp' must be decimal milliseconds, got {text!r}",
            path=path,
        )
    return int(text)


def _broker_list(path: str, what: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in value
    ):
        raise CorruptZnodeError(
            f"znode {path}: {what} must be a list of broker ids, got {value!r}", path=path
        )
    if len(set(value)) != len(value):
        raise CorruptZnodeError(f"znode {path}: {what} names a broker twice: {value!r}", path=path)
    return tuple(value)


# ---------------------------------------------------------------------------------------------
# /brokers/ids/<id>


@dataclasses.dataclass(frozen=True, slots=True)
class EndPoint:
    """One advertised listener: ``LISTENER_NAME://host:port``."""

    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"

    @classmethod
    def parse(cls, path: str, text: str, protocol_map: Mapping[str, str]) -> EndPoint:
        name, sep, rest = text.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not name or not port.isdigit() or int(port) > 65535:
            raise CorruptZnodeError(
                f"znode {path}: endpoint {text!r} is not LISTENER://host:port", path=path
            )
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        return cls(name, host, int(port), protocol_map.get(name, name))


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker: its advertised endpoints, rack and registration time (version 5 JSON)."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None
    timestamp_ms: int

    def __post_init__(self) -> None:
        assert self.broker_id >= 0, self.broker_id
        assert self.endpoints, "a broker registers at least one endpoint"

    def endpoint(self, listener_name: str | None = None) -> EndPoint:
        """The endpoint of ``listener_name``, or the first one."""
        for endpoint in self.endpoints:
            if listener_name is None or endpoint.listener_name == listener_name:
                return endpoint
        raise KeyError(listener_name)

    def encode(self) -> bytes:
        # The top-level host and port are the first PLAINTEXT endpoint, for old clients.
        plaintext = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        obj: dict[str, Any] = {
            "version": 5,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "endpoints": [e.connection_string for e in self.endpoints],
            "listener_security_protocol_map": {
                e.listener_name: e.security_protocol for e in self.endpoints
            },
            "jmx_port": -1,
            "timestamp": str(self.timestamp_ms),
            "features": {},
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        return _encode(obj)

    @classmethod
    def decode(cls, broker_id: int, data: bytes | None) -> BrokerRegistration:
        path = broker_path(broker_id)
        obj = _parse(path, data)
        version = _int(path, obj, "version")
        if version < 2:
            raise CorruptZnodeError(
                f"znode {path}: registration version {version} has no endpoints (need 2+)",
                path=path,
            )
        protocol_map = obj.get("listener_security_protocol_map") or {}
        if not isinstance(protocol_map, dict) or not all(
            isinstance(v, str) for v in protocol_map.values()
        ):
            raise CorruptZnodeError(
                f"znode {path}: listener_security_protocol_map must map names to protocols",
                path=path,
            )
        texts = obj.get("endpoints")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise CorruptZnodeError(
                f"znode {path}: field 'endpoints' must be a non-empty list of strings, got "
                f"{texts!r}",
                path=path,
            )
        rack = _str(path, obj, "rack", optional=True)
        return cls(
            broker_id=broker_id,
            endpoints=tuple(EndPoint.parse(path, t, protocol_map) for t in texts),
            rack=rack,
            timestamp_ms=_timestamp_ms(path, obj),
        )


# ---------------------------------------------------------------------------------------------
# /cluster/id


def encode_cluster_id(cluster_id: str) -> bytes:
    return _encode({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    obj = _parse(CLUSTER_ID, data)
    cluster_id = _str(CLUSTER_ID, obj, "id")
    if not cluster_id:
        raise CorruptZnodeError(f"znode {CLUSTER_ID}: field 'id' is empty", path=CLUSTER_ID)
    return cluster_id


# ---------------------------------------------------------------------------------------------
# /controller and /controller_epoch


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """Who the controller is (the ephemeral ``/controller`` znode)."""

    broker_id: int
    timestamp_ms: int

    def encode(self) -> bytes:
        return _encode(
            {"version": 1, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms)}
        )

    @classmethod
    def decode(cls, data: bytes | None) -> ControllerRegistration:
        obj = _parse(CONTROLLER, data)
        return cls(
            broker_id=_int(CONTROLLER, obj, "brokerid", minimum=0),
            timestamp_ms=_timestamp_ms(CONTROLLER, obj),
        )


def encode_controller_epoch(epoch: int) -> bytes:
    assert epoch >= 0, epoch
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes | None) -> int:
    text = (data or b"").decode("ascii", "replace")
    if not text.isdigit():
        raise CorruptZnodeError(
            f"znode {CONTROLLER_EPOCH} must hold a decimal epoch, got {data!r}",
            path=CONTROLLER_EPOCH,
        )
    return int(text)


# ---------------------------------------------------------------------------------------------
# /brokers/topics/<t> and its partition states


@dataclasses.dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's replica assignment: partition -> replicas, the first the preferred leader.

    ``adding`` and ``removing`` are the replicas of an ongoing reassignment (KIP-455).
    """

    partitions: Mapping[int, tuple[int, ...]]
    adding: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    topic_id: str | None = None

    def encode(self) -> bytes:
        def as_json(m: Mapping[int, tuple[int, ...]]) -> dict[str, list[int]]:
            return {str(p): list(replicas) for p, replicas in sorted(m.items())}

        obj: dict[str, Any] = {
            "version": 2,
            "partitions": as_json(self.partitions),
            "adding_replicas": as_json(self.adding),
            "removing_replicas": as_json(self.removing),
        }
        if self.topic_id is not None:
            obj["topic_id"] = self.topic_id
        return _encode(obj)

    @classmethod
    def decode(cls, topic: str, data: bytes | None) -> TopicAssignment:
        path = topic_path(topic)
        obj = _parse(path, data)

        def partition_map(key: str, *, required: bool) -> dict[int, tuple[int, ...]]:
            raw = obj.get(key)
            if raw is None and not required:
                return {}
            if not isinstance(raw, dict):
                raise CorruptZnodeError(
                    f"znode {path}: field {key!r} must be an object, got {raw!r}", path=path
                )
            out = {}
            for p, replicas in raw.items():
                if not p.isdigit():
                    raise CorruptZnodeError(
                        f"znode {path}: partition {p!r} in {key!r} is not a number", path=path
                    )
                out[int(p)] = _broker_list(path, f"{key}[{p}]", replicas)
            return out

        partitions = partition_map("partitions", required=True)
        if sorted(partitions) != list(range(len(partitions))):
            raise CorruptZnodeError(
                f"znode {path}: partitions must be numbered 0..n-1, got {sorted(partitions)}",
                path=path,
            )
        topic_id = _str(path, obj, "topic_id", optional=True)
        return cls(
            partitions=partitions,
            adding=partition_map("adding_replicas", required=False),
            removing=partition_map("removing_replicas", required=False),
            topic_id=topic_id,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's LeaderIsrAndControllerEpoch: who leads a partition, in which leader epoch, the
    in-sync replicas, and the controller epoch that wrote it. The znode's data version (the
    partition epoch) travels beside it in :class:`Versioned`."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def __post_init__(self) -> None:
        assert self.leader >= NO_LEADER and self.leader_epoch >= 0, self
        assert len(set(self.isr)) == len(self.isr), self.isr

    def encode(self) -> bytes:
        return _encode(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def decode(cls, topic: str, partition: int, data: bytes | None) -> PartitionState:
        path = partition_state_path(topic, partition)
        obj = _parse(path, data)
        return cls(
            leader=_int(path, obj, "leader", minimum=NO_LEADER),
            leader_epoch=_int(path, obj, "leader_epoch", minimum=0),
            isr=_broker_list(path, "isr", obj.get("isr")),
            controller_epoch=_int(path, obj, "controller_epoch", minimum=0),
        )


# ---------------------------------------------------------------------------------------------
# /config/topics/<t>


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfigOverrides:
    """A topic's configuration overrides, Kafka's keys and string values."""

    config: Mapping[str, str]

    def encode(self) -> bytes:
        return _encode({"version": 1, "config": dict(sorted(self.config.items()))})

    @classmethod
    def decode(cls, topic: str, data: bytes | None) -> TopicConfigOverrides:
        path = topic_config_path(topic)
        obj = _parse(path, data)
        config = obj.get("config")
        if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
            raise CorruptZnodeError(
                f"znode {path}: field 'config' must map keys to string values, got {config!r}",
                path=path,
            )
        return cls(config=config)


# ---------------------------------------------------------------------------------------------
# /config/changes/config_change_<n>

#: Kafka's entity type of topic configs, the first part of a notification's entity path.
TOPIC_ENTITY: Final = "topics"
#: Kafka's entity type of user configs (SCRAM credentials, quotas).
USER_ENTITY: Final = "users"


def sanitize_entity_name(name: str) -> str:
    """A user or client id as one path component of its config znode and in its change
    notification (Kafka's Sanitizer): percent-encoded, so that "/" and the like cannot
    change the path, with the dots of "." and ".." encoded too (percent-encoding leaves dots
    alone, and ZooKeeper refuses those two components). :func:`desanitize_entity_name`
    undoes it."""
    if name in (".", ".."):
        return name.replace(".", "%2E")
    return urllib.parse.quote(name, safe="")


def desanitize_entity_name(text: str) -> str:
    return urllib.parse.unquote(text)


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigChangeNotification:
    """That the config of one entity changed (Kafka's ConfigEntityChangeNotification):
    ``entity_type`` is ``topics`` for a topic (Kafka also has ``clients``, ``users`` and
    ``brokers``), ``entity_name`` the topic. The new config is in ``/config/<type>/<name>``."""

    entity_type: str
    entity_name: str

    def encode(self) -> bytes:
        return _encode({"version": 2, "entity_path": f"{self.entity_type}/{self.entity_name}"})

    @classmethod
    def decode(cls, name: str, data: bytes | None) -> ConfigChangeNotification:
        path = config_change_path(name)
        obj = _parse(path, data)
        version = _int(path, obj, "version")
        if version == 1:
            # Kafka before 1.1 wrote the type and name apart; its brokers still read both.
            return cls(_str(path, obj, "entity_type"), _str(path, obj, "entity_name"))
        if version != 2:
            raise CorruptZnodeError(
                f"znode {path}: notification version {version} is unknown (Kafka writes 1 or 2)",
                path=path,
            )
        entity_type, slash, entity_name = _str(path, obj, "entity_path").partition("/")
        if not slash or not entity_type or not entity_name:
            raise CorruptZnodeError(
                f"znode {path}: field 'entity_path' must be '<type>/<name>', got "
                f"{obj['entity_path']!r}",
                path=path,
            )
        return cls(entity_type, entity_name)
