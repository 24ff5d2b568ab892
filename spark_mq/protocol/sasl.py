"""SASL authentication and SCRAM users: SaslHandshake (17), SaslAuthenticate (36),
DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), Kafka's APIs field for
field where the field means the same here (Kafka's camelCase names in snake case).

On a ``SASL_PLAINTEXT://`` listener a connection authenticates before anything else (only
ApiVersions may come first): SaslHandshake names the mechanism (``PLAIN``, ``SCRAM-SHA-256``,
``SCRAM-SHA-512``); the broker answers with the mechanisms it enables. Then SaslAuthenticate
requests carry the mechanism's own bytes, as Kafka's KIP-152 framing does: one for PLAIN
(``authzid NUL user NUL password``, RFC 4616), two for SCRAM (client-first and client-final
messages, RFC 5802); each response carries the server's bytes. A failure is
``SASL_AUTHENTICATION_FAILED`` (58) with a message naming the mechanism and the user (never
the secret), and the broker closes the connection. With ``connections.max.reauth.ms`` the
session has a lifetime, and the client runs the exchange again on the same connection before
it ends (Kafka's KIP-368 re-authentication).

AlterUserScramCredentials carries what Kafka's Admin sends: the *salted* password
(``SaltedPassword`` of RFC 5802, computed by the client with the salt and iteration count it
chose), never the password; the broker derives the stored and server keys from it and keeps
those (docs/security.md).
"""

from __future__ import annotations

import msgspec

# -- SaslHandshake (17) -----------------------------------------------------------------------


class SaslHandshakeRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """The mechanism the client wants: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."""

    mechanism: str


class SaslHandshakeResponse(msgspec.Struct, array_like=True):
    """0, or UNSUPPORTED_SASL_MECHANISM (33) / ILLEGAL_SASL_STATE (34); ``mechanisms`` lists
    what the listener enables either way."""

    error_code: int
    mechanisms: list[str]


def sasl_handshake_error(
    _: SaslHandshakeRequest, code: int, _message: str
) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(code, [])


# -- SaslAuthenticate (36) --------------------------------------------------------------------


class SaslAuthenticateRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """One message of the mechanism's exchange, from the client."""

    auth_bytes: bytes


class SaslAuthenticateResponse(msgspec.Struct, array_like=True):
    """The server's next message of the exchange (empty when it has none). A non-zero
    ``error_code`` ends the exchange and the connection. ``session_lifetime_ms``, in the
    response that completes the exchange: how long the session lasts before the client must
    re-authenticate on the connection (the broker's ``connections.max.reauth.ms``; 0: for
    ever). Kafka added it in version 1; ours has it at version 0, appended with a default
    (docs/protocol.md, "SASL authentication")."""

    error_code: int
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0


def sasl_authenticate_error(
    _: SaslAuthenticateRequest, code: int, message: str
) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(code, message)


# -- DescribeUserScramCredentials (50) --------------------------------------------------------


class ScramCredentialInfo(msgspec.Struct, array_like=True):
    """One credential of a user: its mechanism and iteration count (never the keys)."""

    mechanism: str
    iterations: int


class DescribeUserScramCredentialsRequest(
    msgspec.Struct, array_like=True, forbid_unknown_fields=True
):
    """The users to describe; None: every user with a credential."""

    users: list[str] | None = None


class DescribeUserScramCredentialsResult(msgspec.Struct, array_like=True):
    """One user: RESOURCE_NOT_FOUND (91) when it has no credential."""

    user: str
    error_code: int
    error_message: str | None
    credential_infos: list[ScramCredentialInfo]


class DescribeUserScramCredentialsResponse(msgspec.Struct, array_like=True):
    error_code: int
    error_message: str | None
    results: list[DescribeUserScramCredentialsResult]


def describe_user_scram_credentials_error(
    _: DescribeUserScramCredentialsRequest, code: int, message: str
) -> DescribeUserScramCredentialsResponse:
    return DescribeUserScramCredentialsResponse(code, message, [])


# -- AlterUserScramCredentials (51) -----------------------------------------------------------


class ScramCredentialDeletion(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Remove the user's credential for one mechanism."""

    name: str
    mechanism: str


class ScramCredentialUpsertion(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Set the user's credential for one mechanism: RFC 5802's SaltedPassword
    (Hi(password, salt, iterations)) with its salt and iteration count."""

    name: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes


class AlterUserScramCredentialsRequest(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    deletions: list[ScramCredentialDeletion]
    upsertions: list[ScramCredentialUpsertion]


class AlterUserScramCredentialsResult(msgspec.Struct, array_like=True):
    """One user's outcome (all of a user's alterations succeed or fail together)."""

    user: str
    error_code: int
    error_message: str | None = None


class AlterUserScramCredentialsResponse(msgspec.Struct, array_like=True):
    results: list[AlterUserScramCredentialsResult]


def alter_user_scram_credentials_error(
    request: AlterUserScramCredentialsRequest, code: int, message: str
) -> AlterUserScramCredentialsResponse:
    users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
    return AlterUserScramCredentialsResponse(
        [AlterUserScramCredentialsResult(user, code, message) for user in users]
    )
