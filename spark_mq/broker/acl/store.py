"""Where ACLs are kept, and the JSON Kafka keeps them in.

Kafka stores the entries of one resource pattern as
``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
"operation":"Read","host":"*"}]}`` (ZooKeeper ``/kafka-acl/Topic/orders``); both stores here
use that form, so ACLs read the same in either and in Kafka's own tools.

- :class:`FileAclStore`: a single node's ACLs, in ``acls.json`` of its log directory, each
  change written whole to a temporary file, fsynced and renamed over the old one (a crash
  leaves the old or the new file, never a torn one);
- ``zk_store.ZkAclStore``: a cluster's, in ZooKeeper as Kafka keeps them.

A store changes what it keeps and then the broker's :class:`~.authorizer.AclAuthorizer`;
creating an ACL that exists, or deleting with a filter nothing matches, changes nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from spark_mq.broker.acl.authorizer import AclAuthorizer
from spark_mq.errors import CorruptCheckpointError
from spark_mq.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    check_binding,
)
from spark_mq.storage.checkpoint_file import atomic_write_bytes

#: A single node's ACL file in its log directory.
ACL_FILE: Final = "acls.json"


class AclStore(Protocol):
    """Keeps ACLs and applies every change to the broker's authorizer. Blocking: call from
    an executor thread."""

    def load(self) -> None:
        """Read every ACL into the authorizer (at start-up)."""
        ...

    def create(self, bindings: Sequence[AclBinding]) -> None:
        """Add ``bindings`` (each checked first: ConfigError, nothing written)."""
        ...

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every ACL each filter matches; the ones removed, per filter."""
        ...


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    """Kafka's JSON of one resource's entries."""
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission_type.kafka_name,
            "operation": e.operation.kafka_name,
            "host": e.host,
        }
        for e in sorted(
            entries, key=lambda e: (e.principal, e.host, e.operation, e.permission_type)
        )
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_entries(where: str, data: bytes | Mapping[str, Any]) -> frozenset[AccessControlEntry]:
    """The entries of Kafka's JSON; CorruptCheckpointError naming ``where`` if it is not."""
    try:
        obj = json.loads(data) if isinstance(data, bytes) else data
        if obj.get("version") != 1:
            raise ValueError(f"version {obj.get('version')!r} (Kafka writes 1)")
        return frozenset(
            AccessControlEntry(
                str(acl["principal"]),
                str(acl["host"]),
                AclOperation.parse(acl["operation"]),  # type: ignore[arg-type]
                AclPermissionType.parse(acl["permissionType"]),  # type: ignore[arg-type]
            )
            for acl in obj["acls"]
        )
    except Exception as exc:
        raise CorruptCheckpointError(
            f"ACLs in {where} are not Kafka's ACL JSON ({exc}); fix or remove them",
            path=where,
        ) from exc


def merge(
    current: Mapping[ResourcePattern, frozenset[AccessControlEntry]],
    bindings: Sequence[AclBinding],
) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """``current`` with ``bindings`` added: only the patterns that change."""
    changed: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for binding in bindings:
        check_binding(binding)
        entries = changed.setdefault(binding.pattern, set(current.get(binding.pattern, ())))
        entries.add(binding.entry)
    return {p: frozenset(e) for p, e in changed.items() if e != current.get(p, frozenset())}


def remove(
    current: Mapping[ResourcePattern, frozenset[AccessControlEntry]],
    filters: Sequence[AclBindingFilter],
) -> tuple[dict[ResourcePattern, frozenset[AccessControlEntry]], list[list[AclBinding]]]:
    """The patterns whose entries change when ``filters`` delete, and what each filter
    matched."""
    changed: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    matched: list[list[AclBinding]] = []
    for flt in filters:
        found: list[AclBinding] = []
        for pattern in current:
            entries = changed.get(pattern, current[pattern])
            gone = {e for e in entries if flt.matches(AclBinding(pattern, e))}
            if gone:
                found.extend(AclBinding(pattern, e) for e in sorted(gone, key=str))
                changed[pattern] = entries - gone
        matched.append(found)
    return changed, matched


def by_pattern(
    bindings: Iterable[AclBinding],
) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    out: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for b in bindings:
        out.setdefault(b.pattern, set()).add(b.entry)
    return {p: frozenset(e) for p, e in out.items()}


class FileAclStore:
    """A single node's ACLs in ``<log dir>/acls.json`` (see the module docstring)."""

    def __init__(self, log_dir: str | Path, authorizer: AclAuthorizer) -> None:
        self.path = Path(log_dir) / ACL_FILE
        self._authorizer = authorizer
        self._lock = threading.Lock()
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}

    def load(self) -> None:
        with self._lock:
            self._acls = self._read()
            self._authorizer.replace_all(
                AclBinding(p, e) for p, entries in self._acls.items() for e in entries
            )

    def _read(self) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        where = str(self.path)
        try:
            obj = json.loads(data)
            resources = obj["resources"]
            if obj.get("version") != 1:
                raise ValueError(f"version {obj.get('version')!r}")
            out = {}
            for res in resources:
                pattern = ResourcePattern(
                    ResourceType.parse(res["resourceType"]),  # type: ignore[arg-type]
                    str(res["name"]),
                    PatternType.parse(res["patternType"]),  # type: ignore[arg-type]
                )
                out[pattern] = decode_entries(where, res)
        except CorruptCheckpointError:
            raise
        except Exception as exc:
            raise CorruptCheckpointError(
                f"ACL file {where} is not valid ({exc}); restore it or remove it (removing "
                "it removes every ACL)",
                path=where,
            ) from exc
        return out

    def _write(self, acls: Mapping[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        resources = []
        for pattern in sorted(acls, key=lambda p: (p.resource_type, p.pattern_type, p.name)):
            entries = json.loads(encode_entries(acls[pattern]))
            resources.append(
                {
                    "resourceType": pattern.resource_type.kafka_name,
                    "patternType": pattern.pattern_type.name,
                    "name": pattern.name,
                    **entries,
                }
            )
        data = json.dumps({"version": 1, "resources": resources}, indent=1).encode()
        atomic_write_bytes(self.path, data)

    def create(self, bindings: Sequence[AclBinding]) -> None:
        with self._lock:
            changed = merge(self._acls, bindings)
            if changed:
                self._apply(changed)

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        with self._lock:
            changed, matched = remove(self._acls, filters)
            if changed:
                self._apply(changed)
            return matched

    def _apply(self, changed: Mapping[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        acls = {**self._acls, **changed}
        acls = {p: e for p, e in acls.items() if e}
        self._write(acls)  # first: a failed write changes nothing
        self._acls = acls
        for pattern, entries in changed.items():
            self._authorizer.set_resource(pattern, entries)
