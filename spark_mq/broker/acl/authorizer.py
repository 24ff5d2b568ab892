"""Kafka's AclAuthorizer: may this principal, from this host, do this to this resource?

The rules, in Kafka's order:

1. a principal in ``super.users`` may do everything;
2. the ACLs that apply to a resource are those of its literal name, of the literal ``*`` of
   its type, and of every prefixed pattern its name starts with;
3. a Deny entry that matches (principal or ``User:*``, host or ``*``, the operation or
   ``All``) refuses, whatever allows;
4. an Allow entry that matches allows; Describe is also allowed by Read, Write, Delete and
   Alter, DescribeConfigs by AlterConfigs (Kafka's implied operations);
5. no ACL at all for the resource: ``allow.everyone.if.no.acl.found`` decides (false by
   default); otherwise refused.

Cost on the hot path. Every produce and fetch asks once per topic, so answers are cached
per (principal, host, operation, resource type, name) in the current :class:`_Snapshot` of
the ACLs. A change builds a new snapshot with an empty cache and swaps it in one assignment:
a check that began on the old snapshot finishes on it and caches into it, never into the new
one, so no stale answer outlives a change. Snapshots are replaced from the event loop (a
single node's own change) or the ZooKeeper change thread (a cluster); readers take no lock.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable
from typing import Final

from spark_mq.broker.acl.config import AuthorizerConfig
from spark_mq.protocol.acls import (
    IMPLIED_BY,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

logger = logging.getLogger("spark_mq.broker.acl")

#: Answers cached per snapshot before the cache starts over (a bound on memory when
#: principals or topics are many; a miss costs a few dictionary look-ups).
CACHE_MAX_ENTRIES: Final = 100_000

_Key = tuple[str, str, AclOperation, ResourceType, str]


@dataclasses.dataclass(slots=True)
class _Snapshot:
    """The ACLs at one moment, indexed for look-up, with their cache of answers."""

    #: (resource type, literal name) -> entries; ``*`` is a literal name.
    literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]]
    #: (resource type, prefix) -> entries: a name's patterns are found with one look-up per
    #: prefix length of the name, whatever the number of prefixed ACLs.
    prefixed: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]]
    cache: dict[_Key, bool]


def _index(acls: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> _Snapshot:
    literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
    prefixed: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
    for pattern, entries in acls.items():
        if not entries:
            continue
        if pattern.pattern_type is PatternType.PREFIXED:
            prefixed[(pattern.resource_type, pattern.name)] = entries
        else:
            literal[(pattern.resource_type, pattern.name)] = entries
    return _Snapshot(literal, prefixed, {})


class AclAuthorizer:
    """The ACLs a broker enforces and the check of every request (see the module
    docstring). Stores (a file, ZooKeeper) feed it with :meth:`set_resource` and
    :meth:`replace_all`."""

    def __init__(self, config: AuthorizerConfig) -> None:
        self.config = config
        self.enabled = config.enabled
        self.super_users = config.super_principals
        self.allow_if_no_acl = config.allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._snapshot = _index({})
        # Writers (event loop, ZooKeeper change thread) serialize among themselves.
        self._write_lock = threading.Lock()

    # -- changes -----------------------------------------------------------------------------

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        acls: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            acls.setdefault(binding.pattern, set()).add(binding.entry)
        with self._write_lock:
            self._acls = {p: frozenset(e) for p, e in acls.items()}
            self._snapshot = _index(self._acls)

    def set_resource(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Make ``entries`` the ACLs of ``pattern`` (none: the pattern has no ACL)."""
        frozen = frozenset(entries)
        with self._write_lock:
            acls = dict(self._acls)
            if frozen:
                acls[pattern] = frozen
            else:
                acls.pop(pattern, None)
            self._acls = acls
            self._snapshot = _index(acls)

    def bindings(self) -> list[AclBinding]:
        """Every ACL, in a stable order (resource, then entry)."""
        acls = self._acls
        return [
            AclBinding(pattern, entry)
            for pattern in sorted(acls, key=lambda p: (p.resource_type, p.pattern_type, p.name))
            for entry in sorted(
                acls[pattern],
                key=lambda e: (e.principal, e.host, e.operation, e.permission_type),
            )
        ]

    # -- checks ------------------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` (``User:alice``) from ``host`` may do ``operation`` on the
        resource. Always True when the authorizer is off."""
        if not self.enabled:
            return True
        snapshot = self._snapshot
        key = (principal, host, operation, resource_type, name)
        cached = snapshot.cache.get(key)
        if cached is not None:
            return cached
        allowed = self._decide(snapshot, key)
        cache = snapshot.cache
        if len(cache) >= CACHE_MAX_ENTRIES:
            cache.clear()
        cache[key] = allowed
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on at least one resource of the type
        (Kafka's authorizeByResourceType: an idempotent producer needs Write on some topic
        or IdempotentWrite on the cluster). A Deny on the type's literal ``*`` refuses."""
        if not self.enabled or principal in self.super_users:
            return True
        snapshot = self._snapshot
        groups = [e for (t, _), e in snapshot.literal.items() if t is resource_type]
        groups += [e for (t, _), e in snapshot.prefixed.items() if t is resource_type]
        if not groups:
            return self.allow_if_no_acl
        principals = {principal, f"{principal.partition(':')[0]}:{WILDCARD}"}
        hosts = {host, WILDCARD}
        for e in snapshot.literal.get((resource_type, WILDCARD), ()):
            if (
                e.permission_type is AclPermissionType.DENY
                and e.principal in principals
                and e.host in hosts
                and e.operation in (operation, AclOperation.ALL)
            ):
                return False
        allowing = IMPLIED_BY.get(operation, frozenset((operation,)))
        return any(
            e.permission_type is AclPermissionType.ALLOW
            and e.principal in principals
            and e.host in hosts
            and (e.operation in allowing or e.operation is AclOperation.ALL)
            for entries in groups
            for e in entries
        )

    def _decide(self, snapshot: _Snapshot, key: _Key) -> bool:
        principal, host, operation, resource_type, name = key
        if principal in self.super_users:
            return True
        entries: list[AccessControlEntry] = []
        for literal in (name, WILDCARD):
            found = snapshot.literal.get((resource_type, literal))
            if found:
                entries.extend(found)
        if snapshot.prefixed:
            for end in range(1, len(name) + 1):
                found = snapshot.prefixed.get((resource_type, name[:end]))
                if found:
                    entries.extend(found)
        if not entries:
            return self.allow_if_no_acl
        principal_type = principal.partition(":")[0]
        principals = {principal, f"{principal_type}:{WILDCARD}"}
        hosts = {host, WILDCARD}
        for entry in entries:
            if (
                entry.permission_type is AclPermissionType.DENY
                and entry.principal in principals
                and entry.host in hosts
                and entry.operation in (operation, AclOperation.ALL)
            ):
                return False
        allowing = IMPLIED_BY.get(operation, frozenset((operation,)))
        for entry in entries:
            if (
                entry.permission_type is AclPermissionType.ALLOW
                and entry.principal in principals
                and entry.host in hosts
                and (entry.operation in allowing or entry.operation is AclOperation.ALL)
            ):
                return True
        return False


def denial(
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> str:
    """What a refused request is told: who may not do what to which resource, and the
    command that would allow it."""
    option = {
        ResourceType.TOPIC: f"--topic {name}",
        ResourceType.GROUP: f"--group {name}",
        ResourceType.TRANSACTIONAL_ID: f"--transactional-id {name}",
        ResourceType.CLUSTER: "--cluster",
    }.get(resource_type, name)
    what = (
        "the cluster"
        if resource_type is ResourceType.CLUSTER
        else f"{resource_type.kafka_name} {name!r}"
    )
    # A client's first request on a topic or transactional id is often the Describe that
    # its real operation implies (Metadata, FindCoordinator); granting only Describe would
    # move the refusal one request on, so the message says which ACLs imply it.
    implied = (
        "; Read, Write, Delete or Alter imply Describe (a consumer needs Read, a producer Write)"
        if operation is AclOperation.DESCRIBE
        else ""
    )
    return (
        f"principal {principal} (host {host}) is not authorized to {operation.kafka_name} "
        f"{what}: no ACL allows it, or one denies it. An administrator allows it with "
        f"`spark-mq acls add --allow-principal {principal} --operation "
        f"{operation.kafka_name} {option}` (or adds the principal to super.users){implied}"
    )
