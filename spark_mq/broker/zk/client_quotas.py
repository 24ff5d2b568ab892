"""Client quotas of a cluster in ZooKeeper, as Kafka keeps them.

``/config/users/<u>``, ``/config/users/<u>/clients/<c>`` and ``/config/clients/<c>`` (names
URL-encoded, ``<default>`` for a default entity) each hold::

    {"version":1,"config":{"producer_byte_rate":"1048576","consumer_byte_rate":"2097152"}}

``/config/users/<u>`` is shared with the user's SCRAM credentials
(:mod:`spark_mq.broker.zk.user_credentials`): each writer keeps the other's keys. A parent
that must exist for a user+client-id entity is created holding an empty config, which both
readers take as "nothing here".

**Writing** (:class:`ZkQuotaBackend`, any broker answering AlterClientQuotas): one multi-op
sets the znode at the version read (a compare-and-set; the loser of a race reads again) and
creates the notification ``/config/changes/config_change_<n>`` with Kafka's entity path
(``users/<u>``, ``users/<u>/clients/<c>`` or ``clients/<c>``). **Applying**
(:class:`ClientQuotaSync`, an entity handler of
:class:`~spark_mq.broker.zk.config_changes.TopicConfigSync` for ``users`` and ``clients``):
on each notification the broker reads the entity's znode into its
:class:`~spark_mq.broker.quotas.store.QuotaStore`; at start-up and after a new session it
reads every entity. Every broker thus applies a change within the time a watch takes to fire.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

from kazoo.exceptions import NodeExistsError

from spark_mq.broker.quotas.entity import QuotaEntity
from spark_mq.broker.quotas.store import (
    QuotaStore,
    QuotasUpdate,
    decode_values,
    encode_values,
    parse_values,
)
from spark_mq.errors import CorruptZnodeError
from spark_mq.protocol.quotas import QUOTA_KEYS

from . import znodes
from .client import ZkClient, translate_errors
from .entity_configs import alter_entity_config, decode_config, encode_config

log = logging.getLogger(__name__)

#: Kafka's path of client-id configs.
CONFIG_CLIENTS: Final = "/config/clients"
#: Kafka's entity type of client-id configs, in notifications.
CLIENT_ENTITY: Final = "clients"
_EMPTY: Final = encode_config({})


def entity_znode(entity: QuotaEntity) -> str:
    return f"{znodes.CONFIG}/{entity.path}"


def read_entity(zk: ZkClient, entity: QuotaEntity) -> dict[str, float]:
    """The entity's quotas in ZooKeeper ({} if none)."""
    path = entity_znode(entity)
    found = zk.get(path)
    if found is None or not found[0]:
        return {}
    try:
        return decode_values(path, decode_config(path, found[0]))
    except ValueError as exc:
        raise CorruptZnodeError(f"znode {path}: {exc}", path=path) from exc


def _entities(zk: ZkClient) -> list[QuotaEntity]:
    out = []
    for user in zk.children(znodes.CONFIG_USERS):
        out.append(QuotaEntity.from_path(f"users/{user}"))
        for client in zk.children(f"{znodes.CONFIG_USERS}/{user}/clients"):
            out.append(QuotaEntity.from_path(f"users/{user}/clients/{client}"))
    out.extend(QuotaEntity.from_path(f"clients/{c}") for c in zk.children(CONFIG_CLIENTS))
    return out


class ZkQuotaBackend:
    """The :class:`~spark_mq.broker.quotas.store.QuotaBackend` of a cluster."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        out = {}
        for entity in _entities(self._zk):
            try:
                values = read_entity(self._zk, entity)
            except CorruptZnodeError as exc:
                log.error("skipping the quotas of %s: %s", entity, exc)
                continue
            if values:
                out[entity] = values
        return out

    def alter_entity(self, entity: QuotaEntity, update: QuotasUpdate) -> dict[str, float]:
        path = entity_znode(entity)
        written: dict[str, float] = {}

        def change(current: dict[str, Any] | None) -> dict[str, Any]:
            config = current or {}
            try:
                values = parse_values(path, config)[0]
            except ValueError:
                values = {}  # a value no broker could read: the alteration replaces it
            new = update(values)
            written.clear()
            written.update(new)
            # The entity's other keys (a user's SCRAM credentials) stay as they are.
            kept = {k: v for k, v in config.items() if k not in QUOTA_KEYS}
            return {**kept, **encode_values(new)}

        self._make_parents(entity)
        alter_entity_config(
            self._zk,
            path,
            json.dumps({"version": 2, "entity_path": entity.path}, separators=(",", ":")).encode(),
            change,
            f"writing the quotas of {entity}",
        )
        return written

    def _make_parents(self, entity: QuotaEntity) -> None:
        """The znodes above the entity's (an empty config for a user's)."""
        with translate_errors(f"creating the parents of {entity_znode(entity)}"):
            kazoo = self._zk.kazoo
            if entity.user is None:
                kazoo.ensure_path(CONFIG_CLIENTS)
            elif entity.client_id is not None:
                user_path = entity_znode(QuotaEntity(entity.user, None))
                kazoo.ensure_path(znodes.CONFIG_USERS)
                with contextlib.suppress(NodeExistsError):
                    kazoo.create(user_path, _EMPTY)
                kazoo.ensure_path(f"{user_path}/clients")


class ClientQuotaSync:
    """Keeps a broker's quotas equal to ZooKeeper's: the entity handler of
    ``clients`` notifications, and of the ``users`` ones that name quota entities."""

    def __init__(self, zk: ZkClient, store: QuotaStore, entity_type: str) -> None:
        self._zk = zk
        self._store = store
        self._entity_type = entity_type

    def apply(self, name: str) -> None:
        try:
            entity = QuotaEntity.from_path(f"{self._entity_type}/{name}")
            values: Mapping[str, float] = read_entity(self._zk, entity)
        except (ValueError, CorruptZnodeError) as exc:
            log.error("not applying the quotas of %s/%s: %s", self._entity_type, name, exc)
            return
        self._store.replace_entity(entity, values)
        log.info("applied the quotas of %s from ZooKeeper: %s", entity, values or "none")

    def apply_all(self) -> None:
        self._store.use_backend(ZkQuotaBackend(self._zk))


class UserEntitySync:
    """``users`` notifications carry SCRAM credentials (``users/<u>``) and quotas
    (``users/<u>`` and ``users/<u>/clients/<c>``): each goes where it belongs."""

    def __init__(self, credentials: Any, quotas: ClientQuotaSync) -> None:
        self._credentials = credentials
        self._quotas = quotas

    def apply(self, name: str) -> None:
        if "/" not in name:
            self._credentials.apply(name)
        self._quotas.apply(name)

    def apply_all(self) -> None:
        self._credentials.apply_all()
        self._quotas.apply_all()
