"""The users a broker authenticates: their SCRAM credentials, per mechanism, in memory,
backed by the log directory (a single node) or ZooKeeper (a cluster).

**Single node**: ``scram-credentials.json`` in the log directory::

    {"version": 1, "users": {"alice": {"SCRAM-SHA-512": "salt=...,stored_key=...,
                                        server_key=...,iterations=4096"}}}

a :class:`~spark_mq.broker.json_state_file.JsonStateFile`: written whole and atomically (a
crash leaves the old file or the new one, never a torn one), mode 0600. It is read at
start-up; an unreadable file stops the broker with :class:`~spark_mq.errors.CorruptCheckpointError`
naming it rather than serving with no users.

**Cluster**: ``/config/users/<user>`` as Kafka keeps them, and a change notification so that
every broker reloads the user (:mod:`spark_mq.broker.zk.user_credentials`). The store holds
what was last read; :meth:`CredentialStore.replace_user` is how the watcher updates it.

Only salted keys are ever stored (:class:`~spark_mq.scram.ScramCredential`); the password
is never written anywhere.

Threads: the event loop reads (authentication), the executor writes (AlterUserScram-
Credentials) and the ZooKeeper watcher's thread replaces users; one lock guards the map.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Protocol

from spark_mq.broker.json_state_file import JsonStateFile, with_entry
from spark_mq.errors import ConfigError
from spark_mq.scram import ScramCredential

log = logging.getLogger(__name__)

#: The file of a single-node broker's credentials, in its log directory.
CREDENTIALS_FILE: Final = "scram-credentials.json"
FILE_VERSION: Final = 1

#: One user's credentials: mechanism -> credential.
UserCredentials = Mapping[str, ScramCredential]


class CredentialBackend(Protocol):
    """Where credentials are kept durably."""

    def load(self) -> dict[str, dict[str, ScramCredential]]:
        """Every user's credentials."""
        ...

    def write_user(self, user: str, credentials: UserCredentials) -> None:
        """Make ``credentials`` the user's (empty: remove the user), durably."""
        ...


def encode_user_config(credentials: UserCredentials) -> dict[str, str]:
    return {mech: cred.to_kafka_string() for mech, cred in sorted(credentials.items())}


def decode_user_config(user: str, config: Mapping[str, object]) -> dict[str, ScramCredential]:
    """A user's ``{"SCRAM-SHA-512": "salt=..."}`` map; keys that are not SCRAM mechanisms
    (a Kafka user's quota settings, say) are not credentials and are left alone."""
    out: dict[str, ScramCredential] = {}
    for mechanism, text in config.items():
        if not mechanism.startswith("SCRAM-"):
            continue
        if not isinstance(text, str):
            raise ConfigError(f"user {user!r}: {mechanism} must be a string", key=mechanism)
        out[mechanism] = ScramCredential.parse(text, mechanism)
    return out


class FileCredentialBackend:
    """``scram-credentials.json`` in a single node's log directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / CREDENTIALS_FILE
        self._file = JsonStateFile(
            self.path,
            "{path}: not a credentials file ({reason}); restore it from a backup or remove it "
            "and add the users again with spark-mq users add",
            version=FILE_VERSION,
        )
        self._users: dict[str, dict[str, str]] = {}

    def load(self) -> dict[str, dict[str, ScramCredential]]:
        out = self._file.read_section(
            "users",
            lambda users: {name: decode_user_config(name, c) for name, c in users.items()},
        )
        if out is None:
            return {}
        self._users = {user: encode_user_config(creds) for user, creds in out.items()}
        return out

    def write_user(self, user: str, credentials: UserCredentials) -> None:
        users = with_entry(self._users, user, encode_user_config(credentials))
        self._file.write({"users": users})
        self._users = users


class CredentialStore:
    """Every user's SCRAM credentials, as the broker last loaded them."""

    def __init__(self, backend: CredentialBackend) -> None:
        self._lock = threading.Lock()
        self._backend = backend
        self._users: dict[str, dict[str, ScramCredential]] = backend.load()

    def use_backend(self, backend: CredentialBackend) -> None:
        """Switch to ``backend`` (a cluster broker's ZooKeeper) and load from it."""
        users = backend.load()
        with self._lock:
            self._backend = backend
            self._users = users

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        with self._lock:
            return dict(self._users.get(user, {}))

    def users(self) -> list[str]:
        with self._lock:
            return sorted(self._users)

    def replace_user(self, user: str, credentials: UserCredentials) -> None:
        """What the backend now holds for ``user`` (the cluster's change watcher)."""
        with self._lock:
            if credentials:
                self._users[user] = dict(credentials)
            else:
                self._users.pop(user, None)

    def alter_user(self, user: str, upserts: list[ScramCredential], deletions: list[str]) -> None:
        """Apply one user's alterations durably, then in memory. ConfigError (as the
        caller's UNACCEPTABLE_CREDENTIAL) for the deletion of a credential not there."""
        with self._lock:
            current = dict(self._users.get(user, {}))
        for mechanism in deletions:
            if mechanism not in current:
                raise ConfigError(
                    f"user {user!r} has no {mechanism} credential to delete",
                    key=mechanism,
                )
            del current[mechanism]
        for cred in upserts:
            current[cred.mechanism] = cred
        self._backend.write_user(user, current)
        self.replace_user(user, current)
        log.info(
            "SCRAM credentials of user %r are now: %s", user, ", ".join(sorted(current)) or "none"
        )
