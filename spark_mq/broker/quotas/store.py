"""Where client quotas are kept: the log directory of a single node, ZooKeeper for a
cluster (:mod:`spark_mq.broker.zk.client_quotas`), and how an alteration is applied.

**Single node**: ``client-quotas.json`` in the log directory::

    {"version": 1, "entities": {"users/alice": {"producer_byte_rate": "1048576"},
                                "clients/<default>": {"consumer_byte_rate": "2097152"}}}

keyed by entity path (:attr:`~spark_mq.broker.quotas.entity.QuotaEntity.path`), values as
strings as Kafka writes them to ZooKeeper. It is a
:class:`~spark_mq.broker.json_state_file.JsonStateFile`, like the SCRAM credentials beside it:
written whole and atomically (a crash leaves the old file or the new one), mode 0600. An
unreadable file (not JSON, not an entity path, a value that is not a number) stops the
broker with :class:`~spark_mq.errors.CorruptCheckpointError` naming it rather than serving
with no quotas. A number no quota can be (zero, negative, NaN, infinite: the APIs and the
command line refuse one, but a file or znode edited by hand can hold it) is left out, with
one warning per load naming the entity, the key and the value; the entity's other keys and
the other entities apply, and the file keeps the value until the key is set again or
deleted.

Files written before entity names were sanitized as they are now (``clients/..`` for the
client id ``..``, now ``clients/%2E%2E``) are migrated when loaded: each old key is merged
into its sanitized one, whose value wins where both set a quota (one log line says what
moved and what was overridden), and the file is written back.

**Cluster**: ``/config/users/<u>``, ``/config/users/<u>/clients/<c>`` and
``/config/clients/<c>`` as Kafka keeps them, each change announced under
``/config/changes`` so that every broker reloads the entity.

Threads: an AlterClientQuotas handler writes on the executor, the ZooKeeper sync on its
thread; one lock orders the writes, and the manager gets the whole new map after each.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

from spark_mq.broker.json_state_file import JsonStateFile, with_entry
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.quotas import QUOTA_KEYS, QuotaOp

from .entity import QuotaEntity, check_value
from .manager import ClientQuotaManager

logger = logging.getLogger(__name__)

#: The file of a single-node broker's client quotas, in its log directory.
QUOTAS_FILE: Final = "client-quotas.json"
FILE_VERSION: Final = 1


#: ``update(current quotas) -> new quotas``; raises to refuse the change.
QuotasUpdate = Callable[[Mapping[str, float]], dict[str, float]]


class QuotaBackend(Protocol):
    """Where quotas are kept durably."""

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every entity's quotas."""
        ...

    def alter_entity(self, entity: QuotaEntity, update: QuotasUpdate) -> dict[str, float]:
        """Make ``update(the entity's stored quotas)`` its quotas (empty: none), durably,
        reading and writing as one step; the new quotas. ``update`` raises to refuse."""
        ...


def encode_values(values: Mapping[str, float]) -> dict[str, str]:
    """Kafka's string form: ``1048576`` for a whole number, else the float's repr."""
    return {k: str(int(v)) if float(v).is_integer() else repr(float(v)) for k, v in values.items()}


def parse_values(
    where: str, config: Mapping[str, object]
) -> tuple[dict[str, float], dict[str, str]]:
    """An entity's quotas from its stored config, and apart the values no quota can be (zero,
    negative, NaN, infinite) as stored; keys that are not quotas (a user's SCRAM credentials
    share Kafka's ``/config/users/<u>``) are left out. ValueError naming ``where`` if a
    quota value is not a number."""
    out: dict[str, float] = {}
    refused: dict[str, str] = {}
    for key, text in config.items():
        if key not in QUOTA_KEYS:
            continue
        try:
            value = float(str(text))
        except ValueError:
            raise ValueError(f"{where}: quota {key}={text!r} is not a number") from None
        if 0 < value < math.inf:  # NaN fails both comparisons
            out[key] = value
        else:
            refused[key] = str(text)
    return out, refused


def decode_values(where: str, config: Mapping[str, object]) -> dict[str, float]:
    """:func:`parse_values`'s quotas, with one warning naming ``where``, the key and the
    value for each value no quota can be (the throttle math would divide by zero, throttle
    by a negative time or mute every client)."""
    values, refused = parse_values(where, config)
    for key, text in refused.items():
        logger.warning(
            "client quota %s=%r of %s ignored: a quota must be a positive number (bytes per "
            "second, or percent for request_percentage); set it again with spark-mq quotas "
            "alter, or delete the key",
            key,
            text,
            where,
        )
    return values


class FileQuotaBackend:
    """``client-quotas.json`` in a single node's log directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / QUOTAS_FILE
        self._file = JsonStateFile(
            self.path,
            "{path}: not a client quotas file ({reason}); restore it from a backup or remove "
            "it and set the quotas again with spark-mq quotas alter",
            version=FILE_VERSION,
        )
        #: The file's entities as stored (values as text, those no quota can be included:
        #: a rewrite for another entity keeps them as the operator wrote them).
        self._entities: dict[str, dict[str, str]] = {}

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        found = self._file.read_section("entities", _StoredEntities.parse)
        if found is None:
            return {}
        if found.migrated:
            logger.warning(
                "%s: entity keys written before entity names were sanitized are migrated: %s",
                self.path,
                "; ".join(found.migrated),
            )
            try:
                self._file.write({"entities": found.entities})
            except OSError as exc:
                # The migrated map is in force; the next alteration writes it again.
                logger.warning("%s: the migrated file could not be written: %s", self.path, exc)
        self._entities = found.entities
        out = {}
        for path, config in found.entities.items():
            entity = QuotaEntity.from_path(path)
            values = decode_values(f"{entity} ({path} in {self.path})", config)
            if values:
                out[entity] = values
        return out

    def alter_entity(self, entity: QuotaEntity, update: QuotasUpdate) -> dict[str, float]:
        stored = self._entities.get(entity.path, {})
        # A value no quota can be was warned about at load; the alteration replaces it.
        values = update(parse_values(entity.path, stored)[0])
        entities = with_entry(self._entities, entity.path, encode_values(values))
        self._file.write({"entities": entities})
        self._entities = entities
        return values


@dataclasses.dataclass(frozen=True)
class _StoredEntities:
    """The ``entities`` of ``client-quotas.json`` keyed by sanitized entity path, and a line
    for each old key merged into its sanitized one."""

    entities: dict[str, dict[str, str]]
    migrated: list[str]

    @classmethod
    def parse(cls, entities: dict[str, Any]) -> _StoredEntities:
        """ValueError (the file is refused) for a key that is not an entity path, a config
        that is not an object or a quota that is not a number."""
        canonical: dict[str, dict[str, str]] = {}
        old: dict[str, list[tuple[str, dict[str, str]]]] = {}
        for path, config in entities.items():
            if not isinstance(config, dict):
                raise ValueError(f"the quotas of {path} must be an object")
            text = {str(k): str(v) for k, v in config.items()}
            parse_values(path, text)
            sanitized = QuotaEntity.from_path(path).path
            if sanitized == path:
                canonical[path] = text
            else:
                old.setdefault(sanitized, []).append((path, text))
        migrated = []
        for sanitized, sources in sorted(old.items()):
            merged: dict[str, str] = {}
            sources.sort(key=lambda source: source[0])
            for _, text in sources:
                merged.update(text)
            newer = canonical.get(sanitized, {})
            overridden = [
                f"{k}={v} kept over the old {merged[k]}"
                for k, v in newer.items()
                if merged.get(k, v) != v
            ]
            canonical[sanitized] = {**merged, **newer}
            line = f"{', '.join(p for p, _ in sources)} -> {sanitized}"
            if overridden:
                line += f" ({', '.join(overridden)})"
            migrated.append(line)
        return cls(canonical, migrated)


def apply_ops(
    entity: QuotaEntity, current: Mapping[str, float], ops: list[QuotaOp]
) -> dict[str, float]:
    """The entity's quotas after ``ops``; InvalidRequestError for a bad op (nothing is
    applied then): an unknown key, a value that is not positive, a key altered twice."""
    new = dict(current)
    seen: set[str] = set()
    for op in ops:
        if op.key in seen:
            raise InvalidRequestError(f"quota {op.key} of {entity} is altered twice in one request")
        seen.add(op.key)
        if op.remove:
            check_value(entity, op.key, 1.0)
            new.pop(op.key, None)
        else:
            check_value(entity, op.key, op.value)
            new[op.key] = float(op.value)
    return new


class QuotaStore:
    """The quotas of every entity, durably in a backend and in force in the manager."""

    def __init__(self, backend: QuotaBackend, manager: ClientQuotaManager) -> None:
        self._lock = threading.Lock()
        self._backend = backend
        self._manager = manager
        self._configs = backend.load()
        manager.update_configs(self._configs)

    def use_backend(self, backend: QuotaBackend) -> None:
        """Switch to ``backend`` (a cluster broker's ZooKeeper) and load from it."""
        configs = backend.load()
        with self._lock:
            self._backend = backend
            self._configs = configs
            self._manager.update_configs(configs)

    def configs(self) -> dict[QuotaEntity, dict[str, float]]:
        with self._lock:
            return {e: dict(v) for e, v in self._configs.items()}

    def replace_entity(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """What the backend now holds for ``entity`` (the cluster's change watcher)."""
        with self._lock:
            if values:
                self._configs[entity] = dict(values)
            else:
                self._configs.pop(entity, None)
            self._manager.update_configs(self._configs)

    def alter(self, entity: QuotaEntity, ops: list[QuotaOp], *, validate_only: bool) -> None:
        """Apply ``ops`` to the entity durably, then in force (InvalidRequestError for bad
        ops, nothing written)."""
        with self._lock:
            if validate_only:
                apply_ops(entity, self._configs.get(entity, {}), ops)
                return
            new = self._backend.alter_entity(entity, lambda now: apply_ops(entity, now, ops))
        self.replace_entity(entity, new)
