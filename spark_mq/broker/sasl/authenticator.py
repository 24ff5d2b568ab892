"""One connection's SASL exchange on a SASL listener (Kafka's SaslServerAuthenticator).

The connection's state, with the only moves allowed (:data:`TRANSITIONS`)::

    HANDSHAKE ──SaslHandshake(enabled mechanism)──▶ AUTHENTICATING ──last message ok──▶ COMPLETE
        │                                          │    ▲  (SCRAM: client-first, then final) │
        │                                          │    └── SaslHandshake (re-authenticate) ──┤
        └────────── anything wrong ─────────▶ FAILED ◀───── another mechanism ───────────────┘

Until COMPLETE only ApiVersions, SaslHandshake and SaslAuthenticate are served
(:data:`PRE_AUTHENTICATION_APIS`); anything else closes the connection
(``broker/connection.py``). COMPLETE sets the session's principal to ``User:<name>``;
FAILED answers SASL_AUTHENTICATION_FAILED (58) with a message naming the mechanism and the
user (never the password) and closes the connection, as Kafka does.

Re-authentication (Kafka's KIP-368). With ``connections.max.reauth.ms`` above 0 for the
mechanism, COMPLETE gives the session a lifetime: the SaslAuthenticate response that
completes the exchange carries it (``session_lifetime_ms``), and the session *expires* that
long after (:meth:`SaslServerSession.expired`). An expired connection may send only
SaslHandshake, which starts the exchange again on the same connection (COMPLETE ->
AUTHENTICATING); the connection keeps its principal meanwhile, and any other request closes
it (``broker/connection.py``). A re-authentication must use the same mechanism and prove the
same principal, as Kafka's does: another mechanism is refused at SaslHandshake, another user
after its proof; both close the connection. A user removed, or whose password changed, since
the connection authenticated fails the new exchange like any unknown user or wrong password,
so its connection ends at its next expiry. Without a lifetime (the default), a second
SaslHandshake is out of turn, as before. The clock is injected (the broker passes its event
loop's), so that expiry is measured on the same clock as the connection's frames.

Mechanisms:

- ``PLAIN`` (RFC 4616): one message ``[authzid] NUL authcid NUL passwd``. The password is
  checked against the user's SCRAM credential (SCRAM-SHA-512 if the user has one, else
  SCRAM-SHA-256): salted with that credential's salt and iterations and compared by stored
  key, so the broker keeps no password (Kafka's PLAIN reads a JAAS file of plaintext
  passwords instead). The salting takes PBKDF2's time; it runs on the executor.
- ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` (RFC 5802, RFC 7677): the ``scramp`` library's
  server, fed the stored credential. Two messages: client-first (answered with server-first)
  and client-final (answered with server-final, the server's signature).

An unknown user and a wrong password get the same answer, so the answer does not tell which
users exist; the broker's log says which it was.

Tokens (Kafka's delegation tokens, KIP-48): a SCRAM client-first message that carries the
extension ``tokenauth=true`` (``n,,n=<token id>,r=<nonce>,tokenauth=true``) names a token,
not a user. Only a session given the embedded broker's token (:class:`TokenCredentials`, on
its token listener) accepts one: the token id must be that token's and the proof is checked
against the credential derived from its HMAC; the principal is the token's owner. A token
session accepts nothing else (no user, no PLAIN), and any other session refuses a token.
The extension stays in the client-first message that both sides sign (RFC 5802's
AuthMessage), as Kafka's ScramSaslServer keeps it; ``scramp`` parses single-letter
attributes only, so it is handed the message without it and then told the bare message
the client signed.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from typing import Final, NoReturn

import scramp

from spark_mq.broker.embedded_token import TOKEN_AUTH_EXTENSION, TokenCredentials
from spark_mq.broker.sasl.credential_store import CredentialStore
from spark_mq.errors import AuthenticationError, IllegalSaslStateError
from spark_mq.principal import KafkaPrincipal
from spark_mq.protocol.api import ApiKey
from spark_mq.scram import SCRAM_HASHES, ScramCredential

#: What a connection may send on a SASL listener before it has authenticated.
PRE_AUTHENTICATION_APIS: Final = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
#: The longest message of an exchange accepted (a PLAIN message is user and password; a
#: SCRAM message a few hundred bytes): a longer one fails the exchange.
MAX_AUTH_BYTES: Final = 8 * 1024


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATING = "authenticating"
    COMPLETE = "complete"
    FAILED = "failed"


TRANSITIONS: Final[dict[SaslState, frozenset[SaslState]]] = {
    SaslState.HANDSHAKE: frozenset({SaslState.AUTHENTICATING, SaslState.FAILED}),
    SaslState.AUTHENTICATING: frozenset(
        {SaslState.AUTHENTICATING, SaslState.COMPLETE, SaslState.FAILED}
    ),
    # Re-authentication starts over on the same connection, or is refused at its handshake.
    SaslState.COMPLETE: frozenset({SaslState.AUTHENTICATING, SaslState.FAILED}),
    SaslState.FAILED: frozenset(),
}


class ExchangeFailedError(Exception):
    """Why an exchange failed, for the broker's log. The client gets a generic answer, or
    ``for_client`` when the reason tells it nothing it did not know (a re-authentication
    as another user, which it proved to be)."""

    def __init__(self, reason: str, user: str | None, for_client: str | None = None) -> None:
        super().__init__(reason)
        self.user = user
        self.for_client = for_client


class _UnknownUserError(Exception):
    pass


class SaslServerSession:
    """The SASL state of one connection."""

    def __init__(
        self,
        store: CredentialStore,
        enabled: tuple[str, ...],
        token: TokenCredentials | None = None,
        *,
        max_reauth_ms: Mapping[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        #: A token listener's session: only this token authenticates (SCRAM, tokenauth).
        self._token = token
        # A token proves itself with SCRAM only, whatever sasl.enabled.mechanisms says for
        # the SASL listeners of users.
        self.enabled = tuple(SCRAM_HASHES) if token is not None else enabled
        #: Whether the client named a token (the SCRAM extension tokenauth=true).
        self.token_auth = False
        #: connections.max.reauth.ms per mechanism (absent or 0: sessions do not expire).
        self._max_reauth_ms = dict(max_reauth_ms or {})
        #: Seconds, the clock :meth:`expired` is asked with.
        self._clock = clock
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        #: The user the client names (known once its first message is parsed).
        self.user: str | None = None
        self._scram: scramp.core.ScramServer | None = None
        #: The lifetime the last completed exchange gave the session (0: no expiry).
        self.session_lifetime_ms = 0
        #: When the session expires, on ``clock`` (None: never).
        self.expires_at: float | None = None
        #: The (mechanism, user) of the session being re-authenticated (None: the first
        #: authentication of the connection).
        self.previous: tuple[str, str] | None = None

    @property
    def reauthenticating(self) -> bool:
        """Whether the exchange under way (or that just ended) re-authenticates."""
        return self.previous is not None

    def expired(self, now: float) -> bool:
        """Whether the authenticated session's lifetime is over at ``now`` (the clock's
        seconds): the connection must re-authenticate before anything else."""
        expires_at = self.expires_at
        return self.state is SaslState.COMPLETE and expires_at is not None and now >= expires_at

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def _move(self, to: SaslState) -> None:
        if to not in TRANSITIONS[self.state]:
            raise IllegalSaslStateError(
                f"SASL exchange cannot go from {self.state.value} to {to.value}",
                mechanism=self.mechanism,
                user=self.user,
            )
        self.state = to

    def fail(self) -> None:
        """The exchange failed (the connection is being closed). A connection that had
        authenticated keeps its state: what is refused then is a request out of turn, and
        the connection closes all the same."""
        if self.state in (SaslState.HANDSHAKE, SaslState.AUTHENTICATING):
            self._move(SaslState.FAILED)

    def handshake(self, mechanism: str) -> None:
        """SaslHandshake: IllegalSaslStateError out of turn; the caller checks that the
        mechanism is enabled first. On a completed session whose lifetime is limited it
        begins a re-authentication: ExchangeFailedError if ``mechanism`` is not the one the
        session authenticated with (Kafka refuses that too)."""
        if self.state is SaslState.COMPLETE and self.expires_at is not None:
            assert self.mechanism is not None and self.user is not None
            self.previous = (self.mechanism, self.user)
            if mechanism != self.mechanism:
                self._move(SaslState.FAILED)
                reason = (
                    f"re-authentication with SASL {mechanism} of a connection authenticated "
                    f"with {self.mechanism}: a connection keeps its mechanism"
                )
                raise ExchangeFailedError(reason, self.user, reason)
            self._scram = None
            self._move(SaslState.AUTHENTICATING)
            return
        if self.state is not SaslState.HANDSHAKE:
            raise IllegalSaslStateError(
                "SaslHandshake may come only once, before SaslAuthenticate (re-authentication "
                "is off: the broker's connections.max.reauth.ms is 0)"
                if self.state is SaslState.COMPLETE
                else "SaslHandshake may come only once, before SaslAuthenticate",
                mechanism=mechanism,
            )
        self.mechanism = mechanism
        self._move(SaslState.AUTHENTICATING)

    def step(self, message: bytes) -> tuple[bytes, Callable[[], bool] | None]:
        """Feed one SaslAuthenticate message. Returns the server's answer and, for PLAIN,
        the password check to run off the event loop (the caller runs it and passes its
        result to :meth:`finish_plain`). Raises ExchangeFailedError (the caller answers 58 and
        closes) or IllegalSaslStateError."""
        if self.state is not SaslState.AUTHENTICATING:
            raise IllegalSaslStateError(
                "SaslAuthenticate before SaslHandshake, or after the exchange ended",
                mechanism=self.mechanism,
            )
        if len(message) > MAX_AUTH_BYTES:
            self._refuse(f"a message of {len(message)} bytes (the limit is {MAX_AUTH_BYTES})")
        if self.mechanism == "PLAIN":
            return b"", self._plain_check(message)
        return self._scram_step(message), None

    # -- PLAIN ----------------------------------------------------------------------------

    def _plain_check(self, message: bytes) -> Callable[[], bool]:
        parts = message.split(b"\0")
        if len(parts) != 3:
            self._refuse("a PLAIN message that is not authzid NUL user NUL password")
        try:
            authzid, user, password = (part.decode() for part in parts)
        except UnicodeDecodeError:
            self._refuse("a PLAIN message that is not UTF-8")
        self.user = user
        if not user:
            self._refuse("an empty user name")
        if authzid and authzid != user:
            self._refuse(f"authorization id {authzid!r} is not the user (impersonation)")
        creds = self._store.credentials(user)
        cred = creds.get("SCRAM-SHA-512") or creds.get("SCRAM-SHA-256")
        if cred is None:
            self._refuse("unknown user")
        checked: ScramCredential = cred

        def check() -> bool:
            return checked.verify_password(password)

        return check

    def finish_plain(self, ok: bool) -> None:
        if not ok:
            self._refuse("wrong password")
        self._complete()

    # -- SCRAM ----------------------------------------------------------------------------

    def _scram_step(self, message: bytes) -> bytes:
        mechanism = self.mechanism
        assert mechanism in SCRAM_HASHES, mechanism
        try:
            text = message.decode()
        except UnicodeDecodeError:
            self._refuse("a SCRAM message that is not UTF-8")
        signed_bare = ""
        if self._scram is None:
            text, signed_bare = self._take_extensions(text)
        try:
            if self._scram is None:
                self._scram = scramp.ScramMechanism(mechanism).make_server(self._lookup)
                self._scram.set_client_first(text)
                self._scram.client_first_bare = signed_bare
                first: str = self._scram.get_server_first()
                return first.encode()
            self._scram.set_client_final(text)
            final_text: str = self._scram.get_server_final()
            final = final_text.encode()
        except _UnknownUserError:
            self._refuse("unknown user")
        except scramp.ScramException as exc:
            self._refuse(f"SCRAM: {exc}")
        except Exception as exc:  # scramp raises plain errors on malformed messages
            self._refuse(f"a malformed SCRAM message ({type(exc).__name__}: {exc})")
        self._complete()
        return final

    def _take_extensions(self, text: str) -> tuple[str, str]:
        """The client-first message without its extensions (for scramp), and its bare part
        as the client signed it. Records tokenauth; refuses a token where none is served,
        and anything but a token where one is."""
        head, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2:
            return text, text
        kept: list[str] = []
        for attribute in bare.split(","):
            name, eq, value = attribute.partition("=")
            if len(name) > 1 and eq:
                if name == TOKEN_AUTH_EXTENSION:
                    self.token_auth = value.lower() == "true"
                continue  # another extension: ignored, as Kafka ignores unknown ones
            kept.append(attribute)
        if self._token is not None and not self.token_auth:
            self._refuse("this listener accepts only the embedded broker's token (tokenauth)")
        if self._token is None and self.token_auth:
            self._refuse("token authentication (tokenauth) is not served on this listener")
        return f"{head},{authzid},{','.join(kept)}", bare

    def _lookup(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self.user = user
        assert self.mechanism is not None
        if self._token is not None:
            token_cred = (
                self._token.by_mechanism.get(self.mechanism)
                if user == self._token.token_id
                else None
            )
            if token_cred is None:
                raise _UnknownUserError(user)
            return (
                token_cred.salt,
                token_cred.stored_key,
                token_cred.server_key,
                token_cred.iterations,
            )
        cred = self._store.get(user, self.mechanism)
        if cred is None:
            raise _UnknownUserError(user)
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    # -- outcome --------------------------------------------------------------------------

    def _complete(self) -> None:
        """The client proved who it is: a re-authentication must have proved the same
        principal; the session gets its lifetime from now."""
        if self.previous is not None and self.previous[1] != self.user:
            before = KafkaPrincipal.user(self.previous[1])
            after = KafkaPrincipal.user(self.user or "?")
            reason = f"re-authentication may not change the principal ({before} to {after})"
            self._refuse(reason, for_client=reason)
        assert self.mechanism is not None
        lifetime_ms = self._max_reauth_ms.get(self.mechanism, 0)
        self.session_lifetime_ms = lifetime_ms
        self.expires_at = self._clock() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        self._move(SaslState.COMPLETE)

    def _refuse(self, reason: str, *, for_client: str | None = None) -> NoReturn:
        self.fail()
        raise ExchangeFailedError(reason, self.user, for_client)

    @property
    def principal(self) -> KafkaPrincipal:
        """``User:<name>``; for a token, its owner (Kafka's token principal)."""
        assert self.complete and self.user is not None
        if self._token is not None:
            return KafkaPrincipal.user(self._token.owner)
        return KafkaPrincipal.user(self.user)

    def failure_for_client(self, reason: str | None = None) -> AuthenticationError:
        """The answer a client gets: mechanism and user, not which of the two was wrong
        (``reason``: a failure the client may be told about)."""
        user = self.user if self.user is not None else "?"
        what = "re-authentication" if self.reauthenticating else "authentication"
        if reason is not None:
            return AuthenticationError(
                f"SASL {self.mechanism} {what} of user {user!r} refused: {reason}; the "
                "connection is closed",
                mechanism=self.mechanism,
                user=self.user,
            )
        removed = (
            " (a user removed, or whose password changed, since the connection "
            "authenticated cannot re-authenticate)"
            if self.reauthenticating
            else ""
        )
        if self._token is not None:
            return AuthenticationError(
                f"SASL {self.mechanism} authentication with token {user!r} failed: this "
                "listener accepts only its log directory's token (SCRAM with tokenauth=true), "
                "and this is not it, or the proof is wrong; the connection is closed. The "
                "token is handed to executors by the Spark driver; a token deleted or "
                "replaced since (DIR/embedded-token.json), or expired (no query asked for "
                "the listener within delegation.token.expiry.time.ms), is refused",
                mechanism=self.mechanism,
                user=self.user,
            )
        return AuthenticationError(
            f"SASL {self.mechanism} {what} of user {user!r} failed: unknown user or "
            f"wrong password (or a malformed exchange){removed}; the connection is closed. "
            "Check sasl.username / sasl.password (or sasl.jaas.config) and that the user "
            "exists (spark-mq users list)",
            mechanism=self.mechanism,
            user=self.user,
        )
