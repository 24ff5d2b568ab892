"""A cluster's ACLs in ZooKeeper, where Kafka (ZooKeeper mode) keeps them, and how every
broker learns of a change within seconds.

Layout (Kafka's)::

    /kafka-acl/<ResourceType>/<name>                    LITERAL patterns (``*`` included)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  PREFIXED patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<10 digits>           "<ResourceType>:<name>"
    /kafka-acl-extended-changes/acl_changes_<10 digits>  {"version":1,"resourceType":"Topic",
                                                         "name":"orders-","patternType":"PREFIXED"}

**Writing** (any broker answering CreateAcls / DeleteAcls): read the resource's znode,
compute its new entries, and commit in one multi-op the new entries (a compare-and-set at
the version read, so two brokers changing one resource at once cannot lose each other's
entries: the loser reads again) and a sequential change notification. A resource left with
no entry has its znode deleted, as Kafka does.

**Applying** (:class:`ZkAclSync`, one per cluster broker): the broker follows the children
of both change paths with one
:class:`~spark_mq.broker.zk.change_notifications.ChangeNotificationFollower` (its own thread,
the full pass at start-up and after a new session, the purge of notifications older than
:data:`CHANGE_EXPIRATION_MS`: see that module): it reads the resources the new notifications
name (all of them on a full pass) and gives their entries to the authorizer.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Final

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_mq.broker.acl.authorizer import AclAuthorizer
from spark_mq.broker.acl.store import decode_entries, encode_entries, merge, remove
from spark_mq.broker.zk.cas_retry import MAX_WRITE_ATTEMPTS, write_attempts
from spark_mq.broker.zk.change_notifications import (
    CHANGE_EXPIRATION_MS,
    ChangeNotificationFollower,
    ChangeSequence,
    Notification,
)
from spark_mq.broker.zk.client import ZkClient, translate_errors
from spark_mq.errors import ClusterError, ConfigError, SparkMQError
from spark_mq.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    PatternType,
    ResourcePattern,
    ResourceType,
)

log = logging.getLogger(__name__)

LITERAL_ROOT: Final = "/kafka-acl"
PREFIXED_ROOT: Final = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES: Final = "/kafka-acl-changes"
EXTENDED_CHANGES: Final = "/kafka-acl-extended-changes"
CHANGE_PREFIX: Final = "acl_changes_"
#: The notifications of literal and of prefixed resources' changes.
LITERAL_SEQUENCE: Final = ChangeSequence(LITERAL_CHANGES, CHANGE_PREFIX)
EXTENDED_SEQUENCE: Final = ChangeSequence(EXTENDED_CHANGES, CHANGE_PREFIX)
STORED_TYPES: Final = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)


def resource_path(pattern: ResourcePattern) -> str:
    if "/" in pattern.name or pattern.name in (".", ".."):
        raise ConfigError(
            f"ACL resource name {pattern.name!r} cannot be stored in ZooKeeper (a '/' or a "
            "dot name); Kafka refuses it too"
        )
    root = PREFIXED_ROOT if pattern.pattern_type is PatternType.PREFIXED else LITERAL_ROOT
    return f"{root}/{pattern.resource_type.kafka_name}/{pattern.name}"


def _notification(pattern: ResourcePattern) -> tuple[str, bytes]:
    if pattern.pattern_type is PatternType.LITERAL:
        data = f"{pattern.resource_type.kafka_name}:{pattern.name}".encode()
        return f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", data
    body = {
        "version": 1,
        "resourceType": pattern.resource_type.kafka_name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}", json.dumps(body).encode()


def read_resource(
    zk: ZkClient, pattern: ResourcePattern
) -> tuple[frozenset[AccessControlEntry], int]:
    """The entries of ``pattern`` and the znode's version (-1: no znode)."""
    path = resource_path(pattern)
    found = zk.get(path)
    if found is None:
        return frozenset(), -1
    return decode_entries(path, found[0]), found[1].version


def read_all(zk: ZkClient) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for root, pattern_type in (
        (LITERAL_ROOT, PatternType.LITERAL),
        (PREFIXED_ROOT, PatternType.PREFIXED),
    ):
        for rtype in STORED_TYPES:
            for name in zk.children(f"{root}/{rtype.kafka_name}"):
                pattern = ResourcePattern(rtype, name, pattern_type)
                entries, _version = read_resource(zk, pattern)
                if entries:
                    out[pattern] = entries
    return out


def _write(
    zk: ZkClient, pattern: ResourcePattern, entries: frozenset[AccessControlEntry], version: int
) -> bool:
    """Commit ``entries`` for ``pattern`` if its znode is still at ``version``, with a
    change notification; False when another writer came first."""
    path = resource_path(pattern)
    change_path, change = _notification(pattern)
    with translate_errors(f"writing the ACLs of {pattern}"):
        if version < 0:
            zk.kazoo.ensure_path(path.rsplit("/", 1)[0])
        zk.kazoo.ensure_path(change_path.rsplit("/", 1)[0])
        txn = zk.kazoo.transaction()
        if version < 0:
            if not entries:
                return True
            txn.create(path, encode_entries(entries))
        elif entries:
            txn.set_data(path, encode_entries(entries), version)
        else:
            txn.delete(path, version)
        txn.create(change_path, change, sequence=True)
        results = txn.commit()
    failures = [r for r in results if isinstance(r, Exception)]
    if not failures:
        return True
    if any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in failures):
        return False
    raise ClusterError(f"writing the ACLs of {pattern} failed in ZooKeeper: {failures}")


class ZkAclStore:
    """A cluster's ACLs (see the module docstring). The broker's own changes reach its
    authorizer at once; other brokers' through :class:`ZkAclSync`."""

    def __init__(self, zk: ZkClient, authorizer: AclAuthorizer) -> None:
        self._zk = zk
        self._authorizer = authorizer

    def load(self) -> None:
        acls = read_all(self._zk)
        self._authorizer.replace_all(AclBinding(p, e) for p, es in acls.items() for e in es)

    def _update(
        self,
        pattern: ResourcePattern,
        change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
    ) -> None:
        for _attempt in write_attempts():
            current, version = read_resource(self._zk, pattern)
            wanted = change(current)
            if wanted == current:
                self._authorizer.set_resource(pattern, current)
                return
            if _write(self._zk, pattern, wanted, version):
                self._authorizer.set_resource(pattern, wanted)
                log.info("ACLs of %s are now %d entries", pattern, len(wanted))
                return
        raise ClusterError(
            f"changing the ACLs of {pattern}: {MAX_WRITE_ATTEMPTS} attempts in a row lost a race "
            "with other writers; retry"
        )

    def create(self, bindings: Sequence[AclBinding]) -> None:
        for pattern, _ in merge({}, bindings).items():  # checks every binding first
            adding = {b.entry for b in bindings if b.pattern == pattern}
            self._update(pattern, lambda cur, adding=adding: cur | adding)  # type: ignore[misc]

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        current = read_all(self._zk)
        changed, matched = remove(current, filters)
        for pattern in changed:
            gone = {b.entry for found in matched for b in found if b.pattern == pattern}
            self._update(pattern, lambda cur, gone=gone: cur - gone)  # type: ignore[misc]
        return matched


class ZkAclSync:
    """Applies other brokers' ACL changes to this broker's authorizer (see the module
    docstring). :meth:`start` once the session is up; :meth:`close` at shutdown."""

    def __init__(
        self,
        zk: ZkClient,
        authorizer: AclAuthorizer,
        *,
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        expiration_ms: int = CHANGE_EXPIRATION_MS,
    ) -> None:
        self._zk = zk
        self._authorizer = authorizer
        self._follower = ChangeNotificationFollower(
            zk,
            [LITERAL_SEQUENCE, EXTENDED_SEQUENCE],
            self,
            name="acl-changes",
            wall_clock_ms=wall_clock_ms,
            expiration_ms=expiration_ms,
        )

    def start(self) -> None:
        for path in (LITERAL_ROOT, PREFIXED_ROOT):
            with translate_errors(f"creating {path}"):
                self._zk.kazoo.ensure_path(path)
        self._follower.start()

    def close(self) -> None:
        self._follower.close()

    # -- the follower's NotificationHandler, on its thread ----------------------------------------

    def process_all(self) -> None:
        acls = read_all(self._zk)
        self._authorizer.replace_all(AclBinding(p, e) for p, es in acls.items() for e in es)
        log.info("read %d ACL resources from ZooKeeper", len(acls))

    def process(self, notifications: Sequence[Notification]) -> None:
        patterns = {p for n in notifications if (p := self._named(n)) is not None}
        for pattern in patterns:
            entries, _version = read_resource(self._zk, pattern)
            self._authorizer.set_resource(pattern, entries)
            log.info("applied the ACLs of %s from ZooKeeper (%d entries)", pattern, len(entries))

    def _named(self, notification: Notification) -> ResourcePattern | None:
        try:
            if notification.sequence == LITERAL_SEQUENCE:
                kind, _, name = notification.data.decode().partition(":")
                return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)  # type: ignore[arg-type]
            obj = json.loads(notification.data)
            return ResourcePattern(
                ResourceType.parse(obj["resourceType"]),  # type: ignore[arg-type]
                str(obj["name"]),
                PatternType.parse(obj["patternType"]),  # type: ignore[arg-type]
            )
        except (SparkMQError, ValueError, KeyError, TypeError) as exc:
            log.error(
                "ignoring ACL change notification %s: %s",
                notification.sequence.node(notification.name),
                exc,
            )
            return None
