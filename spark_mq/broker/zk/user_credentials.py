"""SCRAM credentials of a cluster's users in ZooKeeper, as Kafka keeps them.

``/config/users/<user>`` (the name URL-encoded, as Kafka's Sanitizer does) holds::

    {"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,server_key=...,iterations=4096"}}

Keys of the config that are not SCRAM mechanisms (Kafka keeps a user's quotas there too)
are kept as they are. **Writing** (:class:`ZkCredentialBackend`, any broker answering
AlterUserScramCredentials): one multi-op sets the znode at the version read (a
compare-and-set: two brokers altering one user at once cannot lose each other's change; the
loser reads again) and creates the change notification ``/config/changes/config_change_<n>``
with ``{"version":2,"entity_path":"users/<user>"}``. **Applying** (:class:`UserCredentialSync`,
one per cluster broker, an entity handler of :class:`~spark_mq.broker.zk.config_changes.
TopicConfigSync`): on each notification the broker reads the user's znode into its
:class:`~spark_mq.broker.sasl.credential_store.CredentialStore`; at start-up and after a new
session it reads every user. Every broker thus authenticates a new or changed user within the
time a watch takes to fire (well under a second on a healthy ensemble).

Only salted keys are in ZooKeeper; anyone who can read it can attempt an offline dictionary
attack on them (4096 PBKDF2 iterations each), which is Kafka's trust boundary too: protect
ZooKeeper.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from spark_mq.broker.sasl.credential_store import (
    CredentialStore,
    UserCredentials,
    decode_user_config,
    encode_user_config,
)
from spark_mq.errors import ConfigError, CorruptZnodeError
from spark_mq.scram import ScramCredential

from . import znodes
from .client import ZkClient
from .entity_configs import alter_entity_config, decode_config

log = logging.getLogger(__name__)


def user_znode(user: str) -> str:
    return f"{znodes.CONFIG_USERS}/{znodes.sanitize_entity_name(user)}"


def read_user(zk: ZkClient, user: str) -> dict[str, ScramCredential]:
    """The user's credentials in ZooKeeper ({} if none)."""
    path = user_znode(user)
    found = zk.get(path)
    if found is None:
        return {}
    try:
        return decode_user_config(user, decode_config(path, found[0]))
    except ConfigError as exc:
        raise CorruptZnodeError(f"znode {path}: {exc}", path=path) from exc


class ZkCredentialBackend:
    """The :class:`~spark_mq.broker.sasl.credential_store.CredentialBackend` of a cluster."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    def load(self) -> dict[str, dict[str, ScramCredential]]:
        out = {}
        for child in self._zk.children(znodes.CONFIG_USERS):
            user = znodes.desanitize_entity_name(child)
            try:
                creds = read_user(self._zk, user)
            except CorruptZnodeError as exc:
                log.error("skipping the credentials of user %r: %s", user, exc)
                continue
            if creds:
                out[user] = creds
        return out

    def write_user(self, user: str, credentials: UserCredentials) -> None:
        def change(current: dict[str, Any] | None) -> dict[str, Any]:
            # The user's other keys (its quotas) stay as they are.
            config = {k: v for k, v in (current or {}).items() if not k.startswith("SCRAM-")}
            config.update(encode_user_config(credentials))
            return config

        alter_entity_config(
            self._zk,
            user_znode(user),
            # The name as in the znode's path (Kafka's): a notification names a path.
            znodes.ConfigChangeNotification(
                znodes.USER_ENTITY, znodes.sanitize_entity_name(user)
            ).encode(),
            change,
            f"writing the SCRAM credentials of user {user!r}",
        )


class UserCredentialSync:
    """Keeps a broker's credential store equal to ZooKeeper's users (an entity handler of
    TopicConfigSync for ``users``)."""

    def __init__(self, zk: ZkClient, store: CredentialStore) -> None:
        self._zk = zk
        self._store = store

    def apply(self, name: str) -> None:
        """Apply the user a notification names (sanitized, as in its znode's path)."""
        name = znodes.desanitize_entity_name(name)
        try:
            creds: Mapping[str, ScramCredential] = read_user(self._zk, name)
        except CorruptZnodeError as exc:
            log.error("not applying the credentials of user %r: %s", name, exc)
            return
        self._store.replace_user(name, creds)
        log.info(
            "applied the SCRAM credentials of user %r from ZooKeeper: %s",
            name,
            ", ".join(sorted(creds)) or "none",
        )

    def apply_all(self) -> None:
        self._store.use_backend(ZkCredentialBackend(self._zk))
