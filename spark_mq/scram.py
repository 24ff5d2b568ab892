"""SCRAM credentials (RFC 5802 / RFC 7677) as Kafka stores them, never the password.

A credential of one user for one mechanism is what RFC 5802 lets a server keep::

    SaltedPassword = Hi(password, salt, iterations)      (PBKDF2 with the mechanism's HMAC)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

and is written in Kafka's text form (``ScramCredentialUtils.credentialToString``)::

    salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>

The client side of AlterUserScramCredentials computes ``SaltedPassword`` itself (Kafka's
Admin does), so the password never reaches a broker; the broker derives the two keys from
it. PLAIN is checked against the same credential: the broker salts the password it was
sent and compares the stored key, so no plaintext password is kept anywhere.

The primitives are the standard library's (``hashlib.pbkdf2_hmac``, ``hmac``); the SCRAM
exchange itself is the ``scramp`` library's (``broker/sasl/``, ``client/sasl.py``).

>>> cred = ScramCredential.from_password("SCRAM-SHA-256", "secret", salt=b"s" * 16)
>>> ScramCredential.parse(cred.to_kafka_string()) == cred, cred.verify_password("secret")
(True, True)
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
from typing import Final

from spark_mq.errors import ConfigError

#: The SCRAM mechanisms spark_mq implements, with their hash (RFC 7677 and Kafka's 512).
SCRAM_HASHES: Final = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's minimum and default iteration count (ScramMechanism.minIterations: 4096).
MIN_ITERATIONS: Final = 4096
#: Kafka's maximum (ScramMechanism.maxIterations: 16384).
MAX_ITERATIONS: Final = 16384
#: Bytes of a fresh salt (Kafka's ScramFormatter uses a 32-byte nonce-like salt).
SALT_BYTES: Final = 32


def hash_name(mechanism: str) -> str:
    """hashlib's name for a SCRAM mechanism's hash; ConfigError for any other mechanism."""
    try:
        return SCRAM_HASHES[mechanism]
    except KeyError:
        raise ConfigError(
            f"{mechanism!r} is not a SCRAM mechanism; use one of {', '.join(SCRAM_HASHES)}",
            key="mechanism",
            value=mechanism,
        ) from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi(Normalize(password), salt, i)``. The password is used as UTF-8
    without SASLprep, as Kafka's ScramFormatter does."""
    return hashlib.pbkdf2_hmac(hash_name(mechanism), password.encode(), salt, iterations)


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredential:
    """One user's credential for one mechanism (see the module docstring)."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salted: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        digest = hash_name(mechanism)
        client_key = hmac.digest(salted, b"Client Key", digest)
        stored_key = hashlib.new(digest, client_key).digest()
        server_key = hmac.digest(salted, b"Server Key", digest)
        return cls(mechanism, salt, stored_key, server_key, iterations)

    @classmethod
    def from_password(
        cls,
        mechanism: str,
        password: str,
        *,
        salt: bytes | None = None,
        iterations: int = MIN_ITERATIONS,
    ) -> ScramCredential:
        salt = os.urandom(SALT_BYTES) if salt is None else salt
        salted = salted_password(mechanism, password, salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)

    def verify_password(self, password: str) -> bool:
        """Whether ``password`` is the one this credential was made from (for PLAIN);
        the comparison takes the same time wherever the keys differ."""
        salted = salted_password(self.mechanism, password, self.salt, self.iterations)
        again = ScramCredential.from_salted_password(
            self.mechanism, salted, self.salt, self.iterations
        )
        return hmac.compare_digest(again.stored_key, self.stored_key)

    def to_kafka_string(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def parse(cls, text: str, mechanism: str = "SCRAM-SHA-256") -> ScramCredential:
        """Kafka's text form (``mechanism`` is the key it was stored under); ConfigError
        naming what is wrong otherwise."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, eq, value = part.partition("=")
            if not eq:
                raise ConfigError(
                    f"SCRAM credential {part!r} is not name=value; Kafka's form is "
                    "salt=...,stored_key=...,server_key=...,iterations=N",
                    key=mechanism,
                )
            fields[name.strip()] = value.strip()
        missing = {"salt", "stored_key", "server_key", "iterations"} - fields.keys()
        if missing:
            raise ConfigError(
                f"SCRAM credential for {mechanism} lacks {', '.join(sorted(missing))}",
                key=mechanism,
            )
        try:
            salt = base64.b64decode(fields["salt"], validate=True)
            stored = base64.b64decode(fields["stored_key"], validate=True)
            server = base64.b64decode(fields["server_key"], validate=True)
            iterations = int(fields["iterations"])
        except (binascii.Error, ValueError) as exc:
            raise ConfigError(f"SCRAM credential for {mechanism}: {exc}", key=mechanism) from exc
        hash_name(mechanism)
        return cls(mechanism, salt, stored, server, iterations)
