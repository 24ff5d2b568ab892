"""Where client quotas are kept: the log directory of a single node, ZooKeeper for a
cluster (:mod:`spark_mq.broker.zk.client_quotas`), and how an alteration is applied.

**Single node**: ``client-quotas.json`` in the log directory::

    {"version": 1, "entities": {"users/alice": {"producer_byte_rate": "1048576"},
                                "clients/<default>": {"consumer_byte_rate": "2097152"}}}

keyed by entity path (:attr:`~spark_mq.broker.quotas.entity.QuotaEntity.path`), values as
strings as Kafka writes them to ZooKeeper. It is a
:class:`~spark_mq.broker.json_state_file.JsonStateFile`, like the SCRAM credentials beside it:
written whole and atomically (a crash leaves the old file or the new one), mode 0600. An
unreadable file stops the broker with :class:`~spark_mq.errors.CorruptCheckpointError`
naming it rather than serving with no quotas.

**Cluster**: ``/config/users/<u>``, ``/config/users/<u>/clients/<c>`` and
``/config/clients/<c>`` as Kafka keeps them, each change announced under
``/config/changes`` so that every broker reloads the entity.

Threads: an AlterClientQuotas handler writes on the executor, the ZooKeeper sync on its
thread; one lock orders the writes, and the manager gets the whole new map after each.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, Protocol

from spark_mq.broker.json_state_file import JsonStateFile, with_entry
from spark_mq.errors import InvalidRequestError
from spark_mq.protocol.quotas import QUOTA_KEYS, QuotaOp

from .entity import QuotaEntity, check_value
from .manager import ClientQuotaManager

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


def decode_values(where: str, config: Mapping[str, object]) -> dict[str, float]:
    """An entity's quotas from its stored config; keys that are not quotas (a user's SCRAM
    credentials share Kafka's ``/config/users/<u>``) are left out. ValueError if a quota
    value is not a number."""
    out = {}
    for key, text in config.items():
        if key not in QUOTA_KEYS:
            continue
        try:
            out[key] = float(str(text))
        except ValueError:
            raise ValueError(f"{where}: quota {key}={text!r} is not a number") from None
    return out


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
        self._entities: dict[str, dict[str, str]] = {}

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        out = self._file.read_section(
            "entities",
            lambda entities: {
                QuotaEntity.from_path(path): decode_values(path, config)
                for path, config in entities.items()
            },
        )
        if out is None:
            return {}
        self._entities = {e.path: encode_values(v) for e, v in out.items()}
        return out

    def alter_entity(self, entity: QuotaEntity, update: QuotasUpdate) -> dict[str, float]:
        stored = self._entities.get(entity.path, {})
        values = update(decode_values(entity.path, stored))
        entities = with_entry(self._entities, entity.path, encode_values(values))
        self._file.write({"entities": entities})
        self._entities = entities
        return values


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
