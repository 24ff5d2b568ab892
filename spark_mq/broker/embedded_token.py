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
     "owner": "<OS user name>"}

Only the broker that owns DIR creates it (the first time a listener is asked for), so two
writers never race; it is kept across restarts, so an executor holding it still
authenticates with the broker that replaces a dead one. Whoever can read the file (the
directory's owner) can connect: delete it to revoke the token, and the next listener
opened makes a new one. The HMAC is random (``secrets.token_urlsafe``), not derived from a
master key as Kafka's is: there is one token per directory and nothing to derive it from.

The broker never keeps the HMAC in a SCRAM credential's place: it derives one credential
per mechanism (:meth:`EmbeddedToken.credentials`, a fresh salt, 4096 iterations) when the
listener opens.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import secrets
from pathlib import Path
from typing import Final

from spark_mq.broker.json_state_file import JsonStateFile
from spark_mq.scram import SCRAM_HASHES, ScramCredential

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

    @classmethod
    def read(cls, root: str | os.PathLike[str]) -> EmbeddedToken | None:
        """The token kept in ``root``; None if there is none. CorruptCheckpointError naming
        the file if it cannot be read as one (delete it: the broker makes a new one)."""

        def parse(doc: dict[str, object]) -> EmbeddedToken:
            token_id, hmac_text, owner = doc["token_id"], doc["hmac"], doc["owner"]
            if not all(isinstance(v, str) and v for v in (token_id, hmac_text, owner)):
                raise ValueError("token_id, hmac and owner must be non-empty strings")
            return cls(str(token_id), str(hmac_text), str(owner))

        return _token_file(root).read(parse)

    @classmethod
    def load_or_create(cls, root: str | os.PathLike[str]) -> EmbeddedToken:
        """The token of ``root``, made and written (mode 0600) if there is none. Only the
        broker that owns ``root`` calls this."""
        found = cls.read(root)
        if found is not None:
            return found
        token = cls(
            token_id=secrets.token_urlsafe(_ID_BYTES),
            hmac=secrets.token_urlsafe(_HMAC_BYTES),
            owner=_os_user(),
        )
        _token_file(root).write(
            {"token_id": token.token_id, "hmac": token.hmac, "owner": token.owner}
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


def _token_file(root: str | os.PathLike[str]) -> JsonStateFile:
    # Written in the order of the docstring's example: version, token_id, hmac, owner.
    return JsonStateFile(
        Path(root) / TOKEN_FILE,
        "{path} is not an embedded broker token ({reason}); delete it and the broker makes a "
        "new one when a Spark query next needs its TCP listener (executors holding the old "
        "one are then refused)",
        version=FILE_VERSION,
        sort_keys=False,
        max_bytes=_MAX_FILE_BYTES,
    )


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
