"""Quota entities and which one applies to a request (Kafka's KIP-55 precedence).

An entity is a user, a client id, or both; either name may be :data:`DEFAULT`, Kafka's
``<default>``, which stands for every user (client id) without a quota of its own. A
request of user ``u`` with client id ``c`` takes each quota key from the first of these
that sets it (Kafka's order, highest first)::

    users/u/clients/c           users/u/clients/<default>      users/u
    users/<default>/clients/c   users/<default>/clients/<default>   users/<default>
    clients/c                   clients/<default>

What the client shares its quota with follows from the entity that matched: a quota of
``users/u/clients/c`` (or of a default at either place) is measured per user *and* client
id; one of ``users/u`` (or ``users/<default>``) over all of the user's client ids; one of
``clients/c`` (or ``clients/<default>``) over every user with that client id. The measured
"who" is the :class:`MetricKey` (Kafka's quota metric tags).

The user is the principal's name (``alice`` of ``User:alice``; ``ANONYMOUS`` on a
connection that has not authenticated). A super user (``super.users``) and the cluster's
own brokers are measured only against quotas that name them: the defaults never apply to
them.

Entity paths (``users/alice/clients/c1``) are how ZooKeeper and the log directory's file
name an entity; names are URL-encoded in them as Kafka's Sanitizer does, so a ``/`` in a
client id cannot be mistaken for the path's; a name that is ``.`` or ``..`` has its dots
encoded too (``%2E``), since ZooKeeper refuses such a path component. A name equal to
``<default>`` is refused.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from spark_mq.broker.zk.znodes import desanitize_entity_name, sanitize_entity_name
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.quotas import (
    CLIENT_ID,
    ENTITY_TYPES,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    QUOTA_KEYS,
    USER,
    EntityComponent,
    FilterComponent,
)

#: Kafka's name of a default entity, in ZooKeeper paths and on the command line.
DEFAULT: Final = "<default>"


@dataclasses.dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A user, a client id or both (None: not part of the entity); :data:`DEFAULT` for a
    default."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        assert self.user is not None or self.client_id is not None, "an empty quota entity"

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"user={self.user}")
        if self.client_id is not None:
            parts.append(f"client-id={self.client_id}")
        return ",".join(parts)

    @property
    def path(self) -> str:
        """``users/<u>``, ``users/<u>/clients/<c>`` or ``clients/<c>``, names sanitized."""
        if self.user is None:
            return f"clients/{_sanitize(self.client_id)}"
        if self.client_id is None:
            return f"users/{_sanitize(self.user)}"
        return f"users/{_sanitize(self.user)}/clients/{_sanitize(self.client_id)}"

    @classmethod
    def from_path(cls, path: str) -> QuotaEntity:
        """The entity of ``path`` (ValueError if it is not an entity path)."""
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "users" and parts[1]:
            return cls(_desanitize(parts[1]), None)
        if len(parts) == 2 and parts[0] == "clients" and parts[1]:
            return cls(None, _desanitize(parts[1]))
        if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and all(parts[1::2]):
            return cls(_desanitize(parts[1]), _desanitize(parts[3]))
        raise ValueError(f"{path!r} is not a quota entity path (users/U, clients/C, or both)")

    def components(self) -> list[EntityComponent]:
        """The entity as the wire carries it (None: the default)."""
        out = []
        if self.user is not None:
            out.append(EntityComponent(USER, None if self.user == DEFAULT else self.user))
        if self.client_id is not None:
            out.append(
                EntityComponent(CLIENT_ID, None if self.client_id == DEFAULT else self.client_id)
            )
        return out

    @classmethod
    def from_components(cls, components: list[EntityComponent]) -> QuotaEntity:
        """The entity a request names; InvalidRequestError saying what is wrong."""
        names: dict[str, str] = {}
        for c in components:
            if c.entity_type not in (USER, CLIENT_ID):
                raise InvalidRequestError(
                    f"quota entity type {c.entity_type!r} is not supported: use "
                    f"{USER!r} or {CLIENT_ID!r}"
                )
            if c.entity_type in names:
                raise InvalidRequestError(f"quota entity names {c.entity_type!r} twice")
            if c.entity_name == DEFAULT:
                raise InvalidRequestError(
                    f"{c.entity_type} name {DEFAULT!r} is reserved for the default entity "
                    "(send no name for the default)"
                )
            if c.entity_name == "":
                raise InvalidRequestError(f"the {c.entity_type} name of a quota entity is empty")
            names[c.entity_type] = DEFAULT if c.entity_name is None else c.entity_name
        if not names:
            raise InvalidRequestError("a quota entity needs a user, a client-id or both")
        return cls(names.get(USER), names.get(CLIENT_ID))


def _sanitize(name: str | None) -> str:
    assert name is not None
    return DEFAULT if name == DEFAULT else sanitize_entity_name(name)


def _desanitize(text: str) -> str:
    return DEFAULT if text == DEFAULT else desanitize_entity_name(text)


@dataclasses.dataclass(frozen=True, slots=True)
class MetricKey:
    """Who a quota is measured over (Kafka's quota metric tags): '' where the matched
    entity does not name that part."""

    user: str
    client_id: str


def precedence(user: str, client_id: str, *, exempt: bool = False) -> Iterator[QuotaEntity]:
    """The entities whose quotas apply to ``user`` with ``client_id``, highest first (see
    the module docstring); ``exempt`` (a super user, a broker) only those naming the user."""
    yield QuotaEntity(user, client_id)
    if not exempt:
        yield QuotaEntity(user, DEFAULT)
    yield QuotaEntity(user, None)
    if exempt:
        return
    yield QuotaEntity(DEFAULT, client_id)
    yield QuotaEntity(DEFAULT, DEFAULT)
    yield QuotaEntity(DEFAULT, None)
    yield QuotaEntity(None, client_id)
    yield QuotaEntity(None, DEFAULT)


def metric_key(entity: QuotaEntity, user: str, client_id: str) -> MetricKey:
    """Who shares the quota of ``entity`` when it applies to ``user`` / ``client_id``."""
    return MetricKey(
        user if entity.user is not None else "",
        client_id if entity.client_id is not None else "",
    )


def check_value(entity: QuotaEntity, key: str, value: float) -> None:
    """Refuse a key Kafka does not have or a value no quota can be."""
    if key not in QUOTA_KEYS:
        raise InvalidRequestError(
            f"quota key {key!r} of {entity} is not a client quota: use one of "
            f"{', '.join(QUOTA_KEYS)}"
        )
    if not 0 < value < math.inf:  # NaN fails both comparisons
        raise InvalidRequestError(
            f"quota {key}={value} of {entity} must be a positive number (bytes per second, "
            "or percent for request_percentage); remove the key to lift the quota"
        )


def _part(entity: QuotaEntity, entity_type: str) -> str | None:
    return entity.user if entity_type == USER else entity.client_id


def filter_matcher(
    components: list[FilterComponent], strict: bool
) -> Callable[[QuotaEntity], bool]:
    """A predicate over entities for a DescribeClientQuotas filter (InvalidRequestError if
    the filter is bad); see protocol/quotas.py for the match rules."""
    seen: set[str] = set()
    for c in components:
        if c.entity_type not in ENTITY_TYPES:
            raise InvalidRequestError(
                f"filter entity type {c.entity_type!r} is not supported: use {USER!r} or "
                f"{CLIENT_ID!r}"
            )
        if c.entity_type in seen:
            raise InvalidRequestError(f"the filter names {c.entity_type!r} twice")
        seen.add(c.entity_type)
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise InvalidRequestError(f"filter match type {c.match_type} is not 0, 1 or 2")
        if c.match_type == MATCH_EXACT and not c.match:
            raise InvalidRequestError(f"an exact {c.entity_type} filter needs a name")

    def matches(entity: QuotaEntity) -> bool:
        for c in components:
            name = _part(entity, c.entity_type)
            if name is None:
                return False
            if c.match_type == MATCH_EXACT and name != c.match:
                return False
            if c.match_type == MATCH_DEFAULT and name != DEFAULT:
                return False
        return not strict or all(_part(entity, t) is None for t in ENTITY_TYPES if t not in seen)

    return matches


QuotaConfigs = Mapping[QuotaEntity, Mapping[str, float]]
