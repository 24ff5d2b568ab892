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

**Applying** (:class:`ZkAclSync`, one per cluster broker): the broker watches the children
of both change paths. As in ``zk.config_changes``, the watch runs on the ZooKeeper event
thread, which must stay free, so it only records that something changed and the sync's own
thread does the work: read the resources the new notifications name (all of them at
start-up and after a new session, when notifications may have been missed) and give their
entries to the authorizer. Reading the znode's current state rather than trusting the
notification's order makes applying one twice, or two out of order, end the same.
Notifications older than :data:`CHANGE_EXPIRATION_MS` are purged by whichever broker sees
them first.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from spark_mq.broker.acl.authorizer import AclAuthorizer
from spark_mq.broker.acl.store import decode_entries, encode_entries, merge, remove
from spark_mq.broker.zk.client import SessionEvent, ZkClient, translate_errors
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
#: How long a notification is kept (Kafka's 15 minutes).
CHANGE_EXPIRATION_MS: Final = 15 * 60 * 1000
MAX_WRITE_ATTEMPTS: Final = 10
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
        for _attempt in range(MAX_WRITE_ATTEMPTS):
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
    ) -> None:
        self._zk = zk
        self._authorizer = authorizer
        self._wall_clock_ms = wall_clock_ms
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="zk-acl-changes"
        )
        self._lock = threading.Lock()
        #: Change-path -> children last seen there, not yet processed.
        self._pending: dict[str, list[str]] = {}
        self._full_pass = True
        self._scheduled = False
        self._closed = False
        self._last_applied: dict[str, int] = {LITERAL_CHANGES: -1, EXTENDED_CHANGES: -1}

    def start(self) -> None:
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES, LITERAL_ROOT, PREFIXED_ROOT):
            with translate_errors(f"creating {path}"):
                self._zk.kazoo.ensure_path(path)
        self._zk.add_handler(self)
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self._zk.watch_children(path, functools.partial(self._on_children, path))

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True)

    # -- ZooKeeper event thread: quick work only -------------------------------------------

    def on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.NEW_SESSION:
            with self._lock:
                self._full_pass = True

    def _on_children(self, path: str, children: list[str]) -> None:
        with self._lock:
            if self._closed:
                return
            self._pending[path] = children
            if not self._scheduled:
                self._scheduled = True
                self._executor.submit(self._drain)

    # -- the sync's own thread ----------------------------------------------------------------

    def _drain(self) -> None:
        while True:
            with self._lock:
                pending, full = self._pending, self._full_pass
                if not pending or self._closed:
                    self._scheduled = False
                    return
                self._pending = {}
                self._full_pass = False
            try:
                self._pass(pending, full=full)
            except Exception:
                log.exception(
                    "applying ACL changes failed; everything is read again at the next change"
                )
                with self._lock:
                    self._full_pass = True

    def _pass(self, pending: dict[str, list[str]], *, full: bool) -> None:
        patterns: set[ResourcePattern] = set()
        for path, children in pending.items():
            numbered = sorted(
                (int(c[len(CHANGE_PREFIX) :]), c)
                for c in children
                if c.startswith(CHANGE_PREFIX) and c[len(CHANGE_PREFIX) :].isdigit()
            )
            for seq, child in numbered:
                if seq <= self._last_applied[path] or full:
                    continue
                pattern = self._named(path, child)
                if pattern is not None:
                    patterns.add(pattern)
            if numbered:
                self._last_applied[path] = max(self._last_applied[path], numbered[-1][0])
            self._purge(path, [c for s, c in numbered if s <= self._last_applied[path]])
        if full:
            acls = read_all(self._zk)
            self._authorizer.replace_all(AclBinding(p, e) for p, es in acls.items() for e in es)
            log.info("read %d ACL resources from ZooKeeper", len(acls))
            return
        for pattern in patterns:
            entries, _version = read_resource(self._zk, pattern)
            self._authorizer.set_resource(pattern, entries)
            log.info("applied the ACLs of %s from ZooKeeper (%d entries)", pattern, len(entries))

    def _named(self, path: str, child: str) -> ResourcePattern | None:
        found = self._zk.get(f"{path}/{child}")
        if found is None:
            return None  # purged meanwhile; a full pass would have it
        try:
            if path == LITERAL_CHANGES:
                kind, _, name = found[0].decode().partition(":")
                return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)  # type: ignore[arg-type]
            obj = json.loads(found[0])
            return ResourcePattern(
                ResourceType.parse(obj["resourceType"]),  # type: ignore[arg-type]
                str(obj["name"]),
                PatternType.parse(obj["patternType"]),  # type: ignore[arg-type]
            )
        except (SparkMQError, ValueError, KeyError, TypeError) as exc:
            log.error("ignoring ACL change notification %s/%s: %s", path, child, exc)
            return None

    def _purge(self, path: str, applied: list[str]) -> None:
        now = self._wall_clock_ms()
        for child in applied:
            node = f"{path}/{child}"
            with translate_errors(f"purging {node}"):
                stat = self._zk.kazoo.exists(node)
                if stat is None:
                    continue
                if now - stat.ctime <= CHANGE_EXPIRATION_MS:
                    break
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._zk.kazoo.delete(node, version=stat.version)
