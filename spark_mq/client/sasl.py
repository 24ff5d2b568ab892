"""A client's side of SASL: the credentials from its settings, and the exchange it runs on
every new connection to a SASL listener (Kafka's SaslClientAuthenticator).

Settings, Kafka's and librdkafka's names (``docs/clients.md``):

- ``security.protocol``: ``PLAINTEXT`` (default) or ``SASL_PLAINTEXT``;
- ``sasl.mechanism``: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (Kafka's default is
  GSSAPI, which spark_mq does not build; ours is SCRAM-SHA-512);
- ``sasl.username`` / ``sasl.password`` (librdkafka's), or ``sasl.jaas.config`` (the Java
  client's form)::

      org.apache.kafka.common.security.scram.ScramLoginModule required \
          username="alice" password="s3cret";
      org.apache.kafka.common.security.plain.PlainLoginModule required \
          username="alice" password="s3cret";

(one line; broken here to fit). A delegation token, as Kafka's clients prove one (KIP-48),
is the ScramLoginModule with the token id as username, its HMAC as password and the option
``tokenauth="true"``: the client-first message then carries the SCRAM extension
``tokenauth=true`` (the embedded broker's token listener takes only that; docs/security.md).

The exchange, right after the connection opens (protocol/sasl.py): SaslHandshake with the
mechanism, then SaslAuthenticate messages (PLAIN: one; SCRAM: two, with the ``scramp``
library's client, which also checks the server's signature, so a broker that does not know
the credential cannot pass as one that does). A refusal raises
:class:`~spark_mq.errors.AuthenticationError` naming the mechanism and user, never the
password; the broker has closed the connection.

Re-authentication (Kafka's KIP-368): the SaslAuthenticate response that completes the
exchange says how long the session lasts (``session_lifetime_ms``; 0: for ever, the broker's
``connections.max.reauth.ms`` is off). :class:`~spark_mq.client.connection.BrokerConnection`
runs the same exchange again on the same connection before that, between requests
(:meth:`SaslCredentials.authenticate` with ``reauthenticating``); a refusal then (a user
removed, or whose password changed) raises the same AuthenticationError, saying it was a
re-authentication.

Passwords are held in :class:`Password`, whose ``repr`` and ``str`` are ``[hidden]`` (Kafka's
``Password`` type), so a config printed in a log or an error does not show them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Final

import scramp

from spark_mq.errors import (
    AuthenticationError,
    ConfigError,
    IllegalSaslStateError,
    UnsupportedSaslMechanismError,
)
from spark_mq.protocol.error_codes import ErrorCode
from spark_mq.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

if TYPE_CHECKING:
    from spark_mq.client.connection import BrokerConnection

MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: The SCRAM extension a delegation token's client-first message carries (Kafka's).
TOKEN_AUTH_EXTENSION: Final = "tokenauth=true"
#: The JAAS login module of each mechanism (Kafka's class names).
LOGIN_MODULES: Final = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_FLAGS: Final = ("required", "requisite", "sufficient", "optional")
_JAAS: Final = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<options>.*?);?\s*", re.DOTALL)
_OPTION: Final = re.compile(
    r'\s*(?P<key>[\w.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s";]+))'
)


class Password:
    """A secret setting: ``value`` is the text; it never shows in repr or str."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __bool__(self) -> bool:
        return bool(self.value)


def parse_password(key: str, value: object) -> Password:
    if isinstance(value, Password):
        return value
    if isinstance(value, str):
        return Password(value)
    raise ConfigError(f"{key} must be a string", key=key)


def parse_jaas_config(key: str, value: object) -> Password:
    """``sasl.jaas.config`` is secret (it holds the password); checked when resolved."""
    return parse_password(key, value)


def parse_jaas(text: str, mechanism: str) -> tuple[str, str, bool]:
    """(username, password, tokenauth) from a ``sasl.jaas.config`` for ``mechanism``;
    ConfigError saying what is wrong (never quoting the value: it holds the password)."""
    key = "sasl.jaas.config"
    match = _JAAS.fullmatch(text)
    if match is None or match["flag"] not in _FLAGS:
        raise ConfigError(
            f'{key} must look like \'<LoginModule class> required username="..." '
            f"password=\"...\";' (the Java client's form)",
            key=key,
        )
    expected = LOGIN_MODULES[mechanism]
    if match["module"] != expected:
        raise ConfigError(
            f"{key} names the login module {match['module']}, but sasl.mechanism={mechanism} "
            f"needs {expected}",
            key=key,
        )
    options: dict[str, str] = {}
    rest = match["options"]
    pos = 0
    while rest[pos:].strip():
        option = _OPTION.match(rest, pos)
        if option is None:
            raise ConfigError(
                f"{key}: cannot read the options after the flag at character {pos}: write "
                'them as name="value" separated by spaces',
                key=key,
            )
        quoted = option["quoted"]
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option["bare"]
        options[option["key"]] = value
        pos = option.end()
    missing = [name for name in ("username", "password") if name not in options]
    if missing:
        raise ConfigError(f"{key} lacks {' and '.join(missing)}", key=key)
    token_auth = options.get("tokenauth", "false").strip().lower() == "true"
    if token_auth and mechanism not in SCRAM_MECHANISMS:
        raise ConfigError(
            f'{key}: tokenauth="true" (a delegation token) needs a SCRAM mechanism, not '
            f"sasl.mechanism={mechanism}",
            key=key,
        )
    return options["username"], options["password"], token_auth


@dataclasses.dataclass(frozen=True, slots=True)
class SaslCredentials:
    """What a client authenticates with: mechanism, user and password; with
    ``token_auth`` the user is a delegation token's id and the password its HMAC."""

    mechanism: str
    username: str
    password: Password
    token_auth: bool = False

    @classmethod
    def from_settings(
        cls,
        security_protocol: str,
        mechanism: str,
        username: str,
        password: Password,
        jaas_config: Password,
    ) -> SaslCredentials | None:
        """The credentials for ``security.protocol`` (None for PLAINTEXT); ConfigError
        when a SASL protocol lacks them or they are given twice."""
        if security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return None
        token_auth = False
        if jaas_config:
            if username or password:
                raise ConfigError(
                    "give either sasl.jaas.config or sasl.username and sasl.password, not both",
                    key="sasl.jaas.config",
                )
            username, text, token_auth = parse_jaas(jaas_config.value, mechanism)
            password = Password(text)
        if not username or not password:
            raise ConfigError(
                f"security.protocol={security_protocol} needs credentials: sasl.username and "
                "sasl.password, or sasl.jaas.config",
                key="sasl.username",
            )
        return cls(mechanism, username, password, token_auth)

    def authenticate(
        self,
        conn: BrokerConnection,
        timeout_s: float | None = None,
        *,
        reauthenticating: bool = False,
    ) -> int:
        """Run the exchange on ``conn`` (freshly opened, or with nothing in flight when
        ``reauthenticating``); returns the session's lifetime in ms (0: it does not expire).
        AuthenticationError (or one of its subclasses) if the broker refuses; the connection
        is closed then."""
        try:
            return self._exchange(conn, timeout_s, reauthenticating)
        except AuthenticationError:
            conn.close()
            raise

    def _exchange(
        self, conn: BrokerConnection, timeout_s: float | None, reauthenticating: bool
    ) -> int:
        what = "re-authentication" if reauthenticating else "authentication"
        who = f"user {self.username!r}"
        handshake: SaslHandshakeResponse = conn.request(
            SaslHandshakeRequest(self.mechanism), timeout_s=timeout_s
        )
        if handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise UnsupportedSaslMechanismError(
                f"broker {conn.address} does not enable SASL {self.mechanism} (it enables "
                f"{', '.join(handshake.mechanisms) or 'none'}); set sasl.mechanism to one of "
                "them",
                mechanism=self.mechanism,
                user=self.username,
            )
        if handshake.error_code != 0:
            raise IllegalSaslStateError(
                f"broker {conn.address} refused the SASL handshake for {who} (error "
                f"{handshake.error_code}): is this a SASL_PLAINTEXT listener?",
                mechanism=self.mechanism,
                user=self.username,
            )
        if self.mechanism == "PLAIN":
            message = f"\0{self.username}\0{self.password.value}".encode()
            return self._send(conn, message, timeout_s, what).session_lifetime_ms
        client = scramp.ScramClient([self.mechanism], self.username, self.password.value)
        client_first = client.get_client_first()
        if self.token_auth:
            # The extension is part of the bare message both sides sign (RFC 5802's
            # AuthMessage), as Kafka's ScramSaslClient sends it.
            client_first += f",{TOKEN_AUTH_EXTENSION}"
            client.client_first_bare += f",{TOKEN_AUTH_EXTENSION}"
        first = self._send(conn, client_first.encode(), timeout_s, what)
        try:
            client.set_server_first(bytes(first.auth_bytes).decode())
            final = self._send(conn, client.get_client_final().encode(), timeout_s, what)
            client.set_server_final(bytes(final.auth_bytes).decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            conn.close()
            raise AuthenticationError(
                f"SASL {self.mechanism} {what} of {who} with broker {conn.address} "
                f"failed: the broker's SCRAM answer does not check out ({exc}); it may not "
                "be the broker it claims to be",
                mechanism=self.mechanism,
                user=self.username,
            ) from exc
        return final.session_lifetime_ms

    def _send(
        self, conn: BrokerConnection, message: bytes, timeout_s: float | None, what: str
    ) -> SaslAuthenticateResponse:
        response: SaslAuthenticateResponse = conn.request(
            SaslAuthenticateRequest(message), timeout_s=timeout_s
        )
        if response.error_code != 0:
            detail = response.error_message or f"error {response.error_code}"
            raise AuthenticationError(
                f"broker {conn.address} refused SASL {self.mechanism} {what} of user "
                f"{self.username!r}: {detail}",
                mechanism=self.mechanism,
                user=self.username,
            )
        return response
