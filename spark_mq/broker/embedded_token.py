"""The embedded broker's token: the secret that guards its TCP listener for Spark executors.

docs/security.md, "The embedded broker's token". A broker started for ``path=DIR`` listens
on its owner-only Unix socket; when a Spark query's executors must reach it from other hosts
the driver asks it to open a TCP listener (:mod:`spark_mq.broker.handlers.token_listener`),
and every connection there must prove that it holds this token, the way a Kafka client
proves a delegation token (KIP-48): SASL SCRAM-SHA-256 or SCRAM-SHA-512 with the token id as
user name, the token's HMAC as password and the SCRAM extension ``tokenauth=true``. The
connection's principal is then the token's owner, ``User:<owner>``, as in Kafka.

The token is kept in ``DIR/embedded-token.json``, a
:class:`~spark_mq.broker.json_state_file.JsonStateFile` (mode 0600, replaced atomically)::

    {"version": 1, "token_id": "<22 url-safe chars>", "hmac": "<43 url-safe chars>",
     "owner": "<OS user name>", "expiry_ms": <Unix time, ms>}

Only the broker that owns DIR creates it (the first time a listener is asked for), so two
writers never race; it is kept across restarts, so an executor holding it still
authenticates with the broker that replaces a dead one.

It expires as a Kafka delegation token does: ``delegation.token.expiry.time.ms`` (Kafka's
key and default, 24 hours) after it was made or last renewed, and an expired token
authenticates nothing. Every OpenTokenListener renews it (a Spark driver sends one each time
it plans a batch or creates a writer, so the queries that use it keep it alive, as Spark's
driver renews a Kafka query's delegation tokens); the file is rewritten only when less than
half of the lifetime is left. A token found expired is replaced by a new one. A file
without ``expiry_ms`` (written before tokens expired) is renewed at the next request.

Whoever can read the file (the directory's owner) can connect: delete it to revoke the
token. A running broker refuses it from the next connection on (:class:`TokenKeeper`), and
makes a new one when a driver next asks for a listener. The HMAC is random
(``secrets.token_urlsafe``), not derived from a master key as Kafka's is: there is one token
per directory and nothing to derive it from.

The broker never keeps the HMAC in a SCRAM credential's place: it derives one credential
per mechanism (:meth:`EmbeddedToken.credentials`, a fresh salt, 4096 iterations) when it
first sees the token (:class:`TokenKeeper`).
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from spark_mq.broker.json_state_file import JsonStateFile
from spark_mq.errors import CorruptCheckpointError
from spark_mq.scram import SCRAM_HASHES, ScramCredential

logger = logging.getLogger(__name__)

TOKEN_FILE: Final = "embedded-token.json"
FILE_VERSION: Final = 1
#: The SCRAM extension that says the user name is a token id (Kafka's ScramLoginModule
#: option and ScramExtensions key).
TOKEN_AUTH_EXTENSION: Final = "tokenauth"
#: Random bytes in a token id and in its HMAC.
_ID_BYTES: Final = 16
_HMAC_BYTES: Final = 32
_MAX_FILE_BYTES: Final = 4096


@dataclasses.dataclass(frozen=True)
class EmbeddedToken:
    """A directory's token: its id (the SCRAM user name), its HMAC (the password, never
    printed) and its owner (the principal a connection that proves it becomes)."""

    token_id: str
    hmac: str = dataclasses.field(repr=False)
    owner: str = ""
    #: When it expires, Unix time in ms (0: never recorded; renewed at the next request).
    #: Not part of its identity: a renewed token is the same token.
    expiry_ms: int = dataclasses.field(default=0, compare=False)

    def expired(self, now_ms: int) -> bool:
        return 0 < self.expiry_ms <= now_ms

    @classmethod
    def read(cls, root: str | os.PathLike[str]) -> EmbeddedToken | None:
        """The token kept in ``root``; None if there is none. CorruptCheckpointError naming
        the file if it cannot be read as one (delete it: the broker makes a new one)."""

        def parse(doc: dict[str, object]) -> EmbeddedToken:
            token_id, hmac_text, owner = doc["token_id"], doc["hmac"], doc["owner"]
            if not all(isinstance(v, str) and v for v in (token_id, hmac_text, owner)):
                raise ValueError("token_id, hmac and owner must be non-empty strings")
            expiry_ms = doc.get("expiry_ms", 0)
            if type(expiry_ms) is not int or expiry_ms < 0:
                raise ValueError("expiry_ms must be a non-negative integer")
            return cls(str(token_id), str(hmac_text), str(owner), expiry_ms)

        return _token_file(root).read(parse)

    @classmethod
    def issue_or_renew(
        cls, root: str | os.PathLike[str], lifetime_ms: int, now_ms: int
    ) -> EmbeddedToken:
        """The token of ``root``, renewed to expire ``lifetime_ms`` from ``now_ms`` when less
        than half of that is left (or more than all of it: the lifetime was shortened);
        a new one if there is none, it expired, or the file can be read by others than its
        owner (group or other bits set: copied, restored or chmod-ed; whoever could read it
        may hold it). Written with mode 0600. Only the broker that owns ``root`` calls
        this."""
        found = cls.read(root)
        if found is not None and _exposed_and_fixable(Path(root) / TOKEN_FILE):
            logger.warning(
                "%s could be read by others than its owner: replaced by a new token (mode "
                "0600); connections holding the old one are refused",
                Path(root) / TOKEN_FILE,
            )
            found = None
        if found is not None and not found.expired(now_ms):
            left_ms = found.expiry_ms - now_ms
            if lifetime_ms / 2 <= left_ms <= lifetime_ms:
                return found
            token = dataclasses.replace(found, expiry_ms=now_ms + lifetime_ms)
        else:
            token = cls(
                token_id=secrets.token_urlsafe(_ID_BYTES),
                hmac=secrets.token_urlsafe(_HMAC_BYTES),
                owner=_os_user(),
                expiry_ms=now_ms + lifetime_ms,
            )
        _token_file(root).write(
            {
                "token_id": token.token_id,
                "hmac": token.hmac,
                "owner": token.owner,
                "expiry_ms": token.expiry_ms,
            }
        )
        return token

    def credentials(self) -> dict[str, ScramCredential]:
        """One SCRAM credential per mechanism, derived from the HMAC with a fresh salt."""
        return {
            mechanism: ScramCredential.from_password(mechanism, self.hmac)
            for mechanism in SCRAM_HASHES
        }

    def jaas_config(self) -> str:
        """The client's ``sasl.jaas.config`` that proves this token, as a Kafka client
        writes one for a delegation token (a secret: wrap it in a client Password)."""
        return (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{self.token_id}" password="{self.hmac}" '
            f'{TOKEN_AUTH_EXTENSION}="true";'
        )


@dataclasses.dataclass(frozen=True)
class TokenCredentials:
    """What a token listener checks a connection against: the token id, its owner and its
    SCRAM credentials."""

    token_id: str
    owner: str
    by_mechanism: dict[str, ScramCredential]

    @classmethod
    def of(cls, token: EmbeddedToken) -> TokenCredentials:
        return cls(token.token_id, token.owner, token.credentials())


#: What a token listener checks against when the directory has no readable token (deleted
#: to revoke it, or corrupt): no token id matches, so every connection is refused.
REVOKED: Final = TokenCredentials("", "", {})


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TokenKeeper:
    """The credentials a token listener checks new connections against, kept in step with
    ``DIR/embedded-token.json``: deleting the file revokes the token for every connection
    accepted after, and a new token (the next OpenTokenListener makes one) is taken up at
    once, without a broker restart; an expired token authenticates nothing. Connections
    already authenticated keep going, as a Kafka connection does when its delegation token
    expires or is cancelled (until it re-authenticates).

    :meth:`current` runs at every accept on the event loop: one ``stat`` of the file; the
    file is read only when it changed (another inode, size or modification time), and the
    SCRAM credentials derived (PBKDF2, a few milliseconds) only for another token, not a
    renewal. ``wall_ms`` is the clock expiry is measured on (Unix time, ms; injected).
    """

    def __init__(
        self, root: str | os.PathLike[str], *, wall_ms: Callable[[], int] = _wall_ms
    ) -> None:
        self._path = Path(root) / TOKEN_FILE
        self._root = Path(root)
        self._wall_ms = wall_ms
        self._seen: tuple[int, int, int, int] | None = None
        self._token: EmbeddedToken | None = None
        self._credentials = REVOKED
        self._expiry_logged: str | None = None

    def current(self) -> TokenCredentials:
        """The token's credentials as the file now holds them; :data:`REVOKED` if there is
        no readable token or it expired."""
        try:
            st = os.stat(self._path)
        except OSError:  # gone (revoked), or unreadable: nothing authenticates
            self._seen, self._token, self._credentials = None, None, REVOKED
            return REVOKED
        seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if seen != self._seen:
            try:
                token = EmbeddedToken.read(self._root)
            except (CorruptCheckpointError, OSError) as exc:
                logger.warning("token listener: refusing every connection: %s", exc)
                token = None
            if token is None:
                self._credentials = REVOKED
            elif token != self._token:
                self._credentials = TokenCredentials.of(token)
            self._token, self._seen = token, seen
        token = self._token
        if token is None:
            return REVOKED
        if token.expired(self._wall_ms()):
            if self._expiry_logged != token.token_id:
                self._expiry_logged = token.token_id
                logger.warning(
                    "token listener: the token of %s expired (delegation.token.expiry.time.ms "
                    "after it was last renewed; no Spark query asked for a listener since): "
                    "connections are refused until a query's driver asks again, which makes "
                    "a new token",
                    self._root,
                )
            return REVOKED
        return self._credentials


def _exposed_and_fixable(path: Path) -> bool:
    """Whether ``path`` had group or other permission bits that a chmod to 0600 removed. A
    filesystem that does not keep permissions (some network and FUSE mounts report every
    file as 0777) is not "fixable": replacing the token there at every request would fail
    the tasks of every other query holding it, so it is only warned about, once."""
    try:
        if not os.stat(path).st_mode & 0o077:
            return False
        os.chmod(path, 0o600)
        fixed = not os.stat(path).st_mode & 0o077
    except OSError:
        return False
    if not fixed and path not in _MODES_IGNORED:
        _MODES_IGNORED.add(path)
        logger.warning(
            "%s: this filesystem does not keep file permissions, so the token may be read by "
            "other users of the host; keep the log directory on a local filesystem",
            path,
        )
    return fixed


#: Token files on filesystems that ignore chmod, already warned about (one broker, one).
_MODES_IGNORED: set[Path] = set()


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _token_file(root: str | os.PathLike[str]) -> JsonStateFile:
    # Written in the order of the docstring's example: version, token_id, hmac, owner, expiry.
    return JsonStateFile(
        Path(root) / TOKEN_FILE,
        "{path} is not an embedded broker token ({reason}); delete it and the broker makes a "
        "new one when a Spark query next needs its TCP listener (executors holding the old "
        "one are then refused)",
        version=FILE_VERSION,
        sort_keys=False,
        max_bytes=_MAX_FILE_BYTES,
    )
