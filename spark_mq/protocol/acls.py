"""Access control lists as Kafka's: the model (resource types, pattern types, operations,
permissions, bindings and filters) and the wire messages of DescribeAcls (29), CreateAcls
(30) and DeleteAcls (31).

An ACL binding is a resource pattern (type, name, pattern type) and an entry (principal,
host, operation, permission). The numbers of the enums are Kafka's, so a binding means the
same on the wire as in Kafka's ``AclBinding``; the names are Kafka's (``Topic``, ``Read``,
``Allow``), as ``kafka-acls`` prints them and ZooKeeper stores them.

    >>> topic = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
    >>> topic.matches_name("orders-eu"), topic.matches_name("order")
    (True, False)
    >>> AclOperation.parse("describe-configs")
    <AclOperation.DESCRIBE_CONFIGS: 10>
"""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from spark_mq.errors import ConfigError

#: The literal name that matches every resource of its type, and every principal or host.
WILDCARD: Final = "*"
#: The one Cluster resource's name (Kafka's ``kafka-cluster``).
CLUSTER_NAME: Final = "kafka-cluster"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class _KafkaNamed(enum.IntEnum):
    """An enum with Kafka's camel-case names (``TransactionalId``, ``ClusterAction``)."""

    @property
    def kafka_name(self) -> str:
        return _camel(self.name)

    @classmethod
    def parse(cls, text: str) -> _KafkaNamed:
        """Kafka's name in any case, with or without ``-``/``_`` (``ClusterAction``,
        ``cluster-action``, ``CLUSTER_ACTION``)."""
        wanted = text.strip().replace("-", "").replace("_", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == wanted and member.value > 0:
                return member
        choices = ", ".join(m.kafka_name for m in cls if m.value > 0)
        raise ConfigError(f"{text!r} is not a {cls.__name__}: one of {choices}", value=text)


class ResourceType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(_KafkaNamed):
    UNKNOWN = 0
    #: Filters only: literal or prefixed.
    ANY = 1
    #: Filters only: every pattern that matches the filter's name (literal, ``*``, prefixes).
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(_KafkaNamed):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Kafka's implied operations: an Allow of any of these also allows the key.
IMPLIED_BY: Final[dict[AclOperation, frozenset[AclOperation]]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


class ResourcePattern(msgspec.Struct, frozen=True, array_like=True):
    """A resource type, a name and how the name matches (LITERAL, PREFIXED)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def matches_name(self, name: str) -> bool:
        """Whether this (binding's) pattern covers the resource called ``name``."""
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (WILDCARD, name)

    def __str__(self) -> str:
        return f"{self.resource_type.kafka_name}:{self.pattern_type.kafka_name}:{self.name}"


class AccessControlEntry(msgspec.Struct, frozen=True, array_like=True):
    """Who (``User:alice`` or ``User:*``), from where (an IP or ``*``), may or may not do
    what."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


class AclBinding(msgspec.Struct, frozen=True, array_like=True):
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        e = self.entry
        return (
            f"{e.permission_type.kafka_name} {e.principal} {e.operation.kafka_name} from "
            f"host {e.host} on {self.pattern}"
        )


class AclBindingFilter(msgspec.Struct, frozen=True, array_like=True):
    """Kafka's filter: None (or ANY) fields match everything. ``pattern_type`` MATCH takes
    every binding whose pattern covers ``resource_name`` (its literal, ``*`` and every
    prefix of it); ANY takes literal and prefixed bindings of exactly that name."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and p.resource_type != self.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.resource_name is not None and not p.matches_name(self.resource_name):
                return False
        else:
            if self.pattern_type is not PatternType.ANY and p.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and p.name != self.resource_name:
                return False
        if self.principal is not None and e.principal != self.principal:
            return False
        if self.host is not None and e.host != self.host:
            return False
        if self.operation is not AclOperation.ANY and e.operation != self.operation:
            return False
        return not (
            self.permission_type is not AclPermissionType.ANY
            and e.permission_type != self.permission_type
        )


def check_binding(binding: AclBinding) -> None:
    """Refuse a binding that cannot be stored (filter-only values, a bad principal, a
    Cluster resource not named kafka-cluster), saying what to write instead."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ConfigError(f"ACL {binding}: give a resource type (Topic, Group, ...)")
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ConfigError(f"ACL {binding}: the pattern type must be LITERAL or PREFIXED")
    if p.pattern_type is PatternType.PREFIXED and p.name == WILDCARD:
        raise ConfigError(f"ACL {binding}: a prefix of '*' means nothing; use LITERAL '*'")
    if not p.name:
        raise ConfigError(f"ACL {binding}: the resource name is empty")
    if p.resource_type is ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        raise ConfigError(f"ACL {binding}: the Cluster resource is named {CLUSTER_NAME!r}")
    if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ConfigError(f"ACL {binding}: give an operation (Read, Write, ..., All)")
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise ConfigError(f"ACL {binding}: the permission must be Allow or Deny")
    kind, sep, name = e.principal.partition(":")
    if not sep or not kind or not name:
        raise ConfigError(f"ACL {binding}: write the principal as Kafka does, User:<name>")
    if not e.host:
        raise ConfigError(f"ACL {binding}: the host is '*' or an IP address")


# ---------------------------------------------------------------------------------------------
# Wire messages


class DescribeAclsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    filter: AclBindingFilter


class DescribeAclsResponse(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None
    bindings: list[AclBinding] = []
    throttle_time_ms: int = 0


class CreateAclsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    creations: list[AclBinding]


class AclCreationResult(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None


class CreateAclsResponse(msgspec.Struct, array_like=True):
    results: list[AclCreationResult]
    throttle_time_ms: int = 0


class DeleteAclsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    filters: list[AclBindingFilter]


class DeleteAclsFilterResult(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None = None
    matching_acls: list[AclBinding] = []


class DeleteAclsResponse(msgspec.Struct, array_like=True):
    filter_results: list[DeleteAclsFilterResult]
    throttle_time_ms: int = 0


def describe_acls_error(
    request: DescribeAclsRequest, code: int, message: str
) -> DescribeAclsResponse:
    return DescribeAclsResponse(code, message)


def create_acls_error(request: CreateAclsRequest, code: int, message: str) -> CreateAclsResponse:
    return CreateAclsResponse([AclCreationResult(code, message) for _ in request.creations])


def delete_acls_error(request: DeleteAclsRequest, code: int, message: str) -> DeleteAclsResponse:
    return DeleteAclsResponse([DeleteAclsFilterResult(code, message) for _ in request.filters])
